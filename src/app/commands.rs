//! The app's one command bus: panels, the top bar, the shell and tests say
//! what they want as an [`AppCommand`] pushed to a [`CommandSender`]; the
//! app runs the queue after each frame (`WeightscopeApp::run_commands`), in
//! one place that knows the worker, the recorder and the other panels.
//! Panels never name a worker command and never make a cancel token: the
//! app makes each job's token and hands it to the panel that shows the job.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use crate::checkpoint::ShardId;
use crate::memory::Policy;
use crate::profile::Transform;
use crate::profile::record::Target;
use crate::weights::ViewChoice;

use super::{Action, Tab};

/// Something the window should do.
#[derive(Debug, Clone)]
pub enum AppCommand {
    /// Open this checkpoint (with the chosen view); what was open closes.
    Open(PathBuf),
    /// Materialize this tensor and show it in the inspector.
    Materialize(String),
    /// Release this shard's map and arrays.
    ReleaseShard(ShardId),
    /// Release every shard.
    ReleaseAll,
    /// Free MLX's buffer cache (and trim the host heap).
    ClearCache,
    /// Set MLX's memory limit.
    SetMemoryLimit(u64),
    /// Set MLX's buffer-cache limit.
    SetCacheLimit(u64),
    /// Walk the open checkpoint under a release policy.
    Walk {
        /// What to release.
        policy: Policy,
        /// What to do to each tensor.
        transform: Transform,
    },
    /// Compare the open checkpoint with another.
    Diff {
        /// Checkpoint B.
        other: PathBuf,
        /// B's view.
        view: ViewChoice,
    },
    /// Open one tensor of the diff: A beside B, the error's heatmap and
    /// per-group error.
    DiffTensor {
        /// Checkpoint B.
        other: PathBuf,
        /// B's view.
        view: ViewChoice,
        /// The tensor.
        name: String,
    },
    /// Read every tensor's values (the Check tab).
    ScanValues,
    /// Record a job or a running process, against a checkpoint.
    Record(Target, Option<PathBuf>),
    /// Stop the recorded job (SIGINT, then SIGTERM, SIGKILL) or detach.
    StopRecording,
    /// Ask the recorded job's probe who holds MLX's memory now.
    AskWhoHolds,
    /// Sample memory at this interval.
    SetSampleInterval(Duration),
    /// Save the profiler's trace here (`replace`: over a file already
    /// there; else the profiler asks first).
    SaveTrace {
        /// Where.
        path: PathBuf,
        /// Whether the user agreed to replace an existing file.
        replace: bool,
    },
    /// Load the trace saved here and overlay it.
    LoadTrace(PathBuf),
    /// Ask the shell for a file dialog.
    Dialog(Action),
    /// Show this tab.
    ShowTab(Tab),
    /// Show the Tensors tab with this stored tensor selected and materialized.
    SelectStored(String),
}

/// Where commands are pushed. Cloning it is cheap; a command pushed after
/// the app is gone is dropped.
#[derive(Debug, Clone)]
pub struct CommandSender(Sender<AppCommand>);

impl CommandSender {
    /// Queues `command` for the app.
    pub fn send(&self, command: AppCommand) {
        let _ = self.0.send(command);
    }
}

/// A sender and the app's end of the queue.
pub(super) fn channel() -> (CommandSender, Receiver<AppCommand>) {
    let (tx, rx) = mpsc::channel();
    (CommandSender(tx), rx)
}
