//! The MLX worker: one named thread that owns every MLX array.
//!
//! MLX arrays are `Send` but not `Sync`, and evaluation can take seconds, so
//! the UI never touches them: it sends typed [`Command`]s and receives
//! [`Event`]s carrying summaries (never arrays). The worker wakes its listener
//! through a plain callback after each event, so this layer does not depend on
//! egui.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::mlx::{self, MemoryStats};

use super::{PreviewOptions, TensorPreview, Weights};

/// What the worker is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Open the checkpoint at this path (headers, then lazy MLX maps), closing any open one.
    Open(PathBuf),
    /// Materialize this tensor and send its preview.
    Materialize(String),
    /// Drop this tensor's cached array (frees nothing while its shard is open).
    Release(String),
    /// Drop this shard's native map and every cached array from it.
    ReleaseShard(String),
    /// Drop every cached array and every shard map (the checkpoint stays open).
    ReleaseAll,
    /// Return MLX's cached buffers to the system allocator.
    ClearCache,
    /// Set MLX's memory limit, in bytes.
    SetMemoryLimit(u64),
    /// Close the checkpoint, releasing everything.
    Close,
}

/// What happened, with MLX's memory right after it.
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// MLX's counters after it.
    pub memory: MemoryStats,
    /// When it finished.
    pub at: Instant,
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
    },
    /// Opening failed; nothing is open.
    OpenFailed {
        /// What was asked for.
        path: PathBuf,
        /// One line naming the file and the problem.
        error: String,
    },
    /// A tensor was materialized.
    Materialized(Box<TensorPreview>),
    /// A command about one tensor or shard failed; the worker goes on.
    Failed {
        /// The tensor or shard.
        target: String,
        /// Why.
        error: String,
    },
    /// A cached tensor was dropped.
    Released(String),
    /// A shard's map and arrays were dropped.
    ShardReleased(String),
    /// Every array and map was dropped.
    ReleasedAll,
    /// MLX's cache was cleared.
    CacheCleared,
    /// MLX's memory limit changed.
    MemoryLimitSet {
        /// The limit before.
        previous: u64,
    },
    /// The checkpoint was closed.
    Closed,
}

/// The worker thread is gone (it only stops when its handle is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the MLX worker has stopped")]
pub struct WorkerGone;

/// Handle to the MLX worker thread. Dropping it stops the thread after the
/// commands already sent.
pub struct Worker {
    commands: Option<SyncSender<Command>>,
    events: Receiver<Event>,
    thread: Option<JoinHandle<()>>,
}

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
        let (command_tx, command_rx) = mpsc::sync_channel::<Command>(COMMAND_QUEUE);
        let (event_tx, event_rx) = mpsc::sync_channel::<Event>(EVENT_QUEUE);
        let thread = std::thread::Builder::new()
            .name("mlx-worker".into())
            .spawn(move || run(&command_rx, &event_tx, &wake))?;
        Ok(Self {
            commands: Some(command_tx),
            events: event_rx,
            thread: Some(thread),
        })
    }

    /// Queues a command.
    ///
    /// # Errors
    /// [`WorkerGone`] when the thread has stopped.
    pub fn send(&self, command: Command) -> Result<(), WorkerGone> {
        self.commands
            .as_ref()
            .ok_or(WorkerGone)?
            .send(command)
            .map_err(|_| WorkerGone)
    }

    /// The next event, if one is waiting.
    #[must_use]
    pub fn try_recv(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// Waits for the next event (for the CLI and tests; a UI uses [`Worker::try_recv`]).
    ///
    /// # Errors
    /// [`WorkerGone`] when the thread has stopped.
    pub fn recv(&self) -> Result<Event, WorkerGone> {
        self.events.recv().map_err(|_| WorkerGone)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the command channel ends the loop after the queued commands;
        // draining events keeps the worker from blocking on a full queue.
        self.commands = None;
        while self.events.recv().is_ok() {}
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(commands: &Receiver<Command>, events: &SyncSender<Event>, wake: &(dyn Fn() + Send + Sync)) {
    let mut weights: Option<Weights> = None;
    let options = PreviewOptions::default();
    for command in commands {
        let kind = handle(command, &mut weights, &options);
        let event = Event {
            kind,
            memory: mlx::memory().unwrap_or_default(),
            at: Instant::now(),
        };
        if events.send(event).is_err() {
            break; // nobody listens any more
        }
        wake();
    }
    // Arrays and maps are freed here, on the thread that made them.
    drop(weights);
}

fn handle(command: Command, weights: &mut Option<Weights>, options: &PreviewOptions) -> EventKind {
    let not_open = |target: String| EventKind::Failed {
        target,
        error: "no checkpoint is open".into(),
    };
    match command {
        Command::Open(path) => {
            *weights = None;
            match Weights::open(&path) {
                Ok(opened) => {
                    let checkpoint = opened.shared_checkpoint();
                    *weights = Some(opened);
                    EventKind::Opened { path, checkpoint }
                }
                Err(err) => EventKind::OpenFailed {
                    path,
                    error: err.to_string(),
                },
            }
        }
        Command::Materialize(name) => match weights.as_mut() {
            None => not_open(name),
            Some(w) => match w.preview(&name, options) {
                Ok(preview) => EventKind::Materialized(Box::new(preview)),
                Err(err) => EventKind::Failed {
                    target: name,
                    error: err.to_string(),
                },
            },
        },
        Command::Release(name) => match weights.as_mut() {
            None => not_open(name),
            Some(w) => {
                w.release(&name);
                EventKind::Released(name)
            }
        },
        Command::ReleaseShard(file) => match weights.as_mut() {
            None => not_open(file),
            Some(w) => {
                if w.release_shard(&file) {
                    EventKind::ShardReleased(file)
                } else {
                    EventKind::Failed {
                        error: format!("no shard named `{file}`"),
                        target: file,
                    }
                }
            }
        },
        Command::ReleaseAll => match weights.as_mut() {
            None => not_open(String::new()),
            Some(w) => {
                w.release_all();
                EventKind::ReleasedAll
            }
        },
        Command::ClearCache => match mlx::clear_cache() {
            Ok(()) => EventKind::CacheCleared,
            Err(err) => EventKind::Failed {
                target: "cache".into(),
                error: err.to_string(),
            },
        },
        Command::SetMemoryLimit(bytes) => match mlx::set_memory_limit(bytes) {
            Ok(previous) => EventKind::MemoryLimitSet { previous },
            Err(err) => EventKind::Failed {
                target: "memory limit".into(),
                error: err.to_string(),
            },
        },
        Command::Close => {
            *weights = None;
            EventKind::Closed
        }
    }
}
