//! The only code that touches mlx-rs and mlx-sys.
//!
//! Everything above this module sees MLX through a few plain functions and the
//! [`ShardMap`] type: open a safetensors file lazily, evaluate, read values as
//! `f32`, and read or steer MLX's memory counters. Arrays never leave the thread
//! that created them in the layers above (they are `Send`, not `Sync`).

mod device;
mod memory;
mod shard;

pub use device::{DeviceInfo, DeviceKind, default_device, gpu_available};
pub use memory::{MemoryStats, clear_cache, memory, reset_peak, set_memory_limit};
pub use mlx_rs::{Array, Dtype};
pub use shard::ShardMap;

use std::path::PathBuf;

/// Errors from MLX, with the operation and (where there is one) the file.
#[derive(Debug, thiserror::Error)]
pub enum MlxError {
    /// MLX could not open a safetensors file into a lazy map.
    #[error("mlx could not load {}: {message}", path.display())]
    Load {
        /// The file MLX was asked to open.
        path: PathBuf,
        /// MLX's own message.
        message: String,
    },
    /// An MLX operation (evaluation, cast, memory query) failed.
    #[error("mlx {operation} failed: {message}")]
    Op {
        /// What was being done, in a few words.
        operation: &'static str,
        /// MLX's own message.
        message: String,
    },
}

impl MlxError {
    fn op(operation: &'static str, err: impl std::fmt::Display) -> Self {
        Self::Op {
            operation,
            message: err.to_string(),
        }
    }
}

/// Evaluates `array` (reads its bytes from disk if it is a lazy load).
///
/// # Errors
/// When MLX fails to evaluate it (unreadable file, memory limit, …).
pub fn evaluate(array: &Array) -> Result<(), MlxError> {
    array.eval().map_err(|e| MlxError::op("evaluation", e))
}

/// The values of `array` converted to `f32`, in row-major order.
///
/// Works for every dtype MLX loads from safetensors (floats, signed and
/// unsigned integers, bool). The array is evaluated first: reading the data of
/// an unevaluated MLX array crashes rather than failing.
///
/// # Errors
/// When the cast or the evaluation fails.
pub fn to_f32_vec(array: &Array) -> Result<Vec<f32>, MlxError> {
    let as_f32 = if array.dtype() == Dtype::Float32 {
        array.clone()
    } else {
        array
            .as_dtype(Dtype::Float32)
            .map_err(|e| MlxError::op("cast to f32", e))?
    };
    evaluate(&as_f32)?;
    as_f32
        .try_as_slice::<f32>()
        .map(<[f32]>::to_vec)
        .map_err(|e| MlxError::op("read values", e))
}
