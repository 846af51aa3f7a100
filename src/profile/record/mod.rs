//! Recording a user's job: `weightscope record -- CMD` and `--pid PID`.
//!
//! From outside, the job's whole process tree is sampled from `/proc` at the
//! interval (RSS and its anonymous/file split, `VmHWM`, bytes read, the
//! `.safetensors` files held open). From inside, a probe (the Python one in
//! `assets/probe`, or any client speaking the line protocol of
//! docs/record.md) reports MLX's counters and marks on a pipe. Both land on
//! one clock as a [`Trace`] like a walk's, plus the richer [`Recording`].

mod findings;
#[cfg(target_os = "linux")]
pub mod gpu;
#[cfg(target_os = "linux")]
mod job;
#[cfg(target_os = "linux")]
mod pipes;
pub mod probe;
#[cfg(target_os = "linux")]
pub mod procfs;
mod recorder;
#[cfg(target_os = "linux")]
mod run;
mod summary;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use super::job_end::{JobEnd, MemoryKill, OutputLine, ProbeReport};
pub use super::{held, stacks};
pub use findings::record_findings;
#[cfg(target_os = "linux")]
pub use job::RecordControl;

use super::findings::Finding;
use super::trace::TraceEvent;
use crate::memory::{ExpectedPeaks, Sample};
use probe::ProbeLine;
pub use recorder::MAX_PROBE_EVENTS;
use recorder::Recorder;
#[cfg(target_os = "linux")]
pub use run::record;

/// What to record.
#[derive(Debug, Clone)]
pub enum Target {
    /// Start this job.
    Spawn(JobSpec),
    /// Follow a process already running, from outside only.
    Attach(u32),
}

/// A job to start.
#[derive(Debug, Clone, Default)]
pub struct JobSpec {
    /// Program and arguments.
    pub argv: Vec<OsString>,
    /// Working folder (the recorder's when `None`).
    pub cwd: Option<PathBuf>,
    /// Environment additions.
    pub env: Vec<(OsString, OsString)>,
    /// Take the job's stdout and stderr and pass them on as updates (the
    /// window's pane; the last lines are kept in the recording), instead of
    /// leaving them on this process's. Python's output is then unbuffered.
    pub capture_output: bool,
}

/// Environment variables this process set for itself alone (the window's
/// software-OpenGL threads): the jobs it starts get the environment it was
/// started with.
static OWN_VARIABLES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();

/// Marks `names` as set by this process for itself alone: jobs it starts
/// do not inherit them (the form's environment additions still apply).
pub fn keep_from_jobs(names: Vec<&'static str>) {
    let _ = OWN_VARIABLES.set(names);
}

/// The most output lines a recording keeps (the last ones).
pub const OUTPUT_LINES: usize = 500;
/// The longest output line kept, in bytes (longer ones are cut).
pub const OUTPUT_LINE_BYTES: usize = 4096;

/// How to record.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Time between samples.
    pub interval: Duration,
    /// The checkpoint the job works on; else the folder of the first
    /// `.safetensors` file it opened.
    pub checkpoint: Option<PathBuf>,
    /// Put the Python probe on the job's `PYTHONPATH`.
    pub python_probe: bool,
}

impl Default for RecordOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(50),
            checkpoint: None,
            python_probe: true,
        }
    }
}

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
    /// Seconds from start to the end of the recording.
    pub elapsed_secs: f64,
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
    pub peak_stack: Vec<stacks::Frame>,
    /// The stack at the last sample (what was executing when it ended).
    pub last_stack: Vec<stacks::Frame>,
    /// The job's lines by the memory that grew while they executed.
    pub lines: Vec<stacks::LineGrowth>,
    /// The lines between the job's marks.
    pub phases: Vec<stacks::Phase>,
    /// The files the job loaded (`mx.load`) and what each still held at
    /// the end.
    pub files_loaded: Vec<stacks::FileHeld>,
    /// Growth by whole stack (for an icicle chart).
    pub by_stack: Vec<stacks::StackGrowth>,
    /// Every probe sample, for the trace.
    pub stacks: Option<stacks::TraceStacks>,
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
    pub held_by: Option<held::Census>,
    /// The probe's last walk (for a job killed: what held memory then).
    pub held_last: Option<held::Census>,
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
    pub peak_stack: Vec<stacks::Frame>,
    /// Who held its MLX memory at its peak (its probe's walk there).
    pub held_by: Vec<held::HeldRoot>,
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

