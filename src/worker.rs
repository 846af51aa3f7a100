//! The MLX worker: one named thread that owns every MLX array.
//!
//! MLX arrays are `Send` but not `Sync`, and evaluation can take seconds, so
//! the UI never touches them: it sends typed [`Request`]s and receives
//! [`Event`]s carrying summaries (never arrays). The worker wakes its listener
//! through a plain callback after each event, so this layer does not depend on
//! egui. It sits above `profile` because it also runs walks, streaming their
//! progress as events and stopping between tensors when asked.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::checkpoint::ShardId;
use crate::checkpoint::check::{Diagnostic, check_headers};
use crate::memory::{ExpectedPeaks, Mark, MarkKind, Policy, Sample};
use crate::mlx::{self, MemoryStats};
use crate::profile::{self, Recorded, Transform, WalkOutcome, WalkPlan};
use crate::weights::{
    DiffReport, OpenStep, PreviewBudget, PreviewOptions, Progress, TensorPreview, ValueScan,
    ViewChoice, ViewInfo, Weights, WeightsError,
};

/// What the worker is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Open the checkpoint at this path (headers, then lazy MLX maps), closing
    /// any open one, with the view picked automatically.
    Open(PathBuf),
    /// Open with this view (a view must be installed before anything is
    /// materialized, so changing it means opening again).
    OpenWithView(PathBuf, ViewChoice),
    /// Materialize this tensor and send its preview.
    Materialize(String),
    /// Drop this tensor's cached array (frees nothing while its shard is open).
    Release(String),
    /// Drop this shard's native map and every cached array from it.
    ReleaseShard(ShardId),
    /// Drop every cached array and every shard map (the checkpoint stays open).
    ReleaseAll,
    /// Return MLX's cached buffers to the system allocator.
    ClearCache,
    /// Keep the previews within this many bytes (the least recently shown
    /// let go first).
    SetPreviewBudget(u64),
    /// Pin this tensor's preview (kept whatever the budget), or unpin it.
    PinPreview(String, bool),
    /// Set MLX's memory limit, in bytes.
    SetMemoryLimit(u64),
    /// Set MLX's cache limit, in bytes.
    SetCacheLimit(u64),
    /// Walk every tensor in shard order under a policy (progress comes as
    /// [`EventKind::WalkEnd`]; its token stops it between tensors).
    Walk {
        /// What to release, when.
        policy: Policy,
        /// What to do to each tensor.
        transform: Transform,
        /// Cancels this walk (also before it starts).
        cancel: CancelToken,
    },
    /// Compare the open checkpoint (A, through its view) with another (B),
    /// one tensor at a time (progress as [`EventKind::Diffed`]; its token
    /// stops it between tensors).
    Diff {
        /// B.
        other: PathBuf,
        /// B's view.
        view: ViewChoice,
        /// Cancels this diff (also before it starts).
        cancel: CancelToken,
    },
    /// Open one tensor of a diff: A's, B's and the error's values, and the
    /// error per quantization group ([`EventKind::DiffDetail`]). B is opened
    /// for it and closed after.
    DiffTensor {
        /// B.
        other: PathBuf,
        /// B's view.
        view: ViewChoice,
        /// The tensor (its canonical name on both sides).
        name: String,
    },
    /// Read every tensor's values of the open checkpoint in a release-shard
    /// walk, looking for NaN/Inf, all-zero tensors and bad scales (progress
    /// as [`EventKind::Scanned`]; its token stops it between tensors).
    ScanValues {
        /// Cancels this scan (also before it starts).
        cancel: CancelToken,
    },
    /// Close the checkpoint, releasing everything.
    Close,
}

/// What happened, with memory right after it.
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// MLX's counters after it.
    pub memory: MemoryStats,
    /// Process and MLX memory after it (its `at` is when it finished).
    pub sample: Sample<Instant>,
    /// The event as the profiler records it (with the shard residency it
    /// left behind); `None` for events that change no memory.
    pub mark: Option<Mark>,
    /// When it finished.
    pub at: Instant,
    /// What the previews hold after it, and their budget.
    pub previews: crate::weights::PreviewsHeld,
}

/// Figures about a checkpoint that just opened, computed on the worker so
/// that applying [`EventKind::Opened`] costs the window's frame nothing
/// (for 90k tensors these take tens of milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenedFacts {
    /// The header summary: totals, parameters per dtype, quantization.
    pub summary: crate::checkpoint::Summary,
    /// What a walk is expected to peak at, per transform, from the headers.
    pub expected: Vec<(Transform, ExpectedPeaks)>,
    /// Bytes of the largest shard a walk reads.
    pub largest_shard_bytes: u64,
}

