//! A recording from its trace: the peaks, the files at the peak, the
//! checkpoint's facts, the lines (a replay of the probe's samples) and the
//! findings. `record` builds its summary this way from what it saw, and
//! `weightscope report` from a saved trace or a journal cut short: the two
//! give the same figures.

use std::path::{Path, PathBuf};

use super::job_findings::record_findings;
use super::recording::{CheckpointFacts, JobExit, Ledger, OpenFile, RankPeak, Recording};
use super::stacks;
use crate::memory::{MarkKind, Sample};
use crate::profile::trace::census::{self, Census};
use crate::profile::trace::job_end::{JobEnd, ProbeReport};
use crate::profile::trace::stacks::TraceStacks;
use crate::profile::trace::{JobInfo, Trace, resident_at};

impl Recording {
    /// How the job ended: "exit 3", "signal 9 (SIGKILL)", "cut short" (the
    /// recorder stopped before it ended) or "detached" (a process followed
    /// from outside, let go before it exited).
    #[must_use]
    pub fn ended(&self) -> String {
        match self.exit {
            Some(exit) => exit.describe(),
            None if self.cut_short => "cut short".to_owned(),
            None => "detached".to_owned(),
        }
    }

    /// [`Recording::ended`], with what "cut short" means.
    #[must_use]
    pub fn ended_explained(&self) -> String {
        let ended = self.ended();
        if self.exit.is_none() && self.cut_short {
            format!("{ended} (the recorder stopped before the job ended)")
        } else {
            ended
        }
    }

    /// How long it recorded, in seconds (whatever clock its times are on).
    #[must_use]
    pub fn duration_secs(&self) -> f64 {
        (self.elapsed_secs - self.start_secs).max(0.0)
    }

    /// The distinct shard files the job was seen to open or told its probe
    /// it loaded.
    #[must_use]
    pub fn files_used(&self) -> usize {
        self.files_loaded().len()
    }

    /// The shard files the job used (held open, or loaded through the
    /// probe), each once, in the order first used.
    #[must_use]
    pub fn files_loaded(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        self.events
            .iter()
            .filter(|e| matches!(e.kind, MarkKind::FileOpen | MarkKind::Load))
            .map(|e| e.target.as_str())
            .filter(|f| seen.insert(*f))
            .collect()
    }

    /// The last sample of the job at work: with a probe, the last with
    /// MLX's figures (its process alive; a shell that outlives a killed
    /// command has none), else the last.
    #[must_use]
    pub fn last_job_sample(&self) -> Option<&Sample> {
        let probed = self.probe.is_some() && self.samples.iter().any(|s| s.mlx.is_some());
        if probed {
            self.samples.iter().rev().find(|s| s.mlx.is_some())
        } else {
            self.samples.last()
        }
    }

    /// The signal that ended the job: the one `wait` reported, or the one
    /// a shell's status 128+N says ended its command (`sh -c LINE`, as the
    /// window's Record form runs it: the shell outlives the command it
    /// runs, then exits 137 for a command killed by signal 9); with whether
    /// it was read from a shell's status.
    #[must_use]
    pub fn ending_signal(&self) -> Option<(i32, bool)> {
        match self.exit? {
            JobExit::Signal(n) => Some((n, false)),
            JobExit::Code(c) if (129..=159).contains(&c) => Some((c - 128, true)),
            JobExit::Code(_) => None,
        }
    }

    /// The files loaded whose memory was still held at the end, and the
    /// files still open then.
    #[must_use]
    pub fn files_not_released(&self) -> Vec<&str> {
        let open = resident_at(&self.events, f64::INFINITY);
        let mut files: Vec<&str> = self
            .files_loaded
            .iter()
            .filter(|f| f.held)
            .map(|f| f.path.as_str())
            .collect();
        for file in open {
            if let Some(seen) = self.events.iter().find(|e| e.target == file.shard)
                && !files.contains(&seen.target.as_str())
            {
                files.push(seen.target.as_str());
            }
        }
        files
    }

