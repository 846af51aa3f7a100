//! The app's state (`WeightscopeApp`): the panels, the worker, the
//! recorder, and each frame: events drained, commands run, panels drawn.

mod events;
mod frame;
mod run;

use super::{commands, palette, settings};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::mlx::{DeviceInfo, MemoryStats};
use crate::profile::capture::RecordControl;
use crate::profile::{DEFAULT_INTERVAL, Sampler, Timeline};
use crate::weights::{OpenStep, ViewChoice};
use crate::worker::{Request, Worker};

use super::background::RecorderEvent;
use super::check::CheckPanel;
use super::commands::{AppCommand, CommandSender};
use super::diff::DiffPanel;
use super::inspector::InspectorPanel;
use super::memory_strip::MemoryStrip;
use super::profiler::ProfilerPanel;
use super::shards::ShardsPanel;
use super::status_bar::StatusBar;
use super::tensors::TensorsPanel;

/// A file dialog the UI asks its shell for (the UI itself never opens
/// dialogs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialog {
    /// Show a folder picker; the shell calls [`WeightscopeApp::picked`].
    PickFolder,
    /// Show a `.safetensors` file picker.
    PickFile,
    /// Ask where to save the trace; the shell calls [`WeightscopeApp::save_trace`].
    SaveTrace,
    /// Ask for a saved trace; the shell calls [`WeightscopeApp::load_trace`].
    OpenTrace,
    /// Ask for checkpoint B of a diff; the shell calls [`WeightscopeApp::picked_for`].
    PickDiffFolder,
    /// Ask where to export the trace in this format.
    ExportTrace(crate::profile::export::Format),
}

/// The central area's tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// The tensors table (Ctrl+1).
    Tensors,
    /// The memory profiler (Ctrl+2).
    Profiler,
    /// The diff of two checkpoints (Ctrl+3).
    Diff,
    /// What `weightscope check` finds (Ctrl+4).
    Check,
}

/// The recorder thread of a recording in progress.
pub(super) struct RecorderHandle {
    pub(super) control: RecordControl,
    pub(super) events: std::sync::mpsc::Receiver<RecorderEvent>,
}

/// Below this height of the window's middle, the memory strip is not
/// drawn under the Tensors, Diff and Check tabs.
pub(super) const STRIP_FROM_HEIGHT: f32 = 480.0;

/// The memory sampler samples every 50 ms; the window is woken by its
/// samples at most this often (the strip's live line), so an idle window
/// costs two frames a second, not twenty. Jobs and clicks wake it
/// themselves.
pub(super) const SAMPLE_WAKE: std::time::Duration = std::time::Duration::from_millis(500);

/// The window's wakes by samples, the memory sampler's and a recorded
/// job's, on one clock: each source wakes it only when no wake of either
/// came within its own interval, so that a live recording redraws a few
/// times a second in all (software OpenGL draws a frame in ~0.1 s of CPU,
/// which the recorded job would pay for).
#[derive(Clone)]
pub(super) struct SampleWakes {
    pub(super) wake: Arc<dyn Fn() + Send + Sync>,
    pub(super) last: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

impl SampleWakes {
    pub(super) fn new(wake: Arc<dyn Fn() + Send + Sync>) -> Self {
        Self {
            wake,
            last: Arc::default(),
        }
    }

    /// Wakes the window unless a sample woke it within `every`.
    pub(super) fn wake_at_most(&self, every: std::time::Duration) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.is_none_or(|t| t.elapsed() >= every) {
            *last = Some(std::time::Instant::now());
            (self.wake)();
        }
    }
}