impl OpenedFacts {
    /// The figures for `checkpoint`.
    #[must_use]
    pub fn of(checkpoint: &Checkpoint) -> Self {
        let plan = WalkPlan::from_checkpoint(checkpoint, Transform::None);
        let largest_shard_bytes = plan.largest_shard().map_or(0, |s| s.source_bytes);
        let expected = Transform::ALL
            .into_iter()
            .map(|t| {
                let peaks = if t == Transform::None {
                    plan.expected()
                } else {
                    WalkPlan::from_checkpoint(checkpoint, t).expected()
                };
                (t, peaks)
            })
            .collect();
        Self {
            summary: checkpoint.summary(),
            expected,
            largest_shard_bytes,
        }
    }
}

/// Why a command or job failed on the worker (shared, so that events stay
/// cheap to clone).
#[derive(Debug, Clone, thiserror::Error)]
pub enum JobError {
    /// It needs a checkpoint and none is open.
    #[error("no checkpoint is open")]
    NotOpen,
    /// A shard id past the open checkpoint's shards.
    #[error("the checkpoint has no shard {0}")]
    NoShard(usize),
    /// The Weights core refused or failed (opening, a view, a tensor).
    #[error(transparent)]
    Weights(Arc<WeightsError>),
    /// MLX failed (a limit, the cache).
    #[error(transparent)]
    Mlx(Arc<mlx::MlxError>),
    /// The command never reached the worker.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The job stopped on an internal error (a panic, caught); the worker
    /// goes on.
    #[error("internal error, the job was stopped (the next command works): {0}")]
    Panicked(String),
}

impl From<WeightsError> for JobError {
    fn from(err: WeightsError) -> Self {
        Self::Weights(Arc::new(err))
    }
}

impl From<mlx::MlxError> for JobError {
    fn from(err: mlx::MlxError) -> Self {
        Self::Mlx(Arc::new(err))
    }
}

/// Which kind of command a failure is about (the app routes on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// Materializing a tensor.
    Materialize,
    /// Releasing a tensor, a shard or everything.
    Release,
    /// Clearing MLX's cache.
    ClearCache,
    /// Setting MLX's memory or cache limit.
    Limit,
    /// A walk.
    Walk,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone)]
pub enum EventKind {
    /// A checkpoint is open; its metadata is shared.
    Opened {
        /// What was opened.
        path: PathBuf,
        /// Its headers (problems included).
        checkpoint: Arc<Checkpoint>,
        /// The view installed, if any.
        view: Option<Arc<ViewInfo>>,
        /// Why the chosen view could not be installed (the checkpoint is
        /// then open without one).
        view_error: Option<JobError>,
        /// What `weightscope check` finds in its headers, config and folder.
        findings: Vec<Diagnostic>,
        /// Figures the panels show, computed here.
        facts: Box<OpenedFacts>,
    },
    /// How far the open of `path` has come (at most about 50 of these per
    /// phase); what was open stays open meanwhile.
    OpenProgress {
        /// What is being opened.
        path: PathBuf,
        /// Headers parsed or maps opened, of how many.
        step: OpenStep,
    },
    /// Opening failed; nothing is open.
    OpenFailed {
        /// What was asked for.
        path: PathBuf,
        /// What went wrong, naming the file.
        error: JobError,
    },
    /// A tensor was materialized.
    Materialized(Box<TensorPreview>),
    /// A command about one tensor or shard failed; the worker goes on.
    Failed {
        /// The command that failed.
        job: JobKind,
        /// The tensor or shard (or the setting).
        target: String,
        /// Why.
        error: JobError,
    },
    /// A cached tensor was dropped.
    Released(String),
    /// A shard's map and arrays were dropped.
    ShardReleased {
        /// The shard file.
        file: String,
        /// Bytes its map held in evaluated tensors (now freed into MLX's cache).
        freed_bytes: u64,
    },
    /// Every array and map was dropped.
    ReleasedAll,
    /// A preview was let go to keep the previews within their budget.
    Forgotten(crate::weights::Forgotten),
    /// The previews' budget or pins changed (the event says what the
    /// previews hold now).
    PreviewsChanged,
    /// MLX's cache was cleared and the host heap trimmed.
    CacheCleared {
        /// Whether the C allocator returned memory to the OS.
        trimmed: bool,
    },
    /// MLX's memory limit changed.
    MemoryLimitSet {
        /// The limit before.
        previous: u64,
    },
    /// MLX's cache limit changed.
    CacheLimitSet {
        /// The limit now.
        limit: u64,
    },
    /// A moment of a walk (start, step, release, end).
    WalkEnd(Box<Recorded>),
    /// A walk ended (finished, cancelled or stopped by an error).
    WalkFinished(Box<WalkOutcome>),
    /// A diff compared one more tensor.
    Diffed(Progress),
    /// A diff ended (or B could not be opened).
    DiffFinished(Result<Box<DiffReport>, JobError>),
    /// One tensor of a diff, opened (or why it could not be).
    DiffDetail(String, Result<Box<crate::weights::PairDetail>, JobError>),
    /// A value scan read one more tensor.
    Scanned(Progress),
    /// A value scan ended (finished or cancelled), or could not start.
    ScanFinished(Result<Box<ValueScan>, JobError>),
    /// The checkpoint was closed.
    Closed,
}

