//! `weightscope record`: a user's job's memory over time, from outside (the
//! process tree) and from inside (the probe), with findings.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::profile::analysis::recording::Recording;
use crate::profile::capture::{
    JobSpec, RecordControl, RecordError, RecordOptions, Target, Update, record,
};
use crate::units::human_bytes;

/// What `weightscope record` was asked.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RecordArgs {
    /// Write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the trace to FILE (JSON, or CSV when FILE ends in .csv), as `walk` does.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Milliseconds between samples (default 50: 20 Hz).
    #[arg(long = "interval-ms", value_name = "N", value_parser = super::interval, default_value = "50", hide_default_value = true)]
    pub interval: Duration,
    /// The checkpoint the job works on (default: the folder of the first shard it opens).
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<PathBuf>,
    /// Attach to a running process instead of starting CMD (outside figures only).
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Do not put the Python probe on the job's PYTHONPATH.
    #[arg(long = "no-probe")]
    pub no_probe: bool,
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pid")]
    pub command: Vec<OsString>,
}

/// Records what `args` names; `control` stops it from another thread.
///
/// # Errors
/// When the job cannot start or the pid does not exist.
pub fn run(
    args: &RecordArgs,
    control: &RecordControl,
    journal: Option<crate::profile::Journal>,
) -> Result<(Recording, Option<std::fs::File>), RecordError> {
    let target = match args.pid {
        Some(pid) => Target::Attach(pid),
        None => Target::Spawn(JobSpec {
            capture_output: false,
            argv: args.command.clone(),
            cwd: None,
            env: Vec::new(),
        }),
    };
    let options = RecordOptions {
        interval: args.interval,
        checkpoint: args.checkpoint.clone(),
        python_probe: !args.no_probe,
    };
    let attached = args.pid.is_some();
    let mut journal = journal;
    let recording = record(&target, &options, control, |update| {
        if let Some(journal) = &mut journal {
            match &update {
                Update::Sample(sample) => journal.sample(sample),
                Update::Event(event) => journal.event(event),
                Update::Stacks(update) => journal.stacks(update),
                _ => {}
            }
        }
        if let Update::Started(pid) = update {
            // Said once, so a script knows the recording has begun.
            if attached {
                eprintln!(
                    "weightscope: recording pid {pid} (Ctrl+C ends the recording, not the process)"
                );
            } else {
                eprintln!(
                    "weightscope: recording pid {pid} (Ctrl+C goes to the job; what was seen is kept)"
                );
            }
        }
    })?;
    let journal = journal.map(|j| j.end(recording.to_trace().job.as_ref()));
    Ok((recording, journal))
}

/// Opens the journal of `--trace` before the job starts: a journal that
/// cannot be made for this recording alone (a link, a FIFO, one another
/// recording is writing) stops the recording before it begins.
///
/// # Errors
/// The journal's error, naming its path.
pub fn open_journal(
    args: &RecordArgs,
) -> Result<Option<crate::profile::Journal>, crate::profile::TraceError> {
    let Some(trace) = args.trace.as_deref() else {
        return Ok(None);
    };
    let command = match args.pid {
        Some(pid) => format!("pid {pid}"),
        None => args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" "),
    };
    let mut meta = crate::profile::Trace::new(format!("record: {command}"));
    meta.device = "job".into();
    meta.job = Some(crate::profile::JobInfo {
        command,
        ..crate::profile::JobInfo::default()
    });
    meta.origin = Some(crate::profile::Origin::now());
    crate::profile::Journal::create(&journal_path(trace), &meta).map(Some)
}

/// Where a recording with `--trace FILE` is written as it happens: FILE
/// itself when it is a journal (`.jsonl`), else `FILE.partial.jsonl`, which
/// is removed once FILE is written at the end (and kept, whole up to its
/// last line, when the recording is cut short: `weightscope` killed).
#[must_use]
pub fn journal_path(trace: &std::path::Path) -> PathBuf {
    if trace
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl"))
    {
        return trace.to_path_buf();
    }
    let mut name = trace.as_os_str().to_owned();
    name.push(".partial.jsonl");
    PathBuf::from(name)
}

