//! The app's state (`WeightscopeApp`): the panels, the worker, the
//! recorder, and each frame: events drained, commands run, panels drawn.

use super::{background, commands, palette, settings, widgets};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::Checkpoint;
use crate::mlx::{DeviceInfo, MemoryStats};
use crate::profile::capture::{RecordControl, RecordError, RecordOptions, Target};
use crate::profile::{DEFAULT_INTERVAL, Sampler, Timeline};
use crate::weights::{BUILTIN_VIEWS, OpenStep, ViewChoice, ViewInfo};
use crate::worker::{Event, EventKind, OpenedFacts, Request, Worker};

use super::check::CheckPanel;
use super::commands::{AppCommand, CommandSender};
use super::diff::DiffPanel;
use super::inspector::InspectorPanel;
use super::memory_strip::MemoryStrip;
use super::profiler::{ProfilerInputs, ProfilerPanel};
use super::shards::ShardsPanel;
use super::status_bar::{StatusBar, StatusInputs};
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

use super::background::RecorderEvent;

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

    /// Runs every queued command, oldest first (after each frame).
    /// The Profiler with the record form (`attach`: the attach form) open.
    pub(super) fn open_record_form(&mut self, attach: bool) {
        self.tab = Tab::Profiler;
        self.profiler.open_record_form(attach);
    }

    pub(super) fn run_commands(&mut self) {
        while let Ok(command) = self.queue.try_recv() {
            self.run(command);
        }
    }

    /// The one place commands are carried out: worker commands, jobs with
    /// the cancel token the app makes for them, dialogs, tabs.
    pub(super) fn run(&mut self, command: AppCommand) {
        match command {
            AppCommand::Open(path) => self.open(path),
            AppCommand::Materialize(name) => self.materialize(&name),
            AppCommand::Preview(name, bytes) => self.preview(&name, bytes),
            AppCommand::SetTheme(theme) => self.set_theme(theme),
            AppCommand::ReleaseShard(shard) => self.send(Request::ReleaseShard(shard)),
            AppCommand::ReleaseAll => self.send(Request::ReleaseAll),
            AppCommand::ClearCache => self.send(Request::ClearCache),
            AppCommand::SetMemoryLimit(bytes) => self.send(Request::SetMemoryLimit(bytes)),
            AppCommand::SetCacheLimit(bytes) => self.send(Request::SetCacheLimit(bytes)),
            AppCommand::SetPreviewBudget(bytes) => self.set_preview_budget(bytes),
            AppCommand::PinPreview(name, pinned) => self.send(Request::PinPreview(name, pinned)),
            AppCommand::Walk { policy, transform } => {
                let started = self.worker.try_start(|cancel| Request::Walk {
                    policy,
                    transform,
                    cancel,
                });
                match started {
                    Ok(cancel) => self.with_profiler(|profiler, inputs| {
                        profiler.walk_started((policy, transform), cancel, inputs);
                    }),
                    Err(err) => self.profiler.walk_failed(&err.to_string()),
                }
            }
            AppCommand::Diff { other, view } => {
                match self.worker.try_start(|cancel| Request::Diff {
                    other,
                    view,
                    cancel,
                }) {
                    Ok(cancel) => self.diff.started(cancel),
                    Err(err) => self.diff.finished(Err(err.into())),
                }
            }
            AppCommand::DiffTensor { other, view, name } => {
                let command = Request::DiffTensor {
                    other,
                    view,
                    name: name.clone(),
                };
                // Pending first: a command the worker cannot take is then
                // said in the detail, not dropped as an answer to nothing.
                self.diff.detail_pending(&name);
                if let Err(err) = self.worker.try_send(command) {
                    self.diff.detail_arrived(&name, Err(err.into()));
                }
            }
            AppCommand::ScanValues => {
                match self
                    .worker
                    .try_start(|cancel| Request::ScanValues { cancel })
                {
                    Ok(cancel) => self.check.scan_started(cancel),
                    Err(err) => self.check.finished(Err(err.into())),
                }
            }
            AppCommand::Record(target, checkpoint) => self.start_recording(target, checkpoint),
            AppCommand::StopRecording => {
                if let Some(recorder) = &self.recorder {
                    let _ = recorder.control.stop();
                }
            }
            AppCommand::AskWhoHolds => {
                if let Some(recorder) = &self.recorder {
                    recorder.control.ask_for_walk();
                }
            }
            AppCommand::SetSampleInterval(interval) => {
                if let Some(sampler) = &self.sampler {
                    sampler.set_interval(interval);
                }
            }
            AppCommand::SaveTrace { path, replace } => {
                self.with_profiler(|profiler, inputs| profiler.save_trace(&path, inputs, replace));
            }
            AppCommand::LoadTrace(path) => self.load_traces(vec![path]),
            AppCommand::LoadTraces(paths) => self.load_traces(paths),
            AppCommand::Dialog(dialog) => self.dialogs.push(dialog),
            AppCommand::FocusPath(typed) => self.focus_path = Some(typed),
            AppCommand::StartWalk => self.walk_from_keys(),
            AppCommand::FocusDiff => {
                if self.needs_checkpoint() {
                    self.tab = Tab::Diff;
                    self.diff.focus_other();
                }
            }
            AppCommand::CheckValues => self.check_values(),
            AppCommand::ShowShortcuts => self.show_shortcuts = true,
            AppCommand::OpenRecordForm { attach } => self.open_record_form(attach),
            AppCommand::SelectTensor(position) => self.select_tensor(position),
            AppCommand::ShowTab(tab) => self.tab = tab,
            AppCommand::SelectStored(stored) => self.select_stored(&stored),
        }
    }

    /// Asks the worker to open `path` (the current checkpoint closes).
    pub(super) fn open(&mut self, path: PathBuf) {
        self.path_input = path.display().to_string();
        self.open_error = None;
        self.notice = None;
        let command = Request::OpenWithView(path.clone(), self.view_choice.clone());
        match self.worker.try_send(command) {
            Ok(()) => {
                self.opening = Some(path);
                self.open_step = None;
            }
            Err(err) => self.open_error = Some(err.to_string()),
        }
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

    /// Loads one trace (overlaid, or a recording shown as a run) or merges
    /// several journals of one job, on a thread of its own.
    pub(super) fn load_traces(&mut self, mut paths: Vec<PathBuf>) {
        if paths.len() == 1 {
            let path = paths.swap_remove(0);
            let loading = background::load_trace(path.clone(), Arc::clone(&self.wake));
            self.profiler.load_trace(&path, loading);
        } else {
            let loading = background::load_traces(paths.clone(), Arc::clone(&self.wake));
            self.profiler.load_traces(&paths, loading);
        }
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
            (Dialog::SaveTrace | Dialog::OpenTrace, None) => self.profiler.nothing_chosen(),
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

    /// Applies every waiting worker event, spending at most `budget`.
    pub fn drain_events(&mut self, budget: Duration) {
        let start = Instant::now();
        while let Some(sample) = self.sampler.as_ref().and_then(Sampler::try_recv) {
            self.timeline.push_sample(&sample);
            // The status bar's MLX figures move with the sampler too: during
            // a long materialization the worker sends nothing until it ends.
            if let Some(mlx) = sample.mlx {
                self.memory.active_bytes = mlx.active_bytes;
                self.memory.cache_bytes = mlx.cache_bytes;
                self.memory.peak_bytes = self.memory.peak_bytes.max(mlx.peak_bytes);
            }
        }
        while start.elapsed() < budget {
            let Some(event) = self.worker.try_recv() else {
                break;
            };
            self.apply(event);
        }
        while start.elapsed() < budget {
            let Some(event) = self
                .recorder
                .as_ref()
                .and_then(|r| r.events.try_recv().ok())
            else {
                break;
            };
            self.apply_recorder(event);
        }
    }

    pub(super) fn apply(&mut self, event: Event) {
        self.memory = event.memory;
        self.previews = event.previews;
        if let Some(mark) = &event.mark {
            self.timeline.push_event(mark, &event.sample);
            // One source for residency: the worker's bookkeeping, carried in
            // each mark (a second click on a tensor adds nothing).
            if let Some((file, bytes)) = &mark.resident {
                self.shards.resident(file, *bytes);
            }
        }
        match event.kind {
            EventKind::Opened {
                path,
                checkpoint,
                view,
                view_error,
                findings,
                facts,
            } => {
                self.check.opened(findings);
                let view_error = view_error.map(|e| e.to_string());
                self.apply_opened(&path, checkpoint, view, view_error, &facts);
            }
            EventKind::OpenProgress { path, step } => {
                if self.opening.as_ref() == Some(&path) {
                    self.open_step = Some(step);
                }
            }
            EventKind::OpenFailed { error, .. } => {
                self.opening = None;
                self.open_error = Some(error.to_string());
                // The field shows what is open, not the path that failed
                // (the error names that one).
                if self.checkpoint.is_some()
                    && let Some(open) = &self.opened_path
                {
                    self.path_input = open.display().to_string();
                }
            }
            EventKind::Materialized(preview) => self.inspector.materialized(preview),
            EventKind::Failed { job, target, error } => {
                if job == crate::worker::RequestKind::Walk {
                    self.profiler.walk_failed(&error.to_string());
                }
                self.inspector.worker_failed(&target, &error.to_string());
            }
            EventKind::ShardReleased { file, .. } => self.shards.resident(&file, 0),
            EventKind::ReleasedAll => self.shards.released_all(),
            EventKind::Closed => {
                self.checkpoint = None;
                self.shards = ShardsPanel::default();
                self.inspector.clear();
            }
            EventKind::WalkEnd(recorded) => {
                self.profiler.apply_walk_progress(&recorded, &self.timeline);
            }
            EventKind::WalkFinished(outcome) => {
                self.with_profiler(|profiler, inputs| {
                    profiler.apply_walk_finished(*outcome, inputs);
                });
            }
            EventKind::Diffed(progress) => self.diff.progress(progress),
            EventKind::DiffFinished(result) => self.diff.finished(result),
            EventKind::DiffDetail(name, result) => self.diff.detail_arrived(&name, result),
            EventKind::Scanned(progress) => self.check.progress(progress),
            EventKind::ScanFinished(result) => self.check.finished(result),
            EventKind::Released(_)
            | EventKind::Forgotten(_)
            | EventKind::PreviewsChanged
            | EventKind::CacheCleared { .. }
            | EventKind::MemoryLimitSet { .. }
            | EventKind::CacheLimitSet { .. } => {}
        }
    }

    pub(super) fn apply_opened(
        &mut self,
        path: &Path,
        checkpoint: Arc<Checkpoint>,
        view: Option<Arc<ViewInfo>>,
        view_error: Option<String>,
        facts: &OpenedFacts,
    ) {
        if let Some(error) = view_error {
            self.notice = Some(format!("view not installed: {error}"));
        }
        self.opening = None;
        self.opened_path = Some(path.to_path_buf());
        self.settings.remember(path);
        self.settings_dirty = true;
        self.path_input = path.display().to_string();
        // Panels whose state belongs to one checkpoint start afresh.
        self.shards = ShardsPanel::opened(&checkpoint);
        self.tensors = TensorsPanel::opened(&checkpoint, &facts.summary, view);
        self.status = StatusBar::opened(&facts.summary);
        self.inspector.clear();
        self.profiler
            .checkpoint_opened(facts.expected.clone(), facts.largest_shard_bytes);
        self.checkpoint = Some(checkpoint);
    }

    /// Keeps the previews within `bytes` from now on, and in the settings.
    pub(super) fn set_preview_budget(&mut self, bytes: u64) {
        self.settings.preview_budget = Some(bytes);
        self.settings_dirty = true;
        self.send(Request::SetPreviewBudget(bytes));
    }

    /// The most a preview the selection merely moved onto may take: the
    /// preview budget, and what MLX's memory limit leaves.
    pub(super) fn preview_limit_bytes(&self) -> u64 {
        let budget = match self.previews.limit_bytes {
            0 => crate::weights::DEFAULT_PREVIEW_BUDGET,
            limit => limit,
        };
        let left = match self.memory.limit_bytes {
            0 => u64::MAX,
            limit => limit.saturating_sub(self.memory.active_bytes),
        };
        budget.min(left)
    }

    /// [`AppCommand::Preview`]: materializes `name` when its `bytes` fit
    /// [`Self::preview_limit_bytes`]; else the inspector says its size and
    /// waits for Enter or a click (moving through a table never starts
    /// gigabytes of work).
    pub(super) fn preview(&mut self, name: &str, bytes: u64) {
        let limit = self.preview_limit_bytes();
        if bytes <= limit {
            self.materialize(name);
        } else {
            self.inspector.held_back(name, bytes, limit);
        }
    }

    /// Materializes `name` on the worker; the inspector shows it when ready.
    pub(super) fn materialize(&mut self, name: &str) {
        match self.worker.try_send(Request::Materialize(name.to_owned())) {
            Ok(()) => self.inspector.pending(name),
            Err(err) => self.inspector.failed(name, err.to_string()),
        }
    }

    /// Queues `command` without ever blocking the frame; a full queue or a
    /// stopped worker is said in the error line.
    pub(super) fn send(&mut self, command: Request) {
        if let Err(err) = self.worker.try_send(command) {
            self.open_error = Some(err.to_string());
        }
    }

    /// [`AppCommand::SetTheme`]: saved, and put on the window next frame.
    pub(super) fn set_theme(&mut self, theme: Option<egui::Theme>) {
        self.settings.theme = theme.map(|t| match t {
            egui::Theme::Light => "light".to_owned(),
            egui::Theme::Dark => "dark".to_owned(),
        });
        self.settings_dirty = true;
        self.look_applied = false;
    }

    /// The saved zoom and theme, put on the context once (and again after
    /// a change); a zoom the user makes (Ctrl+plus, Ctrl+minus, Ctrl+0)
    /// is saved.
    pub(super) fn apply_look(&mut self, ctx: &egui::Context) {
        if !self.look_applied {
            self.look_applied = true;
            if let Some(percent) = self
                .settings
                .zoom_percent
                .filter(|p| (50..=300).contains(p))
            {
                #[allow(clippy::cast_precision_loss)]
                ctx.set_zoom_factor(percent as f32 / 100.0);
            }
            let preference = match self.settings.theme.as_deref() {
                Some("light") => egui::ThemePreference::Light,
                Some("dark") => egui::ThemePreference::Dark,
                _ => egui::ThemePreference::System,
            };
            ctx.options_mut(|o| o.theme_preference = preference);
            return;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let percent = (ctx.zoom_factor() * 100.0).round() as u32;
        let saved = self.settings.zoom_percent.unwrap_or(100);
        if percent != saved {
            self.settings.zoom_percent = (percent != 100).then_some(percent);
            self.settings_dirty = true;
        }
    }

    /// Draws the whole window into `ui`.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        self.apply_look(&ctx);
        self.shortcuts_ui(&ctx);
        self.global_keys(&ctx);
        let chosen = self.palette.ui(
            &ctx,
            self.checkpoint.as_deref(),
            &self.settings.recent,
            &|i| match self.checkpoint.as_deref() {
                Some(checkpoint) => self.tensors.facts(checkpoint, i),
                None => crate::checkpoint::query::TensorFacts::default(),
            },
        );
        if let Some(command) = chosen.and_then(|entry| entry.command()) {
            self.commands.send(command);
        }
        egui::Panel::top("top").show(ui, |ui| self.top_bar_ui(ui));
        egui::Panel::bottom("status").show(ui, |ui| {
            let inputs = StatusInputs {
                device: &self.device,
                memory: &self.memory,
                checkpoint: self.checkpoint.as_deref(),
                check_counts: self.check.counts(),
                opening: self.opening.as_deref(),
                previews: &self.previews,
            };
            self.status.ui(ui, &inputs, &self.commands);
        });
        // Side panels and the strip take a share of the window, so the
        // centre keeps room for its tabs from 800x500 up, also after the
        // window shrinks (a panel widened in a large window is narrowed
        // back: at most 25 % and 35 % of the width).
        let (width, height) = (ui.available_width(), ui.available_height());
        let gpu = self
            .device
            .as_ref()
            .is_ok_and(|d| d.kind == crate::mlx::DeviceKind::Gpu);
        // The Profiler tab plots the same series larger: no strip there,
        // its room goes to the plot.
        // Nor in a short window (800x500): the table's rows come first, and
        // the status bar keeps MLX's figures live.
        if self.tab != Tab::Profiler && height >= STRIP_FROM_HEIGHT {
            egui::Panel::bottom("memory")
                .resizable(true)
                // A fifth of the window (at 1400x900, room for three
                // labelled marks on its memory axis), up to 180 points.
                .default_size(180.0_f32.min(height * 0.2))
                .size_range(60.0..=(height * 0.25).max(60.0))
                .show(ui, |ui| {
                    let budget = (self.previews.kept > 0).then_some(self.previews.limit_bytes);
                    self.strip.ui(ui, &self.timeline, gpu, budget);
                });
        }
        if let Some(checkpoint) = self.checkpoint.clone() {
            egui::Panel::left("shards")
                .default_size(320.0_f32.min(width * 0.2))
                .size_range(120.0..=(width * 0.25).max(120.0))
                .show(ui, |ui| self.shards.ui(ui, &checkpoint, &self.commands));
            if self.tab == Tab::Tensors {
                egui::Panel::right("inspector")
                    .default_size(420.0_f32.min(width * 0.3))
                    .size_range(180.0..=(width * 0.35).max(180.0))
                    .show(ui, |ui| {
                        self.inspector.ui(ui, &self.previews.pinned, &self.commands);
                    });
            }
        }
        egui::CentralPanel::default().show(ui, |ui| {
            self.tab_bar_ui(ui);
            ui.separator();
            match self.tab {
                Tab::Tensors => self.tensors_tab_ui(ui),
                Tab::Profiler => self.profiler_tab_ui(ui),
                Tab::Diff => self.diff_tab_ui(ui),
                Tab::Check => self.check_tab_ui(ui),
            }
        });
        self.run_commands();
    }

    /// F1: the keyboard shortcuts, in a window that F1 or Esc closes.
    pub(super) fn shortcuts_ui(&mut self, ctx: &egui::Context) {
        // '?' typed outside a text field opens the list too.
        let question = ctx.memory(|m| m.focused().is_none())
            && ctx.input(|i| {
                i.events
                    .iter()
                    .any(|e| matches!(e, egui::Event::Text(t) if t == "?"))
            });
        if ctx.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::F1)) || question {
            self.show_shortcuts = !self.show_shortcuts;
        }
        if !self.show_shortcuts {
            return;
        }
        if ctx.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Escape)) {
            self.show_shortcuts = false;
            return;
        }
        egui::Window::new("Keyboard shortcuts")
            .open(&mut self.show_shortcuts)
            .collapsible(false)
            .resizable(false)
            .show(ctx, |ui| {
                egui::Grid::new("shortcuts").striped(true).show(ui, |ui| {
                    for (keys, what) in super::keymap::shortcut_list() {
                        ui.monospace(keys);
                        ui.label(what);
                        ui.end_row();
                    }
                });
            });
    }

    /// Keys that work on every tab: Ctrl+K (or Ctrl+Shift+P) opens the
    /// palette; the global keys of `keymap` send their commands.
    pub(super) fn global_keys(&mut self, ctx: &egui::Context) {
        use egui::{Key, Modifiers};
        // Keys typed in Ctrl+K's own frame are the palette's first letters.
        let palette = widgets::shortcut_with_typing(ctx, Key::K);
        let other_palette =
            ctx.input_mut(|i| i.consume_key(Modifiers::COMMAND | Modifiers::SHIFT, Key::P));
        if let Some(typed) = palette.or_else(|| other_palette.then(String::new)) {
            self.palette.toggle(&typed);
        }
        for command in super::keymap::global_keys(ctx) {
            self.commands.send(command);
        }
    }

    /// What the palette's keys, the palette and the top bar ask that needs
    /// an open checkpoint; without one, says so in the notice line.
    pub(super) fn needs_checkpoint(&mut self) -> bool {
        if self.checkpoint.is_none() {
            self.notice = Some("Open a checkpoint first (Ctrl+O).".to_owned());
            return false;
        }
        true
    }

    /// [`AppCommand::StartWalk`].
    pub(super) fn walk_from_keys(&mut self) {
        if !self.needs_checkpoint() {
            return;
        }
        self.tab = Tab::Profiler;
        if self.profiler.running().is_some() {
            self.notice = Some("A walk is already running (Profiler tab).".to_owned());
        } else {
            self.with_profiler(|profiler, inputs| profiler.start_walk(inputs));
        }
    }

    /// [`AppCommand::CheckValues`].
    pub(super) fn check_values(&mut self) {
        if !self.needs_checkpoint() {
            return;
        }
        self.tab = Tab::Check;
        if self.check.is_scanning() {
            self.notice = Some("The values are already being read (Check tab).".to_owned());
        } else {
            self.run(AppCommand::ScanValues);
        }
    }

    /// [`AppCommand::SelectStored`]: the tensor stored as `stored`, as
    /// [`Self::select_tensor`] selects it.
    pub(super) fn select_stored(&mut self, stored: &str) {
        self.tab = Tab::Tensors;
        let position = self
            .checkpoint
            .as_ref()
            .and_then(|c| c.tensors().iter().position(|t| t.name() == stored));
        if let Some(position) = position {
            self.select_tensor(position);
        }
    }

    /// [`AppCommand::SelectTensor`].
    pub(super) fn select_tensor(&mut self, position: usize) {
        self.tab = Tab::Tensors;
        if let Some(checkpoint) = self.checkpoint.clone()
            && let Some(name) = self.tensors.select(&checkpoint, position)
        {
            let bytes = self.tensors.materialized_bytes(&checkpoint, position);
            self.preview(&name, bytes);
        }
    }

    pub(super) fn tab_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.tab, Tab::Tensors, "Tensors")
                .on_hover_text("Ctrl+1");
            ui.selectable_value(&mut self.tab, Tab::Profiler, "Profiler")
                .on_hover_text("Ctrl+2: walks, findings, limits, traces");
            ui.selectable_value(&mut self.tab, Tab::Diff, "Diff")
                .on_hover_text("Ctrl+3: compare with another checkpoint");
            ui.selectable_value(&mut self.tab, Tab::Check, "Check")
                .on_hover_text("Ctrl+4: what is wrong with this checkpoint");
            if ui
                .small_button("?")
                .on_hover_text("Keyboard shortcuts (F1)")
                .clicked()
            {
                self.show_shortcuts = true;
            }
            if self.tab != Tab::Profiler
                && let Some(brief) = self.profiler.recording_brief()
            {
                ui.colored_label(egui::Color32::from_rgb(235, 60, 60), "REC");
                ui.label(brief)
                    .on_hover_text("Ctrl+2: the live graph and Stop");
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_millis(250));
            }
            if let Some(walk) = self.profiler.running() {
                ui.spinner();
                ui.label(format!(
                    "walking {}: {} of {}",
                    walk.policy.as_str(),
                    walk.done,
                    walk.total
                ));
            }
        });
    }

    pub(super) fn tensors_tab_ui(&mut self, ui: &mut egui::Ui) {
        let Some(checkpoint) = self.checkpoint.clone() else {
            let text = match (&self.opening, &self.open_error) {
                (Some(path), _) => format!(
                    "Opening {}… (progress beside the path field)",
                    crate::units::Shown::new(&path.display().to_string())
                ),
                (None, Some(error)) => format!(
                    "Nothing is open: {}\nType another folder or .safetensors path above and press Enter.",
                    crate::units::Shown::new(error)
                ),
                (None, None) => {
                    "Open a checkpoint: type a folder or .safetensors path above and press Enter."
                        .to_owned()
                }
            };
            ui.centered_and_justified(|ui| {
                ui.label(text);
            });
            return;
        };
        self.tensors.ui(ui, &checkpoint, &self.commands);
    }

    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn profiler_inputs(&self) -> ProfilerInputs<'_> {
        ProfilerInputs {
            timeline: &self.timeline,
            checkpoint: self.checkpoint.as_deref(),
            memory: &self.memory,
            sampler: self.sampler.as_ref(),
            device: &self.device,
            commands: &self.commands,
        }
    }

    /// Runs `f` on the profiler panel with what it reads from the app
    /// (disjoint fields: the panel is borrowed mutably, the rest shared).
    pub(super) fn with_profiler<R>(
        &mut self,
        f: impl FnOnce(&mut ProfilerPanel, &ProfilerInputs<'_>) -> R,
    ) -> R {
        let inputs = ProfilerInputs {
            timeline: &self.timeline,
            checkpoint: self.checkpoint.as_deref(),
            memory: &self.memory,
            sampler: self.sampler.as_ref(),
            device: &self.device,
            commands: &self.commands,
        };
        f(&mut self.profiler, &inputs)
    }

    pub(super) fn profiler_tab_ui(&mut self, ui: &mut egui::Ui) {
        self.with_profiler(|profiler, inputs| profiler.ui(ui, inputs));
    }

    pub(super) fn diff_tab_ui(&mut self, ui: &mut egui::Ui) {
        let a = self.checkpoint.as_ref().map(|c| c.root().to_path_buf());
        self.diff.ui(ui, a.as_deref(), &self.commands);
    }

    pub(super) fn check_tab_ui(&mut self, ui: &mut egui::Ui) {
        if self.checkpoint.is_none() {
            ui.label("Open a checkpoint to check it.");
            return;
        }
        self.check.ui(ui, &self.commands);
    }

    /// Starts recording `target` on the `recorder` thread, measured against
    /// `checkpoint` (else the folder of the first shard the job opens); the
    /// profiler tab draws it live and shows its findings when it ends.
    pub(super) fn start_recording(&mut self, target: Target, checkpoint: Option<PathBuf>) {
        if self.recorder.is_some() {
            return;
        }
        let command = match &target {
            Target::Spawn(spec) => spec
                .argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            Target::Attach(pid) => format!("pid {pid}"),
        };
        let control = RecordControl::new();
        let options = RecordOptions {
            checkpoint,
            ..RecordOptions::default()
        };
        let spawned = background::record(
            target,
            options,
            control.clone(),
            Arc::clone(&self.wake),
            self.sample_wakes.clone(),
        );
        match spawned {
            Ok(events) => {
                let start_secs = self.timeline.secs(Instant::now());
                self.profiler.recording_started(command, start_secs);
                self.recorder = Some(RecorderHandle { control, events });
            }
            Err(err) => {
                self.profiler.recording_started(command, 0.0);
                self.profiler
                    .recording_finished(Err(RecordError::Thread(err)));
            }
        }
    }

    pub(super) fn apply_recorder(&mut self, event: RecorderEvent) {
        match event {
            RecorderEvent::Update(update) => self.profiler.recording_update(update),
            RecorderEvent::Finished(result) => {
                self.recorder = None;
                self.profiler.recording_finished(result);
            }
        }
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

    pub(super) fn top_bar_ui(&mut self, ui: &mut egui::Ui) {
        // A folder or file dropped on the window opens like a typed path.
        let dropped = ui.input(|i| i.raw.dropped_files.first().map(|f| f.path().to_path_buf()));
        if let Some(path) = dropped {
            self.commands.send(AppCommand::Open(path));
        }
        // Wraps on a narrow window: every control stays on screen.
        ui.horizontal_wrapped(|ui| {
            ui.strong("weightscope");
            ui.separator();
            if ui
                .button("Open checkpoint…")
                .on_hover_text("Choose a model folder")
                .clicked()
            {
                self.commands.send(AppCommand::Dialog(Dialog::PickFolder));
            }
            if ui
                .button("Open file…")
                .on_hover_text("Choose one .safetensors file")
                .clicked()
            {
                self.commands.send(AppCommand::Dialog(Dialog::PickFile));
            }
            if ui
                .button("Open Hub repo…")
                .on_hover_text(
                    "Read a Hugging Face repo's headers without downloading it: \
                     hf://ORG/REPO[@REVISION][/FOLDER] in the path field",
                )
                .clicked()
            {
                self.commands.send(AppCommand::FocusPath("hf://".into()));
            }
            let mut chosen = None;
            ui.add_enabled_ui(!self.settings.recent.is_empty(), |ui| {
                ui.menu_button("Recent", |ui| {
                    for path in &self.settings.recent {
                        if ui.button(path.display().to_string()).clicked() {
                            chosen = Some(path.clone());
                        }
                    }
                });
            });
            if let Some(path) = chosen {
                self.commands.send(AppCommand::Open(path));
            }
            ui.separator();
            let field = ui.add(
                egui::TextEdit::singleline(&mut self.path_input)
                    .hint_text("folder, .safetensors file, or hf://ORG/REPO")
                    .desired_width(480.0_f32.min(ui.available_width() - 120.0).max(120.0)),
            );
            let field = field.labelled_by(ui.label("Checkpoint path").id);
            let typed = widgets::shortcut_with_typing(ui.ctx(), egui::Key::O)
                .or_else(|| self.focus_path.take());
            if let Some(typed) = typed {
                widgets::focus_selecting_all(ui, &field, &mut self.path_input, &typed);
            }
            // The Enter that opens is consumed here: the tensors table must not
            // also take it as "materialize the selected row".
            let entered = field.lost_focus()
                && ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Enter));
            if ui.button("Open").clicked() || entered {
                let path = PathBuf::from(self.path_input.trim());
                self.commands.send(AppCommand::Open(path));
            }
            if let Some(path) = &self.opening {
                ui.spinner();
                let (what, done, total) = match self.open_step {
                    Some(OpenStep::Headers { parsed, total }) => ("headers", parsed, total),
                    Some(OpenStep::Maps { opened, total }) => ("MLX maps", opened, total),
                    None => ("", 0, 0),
                };
                if total > 0 {
                    #[allow(clippy::cast_precision_loss)]
                    let fraction = done as f32 / total as f32;
                    ui.add(
                        egui::ProgressBar::new(fraction)
                            .desired_width(120.0)
                            .text(format!("{what} {done}/{total}")),
                    );
                }
                ui.label(format!("opening {}", path.display()));
            }
        });
        self.view_bar_ui(ui);
        // Said here while what was open stays shown (the centre says it
        // when nothing is open): one line, never one per place.
        if let Some(error) = &self.open_error
            && self.checkpoint.is_some()
        {
            ui.colored_label(
                ui.visuals().error_fg_color,
                format!(
                    "open failed: {} (the checkpoint shown is still the one that was open)",
                    crate::units::Shown::new(error)
                ),
            );
        }
        if let Some(notice) = &self.notice {
            ui.colored_label(ui.visuals().warn_fg_color, crate::units::Shown::new(notice));
        }
    }

    pub(super) fn view_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("View");
            let current = match &self.view_choice {
                ViewChoice::Auto => "auto".to_owned(),
                ViewChoice::Identity => "identity".to_owned(),
                ViewChoice::Builtin(name) => name.clone(),
                ViewChoice::File(_) => "file".to_owned(),
            };
            let mut chosen = None;
            egui::ComboBox::from_id_salt("view-choice")
                .selected_text(&current)
                .show_ui(ui, |ui| {
                    let mut options = vec![
                        ("auto", ViewChoice::Auto),
                        ("identity", ViewChoice::Identity),
                    ];
                    for name in BUILTIN_VIEWS {
                        options.push((name, ViewChoice::Builtin(name.to_owned())));
                    }
                    for (text, choice) in options {
                        if ui.selectable_label(current == text, text).clicked() {
                            chosen = Some(choice);
                        }
                    }
                    if ui.selectable_label(current == "file", "file").clicked() {
                        chosen = Some(ViewChoice::File(PathBuf::from(self.view_file_input.trim())));
                    }
                })
                .response
                .labelled_by(label.id)
                .on_hover_text(
                    "How stored names map to the names a model graph asks for; changing it reopens the checkpoint",
                );
            let file_label = ui.label("View file");
            let field = ui.add(
                egui::TextEdit::singleline(&mut self.view_file_input)
                    .hint_text("view.json (rename, drop, fixup rules)")
                    .desired_width(260.0),
            );
            field.labelled_by(file_label.id);
            if ui.button("Use view file").clicked() {
                chosen = Some(ViewChoice::File(PathBuf::from(self.view_file_input.trim())));
            }
            if let Some(choice) = chosen {
                self.set_view_choice(choice);
            }
            match &self.tensors.view {
                Some(view) => ui.label(format!("installed: {}", view.name)),
                None => ui.label("installed: none (stored names)"),
            };
        });
    }
}
