//! `record --json`'s summary, typed (the contract in docs/record.md).

use serde::Serialize;
use serde_json::Value;

use crate::profile::analysis::recording::Recording;

/// The summary as JSON (the contract in docs/record.md): [`JsonRecording`]
/// as a value.
#[must_use]
pub fn summary_json(r: &Recording) -> Value {
    serde_json::to_value(JsonRecording::of(r)).unwrap_or(Value::Null)
}

/// `record --json`'s summary, field by field (docs/record.md).
#[derive(Serialize)]
pub struct JsonRecording<'a> {
    command: &'a str,
    pid: u32,
    attached: bool,
    exit_code: Option<i32>,
    signal: Option<i32>,
    elapsed_secs: f64,
    peak_rss_bytes: u64,
    peak_rss_secs: f64,
    rss_figure: &'static str,
    peak_mlx_active_bytes: Option<u64>,
    peak_gpu_bytes: Option<u64>,
    peak_gpu_device_used_bytes: Option<u64>,
    gpu_unavailable: Option<&'a str>,
    probe: bool,
    probe_info: Option<JsonProbe<'a>>,
    samples: Vec<JsonSample>,
    marks: Vec<JsonMark<'a>>,
    files_seen: Vec<JsonFile>,
    files_open_at_peak: Vec<JsonFile>,
    checkpoint: Option<String>,
    checkpoint_error: Option<&'a str>,
    checkpoint_bytes: Option<u64>,
    expected_peak_bytes: Option<JsonExpected>,
    findings: &'a [crate::profile::Finding],
    killed_for_memory: Option<JsonMemoryKill<'a>>,
    address_space_limit_bytes: Option<u64>,
    ledger: Option<JsonLedger<'a>>,
    ranks: &'a [crate::profile::analysis::recording::RankPeak],
    killed: Option<JsonKilled<'a>>,
    cut_short: bool,
    peak_stack: &'a [crate::profile::trace::stacks::Frame],
    last_stack: &'a [crate::profile::trace::stacks::Frame],
    lines: &'a [crate::profile::analysis::stacks::LineGrowth],
    held_by: Vec<HeldRoot>,
    held_by_walk: Option<JsonWalk>,
    phases: &'a [crate::profile::analysis::stacks::Phase],
    files_loaded: &'a [crate::profile::analysis::stacks::FileHeld],
}

/// The probe's own figures.
#[derive(Serialize)]
struct JsonProbe<'a> {
    client: &'a str,
    mlx_version: Option<&'a str>,
    lines: u64,
    bad_lines: u64,
    dropped_events: u64,
    dropped_definitions: u64,
    unknown_pids: u64,
    thinned_samples: u64,
    cpu_percent_of_a_core: Option<f64>,
}

/// One sample of `samples`.
#[derive(Serialize)]
struct JsonSample {
    t: f64,
    rss: u64,
    rss_anon: u64,
    rss_file: u64,
    hwm: u64,
    read_bytes: u64,
    processes: usize,
    open_shard_files: usize,
    open_shard_bytes: u64,
    mlx_active: Option<u64>,
    mlx_cache: Option<u64>,
    mlx_peak: Option<u64>,
    gpu: Option<u64>,
    gpu_device_used: Option<u64>,
}

impl JsonSample {
    fn of(s: &crate::memory::Sample) -> Self {
        Self {
            t: s.at,
            rss: s.process.rss_bytes,
            rss_anon: s.process.anon_bytes,
            rss_file: s.process.file_bytes,
            hwm: s.process.peak_rss_bytes,
            read_bytes: s.process.read_bytes,
            processes: s.process.processes,
            open_shard_files: s.process.open_files,
            open_shard_bytes: s.process.open_file_bytes,
            mlx_active: s.mlx.map(|m| m.active_bytes),
            mlx_cache: s.mlx.map(|m| m.cache_bytes),
            mlx_peak: s.mlx.map(|m| m.peak_bytes),
            gpu: s.gpu.map(|g| g.process_bytes),
            gpu_device_used: s.gpu.map(|g| g.device_used_bytes),
        }
    }
}

/// One mark of `marks`.
#[derive(Serialize)]
struct JsonMark<'a> {
    t: f64,
    kind: crate::memory::MarkKind,
    target: &'a str,
    bytes: u64,
}

/// A file and its size.
#[derive(Serialize)]
struct JsonFile {
    path: String,
    bytes: u64,
}

/// What the headers predict for each policy.
#[derive(Serialize)]
struct JsonExpected {
    retain: u64,
    #[serde(rename = "release-tensor")]
    release_tensor: u64,
    #[serde(rename = "release-shard")]
    release_shard: u64,
}

/// The kernel's kill for memory.
#[derive(Serialize)]
struct JsonMemoryKill<'a> {
    cgroup: &'a str,
    limit_bytes: Option<u64>,
}