/// Everything the window shows, independent of eframe. It owns the worker,
/// the sampler and the timeline, routes worker events to the panels, and
/// runs the actions the panels return; no panel reads another's fields.
pub struct WeightscopeApp {
    pub(super) worker: Worker,
    pub(super) device: Result<DeviceInfo, crate::mlx::MlxError>,
    /// The path being opened, until the worker answers.
    pub(super) opening: Option<PathBuf>,
    /// How far that open has come.
    pub(super) open_step: Option<OpenStep>,
    /// Why the last open failed.
    pub(super) open_error: Option<String>,
    /// The F1 window of keyboard shortcuts is open.
    pub(super) show_shortcuts: bool,
    /// The command palette (Ctrl+K).
    pub(super) palette: palette::Palette,
    /// Focus the path field in the next frame with this text in it (the
    /// palette's Open: empty, what is there is selected; Open a Hub repo:
    /// `hf://`, the cursor after it).
    pub(super) focus_path: Option<String>,
    pub(super) checkpoint: Option<Arc<Checkpoint>>,
    /// The path field (also the fallback when no file dialog can open).
    pub(super) path_input: String,
    pub(super) memory: MemoryStats,
    /// Memory over time; `None` when the sampler could not start.
    pub(super) sampler: Option<Sampler>,
    /// Samples and events since the app started, on one clock.
    pub(super) timeline: Timeline,
    /// Wakes the UI (a repaint request) from other threads.
    pub(super) wake: Arc<dyn Fn() + Send + Sync>,
    /// Wakes by samples (the memory sampler's, a recorded job's), capped.
    pub(super) sample_wakes: SampleWakes,
    /// The recording in progress, if any.
    pub(super) recorder: Option<RecorderHandle>,
    pub(super) tensors: TensorsPanel,
    pub(super) inspector: InspectorPanel,
    pub(super) shards: ShardsPanel,
    pub(super) profiler: ProfilerPanel,
    pub(super) diff: DiffPanel,
    pub(super) check: CheckPanel,
    pub(super) strip: MemoryStrip,
    pub(super) status: StatusBar,
    pub(super) tab: Tab,
    /// Recent checkpoints and other saved settings.
    pub(super) settings: settings::Settings,
    /// Set when `settings` changed and the shell should save them.
    pub(super) settings_dirty: bool,
    /// Whether the saved zoom and theme were put on the context.
    pub(super) look_applied: bool,
    /// File dialogs for the shell to show.
    pub(super) dialogs: Vec<Dialog>,
    /// A one-line notice (for example, that no file dialog could open).
    pub(super) notice: Option<String>,
    /// The view to open checkpoints with.
    pub(super) view_choice: ViewChoice,
    /// The view file field (when the choice is a file).
    pub(super) view_file_input: String,
    /// What is open now (reopened when the view changes).
    pub(super) opened_path: Option<PathBuf>,
    /// What the previews hold, by the worker's last word.
    pub(super) previews: crate::weights::PreviewsHeld,
    /// Where panels push commands, and the app's end of that queue.
    pub(super) commands: CommandSender,
    pub(super) queue: std::sync::mpsc::Receiver<AppCommand>,
}

impl WeightscopeApp {
    /// A new app with its MLX worker; `wake` is called after each worker
    /// event (the shell passes a repaint request). Opens `path` if given.
    ///
    /// # Errors
    /// When the worker thread cannot start.
    pub fn new(
        path: Option<PathBuf>,
        device: Result<DeviceInfo, crate::mlx::MlxError>,
        wake: impl Fn() + Clone + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let worker = Worker::spawn(wake.clone())?;
        let sample_wakes = SampleWakes::new(Arc::new(wake.clone()));
        let sampler = {
            let wakes = sample_wakes.clone();
            Sampler::spawn(DEFAULT_INTERVAL, move || wakes.wake_at_most(SAMPLE_WAKE)).ok()
        };
        let (commands, queue) = commands::channel();
        let mut app = Self {
            worker,
            device,
            opening: None,
            open_step: None,
            open_error: None,
            show_shortcuts: false,
            palette: palette::Palette::default(),
            focus_path: None,
            checkpoint: None,
            path_input: String::new(),
            memory: MemoryStats::default(),
            sampler,
            timeline: Timeline::new(Instant::now()),
            wake: Arc::new(wake),
            sample_wakes,
            recorder: None,
            tensors: TensorsPanel::default(),
            inspector: InspectorPanel::default(),
            shards: ShardsPanel::default(),
            profiler: ProfilerPanel::default(),
            diff: DiffPanel::default(),
            check: CheckPanel::default(),
            strip: MemoryStrip::default(),
            status: StatusBar::default(),
            tab: Tab::Tensors,
            settings: settings::Settings::default(),
            settings_dirty: false,
            look_applied: false,
            dialogs: Vec::new(),
            notice: None,
            view_choice: ViewChoice::Auto,
            view_file_input: String::new(),
            opened_path: None,
            previews: crate::weights::PreviewsHeld::default(),
            commands,
            queue,
        };
        if let Some(path) = path {
            app.execute(AppCommand::Open(path));
        }
        Ok(app)
    }

