//! Histogram bins, and whole summaries of affine-packed weights and of
//! dense `f32`, `f16` and `bf16` arrays, computed by two kernels of our own
//! on CUDA, through MLX's custom-kernel interface (`mlx_fast_cuda_kernel`):
//! blocks count and sum in shared memory and add to the output once, so
//! the device's global atomics see one add per bin per block instead of
//! one per value (MLX's scatter-add). No bin numbers and no converted
//! values are written anywhere.

use mlx_rs::Array;

use super::MlxError;

mod affine;
mod cache;
mod dense;
mod launch;

pub use affine::{AffineWords, MAX_CELLS, affine_counts, affine_stats};
pub use cache::{keep_kernel_cache_private, leave_kernel_cache_out};
pub(super) use dense::dense_image;
pub use dense::{
    BLOCK_THREADS, DenseJob, DenseLayout, DenseValues, dense_centre, dense_counts, dense_stats,
};
pub use launch::{kernels_ready, kernels_settled, prepare_kernels_in_background};

/// Threads per block.
pub(super) const THREADS: i32 = 256;

/// Blocks at most: enough to fill any current GPU several times over; each
/// thread strides over the rest.
pub(super) const MAX_BLOCKS: i64 = 4096;

/// Largest histogram (bins + 2 slots) the kernel keeps in shared memory.
pub const MAX_SLOTS: usize = 4096;

/// Which of MLX's custom-kernel interfaces a dense launch goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// [`DENSE_SOURCE`], compiled ahead (`mlx::cuda`).
    Cuda,
    /// `mlx_fast_metal_kernel`: [`METAL_DENSE_SOURCE`] (never
    /// run on a device: used only where `stats::fused::metal_agrees`).
    Metal,
}

impl Backend {
    /// The GPU backend of this build's MLX (Metal on macOS, else CUDA).
    pub const BUILD: Self = if cfg!(target_os = "macos") {
        Self::Metal
    } else {
        Self::Cuda
    };
}

/// The counts of `slots` histogram slots of the flat `f32` array `x`,
/// `[slots]` as `u32`, lazy: the lowest value and the scale map a finite
/// value `v` to slot `(v - lo) * scale` (the maximum lands on `slots - 2`),
/// non-finite values go to `slots - 1`. Counted by job 1 of
/// [`DENSE_SOURCE`].
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device); a kernel that does not
/// compile fails when evaluated.
pub fn histogram_counts(x: &Array, lo: f32, scale: f32, slots: usize) -> Result<Array, MlxError> {
    let n =
        i32::try_from(x.size()).map_err(|_| MlxError::op("histogram kernel", "too many values"))?;
    let values = DenseValues {
        flat: x,
        rows: 1,
        cols: n,
        backend: Backend::BUILD,
    };
    dense_counts(&values, lo, scale, slots)
}
