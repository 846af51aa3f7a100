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
pub mod probe;
#[cfg(target_os = "linux")]
pub mod procfs;
mod summary;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use super::job_end::{JobEnd, MemoryKill, OutputLine, ProbeReport};
pub use super::{held, stacks};
pub use findings::record_findings;
#[cfg(target_os = "linux")]
pub use job::RecordControl;

use super::findings::Finding;
use super::trace::{JobInfo, Trace, TraceEvent};
use crate::memory::{
    ExpectedPeaks, GpuFigures, MarkKind, MlxFigures, ProcessFigures, Sample, secs_since,
};
use probe::ProbeLine;

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
    pub held_by: Option<held::HeldWalk>,
    /// The probe's last walk (for a job killed: what held memory then).
    pub held_last: Option<held::HeldWalk>,
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

/// The running state of a recording: what was seen so far.
struct Recorder {
    origin: Instant,
    /// This machine's wall clock at `origin` (Unix seconds): the probe's
    /// collective lines carry the job's wall clock, placed on ours by it.
    origin_wall: f64,
    /// The host, the wall clock and the rank the recording states.
    where_when: Option<crate::profile::Origin>,
    samples: Vec<Sample>,
    events: Vec<TraceEvent>,
    /// Files open at the last sample, with their sizes.
    open: BTreeMap<PathBuf, u64>,
    files_seen: Vec<OpenFile>,
    /// The latest MLX figures per reporting process (while it lives), and
    /// when they came.
    mlx: HashMap<u32, MlxFigures>,
    mlx_at: HashMap<u32, Instant>,
    /// Figures older than this are not drawn as the present (a gap in the
    /// MLX series instead): see [`Recorder::mlx_fresh`].
    mlx_stale: Duration,
    /// Processes of the tree read at least once, and those since gone:
    /// a gone process's MLX figures leave the series (its last report,
    /// and any that comes after it is gone, count for the peak only).
    alive: std::collections::HashSet<u32>,
    gone: std::collections::HashSet<u32>,
    /// The highest MLX figure (active, or MLX's own peak counter) of the
    /// reports of processes now gone.
    gone_mlx_peak: Option<u64>,
    probe: Option<ProbeReport>,
    /// Highest `VmHWM` per process.
    hwm: HashMap<u32, u64>,
    /// When each process's descriptor table was last read, and what it held.
    fd_scans: procfs::FdScans,
    /// Sizes of files already seen (one stat per file).
    sizes: HashMap<PathBuf, u64>,
    /// NVML, where the NVIDIA driver is.
    #[cfg(target_os = "linux")]
    gpu: gpu::GpuMemory,
    /// Whether a sample summed proportional set sizes (several processes).
    pss_used: bool,
    /// The probes' frames, stacks and samples.
    stacks: stacks::Stacks,
    /// Memory cgroups of the tree's processes: folder -> OOM kills when
    /// first seen, and the cgroup as last read.
    #[cfg(target_os = "linux")]
    cgroups: HashMap<PathBuf, (Option<u64>, procfs::MemoryCgroup)>,
    /// The lowest address-space limit of a process of the tree.
    address_space_limit: Option<u64>,
    /// Events the probes sent that were kept (at most [`MAX_PROBE_EVENTS`]).
    probe_events: usize,
    /// The file that asks the probe for a held-by walk now, and when it was
    /// last asked.
    walk_request: Option<(PathBuf, Option<Instant>)>,
    /// The job's last output lines, when captured.
    output: std::collections::VecDeque<OutputLine>,
    /// Resident bytes by mapped file near the RSS peak, the RSS they were
    /// read at, and when.
    peak_files: (Vec<(String, u64)>, u64, Option<Instant>),
}

impl Recorder {
    fn new(origin: Instant) -> Self {
        Self {
            origin,
            origin_wall: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            where_when: None,
            samples: Vec::new(),
            events: Vec::new(),
            open: BTreeMap::new(),
            files_seen: Vec::new(),
            mlx: HashMap::new(),
            mlx_at: HashMap::new(),
            mlx_stale: Duration::from_secs(1),
            alive: std::collections::HashSet::new(),
            gone: std::collections::HashSet::new(),
            gone_mlx_peak: None,
            probe: None,
            hwm: HashMap::new(),
            fd_scans: procfs::FdScans::default(),
            sizes: HashMap::new(),
            #[cfg(target_os = "linux")]
            gpu: gpu::GpuMemory::init(),
            pss_used: false,
            stacks: stacks::Stacks::default(),
            #[cfg(target_os = "linux")]
            cgroups: HashMap::new(),
            address_space_limit: None,
            probe_events: 0,
            walk_request: None,
            output: std::collections::VecDeque::new(),
            peak_files: (Vec::new(), 0, None),
        }
    }

    /// At a new high of the tree's RSS, what its processes map, by file;
    /// read again at most once a second unless RSS grew a tenth since.
    #[cfg(target_os = "linux")]
    fn read_mapped_files(&mut self, tree: &[u32], rss: u64, now: Instant) {
        let (_, read_at_rss, read_at) = &self.peak_files;
        let due = read_at.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
            || rss > read_at_rss + read_at_rss / 10;
        if rss <= *read_at_rss || !due {
            return;
        }
        let mut by_file: HashMap<String, u64> = HashMap::new();
        for &pid in tree {
            for (path, bytes) in procfs::mapped_files(pid) {
                *by_file.entry(path).or_insert(0) += bytes;
            }
        }
        let mut files: Vec<(String, u64)> = by_file.into_iter().collect();
        files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        files.truncate(20);
        self.peak_files = (files, rss, Some(now));
    }