/// Why [`Worker::try_send`] did not queue a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The command queue is full: the worker is far behind.
    #[error(
        "the MLX worker is busy ({COMMAND_QUEUE} commands waiting); try again when it catches up"
    )]
    Full,
    /// The worker thread has stopped.
    #[error("the MLX worker has stopped")]
    Gone,
}

/// The worker thread is gone (it only stops when its handle is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the MLX worker has stopped")]
pub struct WorkerGone;

/// Handle to the MLX worker thread. Dropping it stops the thread after the
/// commands already sent.
pub struct Worker {
    commands: Option<SyncSender<Request>>,
    events: Receiver<Event>,
    thread: Option<JoinHandle<()>>,
    /// The token of the job running now, cancelled when the handle drops.
    running: Arc<std::sync::Mutex<Option<CancelToken>>>,
    /// Set when the handle is dropped: queued long jobs are skipped.
    shutdown: Arc<AtomicBool>,
}

/// Cancels one long job on the worker (a walk, a diff, a value scan). Made
/// by whoever sends the job and kept beside it: cheap to clone, usable from
/// any thread. A token cancelled before its job starts makes the job stop
/// before its first tensor; one job's token never touches another job.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A fresh token.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the job to stop before its next tensor.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether it was cancelled.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag the job polls.
    #[must_use]
    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }
}

impl PartialEq for CancelToken {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CancelToken {}

/// Commands waiting at most; a UI that floods the worker blocks briefly.
const COMMAND_QUEUE: usize = 256;
/// Events waiting at most; the UI drains them every frame.
const EVENT_QUEUE: usize = 1024;

impl Worker {
    /// Starts the thread `mlx-worker`. `wake` runs after every event (a UI
    /// passes its repaint request).
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn(wake: impl Fn() + Send + Sync + 'static) -> std::io::Result<Self> {
        let (command_tx, command_rx) = mpsc::sync_channel::<Request>(COMMAND_QUEUE);
        let (event_tx, event_rx) = mpsc::sync_channel::<Event>(EVENT_QUEUE);
        let running = Arc::new(std::sync::Mutex::new(None));
        let shutdown = Arc::new(AtomicBool::new(false));
        let thread_running = Arc::clone(&running);
        let thread_shutdown = Arc::clone(&shutdown);
        let thread = std::thread::Builder::new()
            .name("mlx-worker".into())
            .spawn(move || {
                run(
                    &command_rx,
                    &event_tx,
                    &wake,
                    &thread_running,
                    &thread_shutdown,
                );
            })?;
        Ok(Self {
            commands: Some(command_tx),
            events: event_rx,
            thread: Some(thread),
            running,
            shutdown,
        })
    }

    /// Cancels whatever long job runs now and skips the queued ones, as
    /// closing the window does (the handle's `Drop` does it too).
    pub fn stop_jobs(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Ok(running) = self.running.lock()
            && let Some(token) = running.as_ref()
        {
            token.cancel();
        }
    }

    /// Queues a command.
    ///
    /// # Errors
    /// [`WorkerGone`] when the thread has stopped.
    pub fn send(&self, command: Request) -> Result<(), WorkerGone> {
        self.commands
            .as_ref()
            .ok_or(WorkerGone)?
            .send(command)
            .map_err(|_| WorkerGone)
    }

    /// Queues a command without waiting: a UI never blocks on a full queue.
    ///
    /// # Errors
    /// [`SendError::Full`] when the queue is full (the command is dropped;
    /// the worker is far behind), [`SendError::Gone`] when the thread has
    /// stopped.
    pub fn try_send(&self, command: Request) -> Result<(), SendError> {
        let sender = self.commands.as_ref().ok_or(SendError::Gone)?;
        sender.try_send(command).map_err(|e| match e {
            mpsc::TrySendError::Full(_) => SendError::Full,
            mpsc::TrySendError::Disconnected(_) => SendError::Gone,
        })
    }