    /// What the recorder knew at the end, as the trace keeps it.
    #[must_use]
    pub fn job_end(&self) -> JobEnd {
        JobEnd {
            pid: self.pid,
            attached: self.attached,
            signal: match self.exit {
                Some(JobExit::Signal(n)) => Some(n),
                _ => None,
            },
            elapsed_secs: self.elapsed_secs,
            peak_rss_bytes: self.peak_rss_bytes,
            rss_is_pss: self.rss_is_pss,
            peak_mlx_active_bytes: self.peak_mlx_active_bytes,
            peak_gpu_bytes: self.peak_gpu_bytes,
            peak_gpu_device_used_bytes: self.peak_gpu_device_used_bytes,
            gpu_unavailable: self.gpu_unavailable.clone(),
            probe: self.probe.clone(),
            killed_for_memory: self.memory_kill.clone(),
            address_space_limit: self.address_space_limit,
            mapped_files: self
                .ledger
                .as_ref()
                .map(|l| l.files.clone())
                .unwrap_or_default(),
            output: self.output.clone(),
        }
    }

    /// The recording as a trace in the format walks save (the app opens
    /// it, overlays it and saves it as CSV).
    #[must_use]
    pub fn to_trace(&self) -> Trace {
        let mut trace = Trace::new(format!("record: {}", self.command));
        trace.device = "job".into();
        if let Some(facts) = &self.checkpoint {
            trace.checkpoint = crate::units::location_data(&facts.path.to_string_lossy());
            trace.expected = Some(facts.expected);
        }
        trace.job = Some(JobInfo {
            command: self.command.clone(),
            exit_code: self.exit.map(JobExit::status),
            probe: self.probe.is_some(),
            ended: (!self.cut_short).then(|| self.job_end()),
        });
        trace.samples = self.samples.iter().map(Sample::as_stored).collect();
        trace.stacks.clone_from(&self.stacks);
        trace.events.clone_from(&self.events);
        trace.cut_short = self.cut_short;
        trace.origin.clone_from(&self.origin);
        trace
    }

