//! Recording a user's job: `weightscope record -- CMD` and `--pid PID`.
//!
//! From outside, the job's whole process tree is sampled from `/proc` at the
//! interval (RSS and its anonymous/file split, `VmHWM`, bytes read, the
//! `.safetensors` files held open). From inside, a probe (the Python one in
//! `assets/probe`, or any client speaking the line protocol of
//! docs/record.md) reports MLX's counters and marks on a pipe. Both land on
//! one clock as a trace like a walk's, summarized as a recording
//! (`analysis::recording`). Also the walk's memory sampler (`sampler.rs`).

#[cfg(target_os = "linux")]
pub mod gpu;
#[cfg(target_os = "linux")]
mod job;
#[cfg(target_os = "linux")]
pub mod outside;
#[cfg(target_os = "linux")]
mod pipes;
pub mod probe;
#[cfg(target_os = "linux")]
pub mod procfs;
mod recorder;
#[cfg(target_os = "linux")]
mod run;
pub mod sampler;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(target_os = "linux")]
pub use job::{RecordControl, remember_inherited_descriptors};

#[cfg(not(target_os = "linux"))]
use super::analysis::recording::Recording;
use super::trace::TraceEvent;
use super::trace::job_end::{MemoryKill, OutputLine};
use super::trace::stacks;
use crate::memory::Sample;
use probe::ProbeLine;
use recorder::Recorder;
pub use recorder::{MAX_PROBE_EVENTS, MAX_PROBE_PIDS};
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
    /// What the recording cannot read (an attached process's stacks
    /// without the permission to read its memory), said once as it begins.
    Note(String),
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