/// Something that happened during a recording, for a live display.
#[derive(Debug, Clone)]
pub enum Update {
    /// The job started (or was attached to) with this pid.
    Started(u32),
    /// A sample.
    Sample(Sample),
    /// An event.
    Event(TraceEvent),
    /// A line of the job's output (when captured).
    Output(OutputLine),
    /// A frame, stack, probe sample or rank from the job's probes.
    Stacks(stacks::StackUpdate),
}

/// Why a recording could not start.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The command could not be started.
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// No command was given.
    #[error("no command to record: give one after `--`")]
    NoCommand,
    /// No such process to attach to.
    #[error("no process {pid} to attach to (or not ours to read)")]
    NoProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// The probe's pipe or files could not be made.
    #[error("cannot set up the probe: {0}")]
    Probe(#[from] std::io::Error),
    /// The thread that records could not be started (the window's recorder).
    #[error("cannot start the recorder thread: {0}")]
    Thread(std::io::Error),
    /// This system has no `/proc` (macOS: docs/record.md says what would do).
    #[error("recording needs Linux's /proc for now (docs/record.md)")]
    Unsupported,
}

/// Elsewhere than Linux there is nothing to stop: recording is refused.
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Default)]
pub struct RecordControl;

#[cfg(not(target_os = "linux"))]
impl RecordControl {
    /// A control for one recording.
    #[must_use]
    pub fn new() -> Self {
        Self
    }

    /// Nothing runs: nothing to stop.
    pub fn stop(&self) -> Option<i32> {
        None
    }

    /// Nothing runs: no probe to ask.
    pub fn ask_for_walk(&self) {}
}

/// Recording needs `/proc`: elsewhere it says so.
///
/// # Errors
/// Always [`RecordError::Unsupported`].
#[cfg(not(target_os = "linux"))]
pub fn record(
    _target: &Target,
    _options: &RecordOptions,
    _control: &RecordControl,
    _on_update: impl FnMut(Update),
) -> Result<Recording, RecordError> {
    Err(RecordError::Unsupported)
}

/// The cgroup whose OOM kill count went up while the job was recorded, read
/// again now (the job is gone; its cgroup usually stays).
#[cfg(target_os = "linux")]
fn memory_kill(rec: &Recorder) -> Option<MemoryKill> {
    rec.cgroups.values().find_map(|(first, last)| {
        let now = procfs::oom_kills_in(&last.dir).or(last.oom_kills)?;
        (now > first.unwrap_or(0)).then(|| MemoryKill {
            cgroup: last.name.clone(),
            limit_bytes: last.limit_bytes,
        })
    })
}

#[cfg(not(target_os = "linux"))]
fn memory_kill(_rec: &Recorder) -> Option<MemoryKill> {
    None
}

/// A collective event's detail: `rank R, step K` (`step K` when the
/// process did not say its rank), as [`collective_of`] reads it back.
fn collective_detail(rank: Option<u32>, step: u64) -> String {
    match rank {
        Some(rank) => format!("rank {rank}, step {step}"),
        None => format!("step {step}"),
    }
}

/// The rank and step of a collective event's detail.
#[must_use]
pub fn collective_of(detail: &str) -> (Option<u32>, Option<u64>) {
    let mut rank = None;
    let mut step = None;
    for part in detail.split(", ") {
        if let Some(r) = part.strip_prefix("rank ") {
            rank = r.parse().ok();
        } else if let Some(k) = part.strip_prefix("step ") {
            step = k.parse().ok();
        }
    }
    (rank, step)
}
