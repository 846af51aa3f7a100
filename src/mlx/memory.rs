//! MLX's own memory counters (what MLX's allocator holds, not process RSS).

use super::MlxError;

/// A snapshot of MLX's allocator, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Bytes in arrays that are alive.
    pub active_bytes: u64,
    /// Bytes freed by arrays but kept by MLX for reuse (returned by [`clear_cache`]).
    pub cache_bytes: u64,
    /// Highest `active_bytes` since start or the last [`reset_peak`].
    pub peak_bytes: u64,
    /// MLX's memory limit (by default about 80 % of RAM on the CPU backend).
    pub limit_bytes: u64,
}

fn bytes(value: usize) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Reads all four counters.
///
/// # Errors
/// When MLX fails to report one of them.
pub fn memory() -> Result<MemoryStats, MlxError> {
    let read = |op: &'static str, f: fn() -> mlx_rs::error::Result<usize>| {
        f().map(bytes).map_err(|e| MlxError::op(op, e))
    };
    Ok(MemoryStats {
        active_bytes: read("active memory", mlx_rs::memory::active_memory)?,
        cache_bytes: read("cache memory", mlx_rs::memory::cache_memory)?,
        peak_bytes: read("peak memory", mlx_rs::memory::peak_memory)?,
        limit_bytes: read("memory limit", mlx_rs::memory::memory_limit)?,
    })
}

impl From<MemoryStats> for crate::memory::MlxFigures {
    fn from(stats: MemoryStats) -> Self {
        Self {
            active_bytes: stats.active_bytes,
            cache_bytes: stats.cache_bytes,
            peak_bytes: stats.peak_bytes,
        }
    }
}

/// This process's MLX figures now, `None` when MLX cannot say.
#[must_use]
pub fn figures() -> Option<crate::memory::MlxFigures> {
    memory().ok().map(Into::into)
}

/// This process's memory now: the OS's figures and MLX's.
#[must_use]
pub fn sample_now() -> crate::memory::Sample<std::time::Instant> {
    crate::memory::Sample::now_with(figures())
}

/// Starts a new peak measurement from the current active memory.
///
/// # Errors
/// When MLX fails to reset it.
pub fn reset_peak() -> Result<(), MlxError> {
    mlx_rs::memory::reset_peak_memory().map_err(|e| MlxError::op("reset peak memory", e))
}

/// Returns MLX's cached (freed but kept) buffers to the system allocator.
///
/// # Errors
/// When MLX fails to clear it.
pub fn clear_cache() -> Result<(), MlxError> {
    mlx_rs::memory::clear_cache().map_err(|e| MlxError::op("clear cache", e))
}

/// Sets MLX's memory limit and returns the previous one.
///
/// # Errors
/// When MLX refuses the limit.
pub fn set_memory_limit(limit_bytes: u64) -> Result<u64, MlxError> {
    let limit = usize::try_from(limit_bytes).unwrap_or(usize::MAX);
    mlx_rs::memory::set_memory_limit(limit)
        .map(bytes)
        .map_err(|e| MlxError::op("set memory limit", e))
}

/// Sets how many freed bytes MLX keeps cached for reuse and returns the
/// previous limit (MLX has no getter: callers remember what they set).
///
/// # Errors
/// When MLX refuses the limit.
pub fn set_cache_limit(limit_bytes: u64) -> Result<u64, MlxError> {
    let limit = usize::try_from(limit_bytes).unwrap_or(usize::MAX);
    mlx_rs::memory::set_cache_limit(limit)
        .map(bytes)
        .map_err(|e| MlxError::op("set cache limit", e))
}

/// Asks the C allocator to return freed heap pages to the OS, so that process
/// RSS follows MLX's counters after a [`clear_cache`]. Returns whether memory
/// was returned (always `false` where the allocator offers no such call).
#[must_use]
pub fn trim_host_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a plain integer, touches only glibc's own
        // heap bookkeeping under its lock and is safe to call from any thread.
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        released == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