/// Refuses output paths that would overwrite the checkpoint (`--checkpoint`)
/// or any existing checkpoint file, before the job starts.
///
/// # Errors
/// A line naming the path and why.
pub fn check_outputs(args: &RecordArgs) -> Result<RecordOutputs, crate::files::FileError> {
    let inputs: Vec<&std::path::Path> = args.checkpoint.iter().map(PathBuf::as_path).collect();
    let check = |path: &Option<PathBuf>| {
        path.as_deref()
            .map(|p| crate::files::check_output(p, &inputs))
            .transpose()
    };
    let outputs = RecordOutputs {
        json: check(&args.json)?,
        trace: check(&args.trace)?,
    };
    if let Some(trace) = &args.trace {
        crate::files::check_output(&journal_path(trace), &inputs)?;
    }
    Ok(outputs)
}

/// The checked outputs of a recording (`--json`, `--trace`): written
/// through these, which check again when they write.
#[derive(Debug, Default)]
pub struct RecordOutputs {
    json: Option<crate::files::Output>,
    trace: Option<crate::files::Output>,
}

/// Writes the files asked for (JSON summary, trace); each is written
/// whole or not at all, and one failing does not stop the other.
///
/// # Errors
/// Each file that could not be written.
pub fn save(
    recording: &Recording,
    outputs: &RecordOutputs,
    journal: Option<&std::fs::File>,
) -> Result<(), super::CliError> {
    let mut errors = Vec::new();
    if let Some(out) = &outputs.json {
        let text = serde_json::to_string_pretty(&summary_json(recording)).unwrap_or_default();
        if let Err(err) = out.write((text + "\n").as_bytes()) {
            errors.push(err.into());
        }
    }
    let journal_file = journal;
    if let Some(out) = &outputs.trace {
        let path = out.path();
        let journal = journal_path(path);
        // A journal trace is already written, line by line.
        if journal != *path {
            match recording.to_trace().save(out) {
                Ok(()) => {
                    if let Some(file) = journal_file {
                        crate::files::remove_if_same(&journal, file);
                    }
                }
                Err(err) => errors.push(err.into()),
            }
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(super::CliError::Several(errors)),
    }
}

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
    partial: bool,
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
            elapsed_secs: r.elapsed_secs,
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
            root: "not reachable from Python".into(),
            kind: "unreachable".into(),
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
        partial: w.partial,
        objects: w.objects,
        millis: w.millis,
    }
}

/// The summary's peak RSS line (not known when no sample was taken).
fn peak_rss_line(r: &Recording) -> String {
    if r.samples.is_empty() {
        return "peak RSS not known: the job ended before the first sample (a shorter --interval-ms samples sooner)".to_owned();
    }
    format!(
        "peak RSS {} at {:.1} s (the whole process tree{}; VmHWM included)",
        human_bytes(r.peak_rss_bytes),
        r.peak_rss_secs,
        if r.rss_is_pss {
            ", as PSS: pages its processes share counted once"
        } else {
            ""
        }
    )
}