    /// The next event, if one is waiting.
    #[must_use]
    pub fn try_recv(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// Waits for the next event that answers a command or reports a job,
    /// skipping open progress (for the CLI and tests; a UI uses
    /// [`Worker::try_recv`], which returns every event).
    ///
    /// # Errors
    /// [`WorkerGone`] when the thread has stopped.
    pub fn recv(&self) -> Result<Event, WorkerGone> {
        loop {
            let event = self.recv_any()?;
            if !matches!(event.kind, EventKind::OpenProgress { .. }) {
                return Ok(event);
            }
        }
    }

    /// Waits for the next event of any kind.
    ///
    /// # Errors
    /// [`WorkerGone`] when the thread has stopped.
    pub fn recv_any(&self) -> Result<Event, WorkerGone> {
        self.events.recv().map_err(|_| WorkerGone)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A running walk, diff or scan stops before its next tensor and
        // queued ones are skipped, so closing the window does not wait for
        // them. Closing the command channel ends the loop after the queued
        // commands; draining events keeps the worker from blocking on a full
        // queue.
        self.stop_jobs();
        self.commands = None;
        while self.events.recv().is_ok() {}
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    commands: &Receiver<Request>,
    events: &SyncSender<Event>,
    wake: &(dyn Fn() + Send + Sync),
    running: &std::sync::Mutex<Option<CancelToken>>,
    shutdown: &AtomicBool,
) {
    let mut weights: Option<Weights> = None;
    let mut budget = PreviewBudget::default();
    // What the previews hold, as each event says it.
    let held = std::sync::Mutex::new(budget.held_nothing());
    let options = PreviewOptions::default();
    let mut warmed = false;
    let send = |kind: EventKind, mark: Option<Mark>, sample: Sample<Instant>| {
        let event = Event {
            kind,
            memory: mlx::memory().unwrap_or_default(),
            previews: held.lock().map(|h| h.clone()).unwrap_or_default(),
            at: sample.at,
            sample,
            mark,
        };
        let sent = events.send(event).is_ok();
        wake();
        sent
    };
    for command in commands {
        let token = match &command {
            Request::Walk { cancel, .. }
            | Request::Diff { cancel, .. }
            | Request::ScanValues { cancel } => Some(cancel.clone()),
            _ => None,
        };
        if let Some(token) = &token {
            if shutdown.load(Ordering::Relaxed) {
                continue; // the window is closing: queued jobs are skipped
            }
            if let Ok(mut slot) = running.lock() {
                *slot = Some(token.clone());
            }
        }
        // No input may stop the worker: a panic inside a job (a bug, or a
        // library's assertion on a shape from a file) is reported as that
        // job's failure, and the next command is served (what the job had
        // made is dropped as the panic unwinds; what was open stays open).
        let reply = PanicReply::of(&command);
        let listening = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut previews = Previews {
                budget: &mut budget,
                held: &held,
            };
            handle(command, &mut weights, &mut previews, &options, &send)
        })) {
            Ok(listening) => listening,
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                send(reply.event(message), None, crate::mlx::sample_now())
            }
        };
        if token.is_some()
            && let Ok(mut slot) = running.lock()
        {
            *slot = None;
        }
        if !listening {
            break; // nobody listens any more
        }
        // On a GPU the first summary compiles kernels: do it after the
        // first command (the open), not when a tensor is clicked; ours on a
        // thread of their own (a click meanwhile is summarized by MLX's
        // ops, not kept waiting).
        if !warmed {
            warmed = true;
            // The window lives long: our kernels pay for their compilation
            // after a summary or two.
            mlx::use_summary_kernel(true);
            mlx::warm_up_summaries_in_background();
        }
    }
    // Arrays and maps are freed here, on the thread that made them.
    drop(weights);
}

/// What the app waits for after a command, to be sent when the command
/// panicked instead.
enum PanicReply {
    Open(PathBuf),
    Failed(JobKind, String),
    Diff,
    DiffTensor(String),
    Scan,
}

impl PanicReply {
    fn of(command: &Request) -> Self {
        match command {
            Request::Open(path) | Request::OpenWithView(path, _) => Self::Open(path.clone()),
            Request::Materialize(name) => Self::Failed(JobKind::Materialize, name.clone()),
            Request::Release(name) | Request::PinPreview(name, _) => {
                Self::Failed(JobKind::Release, name.clone())
            }
            Request::ReleaseShard(shard) => {
                Self::Failed(JobKind::Release, format!("shard {shard:?}"))
            }
            Request::ReleaseAll | Request::Close => Self::Failed(JobKind::Release, String::new()),
            Request::ClearCache => Self::Failed(JobKind::ClearCache, String::new()),
            Request::SetPreviewBudget(_) => Self::Failed(JobKind::Limit, "preview budget".into()),
            Request::SetMemoryLimit(_) => Self::Failed(JobKind::Limit, "memory limit".into()),
            Request::SetCacheLimit(_) => Self::Failed(JobKind::Limit, "cache limit".into()),
            Request::Walk { .. } => Self::Failed(JobKind::Walk, "walk".into()),
            Request::Diff { .. } => Self::Diff,
            Request::DiffTensor { name, .. } => Self::DiffTensor(name.clone()),
            Request::ScanValues { .. } => Self::Scan,
        }
    }

    fn event(self, message: String) -> EventKind {
        let error = JobError::Panicked(message);
        match self {
            Self::Open(path) => EventKind::OpenFailed { path, error },
            Self::Failed(job, target) => failed(job, target, error),
            Self::Diff => EventKind::DiffFinished(Err(error)),
            Self::DiffTensor(name) => EventKind::DiffDetail(name, Err(error)),
            Self::Scan => EventKind::ScanFinished(Err(error)),
        }
    }
}

