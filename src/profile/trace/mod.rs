//! A memory trace: samples and events on one clock, with what each shard held
//! after each event. Saved and loaded as JSON or CSV; the app overlays two.

pub mod census;
pub mod job_end;
pub mod stacks;

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::memory::{ExpectedPeaks, FlatSample, Mark, MarkKind, Policy, Sample, secs_since};

/// The trace format's version, written into every file.
pub const TRACE_VERSION: u32 = 1;

/// An event on the trace's clock, with memory right after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Seconds since the trace's origin.
    pub t_secs: f64,
    /// What happened.
    pub kind: MarkKind,
    /// The tensor, shard, path or setting.
    pub target: String,
    /// Bytes involved.
    pub bytes: u64,
    /// Detail line.
    #[serde(default)]
    pub detail: String,
    /// Process RSS right after.
    pub rss_bytes: u64,
    /// MLX active right after.
    pub mlx_active_bytes: u64,
    /// MLX cache right after.
    pub mlx_cache_bytes: u64,
    /// The shard whose residency changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// What that shard holds now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_resident_bytes: Option<u64>,
}

impl TraceEvent {
    /// `mark` placed on the clock of `origin`, at `at`, with `memory` after it.
    #[must_use]
    pub fn new(mark: &Mark, at: Instant, origin: Instant, memory: &Sample<Instant>) -> Self {
        let mlx = memory.mlx_or_zero();
        Self {
            t_secs: secs_since(origin, at),
            kind: mark.kind,
            target: mark.target.clone(),
            bytes: mark.bytes,
            detail: mark.detail.clone(),
            rss_bytes: memory.process.rss_bytes,
            mlx_active_bytes: mlx.active_bytes,
            mlx_cache_bytes: mlx.cache_bytes,
            shard: mark.resident.as_ref().map(|(s, _)| s.clone()),
            shard_resident_bytes: mark.resident.as_ref().map(|(_, b)| *b),
        }
    }

    /// One line for markers and tables.
    #[must_use]
    pub fn label(&self) -> String {
        Mark {
            kind: self.kind,
            target: self.target.clone(),
            bytes: self.bytes,
            detail: String::new(),
            resident: None,
        }
        .label()
    }
}

/// The trace's job, made empty on first use (CSV meta rows fill it).
fn job_info(trace: &mut Trace) -> &mut JobInfo {
    trace.job.get_or_insert_with(JobInfo::default)
}

/// The job a recorded trace followed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// The command line (or `pid N` when attached).
    pub command: String,
    /// Its exit status (128+N for signal N); `None` when attached or unknown.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Whether MLX's figures came from inside the job (a probe).
    #[serde(default)]
    pub probe: bool,
    /// What the recorder knew when the job ended (none in a journal cut
    /// short, or a trace of an older version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<job_end::JobEnd>,
}

/// Samples and events of one run, with what it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Format version ([`TRACE_VERSION`]).
    pub version: u32,
    /// A name for legends ("retain, demo-v1").
    pub label: String,
    /// The checkpoint path, if one was open.
    #[serde(default)]
    pub checkpoint: String,
    /// MLX device ("cpu:0", "gpu:0").
    #[serde(default)]
    pub device: String,
    /// The walk policy, for a walk trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The walk's transform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<String>,
    /// What the headers predict for each policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<ExpectedPeaks>,
    /// The recorded job, for a trace of `weightscope record`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobInfo>,
    /// Samples, in time order.
    pub samples: Vec<Sample>,
    /// A recorded job's Python stacks (JSON only; the CSV form has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<stacks::TraceStacks>,
    /// A journal (`.jsonl`) that ended without its last line: the recorder
    /// was killed (or the machine stopped) before the job ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
    /// Events, in time order.
    pub events: Vec<TraceEvent>,
    /// Where and when a recording was taken (host, wall clock, rank): what
    /// merging the journals of one job's hosts needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// Where and when a recording was taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Origin {
    /// The recording machine's host name.
    pub host: String,
    /// Its wall clock at the trace's second 0 (Unix seconds). Hosts'
    /// clocks differ: `report` of several journals aligns them by their
    /// collectives.
    pub wall_unix_secs: f64,
    /// `MLX_RANK` in the recorder's environment (`mlx.launch` sets it for
    /// each rank's command, the recorder included when it wraps the rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The job's ranks in all: the entries of `MLX_HOSTFILE`'s list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
}

impl Origin {
    /// This machine, its wall clock now, and the rank and world size of
    /// the environment.
    #[must_use]
    pub fn now() -> Self {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let shift = crate::environment::get().wall_shift_secs;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| crate::environment::get().outside.hostname.clone())
            .unwrap_or_else(|| "unknown".to_owned());
        let rank = crate::environment::get()
            .outside
            .mlx_rank
            .as_deref()
            .and_then(|r| r.trim().parse().ok());
        Self {
            host: crate::units::Shown::new(&host).chars().take(255).collect(),
            wall_unix_secs: wall + shift,
            rank,
            world_size: world_size(),
        }
    }
}

