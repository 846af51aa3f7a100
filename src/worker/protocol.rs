//! What crosses the worker thread: the requests it takes, the events it
//! sends back, and how a job failed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::{CancelToken, SendError};
use crate::checkpoint::Checkpoint;
use crate::checkpoint::ShardId;
use crate::finding::Finding;
use crate::memory::{ExpectedPeaks, Mark, Policy, Sample};
use crate::mlx::{self, MemoryStats};
use crate::profile::{Recorded, Transform, WalkOutcome, WalkPlan};
use crate::weights::{
    DiffReport, OpenStep, Progress, TensorPreview, ValueScan, ViewChoice, ViewInfo, WeightsError,
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
pub enum RequestError {
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

impl From<WeightsError> for RequestError {
    fn from(err: WeightsError) -> Self {
        Self::Weights(Arc::new(err))
    }
}

impl From<mlx::MlxError> for RequestError {
    fn from(err: mlx::MlxError) -> Self {
        Self::Mlx(Arc::new(err))
    }
}

/// Which kind of command a failure is about (the app routes on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
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
        view_error: Option<RequestError>,
        /// What `weightscope check` finds in its headers, config and folder.
        findings: Vec<Finding>,
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
        error: RequestError,
    },
    /// A tensor was materialized.
    Materialized(Box<TensorPreview>),
    /// A command about one tensor or shard failed; the worker goes on.
    Failed {
        /// The command that failed.
        job: RequestKind,
        /// The tensor or shard (or the setting).
        target: String,
        /// Why.
        error: RequestError,
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
    DiffFinished(Result<Box<DiffReport>, RequestError>),
    /// One tensor of a diff, opened (or why it could not be).
    DiffDetail(
        String,
        Result<Box<crate::weights::PairDetail>, RequestError>,
    ),
    /// A value scan read one more tensor.
    Scanned(Progress),
    /// A value scan ended (finished or cancelled), or could not start.
    ScanFinished(Result<Box<ValueScan>, RequestError>),
    /// The checkpoint was closed.
    Closed,
}