/// The summary for people (the CLI prints it on stderr).
///
/// # Errors
/// When writing fails.
pub fn write_summary(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let ended = match r.exit {
        Some(exit) => exit.describe(),
        None if r.cut_short => "cut short (the recorder stopped before the job ended)".to_owned(),
        None => "detached".to_owned(),
    };
    writeln!(
        out,
        "recorded `{}` (pid {}): {ended} after {:.1} s, {} samples",
        crate::units::Shown::new(&r.command),
        r.pid,
        r.elapsed_secs,
        r.samples.len()
    )?;
    writeln!(out, "  {}", peak_rss_line(r))?;
    if let Some(p) = &r.probe
        && p.dropped_events + p.dropped_definitions + p.thinned_samples > 0
    {
        writeln!(
            out,
            "  the probes sent more than is kept: {} events past the cap of {} counted, not kept; {} frames or stacks past their caps; {} samples thinned out (every new high kept)",
            p.dropped_events,
            crate::profile::capture::MAX_PROBE_EVENTS,
            p.dropped_definitions,
            p.thinned_samples
        )?;
    }
    match (&r.probe, r.peak_mlx_active_bytes) {
        (Some(p), Some(active)) => {
            let cost = p.cost_percent().map_or(String::new(), |c| {
                format!(", probe cost {c:.2} % of a core")
            });
            writeln!(
                out,
                "  peak MLX active {} (from inside the job: {} probe{}{cost})",
                human_bytes(active),
                if p.client.is_empty() { "a" } else { &p.client },
                p.mlx_version
                    .as_deref()
                    .map_or(String::new(), |v| format!(", MLX {v}"))
            )?;
        }
        (Some(p), None) => writeln!(
            out,
            "  MLX: the {} probe reported no MLX figures (the job did not import mlx.core)",
            if p.client.is_empty() {
                "job's"
            } else {
                &p.client
            }
        )?,
        (None, _) => writeln!(
            out,
            "  MLX: no figures from inside the job (no probe reported; see docs/record.md)"
        )?,
    }
    if let (Some(gpu), Some(device)) = (r.peak_gpu_bytes, r.peak_gpu_device_used_bytes) {
        writeln!(
            out,
            "  peak GPU memory {} (NVML: the job's processes; managed memory, which MLX's CUDA allocator uses, is not in it), {} used on the GPUs by everyone",
            human_bytes(gpu),
            human_bytes(device)
        )?;
    }
    write_ledger(r, out)?;
    for rank in &r.ranks {
        writeln!(
            out,
            "  rank {} (pid {}): peak MLX active {}{}",
            rank.rank,
            rank.pid,
            human_bytes(rank.peak_mlx_active_bytes),
            if rank.peak_stack.is_empty() {
                String::new()
            } else {
                format!(
                    " at {}",
                    crate::units::Shown::new(&crate::profile::analysis::stacks::describe(
                        &rank.peak_stack
                    ))
                )
            }
        )?;
    }
    write_lines(r, out)?;
    write_phases(r, out)?;
    write_files_and_findings(r, out)
}

/// The lines that grew most between the job's marks.
fn write_phases(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    if r.phases.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  by phase (from each of the job's marks to the next):"
    )?;
    // A job with thousands of marks: the first and last phases, and the
    // count of those between (all are in the JSON).
    let shown = 40;
    let skip = r.phases.len().saturating_sub(shown);
    for (i, phase) in r.phases.iter().enumerate() {
        if skip > 0 && i == shown / 2 {
            writeln!(out, "    ... {skip} more phases (all in --json)")?;
        }
        if skip > 0 && (shown / 2..shown / 2 + skip).contains(&i) {
            continue;
        }
        let top = phase.lines.first().map_or(String::new(), |l| {
            format!(
                "; most at {} ({:.0} %)",
                crate::units::Shown::new(&l.frame.label()),
                l.share * 100.0
            )
        });
        writeln!(
            out,
            "    {:>6.1}-{:<6.1} s \"{}\": peak {}, grew {}{top}",
            phase.start_secs,
            phase.end_secs,
            crate::units::Shown::new(&phase.mark),
            human_bytes(phase.peak_bytes),
            human_bytes(phase.grew_bytes)
        )?;
    }
    Ok(())
}

/// What every byte was at the RSS peak.
fn write_ledger(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(l) = &r.ledger else { return Ok(()) };
    let process = &l.sample.process;
    let anon = match (l.sample.mlx, l.host_not_mlx()) {
        (Some(m), Some(host)) => format!(
            "anonymous {} (MLX active {}, MLX cache {}, host memory that is not MLX's: Python objects, numpy, torch, and memory freed but kept by the C allocator {})",
            human_bytes(process.anon_bytes),
            human_bytes(m.active_bytes),
            human_bytes(m.cache_bytes),
            human_bytes(host)
        ),
        _ => format!(
            "anonymous {} (heap: MLX's buffers, numpy, Python)",
            human_bytes(process.anon_bytes)
        ),
    };
    writeln!(
        out,
        "  at the highest RSS sampled ({:.1} s): RSS {} = {anon} + file-backed and shared {}",
        l.sample.at,
        human_bytes(process.rss_bytes),
        human_bytes(process.file_bytes)
    )?;
    if !l.files.is_empty() {
        let files: Vec<String> = l
            .files
            .iter()
            .take(4)
            .map(|(path, bytes)| {
                let name = path.rsplit('/').next().unwrap_or(path);
                format!("{} {}", crate::units::Shown::new(name), human_bytes(*bytes))
            })
            .collect();
        writeln!(out, "    mapped files: {}", files.join(", "))?;
    }
    if let Some(gpu) = l.sample.gpu {
        writeln!(
            out,
            "    beside RSS, GPU memory {}",
            human_bytes(gpu.process_bytes)
        )?;
    }
    Ok(())
}

