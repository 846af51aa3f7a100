//! GPU memory per process through NVML, on machines with the NVIDIA driver.
//! The driver's library is loaded at run time: without it this series is
//! absent and everything else is recorded as usual.

use std::collections::HashMap;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

/// NVML, when the driver's library loads.
pub struct GpuMemory {
    nvml: Option<Nvml>,
    /// Why NVML is not there, for the summary.
    reason: Option<String>,
}

impl GpuMemory {
    /// Loads NVML; a machine without the NVIDIA driver gets an empty probe.
    #[must_use]
    pub fn init() -> Self {
        match Nvml::init() {
            Ok(nvml) => Self {
                nvml: Some(nvml),
                reason: None,
            },
            Err(err) => Self {
                nvml: None,
                reason: Some(err.to_string()),
            },
        }
    }

    /// Whether per-process GPU figures can be read.
    #[must_use]
    pub fn available(&self) -> bool {
        self.nvml.is_some()
    }

    /// Why not, when not.
    #[must_use]
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// GPU memory used by each process with a context on any GPU (compute
    /// and graphics), summed over the GPUs, and the memory used on the GPUs
    /// by everyone; `None` without NVML.
    ///
    /// NVML's per-process figure counts device allocations and the CUDA
    /// context, not managed memory, which is what MLX's CUDA allocator uses:
    /// the devices' used memory is the figure that sees managed pages that
    /// live on the GPU (docs/record.md has what a GPU showed).
    #[must_use]
    pub fn read(&self) -> Option<(HashMap<u32, u64>, u64)> {
        let nvml = self.nvml.as_ref()?;
        let mut used: HashMap<u32, u64> = HashMap::new();
        let mut device_used = 0;
        for index in 0..nvml.device_count().unwrap_or(0) {
            let Ok(device) = nvml.device_by_index(index) else {
                continue;
            };
            device_used += device.memory_info().map_or(0, |m| m.used);
            let compute = device.running_compute_processes().unwrap_or_default();
            let graphics = device.running_graphics_processes().unwrap_or_default();
            for process in compute.iter().chain(&graphics) {
                if let UsedGpuMemory::Used(bytes) = process.used_gpu_memory {
                    *used.entry(process.pid).or_insert(0) += bytes;
                }
            }
        }
        Some((used, device_used))
    }
}
