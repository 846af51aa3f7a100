//! The running state of a recording: samples, events, files, the probe's
//! figures, as they come.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
#[cfg(target_os = "linux")]
use super::pipes::NamedPipe;
use super::{OUTPUT_LINES, ProbeLine, Update};
#[cfg(target_os = "linux")]
use super::{gpu, procfs};
use crate::memory::{GpuFigures, MarkKind, MlxFigures, ProcessFigures, Sample, secs_since};
use crate::profile::analysis::recording::OpenFile;
use crate::profile::analysis::stacks::describe;
use crate::profile::trace::TraceEvent;
use crate::profile::trace::collective_detail;
use crate::profile::trace::job_end::{OutputLine, ProbeReport};
use crate::profile::trace::{census, stacks};
/// Probe events (marks, loads, cache clears, exceptions) kept; past it they
/// are counted ([`ProbeReport::dropped_events`]).
pub const MAX_PROBE_EVENTS: usize = 20_000;
/// Processes the probes' lines may name in one recording (a job's tree
/// seldom has a hundred; each named one has its own row in tables kept by
/// process).
pub const MAX_PROBE_PIDS: usize = 1024;

/// Lines taken from a queue per look between samples.
#[cfg(target_os = "linux")]
pub(super) const WAITING_BATCH: usize = 20_000;

/// Lines a reader thread may hold for the recorder: past it the reader waits
/// (and the job's probe with it), so memory stays bounded.
#[cfg(target_os = "linux")]
pub(super) const LINE_QUEUE: usize = 8_192;

/// A process of a recorded tree this big or bigger may share much with
/// another: two of them and the tree's memory is read as PSS.
pub(super) const PSS_WORTH_BYTES: u64 = 64 << 20;

/// The running state of a recording: what was seen so far.
pub(super) struct Recorder {
    pub(super) origin: Instant,
    /// This machine's wall clock at `origin` (Unix seconds): the probe's
    /// collective lines carry the job's wall clock, placed on ours by it.
    pub(super) origin_wall: f64,
    /// The host, the wall clock and the rank the recording states.
    pub(super) where_when: Option<crate::profile::Origin>,
    pub(super) samples: Vec<Sample>,
    pub(super) events: Vec<TraceEvent>,
    /// Whether a stack of the job (a probe's `sample` or `stack` line) has
    /// been taken yet.
    pub(super) stack_seen: bool,
    /// Files open at the last sample, with their sizes.
    pub(super) open: BTreeMap<PathBuf, u64>,
    pub(super) files_seen: Vec<OpenFile>,
    /// The latest MLX figures per reporting process (while it lives), and
    /// when they came.
    pub(super) mlx: HashMap<u32, MlxFigures>,
    pub(super) mlx_at: HashMap<u32, Instant>,
    /// Figures older than this are not drawn as the present (a gap in the
    /// MLX series instead): see [`Recorder::mlx_fresh`].
    pub(super) mlx_stale: Duration,
    /// Processes of the tree read at least once, and those since gone:
    /// a gone process's MLX figures leave the series (its last report,
    /// and any that comes after it is gone, count for the peak only).
    pub(super) alive: std::collections::HashSet<u32>,
    pub(super) gone: std::collections::HashSet<u32>,
    /// The processes probe lines have named (at most [`MAX_PROBE_PIDS`]):
    /// a line naming another one past it is counted, not read, so the
    /// tables kept by process (MLX's figures, highs, stacks) stay bounded
    /// whatever pids a job writes into the pipe.
    pub(super) probe_pids: std::collections::HashSet<u32>,
    /// The highest MLX figure (active, or MLX's own peak counter) of the
    /// reports of processes now gone.
    pub(super) gone_mlx_peak: Option<u64>,
    pub(super) probe: Option<ProbeReport>,
    /// Highest `VmHWM` per process.
    pub(super) hwm: HashMap<u32, u64>,
    /// When each process's descriptor table was last read, and what it held.
    pub(super) fd_scans: procfs::FdScans,
    /// Sizes of files already seen (one stat per file).
    pub(super) sizes: HashMap<PathBuf, u64>,
    /// NVML, where the NVIDIA driver is.
    #[cfg(target_os = "linux")]
    pub(super) gpu: gpu::GpuMemory,
    /// Whether a sample summed proportional set sizes (several processes).
    pub(super) pss_used: bool,
    /// The probes' frames, stacks and samples.
    pub(super) stacks: stacks::Stacks,
    /// Memory cgroups of the tree's processes: folder -> OOM kills when
    /// first seen, and the cgroup as last read.
    #[cfg(target_os = "linux")]
    pub(super) cgroups: HashMap<PathBuf, (Option<u64>, procfs::MemoryCgroup)>,
    /// The lowest address-space limit of a process of the tree.
    pub(super) address_space_limit: Option<u64>,
    /// Events the probes sent that were kept (at most [`MAX_PROBE_EVENTS`]).
    pub(super) probe_events: usize,
    /// The file that asks the probe for a held-by walk now, and when it was
    /// last asked.
    pub(super) walk_request: Option<(PathBuf, Option<Instant>)>,
    /// The job's last output lines, when captured.
    pub(super) output: std::collections::VecDeque<OutputLine>,
    /// Resident bytes by mapped file near the RSS peak.
    pub(super) peak_files: PeakFiles,
}