/// A panic's message, when it has one.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// Sends a job's events while anybody listens; once nobody does (the app
/// is gone), sets the job's cancel flag so that it stops at its next tensor.
struct Listener<'a> {
    send: &'a SendEvent<'a>,
    cancel: &'a AtomicBool,
    listening: bool,
}

impl<'a> Listener<'a> {
    fn new(send: &'a SendEvent<'a>, cancel: &'a AtomicBool) -> Self {
        Self {
            send,
            cancel,
            listening: true,
        }
    }

    fn send(&mut self, kind: EventKind, mark: Option<Mark>, sample: Sample<Instant>) {
        if self.listening {
            self.listening = (self.send)(kind, mark, sample);
        }
        if !self.listening {
            self.cancel.store(true, Ordering::Relaxed);
        }
    }
}

/// How the worker's jobs send an event (with its mark and memory sample);
/// `false` when nobody listens any more.
type SendEvent<'s> = dyn Fn(EventKind, Option<Mark>, Sample<Instant>) -> bool + Sync + 's;

/// Runs a diff of the open checkpoint against `other`, streaming its
/// progress; returns whether anybody still listens.
fn diff_job(
    weights: Option<&mut Weights>,
    other: &std::path::Path,
    view: &ViewChoice,
    cancel: &AtomicBool,
    send: &SendEvent<'_>,
) -> bool {
    let Some(w) = weights else {
        let kind = EventKind::DiffFinished(Err(JobError::NotOpen));
        return send(kind, None, crate::mlx::sample_now());
    };
    let result = Weights::open_viewed(other, view)
        .map_err(JobError::from)
        .map(|mut b| {
            let mut listener = Listener::new(send, cancel);
            let report = crate::weights::diff(w, &mut b, cancel, &mut |p| {
                listener.send(EventKind::Diffed(p), None, crate::mlx::sample_now());
            });
            Box::new(report)
        });
    let mark = match &result {
        Ok(r) => Mark::new(MarkKind::DiffEnd, "diff").detail(format!(
            "diff with {}: {} compared, {} differ{}",
            other.display(),
            r.common.len(),
            r.differing().count(),
            if r.cancelled { ", cancelled" } else { "" }
        )),
        Err(e) => Mark::new(MarkKind::DiffEnd, "diff").detail(format!("failed: {e}")),
    };
    send(
        EventKind::DiffFinished(result),
        Some(mark),
        crate::mlx::sample_now(),
    )
}

/// Opens one tensor of a diff of the open checkpoint against `other`.
fn diff_detail(
    weights: Option<&mut Weights>,
    other: &std::path::Path,
    view: &ViewChoice,
    name: String,
    options: &PreviewOptions,
) -> EventKind {
    let Some(a) = weights else {
        return EventKind::DiffDetail(name, Err(JobError::NotOpen));
    };
    let result = Weights::open_viewed(other, view)
        .and_then(|mut b| crate::weights::diff_detail(a, &mut b, &name, options.heatmap / 2))
        .map(Box::new)
        .map_err(JobError::from);
    EventKind::DiffDetail(name, result)
}

/// Runs a walk on the open checkpoint, streaming its moments; returns
/// whether anybody still listens.
fn walk_job(
    weights: Option<&mut Weights>,
    policy: Policy,
    transform: Transform,
    cancel: &AtomicBool,
    send: &SendEvent<'_>,
) -> bool {
    let Some(w) = weights else {
        return send(
            failed(JobKind::Walk, "walk", JobError::NotOpen),
            None,
            crate::mlx::sample_now(),
        );
    };
    let mut listener = Listener::new(send, cancel);
    let outcome = profile::walk(w, policy, transform, cancel, &mut |recorded| {
        let (mark, sample) = (recorded.mark.clone(), recorded.memory);
        listener.send(EventKind::WalkEnd(Box::new(recorded)), Some(mark), sample);
    });
    send(
        EventKind::WalkFinished(Box::new(outcome)),
        None,
        crate::mlx::sample_now(),
    )
}

/// Runs a value scan on the open checkpoint, streaming its progress;
/// returns whether anybody still listens.
fn scan_job(weights: Option<&mut Weights>, cancel: &AtomicBool, send: &SendEvent<'_>) -> bool {
    let Some(w) = weights else {
        let kind = EventKind::ScanFinished(Err(JobError::NotOpen));
        return send(kind, None, crate::mlx::sample_now());
    };
    let mut listener = Listener::new(send, cancel);
    let scan = crate::weights::scan_values(w, cancel, &mut |p| {
        listener.send(EventKind::Scanned(p), None, crate::mlx::sample_now());
    });
    let mark = Mark::new(MarkKind::CheckEnd, "check values").detail(format!(
        "{} of {} tensors read, {} findings{}",
        scan.scanned,
        scan.total,
        scan.findings.len(),
        if scan.cancelled { ", cancelled" } else { "" }
    ));
    send(
        EventKind::ScanFinished(Ok(Box::new(scan))),
        Some(mark),
        crate::mlx::sample_now(),
    )
}

