//! One safetensors file opened by MLX's own loader, or read through: each
//! tensor's bytes read (from a remote file, or where MLX's loader refuses
//! a dtype) into an MLX-owned array when first asked for.

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
    /// The tensors read through, with the reader; `None` for MLX's own map.
    through: Option<Through>,
}

/// Why bytes could not be read: the reader's own error (a checkpoint's
/// `CheckpointError`, naming the file), kept as it is.
pub type ReadError = Box<dyn std::error::Error + Send + Sync>;

/// Reads the bytes in a range of offsets of the file, or says why not.
pub type ReadBytes = Box<dyn Fn(std::ops::Range<u64>) -> Result<Vec<u8>, ReadError> + Send>;

/// A tensor to read through: how to make an MLX array of its bytes.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The array's element type (`uint8` for a dtype MLX has not).
    pub dtype: mlx_rs::Dtype,
    /// Its shape (for `uint8` stand-ins of sub-byte dtypes: the byte count).
    pub shape: Vec<i32>,
    /// Its bytes' offsets in the file.
    pub bytes: std::ops::Range<u64>,
    /// A dtype nothing here decodes (`F4`, `F6_E2M3`…): asking for the
    /// tensor is an error naming it, never its bytes shown as numbers.
    pub undecoded: Option<&'static str>,
    /// An axis of the tensor that no MLX array can have (over 2^31-1):
    /// asking for it is an error naming it.
    pub oversized_axis: Option<u64>,
    /// What turns the bytes read into the tensor's row-major bytes (a
    /// PyTorch view's elements gathered through its strides) before MLX
    /// sees them; `None`: the bytes are the tensor's as they are.
    pub rearrange: Option<Rearrange>,
}

/// Rearranges a tensor's bytes once read, or says (`None`) that they do
/// not hold what it needs. Made by the layer that knows the format.
#[derive(Clone)]
pub struct Rearrange(pub std::sync::Arc<RearrangeFn>);

/// What a [`Rearrange`] calls: the bytes read in, the tensor's out.
pub type RearrangeFn = dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync;

impl std::fmt::Debug for Rearrange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rearrange(..)")
    }
}

struct Through {
    stored: HashMap<String, Stored>,
    read: ReadBytes,
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
            through: None,
        })
    }

    /// A map of `stored` tensors whose bytes `read` reads when a tensor is
    /// first asked for, into an MLX-owned array kept by the map (as MLX's
    /// own map keeps what it evaluated). Opening reads nothing.
    #[must_use]
    pub fn read_through(path: PathBuf, stored: HashMap<String, Stored>, read: ReadBytes) -> Self {
        Self {
            path,
            arrays: HashMap::new(),
            through: Some(Through { stored, read }),
        }
    }

    /// The file this map was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new handle to the stored tensor `name` (lazy until evaluated), or
    /// `None` when the file holds no such tensor. A map read through reads
    /// the tensor's bytes now, the first time.
    ///
    /// # Errors
    /// When the bytes cannot be read, or are not as many as the tensor has.
    pub fn get(&mut self, name: &str) -> Result<Option<Array>, MlxError> {
        if let Some(array) = self.arrays.get(name) {
            return Ok(Some(array.clone()));
        }
        let Some(through) = &self.through else {
            return Ok(None);
        };
        let Some(stored) = through.stored.get(name) else {
            return Ok(None);
        };
        let failed = |message: String| MlxError::Load {
            path: self.path.clone(),
            message,
        };
        if let Some(axis) = stored.oversized_axis {
            return Err(failed(format!(
                "{name}: an axis of {axis} values; MLX's axes hold at most 2^31-1"
            )));
        }
        if let Some(dtype) = stored.undecoded {
            return Err(failed(format!(
                "{name}: {dtype} values are not decoded yet (MLX's loader refuses them too)"
            )));
        }
        let bytes = (through.read)(stored.bytes.clone()).map_err(|e| failed(e.to_string()))?;
        if bytes.len() as u64 != stored.bytes.end - stored.bytes.start {
            return Err(failed(format!(
                "{name}: {} bytes came of {}",
                bytes.len(),
                stored.bytes.end - stored.bytes.start
            )));
        }
        let bytes = match &stored.rearrange {
            Some(rearrange) => (rearrange.0)(&bytes)
                .ok_or_else(|| failed(format!("{name}: its strides reach past its bytes")))?,
            None => bytes,
        };
        // Made and evaluated now: the bytes live in MLX's memory, not in
        // `bytes`.
        let array = super::typed_array(&bytes, stored.dtype, &stored.shape)
            .map_err(|e| failed(format!("{name}: {e}")))?;
        drop(bytes);
        self.arrays.insert(name.to_owned(), array.clone());
        Ok(Some(array))
    }

    /// Lets go of the evaluated bytes of stored tensor `name` (into MLX's
    /// cache, once nothing else holds the array): a map read through drops
    /// it and reads its bytes again when asked; MLX's own map takes a fresh,
    /// lazy handle for it from the file's header (read again: a few
    /// milliseconds for a header of thousands of tensors). Other tensors'
    /// handles are kept as they are. Nothing to do for a name not evaluated
    /// or not in the file.
    ///
    /// # Errors
    /// When MLX cannot read the header again.
    pub fn forget(&mut self, name: &str) -> Result<(), MlxError> {
        if self.through.is_some() {
            self.arrays.remove(name);
            return Ok(());
        }
        if !self.arrays.contains_key(name) {
            return Ok(());
        }
        let mut fresh = Array::load_safetensors(&self.path).map_err(|e| MlxError::Load {
            path: self.path.clone(),
            message: super::clean_message(&e.to_string()),
        })?;
        if let Some(array) = fresh.remove(name) {
            self.arrays.insert(name.to_owned(), array);
        }
        Ok(())
    }

    /// Whether the map reads its tensors through (not MLX's own loader).
    #[must_use]
    pub fn reads_through(&self) -> bool {
        self.through.is_some()
    }

    /// The stored tensor names, in no particular order.
    pub fn names(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match &self.through {
            Some(t) => Box::new(t.stored.keys().map(String::as_str)),
            None => Box::new(self.arrays.keys().map(String::as_str)),
        }
    }

    /// How many tensors the file holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.through
            .as_ref()
            .map_or(self.arrays.len(), |t| t.stored.len())
    }

    /// Whether the file holds no tensor.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }
}

#[allow(clippy::missing_fields_in_debug)] // the reader is a closure
impl std::fmt::Debug for ShardMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMap")
            .field("path", &self.path)
            .field("evaluated", &self.arrays.len())
            .field("tensors", &self.len())
            .field("read_through", &self.through.is_some())
            .finish()
    }
}
