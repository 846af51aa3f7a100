//! What the OS says a process and the machine hold.

/// A process's (or a process tree's) memory as the OS sees it, in bytes
/// (0 where unknown). On the CPU backend MLX's buffers are part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessFigures {
    /// Resident set size (over a tree of forked workers: the sum of their
    /// proportional set sizes, each shared page counted once).
    pub rss_bytes: u64,
    /// Anonymous resident pages (heap, MLX's CPU buffers).
    pub anon_bytes: u64,
    /// File-backed and shared resident pages (mapped files, the binary).
    pub file_bytes: u64,
    /// Highest RSS since start or the last [`reset_peak_rss`] (over a tree:
    /// the highest of any one process).
    pub peak_rss_bytes: u64,
    /// Bytes read through read calls (`rchar`), cumulative; 0 where not read.
    pub read_bytes: u64,
    /// Processes counted (1 for this process).
    pub processes: usize,
    /// `.safetensors` files held open; 0 where not looked at.
    pub open_files: usize,
    /// Their total size.
    pub open_file_bytes: u64,
}

impl ProcessFigures {
    /// Reads `/proc/self/status` on Linux: one small read, cheaper at 20 Hz
    /// than refreshing a process table, with the anonymous/file split that
    /// sysinfo does not give. Elsewhere, sysinfo's RSS alone.
    #[must_use]
    pub fn read() -> Self {
        #[cfg(target_os = "linux")]
        {
            std::fs::read_to_string("/proc/self/status")
                .map(|text| Self::parse_status(&text))
                .unwrap_or_default()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let rss = sysinfo_rss();
            Self {
                rss_bytes: rss,
                peak_rss_bytes: rss,
                processes: 1,
                ..Self::default()
            }
        }
    }

    /// The figures from the text of a Linux `/proc/PID/status` file.
    #[must_use]
    pub fn parse_status(text: &str) -> Self {
        let mut memory = Self {
            processes: 1,
            ..Self::default()
        };
        for line in text.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let field = match key {
                "VmRSS" => &mut memory.rss_bytes,
                "RssAnon" => &mut memory.anon_bytes,
                "RssFile" | "RssShmem" => &mut memory.file_bytes,
                "VmHWM" => &mut memory.peak_rss_bytes,
                _ => continue,
            };
            let kib = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            *field += kib * 1024;
        }
        memory
    }
}

#[cfg(not(target_os = "linux"))]
fn sysinfo_rss() -> u64 {
    use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System};
    let Ok(pid) = sysinfo::get_current_pid() else {
        return 0;
    };
    let Ok(mut system) = System::new() else {
        return 0;
    };
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_memory(),
    );
    system.process(pid).map_or(0, sysinfo::Process::memory)
}

/// The process's resident set size, or 0 where it cannot be read.
#[must_use]
pub fn process_rss_bytes() -> u64 {
    ProcessFigures::read().rss_bytes
}

/// Starts a new peak-RSS measurement (Linux: writes `5` to
/// `/proc/self/clear_refs`, which resets `VmHWM`). Returns whether it could.
#[must_use]
pub fn reset_peak_rss() -> bool {
    #[cfg(target_os = "linux")]
    {
        crate::files::write_proc_self("clear_refs", b"5").is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// This machine's memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MachineMemory {
    /// Installed RAM.
    pub total_bytes: u64,
    /// What the OS says new work can use now.
    pub available_bytes: u64,
}

impl MachineMemory {
    /// Reads the machine's memory through sysinfo.
    #[must_use]
    pub fn read() -> Self {
        let Ok(mut system) = sysinfo::System::new() else {
            return Self::default();
        };
        system.refresh_memory();
        Self {
            total_bytes: system.total_memory(),
            available_bytes: system.available_memory(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_is_split_into_anonymous_and_file_pages() {
        let text = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 600 kB\n\
                    RssFile:\t 400 kB\nRssShmem:\t 24 kB\nbogus line\nVmSwap: x kB\n";
        let memory = ProcessFigures::parse_status(text);
        assert_eq!(memory.rss_bytes, 1024 * 1024);
        assert_eq!(memory.anon_bytes, 600 * 1024);
        assert_eq!(memory.file_bytes, 424 * 1024);
        assert_eq!(memory.peak_rss_bytes, 2048 * 1024);
    }
}