    /// The recording a trace holds: what `record` saw, or what a journal
    /// cut short kept (then the job's end is unknown). The checkpoint named
    /// in the trace (else the folder of the first file the job used) is
    /// read again for the figures the findings compare with.
    #[must_use]
    pub fn from_trace(mut trace: Trace) -> Self {
        let job = trace.job.take().unwrap_or_default();
        let end = job.ended.clone().unwrap_or_default();
        let mut samples = std::mem::take(&mut trace.samples);
        // A journal cut short never got the job's end, where `probe` is
        // said: its probe samples (with MLX figures) say it instead.
        let probed = job.probe
            || trace
                .stacks
                .as_ref()
                .is_some_and(|st| st.samples.iter().any(|s| s.active.is_some()));
        if !probed {
            // A trace keeps 0 for MLX's figures where there were none.
            for s in &mut samples {
                s.mlx = None;
            }
        }
        let mut events = std::mem::take(&mut trace.events);
        events.sort_by(|a, b| a.t_secs.total_cmp(&b.t_secs));
        let exit = match (&job.ended, end.signal, job.exit_code) {
            (None, ..) => None,
            (Some(e), ..) if e.attached => None,
            (_, Some(n), _) => Some(JobExit::Signal(n)),
            (_, None, code) => code.map(JobExit::Code),
        };
        let (peak_rss_bytes, peak_index) = peak_rss(&samples, end.peak_rss_bytes);
        let peak_rss_secs = peak_index
            .and_then(|i| samples.get(i))
            .map_or(0.0, |s| s.at);
        let files_open_at_peak = peak_index
            .map(|i| {
                resident_at(&events, samples[i].at)
                    .into_iter()
                    .map(|file| OpenFile {
                        path: PathBuf::from(file.shard),
                        bytes: file.bytes,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let analysis = stacks::analyse(trace.stacks.as_ref(), &samples, &events, end.attached);
        let (checkpoint, checkpoint_error) = checkpoint_of(&trace.checkpoint, &events);
        let ranks = rank_peaks(trace.stacks.as_ref(), &analysis);
        let ledger = highest(&samples).map(|sample| Ledger {
            sample,
            files: end.mapped_files.clone(),
        });
        let (held_by, held_last) = held_walks(trace.stacks.as_ref());
        let gpu = samples.iter().filter_map(|s| s.gpu);
        let mut recording = Self {
            command: job.command,
            pid: end.pid,
            attached: end.attached,
            exit,
            start_secs: trace.moved_secs,
            elapsed_secs: job.ended.as_ref().map_or_else(
                || samples.last().map_or(0.0, |s| s.at),
                |_| end.elapsed_secs,
            ),
            files_seen: files_seen(&events),
            files_open_at_peak,
            peak_rss_bytes,
            rss_is_pss: end.rss_is_pss,
            peak_rss_secs,
            peak_mlx_active_bytes: end.peak_mlx_active_bytes.or_else(|| {
                samples
                    .iter()
                    .filter_map(|s| s.mlx)
                    .map(|m| m.active_bytes.max(m.peak_bytes))
                    .max()
            }),
            peak_gpu_bytes: end
                .peak_gpu_bytes
                .or_else(|| gpu.clone().map(|g| g.process_bytes).max()),
            peak_gpu_device_used_bytes: end
                .peak_gpu_device_used_bytes
                .or_else(|| gpu.map(|g| g.device_used_bytes).max()),
            gpu_unavailable: end.gpu_unavailable,
            probe: probe_report(end.probe, probed, trace.stacks.as_ref()),
            checkpoint,
            checkpoint_error,
            findings: Vec::new(),
            peak_stack: analysis.peak_stack,
            last_stack: analysis.last_stack,
            lines: analysis.lines,
            phases: analysis.phases,
            files_loaded: analysis.files_loaded,
            by_stack: analysis.by_stack,
            stacks: trace.stacks,
            cut_short: trace.cut_short,
            memory_kill: end.killed_for_memory,
            address_space_limit: end.address_space_limit,
            output: end.output,
            ledger,
            ranks,
            held_by,
            held_last,
            samples,
            events,
            origin: trace.origin,
        };
        recording.findings = record_findings(&recording);
        recording
    }
}

/// The probes' report with what the trace's bounds cut (a journal's stack
/// of a million frames) counted with what the recorder's caps dropped, so
/// it is said in the same line.
fn probe_report(
    probe: Option<ProbeReport>,
    probed: bool,
    stacks: Option<&TraceStacks>,
) -> Option<ProbeReport> {
    probe
        .or_else(|| probed.then(ProbeReport::default))
        .map(|mut probe| {
            let cut = stacks.map_or(0, |st| st.cut);
            probe.dropped_definitions = probe.dropped_definitions.saturating_add(cut);
            probe
        })
}

/// The walk named for the peak, and the last walk.
fn held_walks(stacks: Option<&TraceStacks>) -> (Option<Census>, Option<Census>) {
    stacks.map_or((None, None), |st| {
        (census::at_peak(&st.held).cloned(), st.held.last().cloned())
    })
}

/// The checkpoint a recording is measured against: the one named (else
/// the folder of the first file the job used), or why it cannot be read.
fn checkpoint_of(
    named: &str,
    events: &[crate::profile::TraceEvent],
) -> (Option<CheckpointFacts>, Option<String>) {
    let path = if named.is_empty() {
        first_folder(events)
    } else {
        Some(PathBuf::from(named))
    };
    match path.as_deref().map(checkpoint_facts) {
        Some(Ok(facts)) => (Some(facts), None),
        Some(Err(error)) => (None, Some(error.to_string())),
        None => (None, None),
    }
}

/// Each `.safetensors` file seen open, once, in the order first seen.
fn files_seen(events: &[crate::profile::TraceEvent]) -> Vec<OpenFile> {
    let mut files: Vec<OpenFile> = Vec::new();
    for e in events.iter().filter(|e| e.kind == MarkKind::FileOpen) {
        if !files
            .iter()
            .any(|f| f.path.as_os_str() == e.target.as_str())
        {
            files.push(OpenFile {
                path: PathBuf::from(&e.target),
                bytes: e.bytes,
            });
        }
    }
    files
}

/// The folder of the first file the job opened or loaded.
fn first_folder(events: &[crate::profile::TraceEvent]) -> Option<PathBuf> {
    let first = events
        .iter()
        .find(|e| matches!(e.kind, MarkKind::FileOpen | MarkKind::Load))?;
    let folder = Path::new(&first.target).parent()?;
    Some(if folder.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        folder.to_path_buf()
    })
}

/// The sample of the highest RSS (the first of equals): the ledger's. A
/// peak seen only by `VmHWM`, between samples, has no composition to show.
fn highest(samples: &[Sample]) -> Option<Sample> {
    samples
        .iter()
        .enumerate()
        .max_by_key(|(i, s)| (s.process.rss_bytes, std::cmp::Reverse(*i)))
        .map(|(_, s)| *s)
}

/// Each rank's peak MLX active and its stack then, by rank.
fn rank_peaks(stacks: Option<&TraceStacks>, analysis: &stacks::Analysis) -> Vec<RankPeak> {
    let Some(stacks) = stacks else {
        return Vec::new();
    };
    let mut ranks: Vec<RankPeak> = stacks
        .ranks
        .iter()
        .map(|&(pid, rank)| {
            let (peak, stack) = analysis
                .peaks_by_pid
                .iter()
                .find(|p| p.0 == pid)
                .map(|p| (p.1, p.2.clone()))
                .unwrap_or_default();
            RankPeak {
                rank,
                pid,
                peak_mlx_active_bytes: peak,
                peak_stack: stack,
                held_by: census::at_peak(stacks.held.iter().filter(|w| w.pid == pid))
                    .map(|w| w.roots.clone())
                    .unwrap_or_default(),
            }
        })
        .collect();
    ranks.sort_by_key(|r| r.rank);
    ranks.dedup_by_key(|r| (r.rank, r.pid));
    ranks
}

/// The peak: the highest sampled tree RSS, or the kernel's peak (`VmHWM`
/// of a sample, `hwm` of the whole run) when that saw higher (a spike
/// between samples); and the first sample that reached it (else the
/// highest sampled).
fn peak_rss(samples: &[Sample], hwm: u64) -> (u64, Option<usize>) {
    let peak = samples
        .iter()
        .map(|s| s.process.rss_bytes.max(s.process.peak_rss_bytes))
        .max()
        .unwrap_or(0)
        .max(hwm);
    let index = samples
        .iter()
        .position(|s| s.process.rss_bytes.max(s.process.peak_rss_bytes) >= peak)
        .or_else(|| {
            samples
                .iter()
                .enumerate()
                .max_by_key(|(_, s)| s.process.rss_bytes)
                .map(|(i, _)| i)
        });
    (peak, index)
}

/// Reads the checkpoint's headers for the figures a recording is measured
/// against.
fn checkpoint_facts(path: &Path) -> Result<CheckpointFacts, crate::checkpoint::CheckpointError> {
    let checkpoint = crate::remote::open_checkpoint(path, &|_, _| {})?;
    let plan = crate::profile::walk::WalkPlan::from_checkpoint(
        &checkpoint,
        crate::profile::walk::Transform::None,
    );
    let summary = checkpoint.summary();
    Ok(CheckpointFacts {
        path: path.to_path_buf(),
        total_bytes: summary.total_bytes,
        largest_shard_bytes: plan.largest_shard().map_or(0, |s| s.source_bytes),
        shards: checkpoint.shards().len(),
        expected: plan.expected(),
    })
}
