//! `weightscope record`: a user's job's memory over time, from outside (the
//! process tree) and from inside (the probe), with findings.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::profile::analysis::recording::Recording;
use crate::profile::capture::{
    JobSpec, RecordControl, RecordError, RecordOptions, Target, Update, record,
};

mod json;
mod text;

pub use json::{JsonRecording, summary_json};
pub use text::write_summary;

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
    /// Attach to a running process instead of starting CMD: its memory, its open files and, for Python, its stacks read from outside.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Do not put the Python probe on the job's PYTHONPATH (attached: do not read its stacks).
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
) -> Result<(Recording, Option<crate::profile::JournalEnded>), RecordError> {
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
            // Said at once (a full disk), not at the end of a long job.
            if let Some(failure) = journal.take_failure() {
                super::stderr_line(format_args!("{failure}"));
            }
        }
        if let Update::Note(note) = &update {
            super::stderr_line(format_args!("{note}"));
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
    if let Some(failure) = journal.as_ref().and_then(|j| j.unsaid.as_ref()) {
        super::stderr_line(format_args!("{failure}"));
    }
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
        let text = crate::units::json_shown(
            serde_json::to_string_pretty(&summary_json(recording)).unwrap_or_default(),
        );
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

/// Runs and records the job; exits with its status.
#[must_use]
pub fn main(args: &RecordArgs) -> u8 {
    let Some(outputs) = super::ok_or_said(check_outputs(args)) else {
        return super::BAD_INPUT;
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
    let Some(journal) = super::ok_or_said(open_journal(args)) else {
        return super::BAD_INPUT;
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
    let saved = save(&recording, &outputs, journal.as_ref().map(|j| &j.file));
    let journal_failed = journal.as_ref().is_some_and(|j| j.failed);
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
    let status = recording
        .exit
        .map_or(0, |exit| u8::try_from(exit.status() & 0xff).unwrap_or(1));
    // An output that could not be written (the journal included) is never
    // a success; the job's own failure status is kept.
    if saved.is_err() || journal_failed {
        return status.max(1);
    }
    status
}
