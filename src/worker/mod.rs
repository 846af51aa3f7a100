//! The MLX worker: one named thread that owns every MLX array.
//!
//! MLX arrays are `Send` but not `Sync`, and evaluation can take seconds, so
//! the UI never touches them: it sends typed [`Request`]s and receives
//! [`Event`]s carrying summaries (never arrays). The worker wakes its listener
//! through a plain callback after each event, so this layer does not depend on
//! egui. It sits above `profile` because it also runs walks, streaming their
//! progress as events and stopping between tensors when asked.
//!
//! `protocol.rs` holds what crosses the thread (requests, events, request
//! errors); `handlers.rs` the thread's loop and each request's handler; this
//! file the handle that starts, feeds and stops it.

mod handlers;
mod protocol;

pub use protocol::{Event, EventKind, OpenedFacts, Request, RequestError, RequestKind};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

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
                handlers::run(
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

    /// Queues the long job `request` makes with a fresh cancel token, and
    /// returns the token for the panel that shows the job.
    ///
    /// # Errors
    /// As [`Self::try_send`].
    pub fn try_start(
        &self,
        request: impl FnOnce(CancelToken) -> Request,
    ) -> Result<CancelToken, SendError> {
        let cancel = CancelToken::new();
        self.try_send(request(cancel.clone()))?;
        Ok(cancel)
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