    /// Where to push commands from outside a frame (the shell, scripts).
    #[must_use]
    pub fn commands(&self) -> CommandSender {
        self.commands.clone()
    }

    /// Runs `command` now, with whatever it queues in turn.
    pub fn execute(&mut self, command: AppCommand) {
        self.commands.send(command);
        self.run_commands();
    }

    /// Chooses the view and reopens the open checkpoint with it (a view is
    /// installed before anything is materialized, so it takes a reopen).
    pub fn set_view_choice(&mut self, choice: ViewChoice) {
        self.view_choice = choice;
        if let Some(path) = self.opened_path.clone() {
            self.open(path);
        }
    }

    /// Starts from saved `settings` (recent checkpoints, the previews'
    /// budget).
    pub fn set_settings(&mut self, settings: settings::Settings) {
        if let Some(bytes) = settings.preview_budget {
            self.send(Request::SetPreviewBudget(bytes));
        }
        self.settings = settings;
        self.look_applied = false;
    }

    /// The settings, when they changed since the last call (for the shell to save).
    pub fn take_changed_settings(&mut self) -> Option<&settings::Settings> {
        std::mem::take(&mut self.settings_dirty).then_some(&self.settings)
    }

    /// The file dialogs asked for since the last call, oldest first.
    pub fn take_dialogs(&mut self) -> Vec<Dialog> {
        std::mem::take(&mut self.dialogs)
    }

    /// What the file dialog of `action` returned: opens, saves or loads
    /// it, or explains an empty answer. (A dialog asked before replacing a
    /// file: the trace is saved over one.)
    pub fn picked_for(&mut self, action: Dialog, mut paths: Vec<PathBuf>) {
        if action == Dialog::OpenTrace && !paths.is_empty() {
            self.execute(AppCommand::LoadTraces(paths));
            return;
        }
        let path = (!paths.is_empty()).then(|| paths.swap_remove(0));
        match (action, path) {
            (Dialog::SaveTrace, Some(path)) => {
                self.execute(AppCommand::SaveTrace {
                    path,
                    replace: true,
                });
            }
            (Dialog::OpenTrace, Some(path)) => self.execute(AppCommand::LoadTrace(path)),
            (Dialog::ExportTrace(format), Some(path)) => self.execute(AppCommand::ExportTrace {
                path,
                format,
                replace: true,
            }),
            (Dialog::SaveTrace | Dialog::OpenTrace | Dialog::ExportTrace(_), None) => {
                self.profiler.nothing_chosen();
            }
            (Dialog::PickDiffFolder, Some(path)) => self.diff.set_other(&path),
            (Dialog::PickDiffFolder, None) => self.diff.nothing_chosen(),
            (Dialog::PickFolder | Dialog::PickFile, path) => self.picked(path),
        }
    }

    /// What a checkpoint dialog returned: opens it, or explains an empty answer.
    pub fn picked(&mut self, path: Option<PathBuf>) {
        match path {
            Some(path) => self.execute(AppCommand::Open(path)),
            None => {
                self.notice = Some(
                    "Nothing was chosen. If no dialog appeared, this desktop has no file-dialog service \
                     (portal or zenity): type the path above or drop a folder on the window."
                        .into(),
                );
            }
        }
    }

    /// Whether an open is in progress on the worker.
    #[must_use]
    pub fn is_opening(&self) -> bool {
        self.opening.is_some()
    }

    /// The open checkpoint's metadata.
    #[must_use]
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        self.checkpoint.as_deref()
    }

    /// Cancels the worker's running job (walk, diff, value scan) and skips
    /// queued ones: the window is closing.
    pub fn stop_jobs(&self) {
        self.worker.stop_jobs();
        // A recorded job is asked to stop (SIGINT) rather than left running
        // without anyone watching; an attached process is only let go.
        if let Some(recorder) = &self.recorder {
            let _ = recorder.control.stop();
        }
    }
}