/// The ranks `MLX_HOSTFILE` lists (a JSON list, one entry a rank: the ring
/// backend's form), read up to 1 MiB, and only from a regular file: a FIFO
/// or a process substitution (`<(...)`) is never opened (it would block,
/// or take from the job what it is meant to read).
fn world_size() -> Option<u32> {
    let path = crate::environment::get().outside.mlx_hostfile.as_ref()?;
    let text = crate::files::read_bounded_text(path, 1 << 20, "MLX_HOSTFILE").ok()?;
    match serde_json::from_str::<serde_json::Value>(&text).ok()? {
        serde_json::Value::Array(hosts) => u32::try_from(hosts.len()).ok(),
        _ => None,
    }
}

/// The largest trace file read (a day of samples at 50 ms is about 300 MB).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
/// The longest string kept from a trace file (label, event target, …).
pub const MAX_TRACE_STRING: usize = 4096;

/// Why a trace could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read or written (or is not a regular file,
    /// or is larger than [`MAX_TRACE_BYTES`]).
    #[error(transparent)]
    File(#[from] crate::files::FileError),
    /// The file is not a trace.
    #[error(
        "not a weightscope trace ({problem}): {}",
        crate::units::Shown::path(path)
    )]
    Format {
        /// What is wrong, with a line number for CSV.
        problem: String,
        /// The file.
        path: std::path::PathBuf,
    },
}

