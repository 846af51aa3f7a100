//! Starting a job in its own process group with the probe's pipe, handing
//! it the terminal, and signalling its group. The only unsafe code of the
//! recorder is here, each block with its reason.

use std::io::PipeWriter;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

/// A job started by the recorder.
pub struct Job {
    child: Child,
    took_terminal: bool,
    /// This process's RSS when it forked the job: the kernel's max-RSS
    /// figure for the child counts the pages it shared with us between
    /// fork and exec, so a figure at or below this says nothing of the job.
    rss_at_fork: u64,
    /// A descriptor that becomes readable when the job exits (none where
    /// the kernel has no `pidfd_open`, before 5.3): the recorder waits on
    /// it between samples, so that it sees the exit at once rather than
    /// at the next sample.
    exited: Option<std::os::fd::OwnedFd>,
}

impl Job {
    /// Starts `command` in a new process group. `pipe` stays open in the
    /// child (its descriptor is named in the environment by the caller);
    /// when this process owns the terminal, the job's group gets it, so the
    /// job reads stdin and Ctrl+C reaches it as if started by the shell.
    pub fn spawn(mut command: Command, pipe: Option<&PipeWriter>) -> std::io::Result<Self> {
        let fd = pipe.map(AsRawFd::as_raw_fd);
        let take_terminal = owns_terminal();
        let rss_at_fork = crate::memory::ProcessFigures::read().rss_bytes;
        let inherited = inherited_descriptors();
        command.process_group(0);
        #[allow(unsafe_code)]
        // SAFETY: the closure runs in the forked child before exec and calls
        // only async-signal-safe functions (close_range, fcntl, fstat,
        // getrlimit, signal, tcsetpgrp, getpgrp); it allocates nothing and
        // touches no lock (the inherited list was made before the fork).
        unsafe {
            command.pre_exec(move || {
                // Descriptors opened without close-on-exec (MLX's maps of
                // the window's checkpoint, above all) must not leak into
                // the job: they would show as files the job holds.
                inherit_only_stdio();
                pass_on_inherited(inherited);
                if let Some(fd) = fd
                    && libc::fcntl(fd, libc::F_SETFD, 0) == -1
                {
                    return Err(std::io::Error::last_os_error());
                }
                if take_terminal {
                    // A background group may not take the terminal unless
                    // it ignores SIGTTOU while doing so.
                    let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                    libc::tcsetpgrp(0, libc::getpgrp());
                    libc::signal(libc::SIGTTOU, old);
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        if take_terminal {
            // Also from here: whichever runs first, the job has the terminal.
            set_terminal_group(child_pgid(&child));
        }
        let exited = rustix::process::Pid::from_raw(child_pgid(&child)).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        Ok(Self {
            child,
            took_terminal: take_terminal,
            rss_at_fork,
            exited,
        })
    }

    /// The job's stdout and stderr, when they were piped.
    pub fn take_output(
        &mut self,
    ) -> (
        Option<std::process::ChildStdout>,
        Option<std::process::ChildStderr>,
    ) {
        (self.child.stdout.take(), self.child.stderr.take())
    }

    /// Waits until `deadline` or, sooner, until the job exits (without
    /// reaping it: [`Job::try_wait`] does).
    pub fn wait_exit_until(&self, deadline: std::time::Instant) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Some(exited) = &self.exited else {
            std::thread::sleep(left);
            return;
        };
        let timeout = rustix::time::Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [rustix::event::PollFd::new(
            exited,
            rustix::event::PollFlags::IN,
        )];
        // Interrupted by a signal (Ctrl+C passed on): the loop samples
        // again sooner, which is harmless.
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }

    /// The job's pid (also its process group).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// When the job has ended (reaping it): its wait status and the peak
    /// RSS the kernel kept for it (`ru_maxrss`, which sees what no sample
    /// can: the last moments before exit), or 0 when that figure is no more
    /// than this process's RSS at the fork (then it may be ours: a window
    /// of 1.5 GiB recording `sleep 1` would report 1.5 GiB).
    pub fn try_wait(&mut self) -> Option<(std::process::ExitStatus, u64)> {
        use std::os::unix::process::ExitStatusExt as _;
        let pid = libc::pid_t::try_from(self.child.id()).ok()?;
        let mut status = 0;
        #[allow(unsafe_code)]
        // SAFETY: rusage is plain data that wait4 fills; the pid is our own
        // child, which nothing else waits for (std's `Child` is never
        // waited on after this).
        let (reaped, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let reaped = libc::wait4(pid, &raw mut status, libc::WNOHANG, &raw mut usage);
            (reaped, usage)
        };
        (reaped == pid).then(|| {
            let max_rss_bytes = u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024;
            let max_rss_bytes = if max_rss_bytes > self.rss_at_fork {
                max_rss_bytes
            } else {
                0
            };
            (std::process::ExitStatus::from_raw(status), max_rss_bytes)
        })
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.took_terminal {
            set_terminal_group(rustix::process::getpgrp().as_raw_pid());
        }
    }
}

/// Marks every descriptor above stderr close-on-exec (in the child, before
/// exec): `close_range` where the kernel has it (5.11+), else one `fcntl` a
/// descriptor up to the limit (at most 65536).
#[allow(unsafe_code)]
unsafe fn inherit_only_stdio() {
    // SAFETY (for the whole body): plain system calls on this process's own
    // descriptor table; no memory is touched but the rlimit struct.
    unsafe {
        let done = libc::syscall(
            libc::SYS_close_range,
            3_u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) == 0;
        if done {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0 {
            limit.rlim_cur.min(65_536)
        } else {
            1024
        };
        for fd in 3..i32::try_from(top).unwrap_or(1024) {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// The descriptors above stderr this process inherited, each with its
/// device and inode: read once by [`remember_inherited_descriptors`] at
/// start, before this process opened anything.
static INHERITED: std::sync::OnceLock<Vec<(i32, u64, u64)>> = std::sync::OnceLock::new();

/// Notes the descriptors above stderr that this process was given by
/// whoever started it (a shell's `3>log`, a process substitution's
/// `/dev/fd/63`, a systemd socket): those without close-on-exec, which
/// every descriptor inherited across exec is. A recorded job gets them
/// unchanged, as it would from the shell; nothing weightscope opens does.
/// Called first thing in `main`; later calls change nothing.
pub fn remember_inherited_descriptors() {
    let _ = INHERITED.get_or_init(|| {
        let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&fd| fd > 2)
            .filter_map(|fd| {
                #[allow(unsafe_code)]
                // SAFETY: fcntl and fstat on a descriptor number only read
                // this process's descriptor table; a number closed meanwhile
                // gives EBADF. `st` is plain data fstat fills.
                unsafe {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags == -1 || flags & libc::FD_CLOEXEC != 0 {
                        return None;
                    }
                    let mut st: libc::stat = std::mem::zeroed();
                    (libc::fstat(fd, &raw mut st) == 0).then_some((fd, st.st_dev, st.st_ino))
                }
            })
            .collect()
    });
}

/// What [`remember_inherited_descriptors`] found (nothing if it was not
/// called).
fn inherited_descriptors() -> &'static [(i32, u64, u64)] {
    INHERITED.get().map_or(&[], Vec::as_slice)
}

/// In the forked child: clears close-on-exec on each inherited descriptor
/// that is still the file it was at start (a number weightscope closed and
/// reused for a file of its own is not passed on).
#[allow(unsafe_code)]
unsafe fn pass_on_inherited(inherited: &[(i32, u64, u64)]) {
    for &(fd, dev, ino) in inherited {
        // SAFETY: fstat and fcntl on this process's own descriptors; `st`
        // is plain data on the stack.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &raw mut st) == 0 && st.st_dev == dev && st.st_ino == ino {
                libc::fcntl(fd, libc::F_SETFD, 0);
            }
        }
    }
}

fn child_pgid(child: &Child) -> i32 {
    i32::try_from(child.id()).unwrap_or(0)
}

/// Whether stdin is a terminal whose foreground group is ours.
fn owns_terminal() -> bool {
    #[allow(unsafe_code)]
    // SAFETY: isatty, tcgetpgrp and getpgrp only read process state.
    unsafe {
        libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp()
    }
}

/// Makes `pgid` the terminal's foreground group, ignoring SIGTTOU meanwhile.
fn set_terminal_group(pgid: i32) {
    if pgid <= 0 {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: signal and tcsetpgrp on stdin; the old disposition is restored.
    unsafe {
        let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, pgid);
        libc::signal(libc::SIGTTOU, old);
    }
}

/// Stops a recording from another thread (Ctrl+C, the window's Stop): a
/// started job's group gets SIGINT, then SIGTERM, then SIGKILL on later
/// calls, and the recording goes on until the job exits; an attached
/// recording detaches.
#[derive(Debug, Clone, Default)]
pub struct RecordControl {
    inner: Arc<ControlInner>,
}

#[derive(Debug, Default)]
struct ControlInner {
    /// The job's process group once started (0 before, or when attached).
    pgid: AtomicI32,
    stops: AtomicU32,
    detach: AtomicBool,
    /// When a signal to the recorder was passed on to the job.
    forwarded: std::sync::Mutex<Option<std::time::Instant>>,
    /// A held-by walk was asked for and not yet passed to the probe.
    walk_asked: AtomicBool,
}

/// How long a job has to end after a signal to the recorder was passed on
/// to it, before its group gets SIGKILL.
pub const FORWARD_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl RecordControl {
    /// A control for one recording.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    pub(super) fn started(&self, pgid: u32) {
        self.inner
            .pgid
            .store(i32::try_from(pgid).unwrap_or(0), Ordering::SeqCst);
    }

    /// Asks the job to stop (or the recording to detach). Returns the
    /// signal sent, if any.
    #[allow(clippy::must_use_candidate)] // stopping is the point; the signal is for tests
    pub fn stop(&self) -> Option<i32> {
        let n = self.inner.stops.fetch_add(1, Ordering::SeqCst);
        self.inner.detach.store(true, Ordering::SeqCst);
        let pgid = self.inner.pgid.load(Ordering::SeqCst);
        if pgid <= 0 {
            return None;
        }
        let signal = match n {
            0 => libc::SIGINT,
            1 => libc::SIGTERM,
            _ => libc::SIGKILL,
        };
        self.signal_group(signal);
        Some(signal)
    }

    /// Passes a signal the recorder received (SIGTERM, SIGHUP, SIGINT) on
    /// to the job's group; the recording goes on until the job ends, at
    /// most [`FORWARD_GRACE`] (then the group gets SIGKILL). An attached
    /// recording detaches.
    pub fn forward(&self, signal: i32) {
        self.inner.detach.store(true, Ordering::SeqCst);
        if let Ok(mut at) = self.inner.forwarded.lock() {
            at.get_or_insert_with(std::time::Instant::now);
        }
        self.signal_group(signal);
    }

    /// How long ago a signal was passed on, if one was.
    #[must_use]
    pub fn forwarded_since(&self) -> Option<std::time::Duration> {
        self.inner
            .forwarded
            .lock()
            .ok()
            .and_then(|at| at.map(|at| at.elapsed()))
    }

    /// Sends `signal` to the job's group, when there is one.
    pub(super) fn signal_group(&self, signal: i32) {
        let pgid = self.inner.pgid.load(Ordering::SeqCst);
        if pgid <= 0 {
            return;
        }
        #[allow(unsafe_code)]
        // SAFETY: kill on the job's own process group, which this recorder
        // created; a group already gone gives ESRCH, which is ignored.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }

    /// Whether a stop was asked for.
    #[must_use]
    pub fn stop_requested(&self) -> bool {
        self.inner.detach.load(Ordering::SeqCst)
    }

    /// Asks the job's Python probe for a held-by walk now (who holds MLX's
    /// memory at this moment); it arrives as the walks at highs do.
    pub fn ask_for_walk(&self) {
        self.inner.walk_asked.store(true, Ordering::SeqCst);
    }

    /// Whether a walk was asked for since the last call.
    pub(super) fn take_walk_request(&self) -> bool {
        self.inner.walk_asked.swap(false, Ordering::SeqCst)
    }
}
