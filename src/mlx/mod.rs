//! The only code that touches mlx-rs and mlx-sys.
//!
//! Everything above this module sees MLX through a few plain functions and the
//! [`ShardMap`] type: open a safetensors file lazily, evaluate, read values as
//! `f32`, and read or steer MLX's memory counters. Arrays never leave the thread
//! that created them in the layers above (they are `Send`, not `Sync`).

mod cuda;
mod device;
pub mod ggml;
mod kernel;
mod memory;
mod quant;
mod shard;
mod stats;
mod transform;

pub use cuda::CudaError;
pub use device::{DeviceInfo, DeviceKind, GPU_BACKEND, default_device, gpu_available};
pub use kernel::{AffineWords, keep_kernel_cache_private, leave_kernel_cache_out};
pub use memory::{
    MemoryStats, clear_cache, figures, memory, reset_peak, sample_now, set_cache_limit,
    set_memory_limit, trim_host_heap,
};
pub use mlx_rs::{Array, Dtype};
pub use quant::{ByteFloat, decode_bytes, dequantize, mlx_from_fp8, quantize_mode, scale_blocks};
pub use shard::{ReadBytes, ReadError, Rearrange, ShardMap, Stored};
pub use stats::{
    Heatmap, Histogram, RowBands, Stats, ValueStats, summarize, summarize_bands,
    summary_scratch_bytes, use_summary_kernel, warm_up_summaries, warm_up_summaries_in_background,
};
pub use transform::{
    DiffSums, Difference, GroupSums, ValueCounts, abs_difference, add_scalar, concat_rows,
    count_values, difference, dtype_named, group_sums, metrics, move_axis, reshape, slice_rows,
    swap_axes, take_row,
};

use std::path::PathBuf;

/// Errors from MLX, with the operation and (where there is one) the file.
#[derive(Debug, thiserror::Error)]
pub enum MlxError {
    /// MLX could not open a safetensors file into a lazy map.
    #[error("mlx could not load {}: {message}", crate::units::Shown::path(path))]
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
    pub(crate) fn op(operation: &'static str, err: impl std::fmt::Display) -> Self {
        Self::Op {
            operation,
            message: clean_message(&err.to_string()),
        }
    }
}

/// MLX's message without the quoting and the C++/Rust source locations that
/// mlx-c and mlx-rs append (` at /path/file.cpp:76`): users need the problem,
/// not our build paths.
pub(crate) fn clean_message(raw: &str) -> String {
    let mut message = raw.trim();
    loop {
        let before = message;
        if let Some(cut) = message.rfind(" at ") {
            let tail = &message[cut + 4..];
            let is_location = !tail.contains(' ')
                && tail.contains('/')
                && tail
                    .rsplit(':')
                    .next()
                    .is_some_and(|n| n.parse::<u32>().is_ok());
            if is_location {
                message = message[..cut].trim_end();
            }
        }
        message = message.trim_matches('"');
        if message == before {
            return message.to_owned();
        }
    }
}

/// The arrays held by an MLX vector, each taken out as a new reference that
/// the returned `Array` owns (an element MLX cannot hand out is skipped);
/// the vector itself stays the caller's to free.
///
/// # Safety
/// `vector` must be a live `mlx_vector_array`.
#[allow(unsafe_code)]
pub(super) unsafe fn arrays_of(vector: mlx_sys::mlx_vector_array) -> Vec<Array> {
    // SAFETY: `vector` is live (the caller's promise); each element is
    // fetched into a fresh handle that is either owned by the `Array` made
    // from it or freed here.
    unsafe {
        let len = mlx_sys::mlx_vector_array_size(vector);
        let mut arrays = Vec::with_capacity(len);
        for i in 0..len {
            let mut item = mlx_sys::mlx_array_new();
            if mlx_sys::mlx_vector_array_get(&raw mut item, vector, i) == 0 {
                arrays.push(Array::from_ptr(item));
            } else {
                mlx_sys::mlx_array_free(item);
            }
        }
        arrays
    }
}

/// Evaluates `array` (reads its bytes from disk if it is a lazy load).
///
/// # Errors
/// When MLX fails to evaluate it (unreadable file, memory limit, …).
pub fn evaluate(array: &Array) -> Result<(), MlxError> {
    array.eval().map_err(|e| MlxError::op("evaluation", e))
}