/// Who held MLX memory at the peak: the probe's walk there, root by root.
fn write_held(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(w) = &r.held_by else { return Ok(()) };
    writeln!(
        out,
        "  held by (the walk at {:.1} s, MLX active {}{}):",
        w.t_secs,
        human_bytes(w.active_bytes),
        if w.partial {
            ", partial: the walk stopped at its time budget"
        } else {
            ""
        }
    )?;
    for root in w.roots.iter().take(8) {
        let example = if root.path.is_empty() {
            String::new()
        } else {
            format!(" e.g. {}", root.path)
        };
        let also = if root.also.is_empty() {
            String::new()
        } else {
            format!(
                "; also reaches what {} holds (counted there)",
                root.also.join(", ")
            )
        };
        writeln!(
            out,
            "    {:>10}  {} ({}, {}; {} array{}{also}){example}",
            human_bytes(root.bytes),
            crate::units::Shown::new(&root.root),
            root.kind,
            crate::units::Shown::new(&root.place()),
            root.arrays,
            if root.arrays == 1 { "" } else { "s" },
        )?;
    }
    if w.unreached_bytes() > 0 {
        writeln!(
            out,
            "    {:>10}  not reached from Python (held by MLX's graph: arrays not yet evaluated, or kept by other computations)",
            human_bytes(w.unreached_bytes())
        )?;
    }
    if w.counted_beyond_active_bytes() > 0 {
        writeln!(
            out,
            "    the roots' arrays add up to {} more than MLX held: arrays that share a buffer (views, slices) or hold none yet (not evaluated, as mx.load's until used) are counted each",
            human_bytes(w.counted_beyond_active_bytes())
        )?;
    }
    Ok(())
}

/// The stack at the peak and the lines that grew memory most.
fn write_lines(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    write_held(r, out)?;
    if r.peak_stack.is_empty() && r.lines.is_empty() {
        return Ok(());
    }
    if !r.peak_stack.is_empty() {
        writeln!(
            out,
            "  at the peak the job was at {}",
            crate::units::Shown::new(&crate::profile::analysis::stacks::describe(&r.peak_stack))
        )?;
    }
    writeln!(out, "  lines (held at the peak, share, all they grew):")?;
    for line in r.lines.iter().take(8) {
        let code = if line.frame.text.is_empty() {
            String::new()
        } else {
            format!("  {}", line.frame.text)
        };
        writeln!(
            out,
            "    {:>10} {:>4.0} % {:>10}  {}{}",
            human_bytes(line.held_at_peak_bytes),
            line.share * 100.0,
            human_bytes(line.grew_bytes),
            crate::units::Shown::new(&line.frame.label()),
            crate::units::Shown::new(&code)
        )?;
    }
    Ok(())
}

