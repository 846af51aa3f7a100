//! A recording summarized: what `weightscope record` reports about a job
//! (its peaks, lines, held-by, ledger, the files it read, how it ended),
//! made from its trace by `summarize.rs` the same way live and from a file.

use std::path::PathBuf;

use crate::memory::{ExpectedPeaks, Sample};
use crate::profile::TraceEvent;
use crate::profile::analysis::findings::Finding;
use crate::profile::trace::job_end::{MemoryKill, OutputLine, ProbeReport};

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobExit {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl JobExit {
    /// The status a shell reports: the code, or 128+N for signal N.
    #[must_use]
    pub fn status(self) -> i32 {
        match self {
            Self::Code(code) => code,
            Self::Signal(signal) => 128 + signal,
        }
    }

    /// "exit 3", "signal 9 (SIGKILL)".
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            Self::Code(code) => format!("exit {code}"),
            Self::Signal(signal) => format!("signal {signal} ({})", signal_name(signal)),
        }
    }
}

/// The usual name of signal `n` on Linux.
#[must_use]
pub fn signal_name(n: i32) -> &'static str {
    match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// A `.safetensors` file the job held open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFile {
    /// Its path.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
}

/// The checkpoint a recording is measured against.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFacts {
    /// Its folder or file.
    pub path: PathBuf,
    /// Every tensor's bytes.
    pub total_bytes: u64,
    /// The largest shard's bytes.
    pub largest_shard_bytes: u64,
    /// Shard files.
    pub shards: usize,
    /// What the headers predict for a walk under each policy.
    pub expected: ExpectedPeaks,
}

/// A finished recording.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The command line, or `pid N` when attached.
    pub command: String,
    /// The job's (or attached process's) pid.
    pub pid: u32,
    /// Whether it was attached to rather than started.
    pub attached: bool,
    /// How it ended (`None` when attached).
    pub exit: Option<JobExit>,
    /// When the recording ended, in seconds on its clock (from its start,
    /// unless it was moved onto a merged clock: see `start_secs`).
    pub elapsed_secs: f64,
    /// Where its second 0 is on its clock: 0, unless its trace was moved
    /// onto the clock of several hosts' journals merged.
    pub start_secs: f64,
    /// Samples, in time order.
    pub samples: Vec<Sample>,
    /// Events (files, probe marks, start and end), in time order.
    pub events: Vec<TraceEvent>,
    /// What the probe said, when one reported.
    pub probe: Option<ProbeReport>,
    /// Every `.safetensors` file seen open, in the order first seen.
    pub files_seen: Vec<OpenFile>,
    /// The files open at the peak.
    pub files_open_at_peak: Vec<OpenFile>,
    /// Peak RSS: the highest of the tree's sampled RSS and any process's
    /// `VmHWM` (which sees peaks between samples).
    pub peak_rss_bytes: u64,
    /// Whether the tree's figure summed proportional set sizes (PSS: pages
    /// shared between its processes counted once) rather than RSS, as it
    /// does whenever the tree had more than one process.
    pub rss_is_pss: bool,
    /// When the peak was sampled.
    pub peak_rss_secs: f64,
    /// Peak MLX active memory, when a probe reported.
    pub peak_mlx_active_bytes: Option<u64>,
    /// Peak GPU memory of the tree (NVML), where the driver is.
    pub peak_gpu_bytes: Option<u64>,
    /// Peak memory used on the GPUs by everyone (NVML).
    pub peak_gpu_device_used_bytes: Option<u64>,
    /// Why there is no GPU series, when there is none.
    pub gpu_unavailable: Option<String>,
    /// The checkpoint it is measured against, when known.
    pub checkpoint: Option<CheckpointFacts>,
    /// Why the checkpoint could not be read, when it could not.
    pub checkpoint_error: Option<String>,
    /// Findings, most important first.
    pub findings: Vec<Finding>,
    /// The job's Python stack at its peak (MLX active with MLX, else RSS),
    /// innermost frame first; empty without a probe that sends stacks.
    pub peak_stack: Vec<crate::profile::trace::stacks::Frame>,
    /// The stack at the last sample (what was executing when it ended).
    pub last_stack: Vec<crate::profile::trace::stacks::Frame>,
    /// The job's lines by the memory that grew while they executed.
    pub lines: Vec<super::stacks::LineGrowth>,
    /// The lines between the job's marks.
    pub phases: Vec<super::stacks::Phase>,
    /// The files the job loaded (`mx.load`) and what each still held at
    /// the end.
    pub files_loaded: Vec<super::stacks::FileHeld>,
    /// Growth by whole stack (for an icicle chart).
    pub by_stack: Vec<super::stacks::StackGrowth>,
    /// Every probe sample, for the trace.
    pub stacks: Option<crate::profile::trace::stacks::TraceStacks>,
    /// Read from a journal whose recorder was killed before the job ended.
    pub cut_short: bool,
    /// When the kernel's OOM killer killed in a memory cgroup of the job
    /// during the recording (its count of kills went up): that cgroup.
    pub memory_kill: Option<MemoryKill>,
    /// The job's address-space limit (`ulimit -v`), when it had one.
    pub address_space_limit: Option<u64>,
    /// The job's last output lines, when they were captured.
    pub output: Vec<OutputLine>,
    /// What every byte was at the RSS peak, when there was a sample.
    pub ledger: Option<Ledger>,
    /// A distributed job's ranks (`MLX_RANK` from their probes): each
    /// one's peak MLX active and its stack then, by rank.
    pub ranks: Vec<RankPeak>,
    /// Who held MLX memory at the peak: the probe's walk made at the
    /// highest MLX active memory.
    pub held_by: Option<crate::profile::trace::census::Census>,
    /// The probe's last walk (for a job killed: what held memory then).
    pub held_last: Option<crate::profile::trace::census::Census>,
    /// Where and when it was taken (host, wall clock, rank).
    pub origin: Option<crate::profile::Origin>,
}

/// One rank of a distributed MLX job at its peak.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RankPeak {
    /// `MLX_RANK`.
    pub rank: u32,
    /// Its process.
    pub pid: u32,
    /// Its highest MLX active memory.
    pub peak_mlx_active_bytes: u64,
    /// Its stack then, innermost frame first.
    pub peak_stack: Vec<crate::profile::trace::stacks::Frame>,
    /// Who held its MLX memory at its peak (its probe's walk there).
    pub held_by: Vec<crate::profile::trace::census::HeldRoot>,
}

/// What every byte was at the job's highest sampled RSS: that sample (RSS
/// and its split, MLX's figures, GPU memory) and the files mapped near it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    /// The sample of the highest RSS.
    pub sample: Sample,
    /// File-backed memory by file near the peak (from `/proc/PID/smaps`),
    /// largest first: `(path, bytes)`.
    pub files: Vec<(String, u64)>,
}

impl Ledger {
    /// The anonymous memory that is not MLX's (active and cache taken out):
    /// Python objects, numpy, torch. Only with MLX's figures; meaningful on
    /// the CPU backend, where MLX's buffers are anonymous memory.
    #[must_use]
    pub fn host_not_mlx(&self) -> Option<u64> {
        self.sample.kinds().map(|k| k.host_not_mlx)
    }
}