/// Evaluates several arrays in one MLX graph evaluation, which lets MLX
/// overlap their loads (faster than one [`evaluate`] after another).
///
/// # Errors
/// When MLX fails to evaluate one of them.
pub fn evaluate_all<'a>(arrays: impl IntoIterator<Item = &'a Array>) -> Result<(), MlxError> {
    mlx_rs::transforms::eval(arrays).map_err(|e| MlxError::op("evaluation", e))
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

/// An MLX array of `dtype` made of `bytes` (little-endian, row-major) in
/// `shape`, evaluated: a tensor read through, or a band of one. Its last
/// axis is counted in bytes first (an MLX axis is an `i32`: a tensor of
/// over 2^31 bytes, a stack of experts, fits as long as each axis does).
///
/// # Errors
/// A shape that does not fit the bytes; an MLX failure.
pub fn typed_array(bytes: &[u8], dtype: Dtype, shape: &[i32]) -> Result<Array, MlxError> {
    let item = bytes.len()
        / shape
            .iter()
            .map(|&d| usize::try_from(d).unwrap_or(0))
            .product::<usize>()
            .max(1);
    let mut byte_shape = shape.to_vec();
    match byte_shape.last_mut() {
        Some(last) => {
            *last = i32::try_from(i64::from(*last) * i64::try_from(item).unwrap_or(0))
                .map_err(|_| MlxError::op("make an array", "a row of over 2^31 bytes"))?;
        }
        None => byte_shape.push(i32::try_from(item).unwrap_or(0)),
    }
    let raw = bytes_array(bytes, &byte_shape)?;
    let typed = if dtype == Dtype::Uint8 {
        raw
    } else {
        raw.view_dtype(dtype)
            .map_err(|e| MlxError::op("view the bytes as values", e))?
    };
    let array = typed
        .reshape(shape)
        .map_err(|e| MlxError::op("reshape", e))?;
    evaluate(&array)?;
    Ok(array)
}

/// An MLX array of `bytes` (`uint8`) in `shape`, or why not, never a panic:
/// the shape must hold exactly that many values with every axis an `i32`
/// (MLX's); past 2^31-1 values (mlx-rs multiplies a shape in `i32`) it is
/// made in bands along the first axis and joined.
///
/// # Errors
/// A shape that does not fit the bytes, or a row of over 2^31-1 values.
pub(crate) fn bytes_array(bytes: &[u8], shape: &[i32]) -> Result<Array, MlxError> {
    let refused = |why: String| MlxError::op("make an array", why);
    let count = shape.iter().try_fold(1_usize, |n, &d| {
        usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
    });
    if count != Some(bytes.len()) {
        return Err(refused(format!(
            "{} bytes do not make the shape {shape:?}",
            bytes.len()
        )));
    }
    let most = usize::try_from(i32::MAX).unwrap_or(usize::MAX);
    if bytes.len() <= most {
        return Ok(Array::from_slice(bytes, shape));
    }
    let (Some(&rows), Some(rest)) = (shape.first(), shape.get(1..)) else {
        return Err(refused("no axis to split".into()));
    };
    let row = rest
        .iter()
        .map(|&d| usize::try_from(d).unwrap_or(0))
        .product::<usize>();
    let per_band = most.checked_div(row).unwrap_or(0);
    if per_band == 0 || rows <= 0 {
        return Err(refused(format!("a row of {row} values (over 2^31-1)")));
    }
    let mut bands = Vec::new();
    for band in bytes.chunks(per_band * row) {
        let mut band_shape = shape.to_vec();
        band_shape[0] = i32::try_from(band.len() / row).map_err(|e| refused(e.to_string()))?;
        bands.push(Array::from_slice(band, &band_shape));
    }
    mlx_rs::ops::concatenate(&bands, 0).map_err(|e| refused(e.to_string()))
}

/// A new `f32` array with `values` in row-major order.
#[must_use]
pub fn array_f32(values: &[f32], shape: &[i32]) -> Array {
    Array::from_slice(values, shape)
}

/// `array` cast to `dtype` (lazy).
///
/// # Errors
/// When MLX cannot cast to that dtype.
pub fn cast(array: &Array, dtype: Dtype) -> Result<Array, MlxError> {
    array.as_dtype(dtype).map_err(|e| MlxError::op("cast", e))
}

/// MLX's affine quantization of `weight`: packed weights, scales, biases.
///
/// # Errors
/// When MLX rejects the shape or the parameters.
pub fn quantize(
    weight: &Array,
    group_size: i32,
    bits: i32,
) -> Result<(Array, Array, Array), MlxError> {
    mlx_rs::ops::quantize(weight, group_size, bits).map_err(|e| MlxError::op("quantize", e))
}

/// Ends the process with `code` after flushing stdout and stderr, without
/// running C++ static destructors (on Linux with glibc): MLX's CUDA backend
/// destroys its handles after the CUDA driver has shut down and aborts the
/// process at exit. Call only once everything the program owns was dropped.
pub fn exit_now(code: u8) -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `_exit` ends the process at once; it takes a plain integer
        // and never returns. Buffers we own were flushed above.
        #[allow(unsafe_code)]
        unsafe {
            libc::_exit(i32::from(code))
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    std::process::exit(i32::from(code))
}

/// Writes `arrays` to `path` with MLX's own safetensors writer.
///
/// # Errors
/// When MLX cannot write the file.
pub fn save_safetensors(path: &std::path::Path, arrays: &[(&str, &Array)]) -> Result<(), MlxError> {
    Array::save_safetensors(arrays.iter().map(|(n, a)| (*n, *a)), None, path).map_err(|e| {
        MlxError::Load {
            path: path.to_path_buf(),
            message: clean_message(&e.to_string()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::clean_message;

    #[test]
    fn source_locations_and_quotes_are_stripped() {
        assert_eq!(
            clean_message(
                "\"[safetensor] unsupported dtype F64 at /x/mlx-c/mlx/c/io.cpp:76\" at /rustc/abc/library/core/src/ops/function.rs:250:5"
            ),
            "[safetensor] unsupported dtype F64"
        );
        assert_eq!(clean_message("plain message"), "plain message");
        assert_eq!(clean_message("look at this"), "look at this");
    }
}