impl Trace {
    /// An empty trace.
    #[must_use]
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            version: TRACE_VERSION,
            // A label names a checkpoint or a command: an address in it
            // is kept without its credentials (traces are shared).
            label: crate::units::location_data(&label.into()),
            checkpoint: String::new(),
            device: String::new(),
            policy: None,
            transform: None,
            expected: None,
            job: None,
            samples: Vec::new(),
            stacks: None,
            cut_short: false,
            events: Vec::new(),
            origin: None,
        }
    }

    /// The expected peak for this trace's policy, if known.
    #[must_use]
    pub fn expected_peak_bytes(&self) -> Option<u64> {
        Some(self.policy?.expected(&self.expected?))
    }

    /// Highest MLX active memory recorded: samples, events, and MLX's own
    /// peak counter in the samples (which sees between samples; a walk
    /// resets it when it starts).
    #[must_use]
    pub fn peak_mlx_active_bytes(&self) -> u64 {
        let samples = self
            .samples
            .iter()
            .map(Sample::mlx_or_zero)
            .map(|m| m.active_bytes.max(m.peak_bytes));
        let events = self.events.iter().map(|e| e.mlx_active_bytes);
        samples.chain(events).max().unwrap_or(0)
    }

    /// Highest process RSS seen in samples and events.
    #[must_use]
    pub fn peak_rss_bytes(&self) -> u64 {
        let samples = self.samples.iter().map(|s| s.process.rss_bytes);
        let events = self.events.iter().map(|e| e.rss_bytes);
        samples.chain(events).max().unwrap_or(0)
    }

    /// Adds a sample, as the trace's files keep it ([`Sample::as_stored`]).
    pub fn push_sample(&mut self, sample: &Sample) {
        self.samples.push(sample.as_stored());
    }

    /// Puts samples and events in time order (after merging sources).
    pub fn sort(&mut self) {
        self.samples.sort_by(|a, b| a.at.total_cmp(&b.at));
        self.events.sort_by(|a, b| a.t_secs.total_cmp(&b.t_secs));
    }

    /// The trace as pretty JSON.
    ///
    /// # Errors
    /// When serde cannot serialize it (never for a trace built by this
    /// crate; said rather than written as an empty file).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The trace as CSV: one row per sample and per event, plus `meta` rows
    /// (the `csv` crate writes them from [`CsvRow`] records).
    #[must_use]
    pub fn to_csv(&self) -> String {
        let meta = |key: &str, value: String| CsvRow {
            record: "meta".into(),
            target: Some(key.to_owned()),
            detail: Some(value),
            ..CsvRow::default()
        };
        let mut rows = vec![
            meta("version", self.version.to_string()),
            meta("label", self.label.clone()),
            meta("checkpoint", self.checkpoint.clone()),
            meta("device", self.device.clone()),
        ];
        if let Some(policy) = self.policy {
            rows.push(meta("policy", policy.as_str().to_owned()));
        }
        if let Some(transform) = &self.transform {
            rows.push(meta("transform", transform.clone()));
        }
        if let Some(e) = self.expected {
            rows.push(meta("expected_retain_bytes", e.retain.to_string()));
            rows.push(meta(
                "expected_release_tensor_bytes",
                e.release_tensor.to_string(),
            ));
            rows.push(meta(
                "expected_release_shard_bytes",
                e.release_shard.to_string(),
            ));
        }
        if let Some(job) = &self.job {
            rows.push(meta("job_command", job.command.clone()));
            if let Some(code) = job.exit_code {
                rows.push(meta("job_exit_code", code.to_string()));
            }
            rows.push(meta("job_probe", job.probe.to_string()));
        }
        rows.extend(self.samples.iter().map(|&s| CsvRow::sample(s.into())));
        rows.extend(self.events.iter().map(|e| CsvRow {
            record: "event".into(),
            t_secs: Some(e.t_secs),
            rss_bytes: Some(e.rss_bytes),
            mlx_active_bytes: Some(e.mlx_active_bytes),
            mlx_cache_bytes: Some(e.mlx_cache_bytes),
            event: Some(e.kind),
            target: Some(e.target.clone()),
            bytes: Some(e.bytes),
            shard: e.shard.clone(),
            shard_resident_bytes: e.shard_resident_bytes,
            detail: Some(e.detail.clone()),
            ..CsvRow::default()
        }));
        let mut writer = csv::Writer::from_writer(Vec::new());
        for row in &rows {
            // Into memory, from plain records: nothing here can fail.
            let _ = writer.serialize(row);
        }
        let bytes = writer.into_inner().unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// Writes the trace to the checked output `out`: CSV when its name ends
    /// in `.csv`, else JSON.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save(&self, out: &crate::files::Output) -> Result<(), TraceError> {
        self.save_as(out, is_csv(out.path()))
    }

    /// Writes the trace to the checked output `out` as CSV (`csv`) or JSON,
    /// whatever its name.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save_as(&self, out: &crate::files::Output, csv: bool) -> Result<(), TraceError> {
        let path = out.path();
        let text = if csv {
            self.to_csv()
        } else {
            self.to_json().map_err(|e| TraceError::Format {
                problem: format!("cannot serialize the trace: {e}"),
                path: path.to_path_buf(),
            })?
        };
        out.write(text.as_bytes()).map_err(TraceError::File)
    }

    /// Reads a trace saved by [`Trace::save`] (CSV or JSON, by extension).
    ///
    /// # Errors
    /// When the file cannot be read or is not a trace.
    pub fn load(path: &Path) -> Result<Self, TraceError> {
        let text = crate::files::read_bounded_text(path, MAX_TRACE_BYTES, "a trace")?;
        let parsed = if is_csv(path) {
            Self::from_csv(&text).map_err(|e| e.to_string())
        } else if is_journal(path) {
            Self::from_journal(&text).map_err(|e| e.to_string())
        } else {
            serde_json::from_str::<Self>(&text).map_err(|e| e.to_string())
        };
        let trace = parsed.map_err(|problem| TraceError::Format {
            problem,
            path: path.to_path_buf(),
        })?;
        if trace.version != TRACE_VERSION {
            return Err(TraceError::Format {
                problem: format!(
                    "version {} (this build reads {TRACE_VERSION})",
                    trace.version
                ),
                path: path.to_path_buf(),
            });
        }
        let mut trace = trace;
        trace.bound_strings();
        Ok(trace)
    }

    /// Shortens the strings a trace file brings (label, checkpoint, device,
    /// job command, event targets and details) to [`MAX_TRACE_STRING`]
    /// bytes each, marked with "…": a 20 MB label would otherwise be laid
    /// out on every frame. (The window escapes them where it shows them.)
    fn bound_strings(&mut self) {
        let bound = |text: &mut String| {
            if text.len() > MAX_TRACE_STRING {
                let mut end = MAX_TRACE_STRING;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push('…');
            }
        };
        bound(&mut self.label);
        bound(&mut self.checkpoint);
        bound(&mut self.device);
        if let Some(job) = &mut self.job {
            bound(&mut job.command);
        }
        if let Some(stacks) = &mut self.stacks {
            for frame in &mut stacks.frames {
                bound(&mut frame.file);
                bound(&mut frame.function);
                bound(&mut frame.text);
            }
        }
        for event in &mut self.events {
            bound(&mut event.target);
            bound(&mut event.detail);
            if let Some(shard) = &mut event.shard {
                bound(shard);
            }
        }
    }

    /// Parses the CSV form (through the `csv` crate, old files included).
    ///
    /// # Errors
    /// A line that is not a sample, event or meta row, or a field that does
    /// not parse, with its line number.
    pub fn from_csv(text: &str) -> Result<Self, CsvError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(text.as_bytes());
        let header_ok = reader.headers().is_ok_and(|h| {
            let header = h.iter().collect::<Vec<_>>().join(",");
            header == CSV_HEADER || header == CSV_HEADER_V1
        });
        if !header_ok {
            return Err(CsvError::at(1, "not the trace CSV header"));
        }
        let headers = reader.headers().cloned().map_err(|e| csv_error(&e))?;
        let mut trace = Self::new("");
        trace.version = 0;
        let mut expected = ExpectedPeaks::default();
        let mut has_expected = false;
        for record in reader.records() {
            let record = record.map_err(|e| csv_error(&e))?;
            let line = record.position().map_or(0, csv::Position::line);
            let row: CsvRow = record
                .deserialize(Some(&headers))
                .map_err(|e| csv_error(&e))?;
            let time = || {
                row.t_secs
                    .filter(|t| t.is_finite())
                    .ok_or_else(|| CsvError::at(line, "`t_secs` is not a time"))
            };
            match row.record.as_str() {
                "meta" => {
                    let value = row.detail.clone().unwrap_or_default();
                    let parse = |v: &str| {
                        v.parse::<u64>()
                            .map_err(|_| CsvError::at(line, format!("`{v}` is not a number")))
                    };
                    match row.target.as_deref().unwrap_or("") {
                        "version" => {
                            trace.version = u32::try_from(parse(&value)?).unwrap_or(u32::MAX);
                        }
                        "label" => trace.label = value,
                        "checkpoint" => trace.checkpoint = value,
                        "device" => trace.device = value,
                        "policy" => {
                            trace.policy = Some(Policy::parse(&value).ok_or_else(|| {
                                CsvError::at(line, format!("`{value}` is not a policy"))
                            })?);
                        }
                        "transform" => trace.transform = Some(value),
                        "expected_retain_bytes" => {
                            expected.retain = parse(&value)?;
                            has_expected = true;
                        }
                        "expected_release_tensor_bytes" => {
                            expected.release_tensor = parse(&value)?;
                            has_expected = true;
                        }
                        "expected_release_shard_bytes" => {
                            expected.release_shard = parse(&value)?;
                            has_expected = true;
                        }
                        "job_command" => job_info(&mut trace).command = value,
                        "job_exit_code" => {
                            job_info(&mut trace).exit_code = Some(value.parse().map_err(|_| {
                                CsvError::at(line, format!("`{value}` is not an exit status"))
                            })?);
                        }
                        "job_probe" => job_info(&mut trace).probe = value == "true",
                        _ => {} // newer keys: ignored
                    }
                }
                "sample" => trace.samples.push(row.to_sample(time()?)),
                "event" => trace.events.push(TraceEvent {
                    t_secs: time()?,
                    rss_bytes: row.rss_bytes.unwrap_or(0),
                    mlx_active_bytes: row.mlx_active_bytes.unwrap_or(0),
                    mlx_cache_bytes: row.mlx_cache_bytes.unwrap_or(0),
                    kind: row
                        .event
                        .ok_or_else(|| CsvError::at(line, "an event without its kind"))?,
                    target: row.target.clone().unwrap_or_default(),
                    bytes: row.bytes.unwrap_or(0),
                    shard: row.shard.clone().filter(|s| !s.is_empty()),
                    shard_resident_bytes: row.shard_resident_bytes,
                    detail: row.detail.clone().unwrap_or_default(),
                }),
                other => return Err(CsvError::at(line, format!("unknown record `{other}`"))),
            }
        }
        if has_expected {
            trace.expected = Some(expected);
        }
        Ok(trace)
    }

    /// Per-shard resident bytes over time: see [`residency_steps`].
    #[must_use]
    pub fn residency_steps(&self) -> Residency {
        residency_steps(&self.events)
    }

    /// What was resident at `t_secs`: see [`resident_at`].
    #[must_use]
    pub fn resident_at(&self, t_secs: f64) -> Vec<ResidentShard> {
        resident_at(&self.events, t_secs)
    }
}