/// The profiler's record of a (non-walk) event, with the residency of the
/// shard it touched by the core's bookkeeping.
fn mark_of(kind: &EventKind, weights: Option<&Weights>) -> Option<Mark> {
    let resident_of = |file: &str| -> u64 {
        weights
            .and_then(|w| Some(w.resident_bytes(w.checkpoint().find_shard(file)?)))
            .unwrap_or(0)
    };
    let mark = match kind {
        EventKind::Opened {
            path,
            checkpoint,
            view,
            ..
        } => Mark::new(MarkKind::Open, path.display().to_string()).detail(format!(
            "{}, view {}",
            crate::units::count_of(checkpoint.shards().len(), "shard", "shards"),
            view.as_ref().map_or("none", |v| v.name.as_str())
        )),
        EventKind::Materialized(p) => Mark::new(MarkKind::Materialize, p.name.as_str())
            .bytes(p.bytes)
            .detail(p.device.as_str())
            .resident(p.shard.as_str(), resident_of(&p.shard)),
        EventKind::Released(name) => {
            let mut mark = Mark::new(MarkKind::Release, name.as_str());
            if let Some((info, file)) =
                weights.and_then(|w| Some((w.info(name)?, w.file_of(name)?)))
            {
                mark = mark.bytes(info.bytes()).resident(file, resident_of(file));
            }
            mark
        }
        EventKind::ShardReleased { file, freed_bytes } => {
            Mark::new(MarkKind::ReleaseShard, file.as_str())
                .bytes(*freed_bytes)
                .resident(file.as_str(), 0)
        }
        EventKind::ReleasedAll => Mark::new(MarkKind::ReleaseAll, ""),
        EventKind::Forgotten(f) => {
            let mut mark = Mark::new(MarkKind::Release, f.name.as_str())
                .bytes(f.freed_bytes)
                .detail("preview budget: let go, least recently shown");
            if let Some(file) = weights.and_then(|w| w.file_of(&f.name)) {
                mark = mark.resident(file, resident_of(file));
            }
            mark
        }
        EventKind::CacheCleared { trimmed } => {
            Mark::new(MarkKind::ClearCache, "").detail(if *trimmed {
                "heap trimmed: yes"
            } else {
                "heap trimmed: no"
            })
        }
        EventKind::MemoryLimitSet { previous } => Mark::new(MarkKind::MemoryLimit, "")
            .bytes(mlx::memory().map_or(0, |m| m.limit_bytes))
            .detail(format!("was {}", crate::units::human_bytes(*previous))),
        EventKind::CacheLimitSet { limit } => Mark::new(MarkKind::CacheLimit, "").bytes(*limit),
        EventKind::Failed { target, error, .. } => {
            Mark::new(MarkKind::Error, target.as_str()).detail(error.to_string())
        }
        EventKind::Closed => Mark::new(MarkKind::Close, ""),
        EventKind::OpenFailed { .. }
        | EventKind::PreviewsChanged
        | EventKind::OpenProgress { .. }
        | EventKind::WalkEnd(_)
        | EventKind::WalkFinished(_)
        | EventKind::Diffed(_)
        | EventKind::DiffDetail(..)
        | EventKind::DiffFinished(_)
        | EventKind::Scanned(_)
        | EventKind::ScanFinished(_) => {
            return None;
        }
    };
    Some(mark)
}

/// Opens `path` with progress events; returns whether anybody still listens.
fn open_job(
    weights: &mut Option<Weights>,
    path: &std::path::Path,
    choice: &ViewChoice,
    send: &SendEvent<'_>,
) -> bool {
    // About 50 progress events per phase, whatever the shard count; the
    // header phase reports from several parsing threads at once.
    let last = std::sync::Mutex::new(None::<(bool, usize)>);
    let report = |step: OpenStep| {
        let (maps, done, total) = match step {
            OpenStep::Headers { parsed, total } => (false, parsed, total),
            OpenStep::Maps { opened, total } => (true, opened, total),
        };
        let bucket = done * 50 / total.max(1);
        let Ok(mut last) = last.lock() else { return };
        if last.is_some_and(|(m, b)| m == maps && b >= bucket) {
            return;
        }
        *last = Some((maps, bucket));
        send(
            EventKind::OpenProgress {
                path: path.to_path_buf(),
                step,
            },
            None,
            crate::mlx::sample_now(),
        );
    };
    let kind = open(weights, path.to_path_buf(), choice, &report);
    let mark = mark_of(&kind, weights.as_ref());
    send(kind, mark, crate::mlx::sample_now())
}

