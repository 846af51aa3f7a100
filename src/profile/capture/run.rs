//! A recording from start to finish: the job started (or the process
//! found), sampled at the interval, its probe's lines read, and the
//! recording made when it ends.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use super::pipes::{NamedPipe, install_probe, read_output, read_probe};
use super::recorder::{LINE_QUEUE, Recorder};
use super::{
    OWN_VARIABLES, RecordControl, RecordError, RecordOptions, Target, Update, job, memory_kill,
    probe, procfs,
};
use crate::memory::{MarkKind, secs_since};
use crate::profile::analysis::recording::{JobExit, Recording};
use crate::profile::trace::job_end::{JobEnd, OutputLine};
use crate::profile::trace::{JobInfo, Trace};
#[cfg(target_os = "linux")]
/// A job started (or a process found) and the probe's lines coming in.
pub(super) struct Started {
    pub(super) job: Option<job::Job>,
    pub(super) root: u32,
    pub(super) command: String,
    pub(super) lines: std::sync::mpsc::Receiver<(Instant, String)>,
    pub(super) python_probe: Option<probe::PythonProbe>,
    /// The job's output lines, when captured.
    pub(super) output: Option<std::sync::mpsc::Receiver<OutputLine>>,
    /// The probe's named pipe, for processes that did not inherit the
    /// pipe: our end (to wake its reader at the end) and its lines.
    pub(super) fifo: Option<NamedPipe>,
    /// What could not be read, said once as the recording begins.
    pub(super) note: Option<String>,
}

#[cfg(target_os = "linux")]
/// Starts the job with the probe's pipe (and the Python probe on its
/// path), or checks that the pid to attach to exists.
pub(super) fn start(
    target: &Target,
    options: &RecordOptions,
    control: &RecordControl,
) -> Result<Started, RecordError> {
    use std::sync::mpsc;

    let (lines_tx, lines_rx) = mpsc::sync_channel::<(Instant, String)>(LINE_QUEUE);
    let mut python_probe = None;
    let mut output = None;
    let mut fifo = None;
    let mut note = None;
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
            note = read_from_outside(*pid, options, lines_tx)?;
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
        note,
    })
}

#[cfg(target_os = "linux")]
/// The attached process's Python stacks read from outside on their own
/// thread, unless asked not to (`--no-probe`); what cannot be read, said.
fn read_from_outside(
    pid: u32,
    options: &RecordOptions,
    lines: std::sync::mpsc::SyncSender<(Instant, String)>,
) -> std::io::Result<Option<String>> {
    if !options.python_probe {
        return Ok(None);
    }
    match super::outside::OutsideStacks::attach(pid) {
        Ok(stacks) => super::outside::read_every(stacks, options.interval, lines).map(|()| None),
        Err(why) => Ok(Some(format!(
            "no stacks of pid {pid}: {why}; its memory and open files are recorded"
        ))),
    }
}

#[cfg(target_os = "linux")]
/// The job's process tree at sample `tick`: the tree's own children files
/// find a new child at the next sample; every tenth sample (or where those
/// files are missing) all of `/proc` is scanned.
pub(super) fn tree_at(root: u32, tick: u64) -> Vec<u32> {
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
pub(super) fn past_grace(control: &RecordControl) -> bool {
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
        note,
    } = start(target, options, control)?;
    let lines_rx = lines;
    let mut announced = false;
    let mut rec = Recorder::new(origin);
    // Ten samples without a word from the probe, and a second at least.
    rec.mlx_stale = (options.interval * 10).max(Duration::from_secs(1));
    rec.where_when = Some(crate::profile::Origin::now());
    rec.walk_request = python_probe.as_ref().map(|p| (p.dir().join("walk"), None));
    // Said as the recording begins, after the line that says it has.
    let mut updates: Vec<Update> = note.into_iter().map(Update::Note).collect();
    rec.event(origin, MarkKind::JobStart, command.clone());
    updates.push(Update::Event(rec.events[0].clone()));
    let mut exit = None;
    let mut tick: u64 = 0;
    // Attached: the first sample where the job's stacks are known.
    let mut lines_open = job.is_some() || rec.first_stack(&lines_rx, &mut updates);
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
            wait_until(deadline, job.as_ref());
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

/// Until `deadline`, or until `job` exits when there is one.
fn wait_until(deadline: Instant, job: Option<&super::job::Job>) {
    match job {
        Some(job) => job.wait_exit_until(deadline),
        None => std::thread::sleep(deadline.saturating_duration_since(Instant::now())),
    }
}

/// The recording from what was seen: its trace (full samples) and what
/// the recorder knew at the end, summarized as a saved trace would be.
pub(super) fn finish(
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
        mapped_files: rec.peak_files.files,
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