/// Per-shard resident bytes over time, as changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Residency {
    /// Shard files, in order of first appearance.
    pub shards: Vec<String>,
    /// Every change, in time order.
    pub changes: Vec<ResidencyChange>,
}

/// One change of what a shard holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResidencyChange {
    /// When.
    pub t_secs: f64,
    /// The shard (a position in [`Residency::shards`]); `None`: every shard
    /// dropped to 0 (open, release all, close).
    pub shard: Option<usize>,
    /// What it holds now.
    pub bytes: u64,
}

impl Residency {
    /// Every shard's bytes after at most about `rows` of the changes (evenly
    /// spaced, the last always included): what a stacked plot draws.
    #[must_use]
    pub fn sampled(&self, rows: usize) -> Vec<(f64, Vec<u64>)> {
        let stride = self.changes.len().div_ceil(rows.max(1)).max(1);
        let mut now = vec![0; self.shards.len()];
        let mut out = Vec::new();
        for (i, change) in self.changes.iter().enumerate() {
            match change.shard {
                Some(k) => now[k] = change.bytes,
                None => now.fill(0),
            }
            if i % stride == 0 || i + 1 == self.changes.len() {
                out.push((change.t_secs, now.clone()));
            }
        }
        out
    }
}

/// Per-shard resident bytes over time, from the events' residency fields.
#[must_use]
pub fn residency_steps<'a>(events: impl IntoIterator<Item = &'a TraceEvent>) -> Residency {
    let mut residency = Residency::default();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for event in events {
        match event.kind {
            MarkKind::Open | MarkKind::ReleaseAll | MarkKind::Close => {
                residency.changes.push(ResidencyChange {
                    t_secs: event.t_secs,
                    shard: None,
                    bytes: 0,
                });
            }
            _ => {
                if let (Some(shard), Some(bytes)) = (&event.shard, event.shard_resident_bytes) {
                    let k = *index.entry(shard.as_str()).or_insert_with(|| {
                        residency.shards.push(shard.clone());
                        residency.shards.len() - 1
                    });
                    residency.changes.push(ResidencyChange {
                        t_secs: event.t_secs,
                        shard: Some(k),
                        bytes,
                    });
                }
            }
        }
    }
    residency
}

