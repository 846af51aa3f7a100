//! A memory trace: samples and events on one clock, with what each shard held
//! after each event. The format's vocabulary is here; `write.rs` is its one
//! writer (JSON, CSV, a journal as it happens), `read.rs` its one reader,
//! `rows.rs` the rows both see, `residency.rs` what each shard held.

pub mod census;
pub mod job_end;
mod read;
mod residency;
mod rows;
pub mod stacks;
mod write;

pub use read::CsvError;
pub use residency::{
    Residency, ResidencyChange, ResidentShard, ResidentTensor, residency_steps, resident_at,
};
pub use write::{Journal, JournalEnded};

use std::collections::HashMap;
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

    /// `kind` on `target` at `t_secs`, with no bytes, detail or shard, and
    /// memory figures of zero until the caller fills them.
    #[must_use]
    pub fn bare(t_secs: f64, kind: MarkKind, target: String) -> Self {
        Self {
            t_secs,
            kind,
            target,
            bytes: 0,
            detail: String::new(),
            rss_bytes: 0,
            mlx_active_bytes: 0,
            mlx_cache_bytes: 0,
            shard: None,
            shard_resident_bytes: None,
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
    /// How far [`Trace::shift_times`] moved it (never saved): its second 0
    /// on the clock its times are on now.
    #[serde(skip)]
    pub moved_secs: f64,
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
    /// The rank in the recorder's environment: `MLX_RANK` (`mlx.launch`
    /// sets it for each rank's command, the recorder included when it
    /// wraps the rank), else MPI's (`OMPI_COMM_WORLD_RANK`, `PMI_RANK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The job's ranks in all, from whichever backend's setting is there
    /// (see [`world_size_of`]).
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
        let outside = &crate::environment::get().outside;
        Self {
            host: crate::units::Shown::new(&host).chars().take(255).collect(),
            wall_unix_secs: wall + shift,
            rank: rank_of(outside),
            world_size: world_size_of(outside),
        }
    }
}

/// A number an environment variable holds.
fn number(value: Option<&String>) -> Option<u32> {
    value.and_then(|v| v.trim().parse().ok())
}

/// This process's rank: `MLX_RANK`, else Open MPI's, else MPICH's.
fn rank_of(outside: &crate::environment::Outside) -> Option<u32> {
    number(outside.mlx_rank.as_ref())
        .or_else(|| number(outside.ompi_rank.as_ref()))
        .or_else(|| number(outside.pmi_rank.as_ref()))
}

/// The job's ranks in all, as each of MLX's backends is told it by
/// `mlx.launch`: `MLX_WORLD_SIZE` (NCCL); the entries of `MLX_HOSTFILE`
/// (ring: a list of each rank's addresses; also `mlx.launch`'s own
/// hostfile, a list of hosts or `{"hosts": [...]}`); the rows of
/// `MLX_IBV_DEVICES` (JACCL); `OMPI_COMM_WORLD_SIZE` or `PMI_SIZE` (MPI).
fn world_size_of(outside: &crate::environment::Outside) -> Option<u32> {
    number(outside.mlx_world_size.as_ref())
        .or_else(|| listed(outside.mlx_hostfile.as_deref()?, "MLX_HOSTFILE"))
        .or_else(|| listed(outside.mlx_ibv_devices.as_deref()?, "MLX_IBV_DEVICES"))
        .or_else(|| number(outside.ompi_size.as_ref()))
        .or_else(|| number(outside.pmi_size.as_ref()))
}

