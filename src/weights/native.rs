//! The seam between the Weights core and MLX's native shard maps.

use std::path::Path;

use crate::mlx::{Array, MlxError, ShardMap};

/// The native MLX calls the Weights core makes. Production uses
/// [`MlxNative`]; tests wrap it to inject a failure at shard N and count frees.
pub trait Native {
    /// Opens one shard lazily.
    ///
    /// # Errors
    /// When MLX cannot read the file.
    fn open_shard(&mut self, path: &Path) -> Result<ShardMap, MlxError>;

    /// Frees one shard's map (and, with it, every array only it held).
    fn free_shard(&mut self, map: ShardMap) {
        drop(map);
    }

    /// A new handle to the stored tensor `name` of `map`.
    fn get(&mut self, map: &ShardMap, name: &str) -> Option<Array> {
        map.get(name)
    }
}

/// The real thing: MLX's own safetensors loader.
#[derive(Debug, Default, Clone, Copy)]
pub struct MlxNative;

impl Native for MlxNative {
    fn open_shard(&mut self, path: &Path) -> Result<ShardMap, MlxError> {
        ShardMap::open(path)
    }
}