/// What was resident at `t_secs`, from the events: per shard, its bytes
/// (the core's figure) and the tensors materialized from it, each with
/// whether it had been released while its map still held it. A recorded
/// job's open files count as shards with their size and no tensors.
#[must_use]
pub fn resident_at<'a>(
    events: impl IntoIterator<Item = &'a TraceEvent>,
    t_secs: f64,
) -> Vec<ResidentShard> {
    // Per shard: its entry and its tensors' positions by name.
    let mut shards: Vec<(ResidentShard, HashMap<String, usize>)> = Vec::new();
    for event in events.into_iter().take_while(|e| e.t_secs <= t_secs) {
        match event.kind {
            MarkKind::Open | MarkKind::ReleaseAll | MarkKind::Close => shards.clear(),
            MarkKind::ReleaseShard => shards.retain(|(s, _)| s.shard != event.target),
            MarkKind::Release => {
                for (shard, names) in &mut shards {
                    if event.shard.as_ref().is_some_and(|s| *s != shard.shard) {
                        continue;
                    }
                    if let Some(&i) = names.get(&event.target) {
                        shard.tensors[i].released = true;
                    }
                }
            }
            MarkKind::Materialize
            | MarkKind::WalkStep
            | MarkKind::FileOpen
            | MarkKind::FileClose => {
                let (Some(file), Some(bytes)) = (&event.shard, event.shard_resident_bytes) else {
                    continue;
                };
                let k = shards
                    .iter()
                    .position(|(s, _)| &s.shard == file)
                    .unwrap_or_else(|| {
                        let shard = ResidentShard {
                            shard: file.clone(),
                            bytes: 0,
                            tensors: Vec::new(),
                        };
                        shards.push((shard, HashMap::new()));
                        shards.len() - 1
                    });
                let (shard, names) = &mut shards[k];
                shard.bytes = bytes;
                // A recorded job's file is held whole: it has no tensors.
                if matches!(event.kind, MarkKind::FileOpen | MarkKind::FileClose) {
                    continue;
                }
                if let Some(&i) = names.get(&event.target) {
                    shard.tensors[i].released = false;
                } else {
                    names.insert(event.target.clone(), shard.tensors.len());
                    shard.tensors.push(ResidentTensor {
                        name: event.target.clone(),
                        bytes: event.bytes,
                        released: false,
                    });
                }
            }
            _ => {}
        }
    }
    shards
        .into_iter()
        .map(|(s, _)| s)
        .filter(|s| s.bytes > 0)
        .collect()
}

/// A shard's resident bytes at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResidentShard {
    /// Shard file.
    pub shard: String,
    /// Bytes its map holds (the core's bookkeeping).
    pub bytes: u64,
    /// Tensors materialized from it.
    pub tensors: Vec<ResidentTensor>,
}

/// A resident tensor at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResidentTensor {
    /// Tensor name.
    pub name: String,
    /// Its bytes.
    pub bytes: u64,
    /// Released by name, yet still held by its shard's map (the trap).
    pub released: bool,
}

const CSV_HEADER: &str = "record,t_secs,rss_bytes,rss_anon_bytes,rss_file_bytes,mlx_active_bytes,\
mlx_cache_bytes,mlx_peak_bytes,event,target,bytes,shard,shard_resident_bytes,detail,\
peak_rss_bytes,no_mlx";
/// The header of trace CSVs written before `peak_rss_bytes` and `no_mlx`
/// (still read).
const CSV_HEADER_V1: &str = "record,t_secs,rss_bytes,rss_anon_bytes,rss_file_bytes,mlx_active_bytes,\
mlx_cache_bytes,mlx_peak_bytes,event,target,bytes,shard,shard_resident_bytes,detail";

fn is_csv(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// One row of the trace CSV, whatever its kind: `sample` rows fill the
/// memory columns, `event` rows the event columns, `meta` rows put their key
/// in `target` and their value in `detail`. Empty fields are `None`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CsvRow {
    record: String,
    t_secs: Option<f64>,
    rss_bytes: Option<u64>,
    rss_anon_bytes: Option<u64>,
    rss_file_bytes: Option<u64>,
    mlx_active_bytes: Option<u64>,
    mlx_cache_bytes: Option<u64>,
    mlx_peak_bytes: Option<u64>,
    event: Option<MarkKind>,
    target: Option<String>,
    bytes: Option<u64>,
    shard: Option<String>,
    shard_resident_bytes: Option<u64>,
    detail: Option<String>,
    #[serde(default)]
    peak_rss_bytes: Option<u64>,
    #[serde(default)]
    no_mlx: Option<bool>,
}

impl CsvRow {
    /// The sample a `sample` row holds, at `t_secs`.
    fn to_sample(&self, t_secs: f64) -> Sample {
        FlatSample {
            t_secs,
            rss_bytes: self.rss_bytes.unwrap_or(0),
            rss_anon_bytes: self.rss_anon_bytes.unwrap_or(0),
            rss_file_bytes: self.rss_file_bytes.unwrap_or(0),
            mlx_active_bytes: self.mlx_active_bytes.unwrap_or(0),
            mlx_cache_bytes: self.mlx_cache_bytes.unwrap_or(0),
            mlx_peak_bytes: self.mlx_peak_bytes.unwrap_or(0),
            peak_rss_bytes: self.peak_rss_bytes.unwrap_or(0),
            no_mlx: self.no_mlx.unwrap_or(false),
        }
        .into()
    }