/// Opens `path` and installs the chosen view; a view that cannot be made
/// leaves the checkpoint open without one and says why.
fn open(
    weights: &mut Option<Weights>,
    path: PathBuf,
    choice: &ViewChoice,
    report: &(dyn Fn(OpenStep) + Sync),
) -> EventKind {
    // The open checkpoint stays until the new one has opened: a failed open
    // leaves what worked working.
    let mut opened = match Weights::open_reporting(&path, report) {
        Ok(opened) => opened,
        Err(err) => {
            return EventKind::OpenFailed {
                path,
                error: err.into(),
            };
        }
    };
    let (view, view_error) = match opened.install_choice(choice) {
        Ok(view) => (view, None),
        Err(err) => (None, Some(err.into())),
    };
    let checkpoint = opened.shared_checkpoint();
    // Nothing of it opened (a file that is not safetensors, a folder whose
    // every shard is broken): a failed open, as the CLI says it, and what
    // was open stays. A checkpoint with some shards broken opens, the
    // broken ones shown and counted by the check.
    if checkpoint.shards().is_empty()
        && let Some(&problem) = checkpoint.fatal_problems().first()
    {
        return EventKind::OpenFailed {
            path,
            error: WeightsError::from(problem.clone()).into(),
        };
    }
    let facts = Box::new(OpenedFacts::of(&checkpoint));
    let findings = check_headers(&checkpoint, &facts.summary);
    // The old one's arrays and maps go first, then the new one takes its place.
    *weights = None;
    *weights = Some(opened);
    EventKind::Opened {
        path,
        checkpoint,
        view,
        view_error,
        findings,
        facts,
    }
}

/// The previews' budget, and what each event says they hold.
struct Previews<'a> {
    budget: &'a mut PreviewBudget,
    held: &'a std::sync::Mutex<crate::weights::PreviewsHeld>,
}

impl Previews<'_> {
    /// Brings what events say the previews hold up to date.
    fn update(&self, weights: Option<&Weights>) {
        let now = match weights {
            Some(w) => self.budget.held(w),
            None => self.budget.held_nothing(),
        };
        if let Ok(mut held) = self.held.lock() {
            *held = now;
        }
    }
}

/// Shows `name`, keeps the previews within their budget, and sends each
/// preview let go (with its mark), then the one shown: every event says
/// what the previews hold after both.
fn materialize_within_budget(
    weights: &mut Option<Weights>,
    previews: &mut Previews<'_>,
    name: &str,
    options: &PreviewOptions,
    send: &SendEvent<'_>,
) -> bool {
    let kind = materialize(weights.as_mut(), name.to_owned(), options);
    if let (EventKind::Materialized(_), Some(w)) = (&kind, weights.as_mut()) {
        let forgotten = previews.budget.shown(w, name);
        previews.update(weights.as_ref());
        if !send_forgotten(weights.as_ref(), forgotten, send) {
            return false;
        }
    }
    let mark = mark_of(&kind, weights.as_ref());
    send(kind, mark, crate::mlx::sample_now())
}

/// Sends each preview let go (or why letting go failed).
fn send_forgotten(
    weights: Option<&Weights>,
    forgotten: Result<Vec<crate::weights::Forgotten>, WeightsError>,
    send: &SendEvent<'_>,
) -> bool {
    match forgotten {
        Ok(list) => list.into_iter().all(|f| {
            let kind = EventKind::Forgotten(f);
            let mark = mark_of(&kind, weights);
            send(kind, mark, crate::mlx::sample_now())
        }),
        Err(err) => send(
            failed(JobKind::Release, "preview budget", err),
            None,
            crate::mlx::sample_now(),
        ),
    }
}

/// Runs one command: a job streams its own events; any other command makes
/// one event, sent with its mark. Returns whether anybody still listens.
fn handle(
    command: Request,
    weights: &mut Option<Weights>,
    previews: &mut Previews<'_>,
    options: &PreviewOptions,
    send: &SendEvent<'_>,
) -> bool {
    let listening = match command {
        Request::Materialize(name) => {
            return materialize_within_budget(weights, previews, &name, options, send);
        }
        Request::SetPreviewBudget(_) | Request::PinPreview(..) => {
            match command {
                Request::SetPreviewBudget(bytes) => previews.budget.set_limit(bytes),
                Request::PinPreview(name, pinned) => previews.budget.pin(&name, pinned),
                _ => {}
            }
            let budget = &mut *previews.budget;
            let forgotten = weights
                .as_mut()
                .map_or(Ok(Vec::new()), |w| budget.enforce(w));
            previews.update(weights.as_ref());
            send_forgotten(weights.as_ref(), forgotten, send)
                && send(EventKind::PreviewsChanged, None, crate::mlx::sample_now())
        }
        Request::Open(_) | Request::OpenWithView(..) | Request::Close => {
            previews.budget.clear();
            previews.update(None);
            handle_plain(command, weights, options, send)
        }
        Request::ReleaseShard(_) | Request::ReleaseAll => {
            // The release may take previews with it: its event says so.
            let kind = match command {
                Request::ReleaseShard(shard) => release_shard(weights.as_mut(), shard),
                _ => release_all(weights.as_mut()),
            };
            previews.update(weights.as_ref());
            let mark = mark_of(&kind, weights.as_ref());
            return send(kind, mark, crate::mlx::sample_now());
        }
        command => handle_plain(command, weights, options, send),
    };
    // A walk or a scan releases what it read: the next event says what
    // the previews still hold.
    previews.update(weights.as_ref());
    listening
}

