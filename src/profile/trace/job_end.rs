//! What a recording knew about its job when the job ended, as it is kept
//! in the trace (its `job`): the recorder (`record`) fills it in, the trace
//! (`trace`) saves and reads it. Here, beneath both, so that the trace does
//! not depend on the recorder.

/// What the recorder knew when the job ended, beyond the samples and
/// events: kept in the trace (its `job`), so that a saved recording gives
/// the figures `record` gave.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobEnd {
    /// The job's pid.
    pub pid: u32,
    /// Whether it was attached to rather than started.
    pub attached: bool,
    /// The signal that ended it.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Seconds from start to the end of the recording.
    pub elapsed_secs: f64,
    /// The highest `VmHWM` (and `ru_maxrss`) of its processes.
    #[serde(default)]
    pub peak_rss_bytes: u64,
    /// Whether the tree's figure was PSS.
    #[serde(default)]
    pub rss_is_pss: bool,
    /// MLX's peak from its counters, the last reports included.
    #[serde(default)]
    pub peak_mlx_active_bytes: Option<u64>,
    /// GPU figures (NVML).
    #[serde(default)]
    pub peak_gpu_bytes: Option<u64>,
    /// Memory used on the GPUs by everyone (NVML).
    #[serde(default)]
    pub peak_gpu_device_used_bytes: Option<u64>,
    /// Why there is no GPU series.
    #[serde(default)]
    pub gpu_unavailable: Option<String>,
    /// What the probe said about itself.
    #[serde(default)]
    pub probe: Option<ProbeReport>,
    /// The kernel's kill for memory.
    #[serde(default)]
    pub killed_for_memory: Option<MemoryKill>,
    /// `ulimit -v`.
    #[serde(default)]
    pub address_space_limit: Option<u64>,
    /// Files mapped near the RSS peak: `(path, resident bytes)`.
    #[serde(default)]
    pub mapped_files: Vec<(String, u64)>,
    /// The job's last output lines, when captured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<OutputLine>,
}

/// One line the job wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputLine {
    /// Whether it was written to stderr (else stdout).
    pub stderr: bool,
    /// The line, without its newline, made valid UTF-8.
    pub text: String,
}

/// What the probe said about itself.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProbeReport {
    /// The client's name from its `hello` ("python", "c").
    pub client: String,
    /// MLX's version, when the job imported MLX.
    pub mlx_version: Option<String>,
    /// Lines read.
    pub lines: u64,
    /// Lines that were not protocol lines (ignored).
    pub bad_lines: u64,
    /// Events (marks, loads, cache clears, exceptions) past the cap of
    /// [`MAX_PROBE_EVENTS`](super::record::MAX_PROBE_EVENTS): counted, not kept.
    pub dropped_events: u64,
    /// Frames and stacks past their caps ([`super::stacks::MAX_FRAMES`],
    /// [`super::stacks::MAX_STACKS`]): counted, not kept (samples naming them
    /// have no stack).
    pub dropped_definitions: u64,
    /// Probe samples thinned out past [`super::stacks::MAX_SAMPLES`] (every
    /// process's new highs are always kept).
    pub thinned_samples: u64,
    /// Lines naming a process past the first 1,024 the probes named (the
    /// recorder's `MAX_PROBE_PIDS`): counted, not read.
    #[serde(default)]
    pub unknown_pids: u64,
    /// The probe's own CPU time and wall time, from its `bye`.
    pub cost: Option<(f64, f64)>,
}

impl ProbeReport {
    /// The probe's cost as a percentage of one core, when it said.
    #[must_use]
    pub fn cost_percent(&self) -> Option<f64> {
        self.cost
            .filter(|(_, wall)| *wall > 0.0)
            .map(|(cpu, wall)| 100.0 * cpu / wall)
    }
}

/// A kill by the kernel for memory: the cgroup whose limit was reached.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryKill {
    /// The cgroup's name (`/x`).
    pub cgroup: String,
    /// Its limit (none: the machine's memory ran out).
    pub limit_bytes: Option<u64>,
}