    /// The row of one sample.
    fn sample(s: FlatSample) -> Self {
        Self {
            record: "sample".into(),
            t_secs: Some(s.t_secs),
            rss_bytes: Some(s.rss_bytes),
            rss_anon_bytes: Some(s.rss_anon_bytes),
            rss_file_bytes: Some(s.rss_file_bytes),
            mlx_active_bytes: Some(s.mlx_active_bytes),
            mlx_cache_bytes: Some(s.mlx_cache_bytes),
            mlx_peak_bytes: Some(s.mlx_peak_bytes),
            peak_rss_bytes: Some(s.peak_rss_bytes),
            no_mlx: s.no_mlx.then_some(true),
            ..Self::default()
        }
    }
}

/// One line of a journal: a trace written as it happens (JSON Lines).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "kebab-case")]
enum JournalRow {
    /// The first line: what the trace is.
    Meta {
        version: u32,
        label: String,
        #[serde(default)]
        checkpoint: String,
        #[serde(default)]
        device: String,
        #[serde(default)]
        job: Option<JobInfo>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<Origin>,
    },
    Sample(FlatSample),
    Event(TraceEvent),
    /// A frame, a stack, a probe sample or a rank (in the order the
    /// trace's `stacks` keeps them).
    Frame {
        id: u32,
        #[serde(flatten)]
        frame: stacks::Frame,
    },
    Stack {
        id: u32,
        frames: Vec<u32>,
    },
    Probe {
        sample: stacks::StackSample,
    },
    Rank {
        pid: u32,
        rank: u32,
    },
    /// A held-by walk of a probe (who held MLX memory then).
    Held {
        walk: census::Census,
    },
    /// The last line: the run ended (the job's status, when it had one, and
    /// what the recorder knew then).
    End {
        #[serde(default)]
        exit_code: Option<i32>,
        #[serde(default)]
        ended: Option<job_end::JobEnd>,
    },
}

/// The earliest and latest times a journal may hold, in seconds on its
/// clock: a year either side (a recording is hours; 10^300 is a forgery
/// that would print a 300-digit time).
const JOURNAL_CLOCK_SECS: f64 = 366.0 * 86_400.0;
/// The latest wall clock a journal's origin may state (Unix seconds, the
/// year 2200).
const LATEST_WALL_SECS: f64 = 7_258_118_400.0;

impl JournalRow {
    /// What is wrong with the times this row holds, if anything.
    fn clock_problem(&self) -> Option<String> {
        let t = match self {
            Self::Sample(s) => s.t_secs,
            Self::Event(e) => e.t_secs,
            Self::Probe { sample } => sample.t,
            Self::Held { walk } => walk.t_secs,
            Self::Meta {
                origin: Some(origin),
                ..
            } => {
                let wall = origin.wall_unix_secs;
                return (!(wall.is_finite() && (0.0..=LATEST_WALL_SECS).contains(&wall))).then(
                    || format!("a wall clock of {wall:.3e} s, not a time between 1970 and 2200"),
                );
            }
            _ => return None,
        };
        (!(t.is_finite() && t.abs() <= JOURNAL_CLOCK_SECS))
            .then(|| format!("a time of {t:.3e} s, more than a year from the recording's start"))
    }
}

/// A trace written as it happens, one JSON object a line, each written
/// whole with one `write` and never rewritten: a recording whose recorder
/// is killed (by the OOM killer, a power cut) still opens, and says it was
/// cut short (no `end` line). A failed write turns it off; the recording
/// goes on.
#[derive(Debug)]
pub struct Journal {
    /// The journal, open (and locked) to the end even when a write fails:
    /// its lock keeps another recording off it, and it tells whether the
    /// file at the path is still this one.
    file: std::fs::File,
    /// A write failed: nothing more is written.
    failed: bool,
}

impl Journal {
    /// Creates `path` for this recording alone ([`crate::files::open_journal`]:
    /// never through a link, never a FIFO or device, never a journal
    /// another recording is writing) and writes `trace`'s description
    /// (label, checkpoint, device, job) as its first line.
    ///
    /// # Errors
    /// When the file cannot be created or written.
    pub fn create(path: &Path, trace: &Trace) -> Result<Self, TraceError> {
        let file = crate::files::open_journal(path).map_err(TraceError::File)?;
        let mut journal = Self {
            file,
            failed: false,
        };
        journal.write(&JournalRow::Meta {
            version: TRACE_VERSION,
            label: trace.label.clone(),
            checkpoint: trace.checkpoint.clone(),
            device: trace.device.clone(),
            job: trace.job.clone(),
            origin: trace.origin.clone(),
        });
        if journal.failed {
            return Err(TraceError::Format {
                problem: "cannot write the journal".into(),
                path: path.to_path_buf(),
            });
        }
        Ok(journal)
    }

    fn write(&mut self, row: &JournalRow) {
        if self.failed {
            return;
        }
        let Ok(mut line) = serde_json::to_vec(row) else {
            return;
        };
        line.push(b'\n');
        if std::io::Write::write_all(&mut self.file, &line).is_err() {
            self.failed = true;
        }
    }