    /// Takes the probe's lines as they come until `deadline`; `false` when
    /// the pipe has closed.
    #[cfg(target_os = "linux")]
    fn probe_lines_until(
        &mut self,
        deadline: Instant,
        lines: &std::sync::mpsc::Receiver<(Instant, String)>,
        updates: &mut Vec<Update>,
    ) -> bool {
        use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
        // What is waiting is taken first, the deadline passed or not: a
        // sample that took longer than the interval (a loaded machine, a
        // tree of processes) must not leave the probe's lines queued until
        // the machine is idle again, the MLX series frozen meanwhile.
        for _ in 0..WAITING_BATCH {
            match lines.try_recv() {
                Ok((at, line)) => self.probe_line(at, &line, updates),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            match lines.recv_timeout(left) {
                Ok((at, line)) => self.probe_line(at, &line, updates),
                Err(RecvTimeoutError::Timeout) => return true,
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// The job is gone: takes the probe lines it sent last (its `bye`) and
    /// its last output. Processes it left running may hold the pipes: they
    /// are waited for a second at most.
    #[cfg(target_os = "linux")]
    fn last_words(
        &mut self,
        end: Instant,
        lines: Option<&std::sync::mpsc::Receiver<(Instant, String)>>,
        output: Option<&std::sync::mpsc::Receiver<OutputLine>>,
        updates: &mut Vec<Update>,
    ) {
        // A second at most, however fast lines still come (a process left
        // behind may write for ever): the deadline ends the loop, not an
        // empty queue.
        let until = end + Duration::from_secs(1);
        let left = || until.saturating_duration_since(Instant::now());
        if let Some(lines) = lines {
            while let (false, Ok((at, line))) = (left().is_zero(), lines.recv_timeout(left())) {
                self.probe_line(at, &line, updates);
            }
        }
        if let Some(output) = output {
            while let (false, Ok(line)) = (left().is_zero(), output.recv_timeout(left())) {
                self.output_line(line, updates);
            }
        }
    }

    /// The job's output lines and the named pipe's probe lines waiting now.
    #[cfg(target_os = "linux")]
    fn take_waiting(
        &mut self,
        output: Option<&std::sync::mpsc::Receiver<OutputLine>>,
        fifo: Option<&NamedPipe>,
        updates: &mut Vec<Update>,
    ) {
        // At most a batch each: a flood must not keep the sampler (and the
        // signals it answers) waiting.
        if let Some(output) = output {
            for line in output.try_iter().take(WAITING_BATCH) {
                self.output_line(line, updates);
            }
        }
        if let Some(fifo) = fifo {
            for (at, line) in fifo.lines.try_iter().take(WAITING_BATCH) {
                self.probe_line(at, &line, updates);
            }
        }
    }

    /// The lines the job's processes wrote to the named pipe before it
    /// ended (a second at most).
    #[cfg(target_os = "linux")]
    fn last_named_lines(&mut self, fifo: NamedPipe, updates: &mut Vec<Update>) {
        let lines = fifo.stop();
        let until = Instant::now() + Duration::from_secs(1);
        let left = || until.saturating_duration_since(Instant::now());
        while let (false, Ok((at, line))) = (left().is_zero(), lines.recv_timeout(left())) {
            self.probe_line(at, &line, updates);
        }
    }

    /// A line of the job's output: kept (the last [`OUTPUT_LINES`]) and
    /// passed on.
    fn output_line(&mut self, line: OutputLine, updates: &mut Vec<Update>) {
        if self.output.len() == OUTPUT_LINES {
            self.output.pop_front();
        }
        self.output.push_back(line.clone());
        updates.push(Update::Output(line));
    }

    fn secs(&self, at: Instant) -> f64 {
        secs_since(self.origin, at)
    }

    /// [`Self::mlx_now`] when every process's figures are recent; `None`
    /// (a gap in the series) when one's last report is older than
    /// `mlx_stale`: its probe's thread got no time (a loaded machine, the
    /// GIL held in a long call). A stale figure drawn as the present froze
    /// the series while the job grew, and the findings then took the
    /// difference for host memory.
    fn mlx_fresh(&self, now: Instant) -> Option<MlxFigures> {
        let stale = self.mlx_at.iter().any(|(pid, at)| {
            self.mlx.contains_key(pid) && now.saturating_duration_since(*at) > self.mlx_stale
        });
        if stale { None } else { self.mlx_now() }
    }

    fn mlx_now(&self) -> Option<MlxFigures> {
        (!self.mlx.is_empty()).then(|| {
            self.mlx
                .values()
                // Saturating: a probe's figures are a job's words, and a
                // sum that wraps would print "16.00 EiB".
                .fold(MlxFigures::default(), |a, m| MlxFigures {
                    active_bytes: a.active_bytes.saturating_add(m.active_bytes),
                    cache_bytes: a.cache_bytes.saturating_add(m.cache_bytes),
                    peak_bytes: a.peak_bytes.saturating_add(m.peak_bytes),
                })
        })
    }

    /// An event at `at` with the latest memory figures.
    fn event(&mut self, at: Instant, kind: MarkKind, target: String) -> &mut TraceEvent {
        let last_rss = self.samples.last().map_or(0, |s| s.process.rss_bytes);
        let mlx = self.mlx_now().unwrap_or_default();
        let event = TraceEvent {
            t_secs: self.secs(at),
            kind,
            target,
            bytes: 0,
            detail: String::new(),
            rss_bytes: last_rss,
            mlx_active_bytes: mlx.active_bytes,
            mlx_cache_bytes: mlx.cache_bytes,
            shard: None,
            shard_resident_bytes: None,
        };
        self.events.push(event);
        let last = self.events.len() - 1;
        &mut self.events[last]
    }

    /// Applies one probe line received at `at`.
    fn report(&mut self) -> &mut ProbeReport {
        self.probe.get_or_insert_with(ProbeReport::default)
    }

    /// A `sample` (MLX's figures and the stacks) or `stack` line of `pid`.
    fn probe_sample(&mut self, at: Instant, pid: u32, line: ProbeLine, updates: &mut Vec<Update>) {
        let active = (line.kind == "sample").then(|| line.active.unwrap_or(0));
        if let Some(active) = active {
            let figures = MlxFigures {
                active_bytes: active,
                cache_bytes: line.cache.unwrap_or(0),
                peak_bytes: line.peak.unwrap_or(0),
            };
            if self.gone.contains(&pid) {
                self.gone_mlx_peak = self.gone_mlx_peak.max(Some(active.max(figures.peak_bytes)));
            } else {
                self.mlx.insert(pid, figures);
                self.mlx_at.insert(pid, at);
            }
        }
        let t = self.secs(at);
        let threads = line.threads.unwrap_or_default();
        match self.stacks.sample(t, pid, line.stack, &threads, active) {
            Some(update) => updates.push(Update::Stacks(update)),
            None => self.report().thinned_samples += 1,
        }
    }

    /// Whether one more probe event is kept (else it is counted).
    fn keep_event(&mut self) -> bool {
        if self.probe_events >= MAX_PROBE_EVENTS {
            self.report().dropped_events += 1;
            return false;
        }
        self.probe_events += 1;
        true
    }

    /// A frame or stack definition's update, or its count past the caps.
    fn defined(
        &mut self,
        defined: Result<Option<stacks::StackUpdate>, stacks::Full>,
        updates: &mut Vec<Update>,
    ) {
        match defined {
            Ok(update) => updates.extend(update.map(Update::Stacks)),
            Err(stacks::Full) => self.report().dropped_definitions += 1,
        }
    }

    /// A `collective` line: the evaluation that runs a rank's collectives
    /// began (`wait`) or returned (`done`), placed on the recording's clock
    /// by the job's wall clock (this machine's), not when the line arrived.
    fn collective_line(&mut self, line: ProbeLine, updates: &mut Vec<Update>) {
        let (Some(wall), Some(step)) = (line.wall, line.step) else {
            return;
        };
        let kind = match line.phase.as_deref() {
            Some("wait") => MarkKind::CollectiveWait,
            Some("done") => MarkKind::CollectiveDone,
            _ => return,
        };
        if !self.keep_event() {
            return;
        }
        let after = wall - self.origin_wall;
        let at = if after.is_finite() && after > 0.0 {
            self.origin + Duration::from_secs_f64(after.min(1e9))
        } else {
            self.origin
        };
        let ops: Vec<String> = line
            .ops
            .unwrap_or_default()
            .iter()
            .take(8)
            .map(|o| crate::units::Shown::new(o).chars().take(32).collect())
            .collect();
        let event = self.event(at, kind, ops.join("+"));
        event.detail = collective_detail(line.rank, step);
        updates.push(Update::Event(event.clone()));
    }

    fn probe_line(&mut self, at: Instant, text: &str, updates: &mut Vec<Update>) {
        let report = self.probe.get_or_insert_with(ProbeReport::default);
        report.lines += 1;
        let Some(line) = ProbeLine::parse(text) else {
            report.bad_lines += 1;
            return;
        };
        let pid = line.pid.unwrap_or(0);
        let (kind, target, bytes) = match line.kind.as_str() {
            "hello" => {
                report.client = line.client.unwrap_or_default();
                if let Some(rank) = line.rank {
                    updates.push(Update::Stacks(self.stacks.rank(pid, rank)));
                }
                return;
            }
            "mlx" => {
                report.mlx_version = line.version;
                return;
            }
            "bye" => {
                if let (Some(cpu), Some(wall)) = (line.probe_cpu_secs, line.wall_secs) {
                    report.cost = Some((cpu, wall));
                }
                return;
            }
            "sample" | "stack" => return self.probe_sample(at, pid, line, updates),
            "held" => {
                let walk = held::HeldWalk::from_line(self.secs(at), pid, line);
                updates.push(Update::Stacks(self.stacks.held(walk)));
                return;
            }
            "frame" => {
                if let (Some(id), Some(file)) = (line.id, line.file) {
                    let frame = stacks::Frame {
                        file,
                        line: line.line.unwrap_or(0),
                        function: line.function.unwrap_or_default(),
                        text: line.text.unwrap_or_default(),
                    };
                    let defined = self.stacks.define_frame(pid, id, frame);
                    self.defined(defined, updates);
                }
                return;
            }
            "stack-def" => {
                if let (Some(id), Some(frames)) = (line.id, line.frames) {
                    let defined = self.stacks.define_stack(pid, id, &frames);
                    self.defined(defined, updates);
                }
                return;
            }
            "load" => (MarkKind::Load, line.file.unwrap_or_default(), 0),
            "clear-cache" => (
                MarkKind::ClearCache,
                String::new(),
                line.cache_before.unwrap_or(0),
            ),
            "mark" => (MarkKind::JobMark, line.text.unwrap_or_default(), 0),
            "collective" => return self.collective_line(line, updates),
            "exception" => {
                if !self.keep_event() {
                    return;
                }
                let t = at;
                let frames: Vec<stacks::Frame> = line
                    .traceback
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(file, line, function, text)| stacks::Frame {
                        file,
                        line,
                        function,
                        text,
                    })
                    .collect();
                let where_ = stacks::describe(&frames);
                let event = self.event(t, MarkKind::JobException, line.text.unwrap_or_default());
                event.detail = where_;
                updates.push(Update::Event(event.clone()));
                return;
            }
            _ => return, // a kind from a newer client
        };
        if !self.keep_event() {
            return;
        }
        let event = self.event(at, kind, target);
        event.bytes = bytes;
        updates.push(Update::Event(event.clone()));
    }

    #[cfg(target_os = "linux")]
    /// Reads every process of `tree` once: a sample (none when all are
    /// gone), and file events for what opened or closed since the last.
    fn sample_tree(
        &mut self,
        tree: &[u32],
        now: Instant,
        updates: &mut Vec<Update>,
    ) -> Option<Sample> {
        let mut sample = Sample {
            at: self.secs(now),
            process: ProcessFigures::default(),
            mlx: None,
            gpu: None,
        };
        let mut open = BTreeMap::new();
        let gpu = self.gpu.read();
        if let Some((used, device)) = gpu.as_ref() {
            sample.gpu = Some(GpuFigures {
                process_bytes: tree.iter().filter_map(|pid| used.get(pid)).sum(),
                device_used_bytes: *device,
            });
        }
        let mut alive = std::collections::HashSet::new();
        // Over a tree of processes (forked workers share their parent's
        // pages), RSS would count each shared page once per process: the
        // proportional set size counts it once in all, read so that no
        // process exits midway (its shares would move to the others). Read
        // only when two processes are big enough to share much: PSS walks
        // every page of a process, and over `sh -c python …` (a shell of a
        // few hundred KiB beside a job of gigabytes) it made each sample
        // slower than the interval on a loaded machine, for nothing.
        let readings: Vec<(u32, procfs::ProcessReading)> = tree
            .iter()
            .filter_map(|&pid| procfs::read_process(pid).map(|r| (pid, r)))
            .collect();
        let big = readings
            .iter()
            .filter(|(_, r)| r.memory.rss_bytes >= PSS_WORTH_BYTES)
            .count();
        let shares: std::collections::HashMap<u32, (u64, u64, u64)> = if big > 1 {
            consistent_pss(tree).into_iter().collect()
        } else {
            std::collections::HashMap::new()
        };
        let tree_figures = &mut sample.process;
        for (pid, figures) in readings {
            alive.insert(pid);
            tree_figures.processes += 1;
            if let Some(&(pss, anon, file)) = shares.get(&pid) {
                tree_figures.rss_bytes += pss;
                tree_figures.anon_bytes += anon;
                tree_figures.file_bytes += file;
                self.pss_used = true;
            } else if !shares.is_empty() {
                // Exiting while it was read: its pages are the others' now.
            } else {
                tree_figures.rss_bytes += figures.memory.rss_bytes;
                tree_figures.anon_bytes += figures.memory.anon_bytes;
                tree_figures.file_bytes += figures.memory.file_bytes;
            }
            tree_figures.read_bytes += figures.read_bytes;
            if let Some(cgroup) = procfs::memory_cgroup(pid) {
                let first = cgroup.oom_kills;
                self.cgroups
                    .entry(cgroup.dir.clone())
                    .and_modify(|(_, last)| *last = cgroup.clone())
                    .or_insert((first, cgroup));
            }
            if let Some(limit) = procfs::address_space_limit(pid) {
                self.address_space_limit =
                    Some(self.address_space_limit.map_or(limit, |l| l.min(limit)));
            }
            let hwm = self.hwm.entry(pid).or_insert(0);
            *hwm = (*hwm).max(figures.memory.peak_rss_bytes);
            for path in self.fd_scans.open_files(pid, now) {
                let bytes = *self
                    .sizes
                    .entry(path.clone())
                    .or_insert_with(|| std::fs::metadata(&path).map_or(0, |m| m.len()));
                open.insert(path, bytes);
            }
        }
        if tree_figures.processes == 0 {
            return None;
        }
        tree_figures.peak_rss_bytes = self.hwm.values().copied().max().unwrap_or(0);
        self.fd_scans.retain(&alive);
        self.forget_gone(alive);
        tree_figures.open_files = open.len();
        tree_figures.open_file_bytes = open.values().sum();
        self.files(now, open, updates);
        sample.mlx = self.mlx_fresh(now);
        self.read_mapped_files(tree, sample.process.rss_bytes, now);
        self.near_limit_walk(sample.process.rss_bytes, now);
        self.samples.push(sample);
        Some(sample)
    }

    /// Near a memory cgroup's limit (the tree at 85 % of it) the next
    /// moment may be the job's last: the probe is asked for a held-by walk
    /// now (at most twice a second), so a job the kernel kills has its
    /// holders from just before the kill.
    #[cfg(target_os = "linux")]
    fn near_limit_walk(&mut self, rss: u64, now: Instant) {
        let near = self.cgroups.values().any(|(_, c)| {
            c.limit_bytes
                .is_some_and(|limit| u128::from(rss) * 100 >= u128::from(limit) * 85)
        });
        if near {
            self.ask_probe_to_walk(now);
        }
    }

    /// Asks the Python probe for a held-by walk now, at most twice a second.
    #[cfg(target_os = "linux")]
    fn ask_probe_to_walk(&mut self, now: Instant) {
        let Some((path, last)) = &mut self.walk_request else {
            return;
        };
        if last.is_some_and(|t| now.duration_since(t) < Duration::from_millis(500)) {
            return;
        }
        *last = Some(now);
        // A new file each time (its inode changes): the probe compares.
        if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
            let _ = crate::files::replace_entry(dir, name, b"walk");
        }
    }

    /// Processes read before and not now are gone: their MLX figures leave
    /// the series (kept for the peak).
    fn forget_gone(&mut self, alive: std::collections::HashSet<u32>) {
        let gone: Vec<u32> = self.alive.difference(&alive).copied().collect();
        for pid in gone {
            self.mlx_at.remove(&pid);
            if let Some(m) = self.mlx.remove(&pid) {
                self.gone_mlx_peak = self
                    .gone_mlx_peak
                    .max(Some(m.active_bytes.max(m.peak_bytes)));
            }
            self.gone.insert(pid);
        }
        self.alive = alive;
    }

    /// Files opened and closed since the last sample, as events whose
    /// residency is the file's size (so the profiler draws them as bands).
    fn files(&mut self, at: Instant, now: BTreeMap<PathBuf, u64>, updates: &mut Vec<Update>) {
        let closed: Vec<PathBuf> = self
            .open
            .keys()
            .filter(|p| !now.contains_key(*p))
            .cloned()
            .collect();
        for path in closed {
            let name = path.display().to_string();
            let event = self.event(at, MarkKind::FileClose, name.clone());
            event.shard = Some(name);
            event.shard_resident_bytes = Some(0);
            updates.push(Update::Event(event.clone()));
        }
        for (path, &bytes) in &now {
            if self.open.contains_key(path) {
                continue;
            }
            if !self.files_seen.iter().any(|f| &f.path == path) {
                self.files_seen.push(OpenFile {
                    path: path.clone(),
                    bytes,
                });
            }
            let name = path.display().to_string();
            let event = self.event(at, MarkKind::FileOpen, name.clone());
            event.bytes = bytes;
            event.shard = Some(name);
            event.shard_resident_bytes = Some(bytes);
            updates.push(Update::Event(event.clone()));
        }
        self.open = now;
    }
}

#[cfg(target_os = "linux")]
/// A job started (or a process found) and the probe's lines coming in.
struct Started {
    job: Option<job::Job>,
    root: u32,
    command: String,
    lines: std::sync::mpsc::Receiver<(Instant, String)>,
    python_probe: Option<probe::PythonProbe>,
    /// The job's output lines, when captured.
    output: Option<std::sync::mpsc::Receiver<OutputLine>>,
    /// The probe's named pipe, for processes that did not inherit the
    /// pipe: our end (to wake its reader at the end) and its lines.
    fifo: Option<NamedPipe>,
}

/// Probe events (marks, loads, cache clears, exceptions) kept; past it they
/// are counted ([`ProbeReport::dropped_events`]).
pub const MAX_PROBE_EVENTS: usize = 20_000;

/// Lines taken from a queue per look between samples.
#[cfg(target_os = "linux")]
const WAITING_BATCH: usize = 20_000;

/// Lines a reader thread may hold for the recorder: past it the reader waits
/// (and the job's probe with it), so memory stays bounded.
#[cfg(target_os = "linux")]
const LINE_QUEUE: usize = 8_192;

/// A process of a recorded tree this big or bigger may share much with
/// another: two of them and the tree's memory is read as PSS.
const PSS_WORTH_BYTES: u64 = 64 << 20;

/// The probe's named pipe and the `probe-fifo` thread that reads it.
///
/// Nothing is ever written to the FIFO by the recorder: the job can fill
/// it, and a line there could be forged by the job. The reader is told to
/// finish through a private pipe of ours instead, and the end of the job
/// comes from `wait`, never from a line.
#[cfg(target_os = "linux")]
struct NamedPipe {
    /// Writing a byte here (or dropping it) tells the reader to finish.
    stop: std::io::PipeWriter,
    lines: std::sync::mpsc::Receiver<(Instant, String)>,
}

#[cfg(target_os = "linux")]
impl NamedPipe {
    /// Makes the FIFO at `path` and starts its reader.
    fn start(path: &Path) -> std::io::Result<Self> {
        crate::files::make_fifo(path)?;
        // Opened for reading and writing, so the reader never sees an end
        // of file while ranks come and go; only ever read.
        let fifo = crate::files::open_own_fifo(path)?;
        let (stop_reader, stop) = std::io::pipe()?;
        let (tx, lines) = std::sync::mpsc::sync_channel(LINE_QUEUE);
        pump_probe_lines(
            "probe-fifo",
            StoppableFifo {
                fifo,
                stop: stop_reader,
                until: None,
            },
            tx,
        )?;
        Ok(Self { stop, lines })
    }

    /// Tells the reader to finish: what is in the FIFO now is still read
    /// (a second at most), then it stops; returns the lines' receiver.
    fn stop(self) -> std::sync::mpsc::Receiver<(Instant, String)> {
        drop(self.stop);
        self.lines
    }
}

/// The FIFO read until our private stop pipe closes, then for what is
/// waiting in it (at most [`FIFO_DRAIN`] longer).
#[cfg(target_os = "linux")]
struct StoppableFifo {
    fifo: std::fs::File,
    stop: std::io::PipeReader,
    /// When the stop came: reading ends by this deadline.
    until: Option<Instant>,
}

/// How long the FIFO is still read after the job ended, for its last lines.
#[cfg(target_os = "linux")]
const FIFO_DRAIN: Duration = Duration::from_secs(1);

#[cfg(target_os = "linux")]
impl std::io::Read for StoppableFifo {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd as _;
        loop {
            if self.until.is_some_and(|t| Instant::now() >= t) {
                return Ok(0);
            }
            match std::io::Read::read(&mut self.fifo, buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if self.until.is_some() {
                        // Stopped, and nothing more is waiting.
                        return Ok(0);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.fifo.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stop.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            #[allow(unsafe_code)]
            // SAFETY: `fds` is a valid array of two pollfd structs, alive
            // for the call; both descriptors are owned by `self`.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if ready < 0 {
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if fds[1].revents != 0 {
                self.until = Some(Instant::now() + FIFO_DRAIN);
            }
        }
    }
}

#[cfg(target_os = "linux")]
/// Puts the Python probe first on `command`'s `PYTHONPATH`, with its named
/// pipe (for processes that do not inherit the pipe) in the environment.
fn install_probe(
    command: &mut std::process::Command,
) -> std::io::Result<(probe::PythonProbe, Option<NamedPipe>)> {
    let installed = probe::PythonProbe::install()?;
    let mut path = OsString::from(installed.dir());
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    command.env("PYTHONPATH", path);
    let named = installed.dir().join("lines");
    // Without it, the inherited pipe still serves most jobs.
    let fifo = NamedPipe::start(&named).ok();
    if fifo.is_some() {
        command.env(probe::PATH_VAR, &named);
    }
    command.env(probe::WALK_VAR, installed.dir().join("walk"));
    Ok((installed, fifo))
}

#[cfg(target_os = "linux")]
/// Reads the probe's pipe on the `probe-reader` thread, each line with the
/// moment it arrived. A line that is too long or not UTF-8 arrives as an
/// empty one, which counts as a bad line; the reading goes on (the probe
/// stays heard).
fn read_probe(
    reader: std::io::PipeReader,
    lines: std::sync::mpsc::SyncSender<(Instant, String)>,
) -> std::io::Result<()> {
    pump_probe_lines("probe-reader", reader, lines)
}

/// Reads probe lines from `reader` on a thread named `name`, each sent with
/// the moment it arrived (a line too long or not UTF-8 arrives empty: a
/// bad line), until the end of the input or nobody listening.
#[cfg(target_os = "linux")]
fn pump_probe_lines(
    name: &str,
    reader: impl std::io::Read + Send + 'static,
    lines: std::sync::mpsc::SyncSender<(Instant, String)>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut reader = std::io::BufReader::with_capacity(64 << 10, reader);
            let mut buf = Vec::new();
            while let Ok(Some(fits)) =
                probe::read_line_capped(&mut reader, &mut buf, probe::MAX_LINE_BYTES)
            {
                let line = if fits {
                    String::from_utf8(std::mem::take(&mut buf)).unwrap_or_default()
                } else {
                    String::new()
                };
                buf.clear();
                if lines.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        })
        .map(drop)
}

#[cfg(target_os = "linux")]
/// Reads the job's stdout and stderr on `job-output` threads, one line at a
/// time (at most [`OUTPUT_LINE_BYTES`] each, the rest of a longer one
/// dropped), into one channel.
fn read_output(job: &mut job::Job) -> std::io::Result<std::sync::mpsc::Receiver<OutputLine>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(LINE_QUEUE);
    let (stdout, stderr) = job.take_output();
    let streams: [(Option<Box<dyn std::io::Read + Send>>, bool); 2] = [
        (
            stdout.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            false,
        ),
        (
            stderr.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            true,
        ),
    ];
    for (stream, is_stderr) in streams {
        let Some(stream) = stream else { continue };
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("job-output".into())
            .spawn(move || {
                let mut reader = std::io::BufReader::new(stream);
                let mut buf = Vec::new();
                while let Ok(Some(_)) =
                    probe::read_line_capped(&mut reader, &mut buf, OUTPUT_LINE_BYTES)
                {
                    let text = String::from_utf8_lossy(&buf)
                        .trim_end_matches(['\n', '\r'])
                        .to_owned();
                    buf.clear();
                    let line = OutputLine {
                        stderr: is_stderr,
                        text,
                    };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })?;
    }
    Ok(rx)
}

#[cfg(target_os = "linux")]
/// Starts the job with the probe's pipe (and the Python probe on its
/// path), or checks that the pid to attach to exists.
fn start(
    target: &Target,
    options: &RecordOptions,
    control: &RecordControl,
) -> Result<Started, RecordError> {
    use std::sync::mpsc;

    let (lines_tx, lines_rx) = mpsc::sync_channel::<(Instant, String)>(LINE_QUEUE);
    let mut python_probe = None;
    let mut output = None;
    let mut fifo = None;
    let (job, root, command) = match target {
        Target::Spawn(spec) => {
            let program = spec.argv.first().ok_or(RecordError::NoCommand)?;
            // exec(2) says "Permission denied" for a folder: say what it is.
            if Path::new(program).is_dir()
                && program
                    .to_string_lossy()
                    .contains(std::path::MAIN_SEPARATOR)
            {
                return Err(RecordError::Spawn {
                    command: program.to_string_lossy().into_owned(),
                    source: std::io::Error::other("is a directory, not a program"),
                });
            }
            let command_line = spec
                .argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ");
            let (reader, writer) = std::io::pipe()?;
            let mut command = std::process::Command::new(program);
            crate::mlx::leave_kernel_cache_out(&mut command);
            command.args(&spec.argv[1..]);
            if let Some(cwd) = &spec.cwd {
                command.current_dir(cwd);
            }
            {
                use std::os::fd::AsRawFd as _;
                let fd = writer.as_raw_fd();
                command.env(probe::FD_VAR, fd.to_string());
                if let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{fd}")) {
                    use std::os::unix::fs::MetadataExt as _;
                    command.env(probe::INO_VAR, meta.ino().to_string());
                }
            }
            command.env(
                probe::INTERVAL_VAR,
                options.interval.as_millis().max(1).to_string(),
            );
            if options.python_probe {
                let (installed, named) = install_probe(&mut command)?;
                fifo = named;
                python_probe = Some(installed);
            }
            for name in OWN_VARIABLES.get().map_or(&[][..], Vec::as_slice) {
                command.env_remove(name);
            }
            for (key, value) in &spec.env {
                command.env(key, value);
            }
            if spec.capture_output {
                command
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .env("PYTHONUNBUFFERED", "1");
            }
            let mut job =
                job::Job::spawn(command, Some(&writer)).map_err(|source| RecordError::Spawn {
                    command: program.to_string_lossy().into_owned(),
                    source,
                })?;
            // Only the job's copies of the write end remain: the reader
            // sees the end of the pipe when the last of them closes.
            drop(writer);
            read_probe(reader, lines_tx)?;
            let pid = job.pid();
            control.started(pid);
            if spec.capture_output {
                output = Some(read_output(&mut job)?);
            }
            (Some(job), pid, command_line)
        }
        Target::Attach(pid) => {
            if !procfs::is_alive(*pid) {
                return Err(RecordError::NoProcess { pid: *pid });
            }
            drop(lines_tx);
            (None, *pid, format!("pid {pid}"))
        }
    };
    Ok(Started {
        job,
        root,
        command,
        lines: lines_rx,
        python_probe,
        output,
        fifo,
    })
}

#[cfg(target_os = "linux")]
/// The job's process tree at sample `tick`: the tree's own children files
/// find a new child at the next sample; every tenth sample (or where those
/// files are missing) all of `/proc` is scanned.
fn tree_at(root: u32, tick: u64) -> Vec<u32> {
    match procfs::descendants_by_children(root) {
        Some(found) if !tick.is_multiple_of(10) => found,
        _ => procfs::descendants(root),
    }
}

#[cfg(target_os = "linux")]
/// After a signal to the recorder was passed on to the job: past the grace
/// its group gets SIGKILL, and a group that still has not ended a few
/// seconds later is left (true: stop waiting; what was seen is written all
/// the same).
fn past_grace(control: &RecordControl) -> bool {
    let Some(since) = control.forwarded_since() else {
        return false;
    };
    if since >= job::FORWARD_GRACE {
        control.signal_group(libc::SIGKILL);
    }
    since >= job::FORWARD_GRACE + Duration::from_secs(2)
}

#[cfg(target_os = "linux")]
/// Records `target` until it ends (or, attached, until `control` asks to
/// stop), calling `on_update` with each sample and event as they come.
///
/// # Errors
/// When the job cannot be started, the pid does not exist, or the probe's
/// pipe cannot be made.
pub fn record(
    target: &Target,
    options: &RecordOptions,
    control: &RecordControl,
    mut on_update: impl FnMut(Update),
) -> Result<Recording, RecordError> {
    let origin = Instant::now();
    let Started {
        mut job,
        root,
        command,
        lines,
        python_probe,
        output,
        fifo,
    } = start(target, options, control)?;
    let lines_rx = lines;
    let mut announced = false;
    let mut rec = Recorder::new(origin);
    // Ten samples without a word from the probe, and a second at least.
    rec.mlx_stale = (options.interval * 10).max(Duration::from_secs(1));
    rec.where_when = Some(crate::profile::Origin::now());
    rec.walk_request = python_probe.as_ref().map(|p| (p.dir().join("walk"), None));
    let mut updates = Vec::new();
    rec.event(origin, MarkKind::JobStart, command.clone());
    updates.push(Update::Event(rec.events[0].clone()));
    let mut exit = None;
    let mut tick: u64 = 0;
    let mut lines_open = true;
    loop {
        let now = Instant::now();
        let tree = tree_at(root, tick);
        tick += 1;
        if let Some(sample) = rec.sample_tree(&tree, now, &mut updates) {
            updates.push(Update::Sample(sample));
        }
        if control.take_walk_request() {
            rec.ask_probe_to_walk(now);
        }
        // Said after the first sample: whoever waits for it to begin knows
        // the process has been seen at least once.
        if !announced {
            on_update(Update::Started(root));
            announced = true;
        }
        rec.take_waiting(output.as_ref(), fifo.as_ref(), &mut updates);
        for update in updates.drain(..) {
            on_update(update);
        }
        let ended = match &mut job {
            Some(job) => job.try_wait().map(|(status, max_rss_bytes)| {
                use std::os::unix::process::ExitStatusExt as _;
                let hwm = rec.hwm.entry(root).or_insert(0);
                *hwm = (*hwm).max(max_rss_bytes);
                match (status.code(), status.signal()) {
                    (Some(code), _) => JobExit::Code(code),
                    (None, Some(signal)) => JobExit::Signal(signal),
                    (None, None) => JobExit::Code(-1),
                }
            }),
            None => None,
        };
        if let Some(status) = ended {
            exit = Some(status);
            break;
        }
        if job.is_some() && past_grace(control) {
            break;
        }
        if job.is_none() && (!procfs::is_alive(root) || control.stop_requested()) {
            break;
        }
        // Wait for the next sample, taking the probe's lines as they come.
        let deadline = now + options.interval;
        if lines_open {
            lines_open = rec.probe_lines_until(deadline, &lines_rx, &mut updates);
        }
        if !lines_open {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        }
    }
    let end = Instant::now();
    rec.last_words(
        end,
        lines_open.then_some(&lines_rx),
        output.as_ref(),
        &mut updates,
    );
    if let Some(fifo) = fifo {
        rec.last_named_lines(fifo, &mut updates);
    }
    rec.files(end, BTreeMap::new(), &mut updates);
    let end_text = exit.map_or_else(|| "detached".to_owned(), JobExit::describe);
    rec.event(end, MarkKind::JobEnd, end_text);
    let last = rec.events.len() - 1;
    updates.push(Update::Event(rec.events[last].clone()));
    for update in updates.drain(..) {
        on_update(update);
    }
    drop(job);
    drop(python_probe);
    Ok(finish(
        rec,
        command,
        root,
        exit,
        secs_since(origin, end),
        options,
    ))
}

/// The recording from what was seen: its trace (full samples) and what
/// the recorder knew at the end, summarized as a saved trace would be.
fn finish(
    rec: Recorder,
    command: String,
    pid: u32,
    exit: Option<JobExit>,
    elapsed_secs: f64,
    options: &RecordOptions,
) -> Recording {
    // MLX's own peak counter sees between samples; the last report of each
    // process (its `bye` sends one) counts too.
    let peak_mlx_active_bytes = rec
        .samples
        .iter()
        .filter_map(|s| s.mlx)
        .chain(rec.mlx_now())
        .map(|m| m.active_bytes.max(m.peak_bytes))
        .max()
        .max(rec.gone_mlx_peak);
    let gpu = rec.samples.iter().filter_map(|s| s.gpu);
    let end = JobEnd {
        pid,
        attached: exit.is_none(),
        signal: match exit {
            Some(JobExit::Signal(n)) => Some(n),
            _ => None,
        },
        elapsed_secs,
        peak_rss_bytes: rec.hwm.values().copied().max().unwrap_or(0),
        rss_is_pss: rec.pss_used,
        peak_mlx_active_bytes,
        peak_gpu_bytes: gpu.clone().map(|g| g.process_bytes).max(),
        peak_gpu_device_used_bytes: gpu.map(|g| g.device_used_bytes).max(),
        #[cfg(target_os = "linux")]
        gpu_unavailable: rec.gpu.reason().map(str::to_owned),
        #[cfg(not(target_os = "linux"))]
        gpu_unavailable: Some("NVML is read on Linux only".to_owned()),
        killed_for_memory: memory_kill(&rec),
        address_space_limit: rec.address_space_limit,
        mapped_files: rec.peak_files.0,
        output: rec.output.into(),
        probe: rec.probe,
    };
    let mut trace = Trace::new(format!("record: {command}"));
    trace.device = "job".into();
    if let Some(path) = &options.checkpoint {
        trace.checkpoint = crate::units::location_data(&path.to_string_lossy());
    }
    trace.job = Some(JobInfo {
        command,
        exit_code: exit.map(JobExit::status),
        probe: end.probe.is_some(),
        ended: Some(end),
    });
    trace.samples = rec.samples;
    trace.events = rec.events;
    trace.stacks = rec.stacks.to_trace();
    trace.origin = rec.where_when;
    Recording::from_trace(trace)
}

/// The proportional set size of each process of `tree`, from one reading
/// in which none of them exited: a process that exits while the others are
/// read moves its share of their common pages to them, so a reading that
/// straddles an exit counts some pages twice (a forked pool of 8 ending read
/// 154 MiB for its 64 MiB). Such a reading is done again over the
/// survivors (at most four times; the last one is kept).
#[cfg(target_os = "linux")]
fn consistent_pss(tree: &[u32]) -> Vec<(u32, (u64, u64, u64))> {
    let mut pids = tree.to_vec();
    let mut read = Vec::new();
    for _ in 0..4 {
        read = pids
            .iter()
            .filter_map(|&pid| procfs::read_pss(pid).map(|figures| (pid, figures)))
            .collect();
        // Every process read, and every one still there after the reading.
        let survivors: Vec<u32> = read
            .iter()
            .map(|&(pid, _)| pid)
            .filter(|&pid| procfs::is_alive(pid))
            .collect();
        if read.len() == pids.len() && survivors.len() == pids.len() {
            break;
        }
        pids = survivors;
    }
    read
}