/// [`handle`] for the commands the budget has no part in.
fn handle_plain(
    command: Request,
    weights: &mut Option<Weights>,
    options: &PreviewOptions,
    send: &SendEvent<'_>,
) -> bool {
    let kind = match command {
        Request::ScanValues { cancel } => return scan_job(weights.as_mut(), cancel.flag(), send),
        Request::Walk {
            policy,
            transform,
            cancel,
        } => return walk_job(weights.as_mut(), policy, transform, cancel.flag(), send),
        Request::Diff {
            other,
            view,
            cancel,
        } => return diff_job(weights.as_mut(), &other, &view, cancel.flag(), send),
        Request::DiffTensor { other, view, name } => {
            diff_detail(weights.as_mut(), &other, &view, name, options)
        }
        Request::Open(path) => return open_job(weights, &path, &ViewChoice::Auto, send),
        Request::OpenWithView(path, choice) => return open_job(weights, &path, &choice, send),
        Request::Materialize(name) => materialize(weights.as_mut(), name, options),
        Request::SetPreviewBudget(_) | Request::PinPreview(..) => return true,
        Request::Release(name) => release(weights.as_mut(), name),
        Request::ReleaseShard(shard) => release_shard(weights.as_mut(), shard),
        Request::ReleaseAll => release_all(weights.as_mut()),
        Request::ClearCache => clear_cache(),
        Request::SetMemoryLimit(bytes) => match mlx::set_memory_limit(bytes) {
            Ok(previous) => EventKind::MemoryLimitSet { previous },
            Err(err) => failed(JobKind::Limit, "memory limit", err),
        },
        Request::SetCacheLimit(bytes) => match mlx::set_cache_limit(bytes) {
            Ok(_) => EventKind::CacheLimitSet { limit: bytes },
            Err(err) => failed(JobKind::Limit, "cache limit", err),
        },
        Request::Close => {
            *weights = None;
            EventKind::Closed
        }
    };
    let mark = mark_of(&kind, weights.as_ref());
    send(kind, mark, crate::mlx::sample_now())
}

/// The event of a command that failed, for `target`.
fn failed(job: JobKind, target: impl Into<String>, error: impl Into<JobError>) -> EventKind {
    EventKind::Failed {
        job,
        target: target.into(),
        error: error.into(),
    }
}

fn materialize(weights: Option<&mut Weights>, name: String, options: &PreviewOptions) -> EventKind {
    let Some(w) = weights else {
        return failed(JobKind::Materialize, name, JobError::NotOpen);
    };
    match w.preview(&name, options) {
        Ok(preview) => EventKind::Materialized(Box::new(preview)),
        Err(err) => failed(JobKind::Materialize, name, err),
    }
}

fn release(weights: Option<&mut Weights>, name: String) -> EventKind {
    let Some(w) = weights else {
        return failed(JobKind::Release, name, JobError::NotOpen);
    };
    w.release(&name);
    EventKind::Released(name)
}

fn release_shard(weights: Option<&mut Weights>, shard: ShardId) -> EventKind {
    let Some(w) = weights else {
        return failed(
            JobKind::Release,
            format!("shard {}", shard.index()),
            JobError::NotOpen,
        );
    };
    let Some(file) = w
        .checkpoint()
        .shards()
        .get(shard.index())
        .map(|s| s.file.clone())
    else {
        let error = JobError::NoShard(shard.index());
        return failed(JobKind::Release, format!("shard {}", shard.index()), error);
    };
    let freed_bytes = w.release_shard(shard);
    EventKind::ShardReleased { file, freed_bytes }
}

fn release_all(weights: Option<&mut Weights>) -> EventKind {
    let Some(w) = weights else {
        return failed(JobKind::Release, "", JobError::NotOpen);
    };
    w.release_all();
    EventKind::ReleasedAll
}

fn clear_cache() -> EventKind {
    match mlx::clear_cache() {
        Ok(()) => EventKind::CacheCleared {
            trimmed: mlx::trim_host_heap(),
        },
        Err(err) => failed(JobKind::ClearCache, "cache", err),
    }
}