    /// A sample, as trace files keep it.
    pub fn sample(&mut self, sample: &Sample) {
        self.write(&JournalRow::Sample(FlatSample::from(*sample)));
    }

    /// An event.
    pub fn event(&mut self, event: &TraceEvent) {
        self.write(&JournalRow::Event(event.clone()));
    }

    /// A frame, stack, probe sample or rank from the job's probes.
    pub fn stacks(&mut self, update: &stacks::StackUpdate) {
        use stacks::StackUpdate;
        let row = match update.clone() {
            StackUpdate::Frame(id, frame) => JournalRow::Frame { id, frame },
            StackUpdate::Stack(id, frames) => JournalRow::Stack { id, frames },
            StackUpdate::Sample(sample) => JournalRow::Probe { sample },
            StackUpdate::Rank { pid, rank } => JournalRow::Rank { pid, rank },
            StackUpdate::Held(walk) => JournalRow::Held { walk },
        };
        self.write(&row);
    }

    /// The last line: the run ended; `job` says how (its status and what
    /// the recorder knew then). Returns the journal's open file (its lock
    /// held), to remove the journal later only if it is still this file.
    #[must_use]
    pub fn end(mut self, job: Option<&JobInfo>) -> std::fs::File {
        self.write(&JournalRow::End {
            exit_code: job.and_then(|j| j.exit_code),
            ended: job.and_then(|j| j.ended.clone()),
        });
        self.file
    }
}

impl Trace {
    /// Reads a journal: its lines as they were written; a last line that
    /// is not whole (the writer was killed mid-line) is dropped, and a
    /// journal without its `end` line is `cut_short`.
    ///
    /// # Errors
    /// A line (other than a partial last one) that is not a journal row.
    pub fn from_journal(text: &str) -> Result<Self, CsvError> {
        use stacks::{StackUpdate, TraceStacks};
        fn stacks(trace: &mut Trace, update: StackUpdate) {
            trace
                .stacks
                .get_or_insert_with(TraceStacks::default)
                .apply(update);
        }
        let mut trace = Self::new("");
        trace.version = 0;
        trace.cut_short = true;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        for (i, line) in lines.iter().enumerate() {
            let number = u64::try_from(i + 1).unwrap_or(u64::MAX);
            let row = match serde_json::from_str::<JournalRow>(line) {
                Ok(row) => row,
                // A last line cut mid-write is dropped; never the first
                // (a journal whose description cannot be read is not one).
                Err(_) if i > 0 && i + 1 == lines.len() && !text.ends_with('\n') => break,
                Err(err) => return Err(CsvError::at(number, err.to_string())),
            };
            if let Some(problem) = row.clock_problem() {
                return Err(CsvError::at(number, problem));
            }
            match row {
                JournalRow::Meta {
                    version,
                    label,
                    checkpoint,
                    device,
                    job,
                    origin,
                } => {
                    trace.version = version;
                    trace.label = label;
                    trace.checkpoint = checkpoint;
                    trace.device = device;
                    trace.job = job;
                    trace.origin = origin;
                }
                JournalRow::Sample(s) => trace.samples.push(s.into()),
                JournalRow::Event(e) => trace.events.push(e),
                JournalRow::Frame { id, frame } => {
                    stacks(&mut trace, StackUpdate::Frame(id, frame));
                }
                JournalRow::Stack { id, frames } => {
                    stacks(&mut trace, StackUpdate::Stack(id, frames));
                }
                JournalRow::Probe { sample } => {
                    stacks(&mut trace, StackUpdate::Sample(sample));
                }
                JournalRow::Rank { pid, rank } => {
                    stacks(&mut trace, StackUpdate::Rank { pid, rank });
                }
                JournalRow::Held { walk } => {
                    stacks(&mut trace, StackUpdate::Held(walk));
                }
                JournalRow::End { exit_code, ended } => {
                    trace.cut_short = false;
                    if let Some(job) = &mut trace.job {
                        job.exit_code = exit_code;
                        job.ended = ended;
                    }
                }
            }
        }
        if trace.cut_short {
            trace.label.push_str(" (cut short)");
        }
        Ok(trace)
    }
}

/// Whether `path` names a journal (`.jsonl`).
fn is_journal(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl"))
}

/// What is wrong in a trace's CSV form, and on which line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct CsvError {
    /// The 1-based line.
    pub line: u64,
    /// What is wrong there.
    pub problem: String,
}

impl CsvError {
    fn at(line: u64, problem: impl Into<String>) -> Self {
        Self {
            line,
            problem: problem.into(),
        }
    }
}

/// A `csv` crate error as one line starting with its line number, naming
/// the column when there is one.
fn csv_error(err: &csv::Error) -> CsvError {
    let line = err.position().map_or(0, csv::Position::line);
    match err.kind() {
        csv::ErrorKind::Deserialize { err, .. } => {
            let column = err
                .field()
                .and_then(|i| {
                    CSV_HEADER
                        .split(',')
                        .nth(usize::try_from(i).unwrap_or(usize::MAX))
                })
                .unwrap_or("a field");
            CsvError::at(line, format!("`{column}`: {}", err.kind()))
        }
        csv::ErrorKind::UnequalLengths {
            len, expected_len, ..
        } => CsvError::at(line, format!("{len} fields, expected {expected_len}")),
        _ => CsvError::at(line, err.to_string()),
    }
}

