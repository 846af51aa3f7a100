//! The probe's named pipe and the job's output: read on threads of their
//! own, stopped through a private pipe, never by a line the job could write.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use super::recorder::LINE_QUEUE;
use super::{OUTPUT_LINE_BYTES, OutputLine, job, probe};
/// The probe's named pipe and the `probe-fifo` thread that reads it.
///
/// Nothing is ever written to the FIFO by the recorder: the job can fill
/// it, and a line there could be forged by the job. The reader is told to
/// finish through a private pipe of ours instead, and the end of the job
/// comes from `wait`, never from a line.
#[cfg(target_os = "linux")]
pub(super) struct NamedPipe {
    /// Writing a byte here (or dropping it) tells the reader to finish.
    pub(super) stop: std::io::PipeWriter,
    pub(super) lines: std::sync::mpsc::Receiver<(Instant, String)>,
}

#[cfg(target_os = "linux")]
impl NamedPipe {
    /// Makes the FIFO at `path` and starts its reader.
    pub(super) fn start(path: &Path) -> std::io::Result<Self> {
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
    pub(super) fn stop(self) -> std::sync::mpsc::Receiver<(Instant, String)> {
        drop(self.stop);
        self.lines
    }
}

/// The FIFO read until our private stop pipe closes, then for what is
/// waiting in it (at most [`FIFO_DRAIN`] longer).
#[cfg(target_os = "linux")]
pub(super) struct StoppableFifo {
    pub(super) fifo: std::fs::File,
    pub(super) stop: std::io::PipeReader,
    /// When the stop came: reading ends by this deadline.
    pub(super) until: Option<Instant>,
}

/// How long the FIFO is still read after the job ended, for its last lines.
#[cfg(target_os = "linux")]
pub(super) const FIFO_DRAIN: Duration = Duration::from_secs(1);

#[cfg(target_os = "linux")]
impl std::io::Read for StoppableFifo {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
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
                rustix::event::PollFd::new(&self.fifo, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&self.stop, rustix::event::PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if !fds[1].revents().is_empty() {
                self.until = Some(Instant::now() + FIFO_DRAIN);
            }
        }
    }
}

#[cfg(target_os = "linux")]
/// Puts the Python probe first on `command`'s `PYTHONPATH`, with its named
/// pipe (for processes that do not inherit the pipe) in the environment.
pub(super) fn install_probe(
    command: &mut std::process::Command,
) -> std::io::Result<(probe::PythonProbe, Option<NamedPipe>)> {
    let installed = probe::PythonProbe::install()?;
    let mut path = OsString::from(installed.dir());
    if let Some(old) = &crate::environment::get().outside.pythonpath {
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
pub(super) fn read_probe(
    reader: std::io::PipeReader,
    lines: std::sync::mpsc::SyncSender<(Instant, String)>,
) -> std::io::Result<()> {
    pump_probe_lines("probe-reader", reader, lines)
}

/// Reads probe lines from `reader` on a thread named `name`, each sent with
/// the moment it arrived (a line too long or not UTF-8 arrives empty: a
/// bad line), until the end of the input or nobody listening.
#[cfg(target_os = "linux")]
pub(super) fn pump_probe_lines(
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
pub(super) fn read_output(
    job: &mut job::Job,
) -> std::io::Result<std::sync::mpsc::Receiver<OutputLine>> {
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