/// What the job's processes mapped, by file, at the last reading near the
/// RSS peak.
#[derive(Debug, Default)]
pub(super) struct PeakFiles {
    /// Resident bytes by mapped file, largest first (at most 20).
    pub(super) files: Vec<(String, u64)>,
    /// The tree's RSS when they were read.
    pub(super) rss_bytes: u64,
    /// Its file-backed part then.
    pub(super) file_bytes: u64,
    /// When they were read, and what the reading took.
    pub(super) read: Option<(Instant, Duration)>,
}

impl Recorder {
    pub(super) fn new(origin: Instant) -> Self {
        Self {
            origin,
            origin_wall: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            where_when: None,
            stack_seen: false,
            samples: Vec::new(),
            events: Vec::new(),
            open: BTreeMap::new(),
            files_seen: Vec::new(),
            mlx: HashMap::new(),
            mlx_at: HashMap::new(),
            mlx_stale: Duration::from_secs(1),
            alive: std::collections::HashSet::new(),
            gone: std::collections::HashSet::new(),
            probe_pids: std::collections::HashSet::new(),
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
            peak_files: PeakFiles::default(),
        }
    }

    /// At a new high of the tree's RSS, what its processes map, by file;
    /// read again only when the file-backed part of RSS changed (by a
    /// tenth, and 4 MiB at least) since: a job whose heap grows maps the
    /// same files, and `/proc/PID/smaps` walks every page of the process
    /// under the lock the job's own allocations take (a job growing its
    /// heap by small steps was slowed a tenth by its reading). And never
    /// more than a twentieth of the time since the last reading.
    #[cfg(target_os = "linux")]
    pub(super) fn read_mapped_files(&mut self, tree: &[u32], figures: (u64, u64), now: Instant) {
        let (rss, file_bytes) = figures;
        let last = &self.peak_files;
        if rss <= last.rss_bytes {
            return;
        }
        if let Some((at, cost)) = last.read {
            let moved = file_bytes.abs_diff(last.file_bytes);
            if moved <= (last.file_bytes / 10).max(4 << 20)
                || now.saturating_duration_since(at) < cost * 19
            {
                return;
            }
        }
        let started = Instant::now();
        let mut by_file: HashMap<String, u64> = HashMap::new();
        for &pid in tree {
            for (path, bytes) in procfs::mapped_files(pid) {
                *by_file.entry(path).or_insert(0) += bytes;
            }
        }
        let mut files: Vec<(String, u64)> = by_file.into_iter().collect();
        files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        files.truncate(20);
        self.peak_files = PeakFiles {
            files,
            rss_bytes: rss,
            file_bytes,
            read: Some((now, started.elapsed())),
        };
    }

    /// Takes the probe's lines as they come until `deadline`; `false` when
    /// the pipe has closed.
    #[cfg(target_os = "linux")]
    /// Attached: takes the process's lines until its first stack (read
    /// from outside, it comes within a moment or not at all), so the first
    /// sample is taken where the job is known to be. Whether the lines are
    /// still open.
    pub(super) fn first_stack(
        &mut self,
        lines: &std::sync::mpsc::Receiver<(Instant, String)>,
        updates: &mut Vec<Update>,
    ) -> bool {
        let until = Instant::now() + std::time::Duration::from_secs(2);
        let mut open = true;
        while open && !self.stack_seen && Instant::now() < until {
            open = self.probe_lines_until(
                Instant::now() + std::time::Duration::from_millis(10),
                lines,
                updates,
            );
        }
        open
    }