/// A collective event's detail: `rank R, step K` (`step K` when the
/// process did not say its rank), as [`collective_of`] reads it back.
#[must_use]
pub fn collective_detail(rank: Option<u32>, step: u64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_trace() -> Trace {
        let mut trace = Trace::new("retain, demo");
        trace.checkpoint = "/models/a,b".into();
        trace.device = "cpu:0".into();
        trace.policy = Some(Policy::Retain);
        trace.transform = Some("none".into());
        trace.expected = Some(ExpectedPeaks {
            retain: 300,
            release_tensor: 300,
            release_shard: 100,
        });
        trace.samples.push(Sample::from(FlatSample {
            t_secs: 0.05,
            rss_bytes: 1000,
            rss_anon_bytes: 600,
            rss_file_bytes: 400,
            mlx_active_bytes: 100,
            mlx_cache_bytes: 0,
            mlx_peak_bytes: 100,
            peak_rss_bytes: 0,
            no_mlx: false,
        }));
        trace.events.push(TraceEvent {
            t_secs: 0.1,
            kind: MarkKind::WalkStep,
            target: "model.layers.0.weight \"odd\", name\nwith a line break".into(),
            bytes: 100,
            detail: "cpu:0".into(),
            rss_bytes: 1100,
            mlx_active_bytes: 100,
            mlx_cache_bytes: 0,
            shard: Some("model-00001.safetensors".into()),
            shard_resident_bytes: Some(100),
        });
        trace.events.push(TraceEvent {
            t_secs: 0.2,
            kind: MarkKind::ReleaseShard,
            target: "model-00001.safetensors".into(),
            bytes: 100,
            detail: String::new(),
            rss_bytes: 1100,
            mlx_active_bytes: 0,
            mlx_cache_bytes: 100,
            shard: Some("model-00001.safetensors".into()),
            shard_resident_bytes: Some(0),
        });
        trace
    }

    #[test]
    fn loaded_strings_are_bounded_and_devices_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let mut trace = sample_trace();
        trace.label = "é".repeat(10 << 20); // 20 MB
        let path = dir.path().join("big-label.json");
        trace
            .save(&crate::files::check_output(&path, &[]).expect("checked"))
            .expect("saved");
        let loaded = Trace::load(&path).expect("loads");
        assert!(loaded.label.len() <= MAX_TRACE_STRING + '…'.len_utf8());
        assert!(loaded.label.starts_with("éé") && loaded.label.ends_with('…'));
        assert_eq!(
            loaded.events, trace.events,
            "short strings are kept as they are"
        );
        let err = Trace::load(Path::new("/dev/zero")).expect_err("a device");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn csv_and_json_round_trip() {
        let trace = sample_trace();
        assert_eq!(Trace::from_csv(&trace.to_csv()).expect("csv parses"), trace);
        let json: Trace =
            serde_json::from_str(&trace.to_json().expect("serializes")).expect("json parses");
        assert_eq!(json, trace);
    }

    #[test]
    fn bad_csv_names_the_line() {
        let mut text = sample_trace().to_csv();
        text.push_str("event,x,1,,,1,1,,walk-step,a,1,,,,,\n");
        let err = Trace::from_csv(&text).expect_err("a bad time").to_string();
        assert!(err.contains("`t_secs`"), "{err}");
        assert!(err.starts_with("line "), "{err}");
        let err = Trace::from_csv("hello\n")
            .expect_err("no header")
            .to_string();
        assert!(err.contains("line 1"), "{err}");
        let err = Trace::from_csv(&format!("{CSV_HEADER}\nevent,\"open"))
            .expect_err("short")
            .to_string();
        assert!(
            err.starts_with("line 2: ") && err.contains("fields"),
            "{err}"
        );
        let err = Trace::from_csv(&format!(
            "{CSV_HEADER}\nevent,0.1,1,,,1,1,,frobnicate,a,1,,,,,\n"
        ))
        .expect_err("unknown kind")
        .to_string();
        assert!(
            err.starts_with("line 2: ") && err.contains("`frobnicate`"),
            "{err}"
        );
        // Quoted fields keep their commas, quotes and line breaks.
        let mut trace = sample_trace();
        trace.label = "a, \"quoted\"\nlabel".into();
        assert_eq!(Trace::from_csv(&trace.to_csv()).expect("parses"), trace);
    }

    #[test]
    fn residency_follows_the_events() {
        let trace = sample_trace();
        let residency = trace.residency_steps();
        assert_eq!(residency.shards, ["model-00001.safetensors"]);
        assert_eq!(residency.sampled(100), [(0.1, vec![100]), (0.2, vec![0])]);
        assert_eq!(
            residency.sampled(1),
            [(0.1, vec![100]), (0.2, vec![0])],
            "the last stays"
        );
        let at = trace.resident_at(0.15);
        assert_eq!(at.len(), 1);
        assert_eq!(at[0].bytes, 100);
        assert_eq!(at[0].tensors.len(), 1);
        assert!(trace.resident_at(0.25).is_empty());
    }
}