/// The entries of the JSON list in the file at `path` (or of its
/// `hosts` list), read up to 1 MiB, and only from a regular file: a FIFO
/// or a process substitution (`<(...)`) is never opened (it would block,
/// or take from the job what it is meant to read).
fn listed(path: &std::path::Path, what: &'static str) -> Option<u32> {
    use serde_json::Value;
    let text = crate::files::read_bounded_text(path, 1 << 20, what).ok()?;
    let entries = match serde_json::from_str::<Value>(&text).ok()? {
        Value::Array(entries) => entries,
        Value::Object(mut file) => match file.remove("hosts")? {
            Value::Array(entries) => entries,
            _ => return None,
        },
        _ => return None,
    };
    u32::try_from(entries.len()).ok().filter(|&n| n > 0)
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
    /// Moves every time it holds by `secs` (samples, events, the probe's
    /// stacks and walks, the job's end): onto another clock, as a merge of
    /// several hosts' journals puts each on the job's.
    pub fn shift_times(&mut self, secs: f64) {
        for sample in &mut self.samples {
            sample.at += secs;
        }
        for event in &mut self.events {
            event.t_secs += secs;
        }
        if let Some(stacks) = &mut self.stacks {
            for sample in &mut stacks.samples {
                sample.t += secs;
            }
            for census in &mut stacks.held {
                census.t_secs += secs;
            }
        }
        if let Some(ended) = self.job.as_mut().and_then(|j| j.ended.as_mut()) {
            ended.elapsed_secs += secs;
        }
        self.moved_secs += secs;
    }

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
            moved_secs: 0.0,
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
    use std::path::Path;

    use super::rows::CSV_HEADER;
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
        // CSV keeps names as shown (a terminal may read `--csv
        // /dev/stdout`): the line break comes back as its escape.
        let mut shown = trace.clone();
        shown.events[0].target = crate::units::Shown::new(&shown.events[0].target).into_string();
        assert!(shown.events[0].target.contains("\\n"));
        assert_eq!(Trace::from_csv(&trace.to_csv()).expect("csv parses"), shown);
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
        // Quoted fields keep their commas and quotes; a line break is shown.
        let mut trace = sample_trace();
        trace.events[0].target = "plain".into();
        trace.label = "a, \"quoted\"\nlabel".into();
        let loaded = Trace::from_csv(&trace.to_csv()).expect("parses");
        assert_eq!(loaded.label, "a, \"quoted\"\\nlabel");
        trace.label = loaded.label.clone();
        assert_eq!(loaded, trace);
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

    /// The environment of a rank: `vars` set, nothing else.
    fn outside(vars: &[(&str, &std::ffi::OsStr)]) -> crate::environment::Outside {
        crate::environment::Outside::read_from(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_os_string())
        })
    }

    /// Variables set for one case.
    type Vars<'a> = Vec<(&'a str, std::ffi::OsString)>;

    #[test]
    fn the_world_size_is_read_as_each_backend_is_told_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        // The ring backend's file, as mlx.launch writes it: each rank's
        // addresses.
        let ring = file(
            "ring.json",
            r#"[["10.0.0.1:5000"], ["10.0.0.2:5001"], ["10.0.0.3:5002"]]"#,
        );
        // mlx.launch's own hostfile, both forms it reads.
        let hosts = file(
            "hosts.json",
            r#"{"backend": "jaccl", "envs": [], "hosts": [{"ssh": "a", "ips": []}, {"ssh": "b", "ips": []}]}"#,
        );
        let listed_hosts = file(
            "list.json",
            r#"[{"ssh": "a"}, {"ssh": "b"}, {"ssh": "c"}, {"ssh": "d"}]"#,
        );
        // JACCL's devices: one row a rank.
        let ibv = file("ibv.json", r#"[[null, "rdma_en2"], ["rdma_en2", null]]"#);
        let empty = file("empty.json", "");
        let os = |p: &Path| p.as_os_str().to_os_string();
        let cases: Vec<(Vars<'_>, Option<u32>)> = vec![
            (vec![("MLX_HOSTFILE", os(&ring))], Some(3)),
            (vec![("MLX_HOSTFILE", os(&hosts))], Some(2)),
            (vec![("MLX_HOSTFILE", os(&listed_hosts))], Some(4)),
            (vec![("MLX_IBV_DEVICES", os(&ibv))], Some(2)),
            (vec![("MLX_WORLD_SIZE", "8".into())], Some(8)),
            (vec![("OMPI_COMM_WORLD_SIZE", "6".into())], Some(6)),
            (vec![("PMI_SIZE", "5".into())], Some(5)),
            // mlx.launch's file for one rank is empty; nothing is made up.
            (vec![("MLX_HOSTFILE", os(&empty))], None),
            (
                vec![("MLX_HOSTFILE", os(&dir.path().join("gone.json")))],
                None,
            ),
            (vec![], None),
        ];
        for (vars, want) in cases {
            let vars: Vec<(&str, &std::ffi::OsStr)> =
                vars.iter().map(|(n, v)| (*n, v.as_os_str())).collect();
            assert_eq!(world_size_of(&outside(&vars)), want, "{vars:?}");
        }
    }

    #[test]
    fn the_rank_is_mlx_s_else_mpi_s() {
        let rank = |vars: &[(&str, &str)]| {
            let vars: Vec<(&str, &std::ffi::OsStr)> = vars
                .iter()
                .map(|(n, v)| (*n, std::ffi::OsStr::new(*v)))
                .collect();
            rank_of(&outside(&vars))
        };
        assert_eq!(
            rank(&[("MLX_RANK", "3"), ("OMPI_COMM_WORLD_RANK", "1")]),
            Some(3)
        );
        assert_eq!(rank(&[("OMPI_COMM_WORLD_RANK", "1")]), Some(1));
        assert_eq!(rank(&[("PMI_RANK", " 2 ")]), Some(2));
        assert_eq!(rank(&[("MLX_RANK", "x")]), None);
    }
}
