//! Which device MLX evaluates on.

use mlx_rs::{Device, DeviceType};

use super::MlxError;

/// The kind of device MLX evaluates on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// Metal on a Mac, CUDA on NVIDIA.
    Gpu,
    /// MLX's CPU backend (where there is no GPU build or no GPU).
    Cpu,
}

/// MLX's default device and whether a GPU could be used at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The default device's kind.
    pub kind: DeviceKind,
    /// The default device's index.
    pub index: i32,
    /// Whether this MLX build sees a usable GPU.
    pub gpu_available: bool,
}

impl DeviceInfo {
    /// Short name such as `gpu:0` or `cpu:0`.
    #[must_use]
    pub fn name(&self) -> String {
        match self.kind {
            DeviceKind::Gpu => format!("gpu:{}", self.index),
            DeviceKind::Cpu => format!("cpu:{}", self.index),
        }
    }

    /// A sentence for people: says plainly when there is no GPU.
    #[must_use]
    pub fn describe(&self) -> String {
        match (self.kind, self.gpu_available) {
            (DeviceKind::Gpu, _) => format!("MLX device: GPU {} ({GPU_BACKEND})", self.name()),
            (DeviceKind::Cpu, false) => "MLX device: CPU (no GPU available to MLX)".to_owned(),
            (DeviceKind::Cpu, true) => "MLX device: CPU (a GPU is available)".to_owned(),
        }
    }
}

/// The GPU backend this build's MLX uses.
#[cfg(target_os = "macos")]
pub const GPU_BACKEND: &str = "Metal";
/// The GPU backend this build's MLX uses.
#[cfg(not(target_os = "macos"))]
pub const GPU_BACKEND: &str = "CUDA";

impl DeviceInfo {
    /// Where MLX's buffers live, for labelling memory series: on a GPU they
    /// are device memory (CUDA's managed memory, Metal's unified memory),
    /// not the process RSS the OS reports; on the CPU backend they are part
    /// of RSS.
    #[must_use]
    pub fn mlx_memory_place(&self) -> &'static str {
        match self.kind {
            DeviceKind::Gpu => "GPU memory",
            DeviceKind::Cpu => "host memory, inside RSS",
        }
    }
}

/// MLX's default device.
///
/// # Errors
/// When MLX cannot report it.
pub fn default_device() -> Result<DeviceInfo, MlxError> {
    let device = Device::try_default().map_err(|e| MlxError::op("default device", e))?;
    let kind = match device
        .get_type()
        .map_err(|e| MlxError::op("device type", e))?
    {
        DeviceType::Gpu => DeviceKind::Gpu,
        DeviceType::Cpu => DeviceKind::Cpu,
    };
    let index = device
        .get_index()
        .map_err(|e| MlxError::op("device index", e))?;
    Ok(DeviceInfo {
        kind,
        index,
        gpu_available: gpu_available(),
    })
}

/// Whether this MLX build can evaluate on a GPU here.
#[must_use]
#[allow(unsafe_code)]
pub fn gpu_available() -> bool {
    // mlx-rs installs its error handler on its first operation; without it,
    // mlx-c's default handler would exit the process on any error below.
    if mlx_rs::memory::active_memory().is_err() {
        return false;
    }
    let mut available = false;
    // SAFETY: the device handle is created, queried and freed here and never
    // escapes; `available` is a valid out-pointer for the call.
    let status = unsafe {
        let gpu = mlx_sys::mlx_device_new_type(mlx_sys::mlx_device_type__MLX_GPU, 0);
        let status = mlx_sys::mlx_device_is_available(&raw mut available, gpu);
        mlx_sys::mlx_device_free(gpu);
        status
    };
    status == 0 && available
}