/// What every byte was at the highest RSS sampled.
#[derive(Serialize)]
struct JsonLedger<'a> {
    at_secs: f64,
    rss: u64,
    anon: u64,
    file: u64,
    mlx_active: Option<u64>,
    mlx_cache: Option<u64>,
    host_not_mlx: Option<u64>,
    gpu: Option<u64>,
    files: Vec<JsonLedgerFile<'a>>,
}

/// A file the ledger charges.
#[derive(Serialize)]
struct JsonLedgerFile<'a> {
    path: &'a str,
    bytes: u64,
}

/// How a signal ended the job: the signal, whether the kernel killed it
/// for memory and at which limit, the age of the last sample, the line
/// executing then, and the files loaded and not released.
#[derive(Serialize)]
struct JsonKilled<'a> {
    signal: i32,
    signal_name: &'static str,
    from_shell_status: bool,
    for_memory: bool,
    cgroup: Option<&'a str>,
    limit_bytes: Option<u64>,
    address_space_limit_bytes: Option<u64>,
    last_sample_secs: f64,
    last_sample_age_secs: f64,
    line: Option<&'a crate::profile::trace::stacks::Frame>,
    files_not_released: Vec<&'a str>,
    held_by: Vec<HeldRoot>,
    held_by_walk: Option<JsonWalk>,
}

/// A held-by walk's figures beside its roots: when, which process, MLX
/// active then, what the roots reached and what no root reached.
#[derive(Serialize)]
struct JsonWalk {
    t: f64,
    pid: u32,
    mlx_active_bytes: u64,
    reached_bytes: u64,
    unreached_bytes: u64,
    counted_beyond_active_bytes: u64,
    /// `buffer` (views counted once, arrays not evaluated as none) or
    /// `array` (each by `nbytes`).
    counted_by: crate::profile::trace::census::CountedBy,
    /// Why by array (`threads`, `beside`, `device`, `mlx`, `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    counted_by_array_why: Option<crate::profile::trace::census::ByArrayWhy>,
    shared_bytes: u64,
    unevaluated_arrays: u64,
    unevaluated_bytes: u64,
    partial: bool,
    /// Big containers and libraries' globals left unwalked (less than
    /// 16 MiB unaccounted for).
    shallow: bool,
    objects: u64,
    millis: f64,
}

type HeldRoot = crate::profile::trace::census::HeldRoot;

impl<'a> JsonRecording<'a> {
    /// The report of `r`.
    #[must_use]
    pub fn of(r: &'a Recording) -> Self {
        let files = |files: &[crate::profile::analysis::recording::OpenFile]| -> Vec<JsonFile> {
            files
                .iter()
                .map(|f| JsonFile {
                    path: f.path.display().to_string(),
                    bytes: f.bytes,
                })
                .collect()
        };
        Self {
            command: &r.command,
            pid: r.pid,
            attached: r.attached,
            exit_code: r
                .exit
                .map(crate::profile::analysis::recording::JobExit::status),
            signal: match r.exit {
                Some(crate::profile::analysis::recording::JobExit::Signal(n)) => Some(n),
                _ => None,
            },
            elapsed_secs: r.duration_secs(),
            peak_rss_bytes: r.peak_rss_bytes,
            peak_rss_secs: r.peak_rss_secs,
            rss_figure: if r.rss_is_pss { "pss" } else { "rss" },
            peak_mlx_active_bytes: r.peak_mlx_active_bytes,
            peak_gpu_bytes: r.peak_gpu_bytes,
            peak_gpu_device_used_bytes: r.peak_gpu_device_used_bytes,
            gpu_unavailable: r.gpu_unavailable.as_deref(),
            probe: r.probe.as_ref().is_some_and(|p| p.lines > 0),
            probe_info: r.probe.as_ref().map(|p| JsonProbe {
                client: &p.client,
                mlx_version: p.mlx_version.as_deref(),
                lines: p.lines,
                bad_lines: p.bad_lines,
                dropped_events: p.dropped_events,
                dropped_definitions: p.dropped_definitions,
                thinned_samples: p.thinned_samples,
                unknown_pids: p.unknown_pids,
                cpu_percent_of_a_core: p.cost_percent(),
            }),
            samples: r.samples.iter().map(JsonSample::of).collect(),
            marks: r
                .events
                .iter()
                .map(|e| JsonMark {
                    t: e.t_secs,
                    kind: e.kind,
                    target: &e.target,
                    bytes: e.bytes,
                })
                .collect(),
            files_seen: files(&r.files_seen),
            files_open_at_peak: files(&r.files_open_at_peak),
            checkpoint: r
                .checkpoint
                .as_ref()
                .map(|c| crate::units::location_data(&c.path.display().to_string())),
            checkpoint_error: r.checkpoint_error.as_deref(),
            checkpoint_bytes: r.checkpoint.as_ref().map(|c| c.total_bytes),
            expected_peak_bytes: r.checkpoint.as_ref().map(|c| JsonExpected {
                retain: c.expected.retain,
                release_tensor: c.expected.release_tensor,
                release_shard: c.expected.release_shard,
            }),
            findings: &r.findings,
            killed_for_memory: r.memory_kill.as_ref().map(|k| JsonMemoryKill {
                cgroup: &k.cgroup,
                limit_bytes: k.limit_bytes,
            }),
            address_space_limit_bytes: r.address_space_limit,
            ledger: r.ledger.as_ref().map(JsonLedger::of),
            ranks: &r.ranks,
            killed: killed(r),
            cut_short: r.cut_short,
            peak_stack: &r.peak_stack,
            last_stack: &r.last_stack,
            lines: &r.lines,
            held_by: held_roots(r.held_by.as_ref()),
            held_by_walk: r.held_by.as_ref().map(walk),
            phases: &r.phases,
            files_loaded: &r.files_loaded,
        }
    }
}

