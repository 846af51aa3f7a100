//! One safetensors file opened by MLX's own loader.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx_rs::Array;

use super::MlxError;

/// A safetensors file opened lazily by MLX: a map from stored tensor name to a
/// not-yet-evaluated array.
///
/// Opening reads only the header. A tensor's bytes are read into an MLX-owned
/// buffer when the array is first evaluated, and that buffer stays alive as
/// long as this map (or any handle to the array) does: dropping a handle you
/// got from [`ShardMap::get`] frees nothing while the map lives. Dropping the
/// map and every handle from it frees the bytes (into MLX's cache).
pub struct ShardMap {
    path: PathBuf,
    arrays: HashMap<String, Array>,
}

impl ShardMap {
    /// Opens `path` lazily on the CPU stream (MLX's `Load` runs on the CPU;
    /// the arrays can then be used on any device).
    ///
    /// # Errors
    /// When MLX cannot read the header.
    pub fn open(path: &Path) -> Result<Self, MlxError> {
        let arrays = Array::load_safetensors(path).map_err(|e| MlxError::Load {
            path: path.to_path_buf(),
            message: super::clean_message(&e.to_string()),
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            arrays,
        })
    }

    /// The file this map was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new handle to the stored tensor `name` (lazy until evaluated), or
    /// `None` when the file holds no such tensor.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Array> {
        self.arrays.get(name).cloned()
    }

    /// The stored tensor names, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.arrays.keys().map(String::as_str)
    }

    /// How many tensors the file holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.arrays.len()
    }

    /// Whether the file holds no tensor.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }
}

impl std::fmt::Debug for ShardMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMap")
            .field("path", &self.path)
            .field("tensors", &self.arrays.len())
            .finish()
    }
}