    pub(super) fn probe_lines_until(
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
    pub(super) fn last_words(
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
    pub(super) fn take_waiting(
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
    pub(super) fn last_named_lines(&mut self, fifo: NamedPipe, updates: &mut Vec<Update>) {
        let lines = fifo.stop();
        let until = Instant::now() + Duration::from_secs(1);
        let left = || until.saturating_duration_since(Instant::now());
        while let (false, Ok((at, line))) = (left().is_zero(), lines.recv_timeout(left())) {
            self.probe_line(at, &line, updates);
        }
    }

    /// A line of the job's output: kept (the last [`OUTPUT_LINES`]) and
    /// passed on.
    pub(super) fn output_line(&mut self, line: OutputLine, updates: &mut Vec<Update>) {
        if self.output.len() == OUTPUT_LINES {
            self.output.pop_front();
        }
        self.output.push_back(line.clone());
        updates.push(Update::Output(line));
    }

    pub(super) fn secs(&self, at: Instant) -> f64 {
        secs_since(self.origin, at)
    }

    /// [`Self::mlx_now`] when every process's figures are recent; `None`
    /// (a gap in the series) when one's last report is older than
    /// `mlx_stale`: its probe's thread got no time (a loaded machine, the
    /// GIL held in a long call). A stale figure drawn as the present froze
    /// the series while the job grew, and the findings then took the
    /// difference for host memory.
    pub(super) fn mlx_fresh(&self, now: Instant) -> Option<MlxFigures> {
        let stale = self.mlx_at.iter().any(|(pid, at)| {
            self.mlx.contains_key(pid) && now.saturating_duration_since(*at) > self.mlx_stale
        });
        if stale { None } else { self.mlx_now() }
    }

    pub(super) fn mlx_now(&self) -> Option<MlxFigures> {
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
    pub(super) fn event(&mut self, at: Instant, kind: MarkKind, target: String) -> &mut TraceEvent {
        let last_rss = self.samples.last().map_or(0, |s| s.process.rss_bytes);
        let mlx = self.mlx_now().unwrap_or_default();
        let event = TraceEvent {
            rss_bytes: last_rss,
            mlx_active_bytes: mlx.active_bytes,
            mlx_cache_bytes: mlx.cache_bytes,
            ..TraceEvent::bare(self.secs(at), kind, target)
        };
        self.events.push(event);
        let last = self.events.len() - 1;
        &mut self.events[last]
    }

    /// Applies one probe line received at `at`.
    pub(super) fn report(&mut self) -> &mut ProbeReport {
        self.probe.get_or_insert_with(ProbeReport::default)
    }

    /// A `sample` (MLX's figures and the stacks) or `stack` line of `pid`.
    pub(super) fn probe_sample(
        &mut self,
        at: Instant,
        pid: u32,
        line: ProbeLine,
        updates: &mut Vec<Update>,
    ) {
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
        self.stack_seen = true;
        let threads = line.threads.unwrap_or_default();
        match self.stacks.sample(t, pid, line.stack, &threads, active) {
            Some(update) => updates.push(Update::Stacks(update)),
            None => self.report().thinned_samples += 1,
        }
    }

    /// Whether one more probe event is kept (else it is counted).
    pub(super) fn keep_event(&mut self) -> bool {
        if self.probe_events >= MAX_PROBE_EVENTS {
            self.report().dropped_events += 1;
            return false;
        }
        self.probe_events += 1;
        true
    }

    /// A frame or stack definition's update, or its count past the caps.
    pub(super) fn defined(
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
    pub(super) fn collective_line(&mut self, line: ProbeLine, updates: &mut Vec<Update>) {
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

    pub(super) fn probe_line(&mut self, at: Instant, text: &str, updates: &mut Vec<Update>) {
        let report = self.probe.get_or_insert_with(ProbeReport::default);
        report.lines += 1;
        let Some(line) = ProbeLine::parse(text) else {
            report.bad_lines += 1;
            return;
        };
        let pid = line.pid.unwrap_or(0);
        if !self.probe_pids.contains(&pid) {
            if self.probe_pids.len() >= MAX_PROBE_PIDS {
                report.unknown_pids += 1;
                return;
            }
            self.probe_pids.insert(pid);
        }
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
                let walk = census::Census::from_line(self.secs(at), pid, line);
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
                let where_ = describe(&frames);
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
    pub(super) fn sample_tree(
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
        if big > 1 && shares.is_empty() && readings.iter().any(|(pid, _)| !procfs::is_alive(*pid)) {
            // The processes exited while their pages were read (forked
            // workers ending together, on a loaded machine): the RSS read
            // before would count each shared page once per process (a tree
            // of 64 MiB said to peak at 654 MiB). No sample this time.
            // (Processes alive whose PSS cannot be read, undumpable ones,
            // keep their RSS as before.)
            return None;
        }
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
        self.read_mapped_files(
            tree,
            (sample.process.rss_bytes, sample.process.file_bytes),
            now,
        );
        self.near_limit_walk(sample.process.rss_bytes, now);
        self.samples.push(sample);
        Some(sample)
    }

    /// Near a memory cgroup's limit (the tree at 85 % of it) the next
    /// moment may be the job's last: the probe is asked for a held-by walk
    /// now (at most twice a second), so a job the kernel kills has its
    /// holders from just before the kill.
    #[cfg(target_os = "linux")]
    pub(super) fn near_limit_walk(&mut self, rss: u64, now: Instant) {
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
    pub(super) fn ask_probe_to_walk(&mut self, now: Instant) {
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
    pub(super) fn forget_gone(&mut self, alive: std::collections::HashSet<u32>) {
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
    pub(super) fn files(
        &mut self,
        at: Instant,
        now: BTreeMap<PathBuf, u64>,
        updates: &mut Vec<Update>,
    ) {
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

/// The proportional set size of each process of `tree`, from one reading
/// in which none of them exited: a process that exits while the others are
/// read moves its share of their common pages to them, so a reading that
/// straddles an exit counts some pages twice (a forked pool of 8 ending read
/// 154 MiB for its 64 MiB). Such a reading is done again over the
/// survivors (at most four times; the last one is kept).
#[cfg(target_os = "linux")]
pub(super) fn consistent_pss(tree: &[u32]) -> Vec<(u32, (u64, u64, u64))> {
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