impl<'a> JsonLedger<'a> {
    fn of(l: &'a crate::profile::analysis::recording::Ledger) -> Self {
        Self {
            at_secs: l.sample.at,
            rss: l.sample.process.rss_bytes,
            anon: l.sample.process.anon_bytes,
            file: l.sample.process.file_bytes,
            mlx_active: l.sample.mlx.map(|m| m.active_bytes),
            mlx_cache: l.sample.mlx.map(|m| m.cache_bytes),
            host_not_mlx: l.host_not_mlx(),
            gpu: l.sample.gpu.map(|g| g.process_bytes),
            files: l
                .files
                .iter()
                .map(|(path, bytes)| JsonLedgerFile {
                    path,
                    bytes: *bytes,
                })
                .collect(),
        }
    }
}

/// How a signal ended the job (`None` when none did).
fn killed(r: &Recording) -> Option<JsonKilled<'_>> {
    let (signal, via_shell) = r.ending_signal()?;
    let last = r.last_job_sample().map_or(0.0, |s| s.at);
    let own_line = r
        .last_stack
        .iter()
        .find(|f| !f.is_library())
        .or_else(|| r.last_stack.first());
    Some(JsonKilled {
        signal,
        signal_name: crate::profile::analysis::recording::signal_name(signal),
        from_shell_status: via_shell,
        for_memory: r.memory_kill.is_some(),
        cgroup: r.memory_kill.as_ref().map(|k| k.cgroup.as_str()),
        limit_bytes: r.memory_kill.as_ref().and_then(|k| k.limit_bytes),
        address_space_limit_bytes: r.address_space_limit,
        last_sample_secs: last,
        last_sample_age_secs: (r.elapsed_secs - last).max(0.0),
        line: own_line,
        files_not_released: r.files_not_released(),
        held_by: held_roots(r.held_last.as_ref()),
        held_by_walk: r.held_last.as_ref().map(walk),
    })
}

/// A walk's roots, and what no root reached as a last entry of kind
/// `unreachable` (held by MLX's graph, or not reachable from Python).
fn held_roots(walk: Option<&crate::profile::trace::census::Census>) -> Vec<HeldRoot> {
    let Some(w) = walk else {
        return Vec::new();
    };
    let mut roots = w.roots.clone();
    if w.unreached_bytes() > 0 {
        roots.push(HeldRoot {
            root: w.unreached_explained().0.into(),
            kind: if w.shallow { "unwalked" } else { "unreachable" }.into(),
            function: String::new(),
            file: String::new(),
            line: 0,
            bytes: w.unreached_bytes(),
            arrays: 0,
            path: String::new(),
            type_name: String::new(),
            also: Vec::new(),
        });
    }
    roots
}

/// A held-by walk's figures beside its roots.
fn walk(w: &crate::profile::trace::census::Census) -> JsonWalk {
    JsonWalk {
        t: w.t_secs,
        pid: w.pid,
        mlx_active_bytes: w.active_bytes,
        reached_bytes: w.reached_bytes,
        unreached_bytes: w.unreached_bytes(),
        counted_beyond_active_bytes: w.counted_beyond_active_bytes(),
        counted_by: w.buffers.as_ref().map(|b| b.by).unwrap_or_default(),
        counted_by_array_why: w.buffers.as_ref().and_then(|b| b.why),
        shared_bytes: w.buffers.as_ref().map_or(0, |b| b.shared),
        unevaluated_arrays: w.buffers.as_ref().map_or(0, |b| b.unevaluated),
        unevaluated_bytes: w.buffers.as_ref().map_or(0, |b| b.unevaluated_bytes),
        partial: w.partial,
        shallow: w.shallow,
        objects: w.objects,
        millis: w.millis,
    }
}
