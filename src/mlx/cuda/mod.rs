//! Our own CUDA, beside MLX's: one symbol table of the driver and NVRTC
//! ([`symbols`]), our kernels compiled ahead and kept on disk ([`ahead`]),
//! the dense summary's launches on streams of our own ([`launch`]), and
//! bulk moves of managed pages ([`pages`]). Everything here works in the
//! CUDA context MLX made and does nothing on another backend.
//! docs/gpu.md says what each part bought, measured.

mod ahead;
mod launch;
mod pages;
mod symbols;

#[cfg(test)]
pub(in crate::mlx) use ahead::compile_for_test;
pub(super) use ahead::{Image, Parts, Which, image, prepare_in_background, settled};
pub(super) use launch::{start, warm_up};
pub(super) use pages::{Plain, array_to_device, array_to_device_now, copy_to_host};

/// A failure of our own CUDA work: the caller falls back to MLX.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A driver or NVRTC call returned a failure status.
    #[error("{call} failed (CUDA error {code})")]
    Call {
        /// The C function.
        call: &'static str,
        /// Its status.
        code: i32,
    },
    /// This process has no CUDA driver or NVRTC loaded, or no device.
    #[error("no {0} in this process")]
    Missing(&'static str),
    /// NVRTC refused our source: the first error line of its log.
    #[error("NVRTC: {0}")]
    Compile(String),
    /// Something we asked for that the driver or our layout cannot give.
    #[error("{0}")]
    Refused(&'static str),
}
