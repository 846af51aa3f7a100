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
use crate::profile::capture::Target;
use crate::weights::ViewChoice;

use super::{Dialog, Tab};

/// Something the window should do.
#[derive(Debug, Clone)]
pub enum AppCommand {
    /// Open this checkpoint (with the chosen view); what was open closes.
    Open(PathBuf),
    /// Materialize this tensor and show it in the inspector (an explicit
    /// Enter or click: whatever its size).
    Materialize(String),
    /// Show this tensor because the selection moved onto it (arrows, Page
    /// Down, Home, End, a palette jump): materialized when it fits the
    /// preview budget and what MLX has left, else its size is said and
    /// Enter or a click materializes it. The bytes are its materialized
    /// size as the headers give it.
    Preview(String, u64),
    /// Release this shard's map and arrays.
    ReleaseShard(ShardId),
    /// Release every shard.
    ReleaseAll,
    /// Free MLX's buffer cache (and trim the host heap).
    ClearCache,
    /// Light, dark, or as the system's (`None`); saved in the settings.
    SetTheme(Option<egui::Theme>),
    /// Set MLX's memory limit.
    SetMemoryLimit(u64),
    /// Set MLX's buffer-cache limit.
    SetCacheLimit(u64),
    /// Keep the previews within this many bytes (saved in the settings).
    SetPreviewBudget(u64),
    /// Pin a tensor's preview (kept whatever the budget), or unpin it.
    PinPreview(String, bool),
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
    /// Show the Profiler with the "Record a command" form open, the
    /// keyboard in its command line (`attach`: the "Attach to process" form).
    OpenRecordForm {
        /// The attach form rather than the command form.
        attach: bool,
    },
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
    /// Write what "Save trace" would save (or the merged journals shown)
    /// in a viewer's format (`weightscope export`'s code) here, on a
    /// thread; an existing file is kept unless `replace`.
    ExportTrace {
        /// Where.
        path: PathBuf,
        /// Perfetto, speedscope or folded stacks.
        format: crate::profile::export::Format,
        /// Whether a file dialog's answer may replace a file there.
        replace: bool,
    },
    /// Load the trace saved here and overlay it.
    LoadTrace(PathBuf),
    /// Read the journals of one job's hosts and show them merged, the rank
    /// whose memory peaked highest shown whole.
    LoadTraces(Vec<PathBuf>),
    /// Merge these journals again with the one at `lane` shown whole (its
    /// findings, lines, held-by).
    ShowMergedLane {
        /// The journals, as merged before.
        paths: Vec<PathBuf>,
        /// Which of them.
        lane: usize,
    },
    /// Ask the shell for a file dialog.
    Dialog(Dialog),
    /// Show this tab.
    ShowTab(Tab),
    /// Focus the checkpoint path field with this text typed (Ctrl+O, the
    /// top bar's "Open Hub repo…").
    FocusPath(String),
    /// Walk the open checkpoint with the profiler's own policy and
    /// transform (Ctrl+Shift+W); said in the notice line when there is no
    /// checkpoint or a walk runs.
    StartWalk,
    /// Show the Diff tab with its B field focused (Ctrl+Shift+D).
    FocusDiff,
    /// Show the Check tab and read every value, unless they are being read
    /// (Ctrl+Shift+R).
    CheckValues,
    /// Show the keyboard shortcuts (F1).
    ShowShortcuts,
    /// Show the Tensors tab with the tensor at this position selected and
    /// materialized (the palette).
    SelectTensor(usize),
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