/// The summary's lines about shard files, the checkpoint and findings.
fn write_files_and_findings(r: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let open_bytes: u64 = r.files_open_at_peak.iter().map(|f| f.bytes).sum();
    writeln!(
        out,
        "  shard files open at the peak: {} ({}); {} used in all (held open, or loaded through the probe)",
        r.files_open_at_peak.len(),
        human_bytes(open_bytes),
        r.files_used()
    )?;
    for file in r.files_open_at_peak.iter().take(8) {
        writeln!(
            out,
            "    {} {}",
            crate::units::Shown::new(&file.path.display().to_string()),
            human_bytes(file.bytes)
        )?;
    }
    if !r.files_loaded.is_empty() {
        let held: Vec<String> = r
            .files_loaded
            .iter()
            .filter(|f| f.held)
            .map(|f| crate::units::Shown::new(f.path.rsplit('/').next().unwrap_or(&f.path)))
            .map(crate::units::Shown::into_string)
            .collect();
        let loaded = r.files_loaded.len();
        let until_exit = r.files_loaded.iter().filter(|f| f.until_exit).count();
        let said = if held.is_empty() {
            "every one released while the job ran (MLX's total fell back to where it was at each load)".to_owned()
        } else if until_exit == loaded {
            format!(
                "{} held until the job ended (MLX's total fell back to where it was at each load only as it exited)",
                if loaded == 1 { "it was" } else { "all were" }
            )
        } else {
            format!(
                "estimated not released while the job ran (MLX's total never fell back to where it was at the load): {}",
                held.join(", ")
            )
        };
        writeln!(
            out,
            "  loaded through mx.load: {loaded} file{}; {said}",
            if loaded == 1 { "" } else { "s" },
        )?;
    }
    if let Some(c) = &r.checkpoint {
        writeln!(
            out,
            "  checkpoint {}: {} in {}; a walk would peak at {} (retain), {} (release-tensor), {} (release-shard)",
            crate::units::Shown::new(&crate::units::location_data(&c.path.display().to_string())),
            human_bytes(c.total_bytes),
            crate::units::count_of(c.shards, "shard", "shards"),
            human_bytes(c.expected.retain),
            human_bytes(c.expected.release_tensor),
            human_bytes(c.expected.release_shard)
        )?;
    } else if let Some(error) = &r.checkpoint_error {
        writeln!(out, "  checkpoint: {}", crate::units::Shown::new(error))?;
    }
    if r.findings.is_empty() {
        writeln!(out, "  no findings")?;
    } else {
        writeln!(out, "  findings:")?;
        for finding in &r.findings {
            writeln!(
                out,
                "  - {}: {}",
                finding.severity.name(),
                crate::units::Shown::new(&finding.message)
            )?;
        }
    }
    Ok(())
}

/// Runs and records the job; exits with its status.
#[must_use]
pub fn main(args: &RecordArgs) -> u8 {
    let outputs = match check_outputs(args) {
        Ok(outputs) => outputs,
        Err(err) => {
            super::stderr_line(format_args!("{err}"));
            return super::BAD_INPUT;
        }
    };
    let control = crate::profile::capture::RecordControl::new();
    // Ctrl+C, SIGTERM, SIGHUP to weightscope: passed on to the job's
    // process group (when the job has the terminal, Ctrl+C goes there by
    // itself); the recording goes on until the job exits (a bounded time),
    // then what was seen is written. Attached, the recording just ends.
    let forward = control.clone();
    if let Err(err) = super::signals::watch(false, move |signal| forward.forward(signal)) {
        super::stderr_line(format_args!("cannot catch termination signals: {err}"));
    }
    let journal = match open_journal(args) {
        Ok(journal) => journal,
        Err(err) => {
            super::stderr_line(format_args!("{err}"));
            return super::BAD_INPUT;
        }
    };
    let (recording, journal) = match run(args, &control, journal) {
        Ok(done) => done,
        Err(err) => {
            super::stderr_line(format_args!("{err}"));
            return super::BAD_INPUT;
        }
    };
    let mut shown = crate::units::ShownLines::new(std::io::stderr().lock());
    let _ = write_summary(&recording, &mut shown).and_then(|()| shown.finish().map(drop));
    let saved = save(&recording, &outputs, journal.as_ref());
    if let Err(err) = &saved {
        super::stderr_line(format_args!("{err}"));
    }
    if let Some(signal) = super::signals::received() {
        super::stderr_line(format_args!(
            "the recording was cut short by {} (passed on to the job); what was seen is written",
            super::signals::name(signal)
        ));
        return super::signals::exit_status(signal);
    }
    if saved.is_err() {
        return 1;
    }
    recording
        .exit
        .map_or(0, |exit| u8::try_from(exit.status() & 0xff).unwrap_or(1))
}
