//! The profiler tab: run a walk under a policy, watch memory against what the
//! headers predict, read the findings, see which shards and tensors were
//! resident at any moment, set MLX's limits, and save, open and overlay traces.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use egui_plot::{HLine, Legend, Line, Plot, PlotPoints, VLine};

use crate::checkpoint::Checkpoint;
use crate::mlx::{DeviceInfo, MemoryStats};
use crate::profile::record::{Recording, Target, Update};
use crate::profile::{
    self, ExpectedPeaks, Finding, MachineMemory, MarkKind, Policy, Sampler, Timeline, Trace,
    TraceEvent, TraceSample, Transform, WalkOutcome,
};
use crate::units::human_bytes;
use crate::worker::{CancelToken, Command};

use super::Action;
use super::record::{FormKind, LiveRecording, RecordForm};

const MIB: f64 = 1024.0 * 1024.0;

/// Below this height (points) the timeline's legend goes above the plot.
const COMPACT_PLOT_HEIGHT: f32 = 400.0;

/// The x margin of both plots (a fraction of the span), the same so that
/// their times line up.
const X_MARGIN: f32 = 0.02;

/// The y axes' width in both plots (room for `700000` MiB), the same so that
/// their plot areas start at one x.
const Y_AXIS_WIDTH: f32 = 48.0;

/// The timeline's plot, before its height: linked in time with the
/// residency plot and over `x_span`, its legend inside unless `compact`.
fn timeline_plot(compact: bool, x_span: Option<(f64, f64)>) -> Plot<'static> {
    let plot = Plot::new("profiler-timeline")
        .link_axis(egui::Id::unique("profiler-time"), [true, false])
        .y_axis_min_width(Y_AXIS_WIDTH);
    let plot = match x_span {
        Some((from, to)) => plot.include_x(from).include_x(to),
        None => plot,
    };
    if compact {
        plot.set_margin_fraction(egui::vec2(X_MARGIN, 0.05))
    } else {
        // Room above the curves for the legend, which is see-through.
        // Top left: walks and jobs start low and peak later, to the right.
        plot.legend(
            Legend::default()
                .position(egui_plot::Corner::LeftTop)
                .background_alpha(0.6),
        )
        .set_margin_fraction(egui::vec2(X_MARGIN, 0.35))
    }
}

/// The first and last time of `samples` (in time order).
fn time_span<'a>(
    mut samples: impl DoubleEndedIterator<Item = &'a TraceSample>,
) -> Option<(f64, f64)> {
    let first = samples.next()?.t_secs;
    let last = samples.next_back().map_or(first, |s| s.t_secs);
    Some((first, last))
}

/// The span covering both (either may be missing).
fn span_of(a: Option<(f64, f64)>, b: Option<(f64, f64)>) -> Option<(f64, f64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    }
}

/// The timeline's legend as a row above it (see `COMPACT_PLOT_HEIGHT`).
fn timeline_legend_row(ui: &mut egui::Ui, mlx_active: &str, expected: bool) {
    use super::series_colors as c;
    let mut items = vec![
        ("process RSS (host)", c::RSS),
        ("RSS anonymous", c::RSS_ANON),
        (mlx_active, c::MLX_ACTIVE),
        ("MLX cache", c::MLX_CACHE),
    ];
    if expected {
        for (p, color) in Policy::ALL.into_iter().zip(c::EXPECTED) {
            items.push((expected_label(p), color));
        }
    }
    super::legend_row(ui, &items);
}

/// The legend name of a policy's expected peak.
fn expected_label(policy: Policy) -> &'static str {
    match policy {
        Policy::Retain => "expected retain",
        Policy::ReleaseTensor => "expected release-tensor",
        Policy::ReleaseShard => "expected release-shard",
    }
}
/// Shards with their own band in the residency plot; the rest share one.
const BANDS: usize = 24;
/// Points drawn per line at most (min/max per bucket keeps the peaks).
const PLOT_POINTS: usize = 1500;

/// A walk in progress, as the UI knows it.
#[derive(Debug, Clone)]
pub(super) struct RunningWalk {
    pub policy: Policy,
    pub transform: Transform,
    pub done: usize,
    pub total: usize,
    pub started: Instant,
    /// When it started, on the timeline's clock.
    pub start_secs: f64,
}

/// What a finished run was.
#[derive(Debug, Clone)]
pub(super) enum Run {
    /// A walk of the open checkpoint.
    Walk(WalkOutcome),
    /// A recorded job.
    Record(Box<Recording>),
}

/// The last finished walk or recording, kept for study.
#[derive(Debug, Clone)]
pub(super) struct FinishedRun {
    pub run: Run,
    /// Its trace, on its own clock (from walk or job start).
    pub trace: Trace,
    /// Where it sits on the session timeline.
    pub start_secs: f64,
    pub findings: Vec<Finding>,
}

/// What the profiler reads that other parts own.
pub(super) struct ProfilerInputs<'a> {
    /// The session's samples and events.
    pub timeline: &'a Timeline,
    /// The open checkpoint.
    pub checkpoint: Option<&'a Checkpoint>,
    /// MLX's figures from the worker's last event.
    pub memory: &'a MemoryStats,
    /// The memory sampler, when it runs.
    pub sampler: Option<&'a Sampler>,
    /// The MLX device, or why MLX could not start.
    pub device: &'a Result<DeviceInfo, String>,
}

impl ProfilerInputs<'_> {
    fn device_name(&self) -> String {
        self.device
            .as_ref()
            .map(DeviceInfo::name)
            .unwrap_or_default()
    }
}

/// What the profiler asks the app to do (run at the end of the frame).
#[must_use]
#[derive(Debug)]
pub(super) enum ProfilerAction {
    /// Queue this command on the MLX worker (walks, limits).
    Send(Command),
    /// Show a file dialog.
    Dialog(Action),
    /// Sample memory at this interval.
    SetSampleInterval(Duration),
    /// Save the trace to this path.
    SaveTo(PathBuf),
    /// Overlay the trace saved at this path.
    OverlayFrom(PathBuf),
    /// Start recording this job or process (against this checkpoint).
    Record(Target, Option<PathBuf>),
    /// Stop the recorded job (SIGINT, then SIGTERM, SIGKILL) or detach.
    StopRecording,
}

/// The profiler tab: its controls, the running and last walks, overlays
/// and the selected moment. Samples and events are the app's timeline,
/// passed in each frame; the caches derived from them are keyed by the
/// event count they were computed from.
pub(super) struct ProfilerPanel {
    policy: Policy,
    transform: Transform,
    running: Option<RunningWalk>,
    last: Option<FinishedRun>,
    /// The record and attach forms.
    record_form: RecordForm,
    /// The recording in progress.
    recording: Option<LiveRecording>,
    /// Loaded traces drawn over the last walk.
    overlays: Vec<Trace>,
    /// A trace being loaded on its own thread (a long recording's trace is
    /// hundreds of MB: never parsed in a frame).
    loading: Option<TraceLoad>,
    /// The selected moment, on the session clock.
    selected_secs: Option<f64>,
    /// Session timeline, or the last walk with overlays (both at walk time).
    walk_view: bool,
    memory_limit_input: String,
    cache_limit_input: String,
    /// The running walk's cancel token.
    cancel: Option<CancelToken>,
    budget_input: String,
    trace_path_input: String,
    interval_ms: u64,
    /// Headers' predictions for the open checkpoint, per transform.
    expected: Vec<(Transform, ExpectedPeaks)>,
    largest_shard_bytes: u64,
    machine: MachineMemory,
    message: Option<String>,
    /// Residency steps, recomputed only when what they come from changes
    /// (key: session events, shown events, what is shown, run number).
    residency: Option<((usize, usize, u8, u64), Residency)>,
    /// Finished runs so far (part of the residency cache's key).
    runs: u64,
    /// What was resident at the selected moment (key: event count, moment,
    /// whether a recording's events, run number).
    resident: Option<(ResidentKey, Vec<profile::ResidentShard>)>,
    /// Actions asked for during this frame.
    actions: Vec<ProfilerAction>,
}

/// A trace file read and parsed on a `trace-load` thread.
struct TraceLoad {
    path: PathBuf,
    result: std::sync::mpsc::Receiver<Result<Trace, String>>,
}

/// What the resident list was computed from: event count, moment (bits),
/// whether a recording's events, run number.
type ResidentKey = (usize, u64, bool, u64);

/// Shards and their resident bytes at each change.
use profile::Residency;

impl Default for ProfilerPanel {
    fn default() -> Self {
        Self {
            policy: Policy::ReleaseShard,
            transform: Transform::None,
            running: None,
            cancel: None,
            last: None,
            record_form: RecordForm::default(),
            recording: None,
            overlays: Vec::new(),
            loading: None,
            selected_secs: None,
            walk_view: false,
            memory_limit_input: String::new(),
            cache_limit_input: String::new(),
            budget_input: String::new(),
            trace_path_input: String::new(),
            interval_ms: 50,
            expected: Vec::new(),
            largest_shard_bytes: 0,
            machine: MachineMemory::default(),
            message: None,
            residency: None,
            runs: 0,
            resident: None,
            actions: Vec::new(),
        }
    }
}

impl ProfilerPanel {
    /// Predictions for a newly opened checkpoint.
    pub fn checkpoint_opened(
        &mut self,
        expected: Vec<(Transform, ExpectedPeaks)>,
        largest_shard_bytes: u64,
    ) {
        self.expected = expected;
        self.largest_shard_bytes = largest_shard_bytes;
        self.machine = MachineMemory::read();
        self.running = None;
    }

    fn expected_now(&self) -> Option<ExpectedPeaks> {
        self.expected
            .iter()
            .find(|(t, _)| *t == self.transform)
            .map(|(_, e)| *e)
    }
}

/// Min/max per bucket of `(t, value)` points, so that peaks survive.
fn decimate(points: impl ExactSizeIterator<Item = [f64; 2]>) -> Vec<[f64; 2]> {
    let n = points.len();
    if n <= PLOT_POINTS {
        return points.collect();
    }
    let per_bucket = n.div_ceil(PLOT_POINTS / 2);
    let mut out = Vec::with_capacity(PLOT_POINTS + 2);
    let mut bucket: Vec<[f64; 2]> = Vec::with_capacity(per_bucket);
    let flush = |bucket: &mut Vec<[f64; 2]>, out: &mut Vec<[f64; 2]>| {
        let lo = bucket.iter().copied().min_by(|a, b| a[1].total_cmp(&b[1]));
        let hi = bucket.iter().copied().max_by(|a, b| a[1].total_cmp(&b[1]));
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if lo[0] <= hi[0] {
                out.extend([lo, hi]);
            } else {
                out.extend([hi, lo]);
            }
        }
        bucket.clear();
    };
    for point in points {
        bucket.push(point);
        if bucket.len() == per_bucket {
            flush(&mut bucket, &mut out);
        }
    }
    flush(&mut bucket, &mut out);
    out
}

/// A line of one sample field, in MiB, decimated.
pub(super) fn sample_line<'a>(
    samples: impl ExactSizeIterator<Item = &'a TraceSample>,
    field: fn(&TraceSample) -> u64,
) -> PlotPoints<'static> {
    PlotPoints::from(decimate(samples.map(|s| [s.t_secs, field(s) as f64 / MIB])))
}

/// The times of the newest `limit` events worth a marker (walk steps and
/// tensor releases are too many; the table lists them), newest first.
pub(super) fn marker_times<'a>(
    events: impl DoubleEndedIterator<Item = &'a TraceEvent>,
    limit: usize,
) -> impl Iterator<Item = f64> {
    events
        .rev()
        .filter(|e| !matches!(e.kind, MarkKind::WalkStep | MarkKind::Release))
        .map(|e| e.t_secs)
        .take(limit)
}

/// Saved traces over the walk view: MLX active dashed, RSS dotted.
fn draw_overlays(plot: &mut egui_plot::PlotUi<'_>, overlays: &[Trace]) {
    // Each overlay keeps its colour, by its position in the list.
    let palette = super::series_colors::OVERLAYS;
    for (i, trace) in overlays.iter().enumerate() {
        let color = palette[i % palette.len()];
        plot.line(
            Line::new(
                format!("{}: MLX active", trace.label),
                sample_line(trace.samples.iter(), |s| s.mlx_active_bytes),
            )
            .color(color)
            .style(egui_plot::LineStyle::dashed_loose()),
        );
        plot.line(
            Line::new(
                format!("{}: RSS", trace.label),
                sample_line(trace.samples.iter(), |s| s.rss_bytes),
            )
            .color(color)
            .style(egui_plot::LineStyle::dotted_loose()),
        );
    }
}

impl ProfilerPanel {
    /// A walk step from the worker (a walk started elsewhere, by a test
    /// or a script, is picked up here too).
    pub(super) fn apply_walk_progress(
        &mut self,
        recorded: &profile::Recorded,
        timeline: &Timeline,
    ) {
        let start_secs = timeline.secs(recorded.memory.at);
        let walk = self.running.get_or_insert_with(|| RunningWalk {
            policy: self.policy,
            transform: self.transform,
            done: 0,
            total: recorded.progress.1,
            started: Instant::now(),
            start_secs,
        });
        if recorded.mark.kind == MarkKind::WalkStart {
            walk.start_secs = start_secs;
            walk.started = Instant::now();
        }
        (walk.done, walk.total) = recorded.progress;
    }

    /// The walk ended: its part of the timeline becomes the last walk's
    /// trace, with findings.
    pub(super) fn apply_walk_finished(
        &mut self,
        outcome: WalkOutcome,
        inputs: &ProfilerInputs<'_>,
    ) {
        let start_secs = self.running.take().map_or(0.0, |w| w.start_secs);
        let end_secs = inputs
            .timeline
            .last_sample()
            .map_or(start_secs, |s| s.t_secs);
        let label = format!(
            "{} {} (walk at {start_secs:.1} s)",
            outcome.policy.as_str(),
            outcome.transform.as_str()
        );
        let mut trace = inputs.timeline.slice(start_secs, end_secs, label);
        trace.checkpoint = inputs
            .checkpoint
            .map(|c| c.root().display().to_string())
            .unwrap_or_default();
        trace.device = inputs.device_name();
        trace.policy = Some(outcome.policy);
        trace.transform = Some(outcome.transform.as_str().into());
        trace.expected = Some(outcome.expected);
        let findings = profile::findings(&trace);
        self.runs += 1;
        self.last = Some(FinishedRun {
            run: Run::Walk(outcome),
            trace,
            start_secs,
            findings,
        });
        // The walk is what the user came to study: show it at walk time.
        self.walk_view = true;
    }

    /// A recording of `command` began at `start_secs` (session clock).
    pub(super) fn recording_started(&mut self, command: String, start_secs: f64) {
        self.recording = Some(LiveRecording::new(command, start_secs));
        self.message = None;
    }

    /// What the recorder sent.
    pub(super) fn recording_update(&mut self, update: Update) {
        if let Some(live) = &mut self.recording {
            live.apply(update);
        }
    }

    /// The recording ended: it becomes the last run, with its findings.
    pub(super) fn recording_finished(&mut self, result: Result<Box<Recording>, String>) {
        let Some(live) = self.recording.take() else {
            return;
        };
        match result {
            Ok(recording) => {
                let mut trace = recording.to_trace();
                trace.label = format!("record {} (at {:.1} s)", live.command, live.start_secs);
                self.message = Some(format!(
                    "recorded `{}`: {}",
                    crate::units::printable(&recording.command),
                    recording.exit.map_or_else(
                        || "detached".to_owned(),
                        crate::profile::record::JobExit::describe
                    )
                ));
                self.runs += 1;
                self.last = Some(FinishedRun {
                    findings: recording.findings.clone(),
                    run: Run::Record(recording),
                    trace,
                    start_secs: live.start_secs,
                });
                self.walk_view = true;
            }
            Err(error) => self.message = Some(format!("record: {error}")),
        }
    }

    /// The recording in progress, in a few words (the tab bar shows it on
    /// other tabs).
    pub(super) fn recording_brief(&self) -> Option<String> {
        self.recording.as_ref().map(|live| {
            format!(
                "recording `{}`: {:.0} s",
                crate::units::printable(&live.command),
                live.started.elapsed().as_secs_f64()
            )
        })
    }

    /// Whether a recording runs.
    pub(super) fn is_recording(&self) -> bool {
        self.recording.is_some()
    }

    /// The walk could not start or failed on the worker.
    pub(super) fn walk_failed(&mut self, error: &str) {
        self.running = None;
        self.message = Some(format!("walk: {error}"));
    }

    /// Asks for a walk of the open checkpoint with the chosen policy and
    /// transform.
    pub(super) fn start_walk(&mut self, inputs: &ProfilerInputs<'_>) {
        let (policy, transform) = (self.policy, self.transform);
        let cancel = CancelToken::new();
        self.cancel = Some(cancel.clone());
        self.actions.push(ProfilerAction::Send(Command::Walk {
            policy,
            transform,
            cancel,
        }));
        self.running = Some(RunningWalk {
            policy,
            transform,
            done: 0,
            total: inputs.checkpoint.map_or(0, |c| c.tensors().len()),
            started: Instant::now(),
            start_secs: inputs.timeline.secs(Instant::now()),
        });
    }

    /// The actions asked for outside `ui` (a walk started by a shortcut).
    pub(super) fn take_actions(&mut self) -> Vec<ProfilerAction> {
        std::mem::take(&mut self.actions)
    }

    /// Whether a walk is running.
    pub(super) fn is_walking(&self) -> bool {
        self.running.is_some()
    }

    /// The running walk, if any (the tab bar shows its progress).
    pub(super) fn running(&self) -> Option<&RunningWalk> {
        self.running.as_ref()
    }

    /// The last finished walk's outcome and findings.
    pub(super) fn last_walk(&self) -> Option<(&WalkOutcome, &[Finding])> {
        self.last.as_ref().and_then(|w| match &w.run {
            Run::Walk(outcome) => Some((outcome, w.findings.as_slice())),
            Run::Record(_) => None,
        })
    }

    /// The last recording and its findings.
    pub(super) fn last_recording(&self) -> Option<(&Recording, &[Finding])> {
        self.last.as_ref().and_then(|w| match &w.run {
            Run::Record(recording) => Some((recording.as_ref(), w.findings.as_slice())),
            Run::Walk(_) => None,
        })
    }

    /// The trace drawn instead of the session: a recording while it runs,
    /// else the last run in the walk view; with its start on the session clock.
    fn shown(&self) -> Option<(&Trace, f64)> {
        shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view)
    }

    /// The trace "Save trace…" writes: the last walk when there is one, else
    /// the whole session.
    pub(super) fn trace_to_save(&self, inputs: &ProfilerInputs<'_>) -> Trace {
        if let Some(last) = &self.last {
            return last.trace.clone();
        }
        let mut trace = inputs.timeline.to_trace("session");
        trace.device = inputs.device_name();
        trace
    }

    /// Writes the trace to `path` (CSV or JSON by extension) and says so.
    pub(super) fn save_trace(&mut self, path: &std::path::Path, inputs: &ProfilerInputs<'_>) {
        self.message = Some(match self.trace_to_save(inputs).save(path) {
            Ok(()) => format!("trace saved to {}", path.display()),
            Err(err) => err.to_string(),
        });
    }

    /// Loads a saved trace and overlays it on the walk view.
    pub(super) fn load_trace(&mut self, path: &std::path::Path) {
        let (done, result) = std::sync::mpsc::channel();
        let file = path.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("trace-load".into())
            .spawn(move || {
                let _ = done.send(Trace::load(&file).map_err(|e| e.to_string()));
            });
        match spawned {
            Ok(_) => {
                self.message = Some(format!("loading {}…", path.display()));
                self.loading = Some(TraceLoad {
                    path: path.to_path_buf(),
                    result,
                });
            }
            // No thread to be had: read it here rather than not at all.
            Err(_) => self.loaded(Trace::load(path).map_err(|e| e.to_string())),
        }
    }

    /// Takes the loaded trace when its thread is done (`wait`: blocks until
    /// it is, for tests and scripted runs). Returns whether one was loading.
    pub(super) fn poll_trace_load(&mut self, wait: bool) -> bool {
        let Some(load) = &self.loading else {
            return false;
        };
        let result = if wait {
            load.result.recv().ok()
        } else {
            match load.result.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => return true,
                other => other.ok(),
            }
        };
        let path = load.path.clone();
        self.loading = None;
        self.loaded(
            result
                .unwrap_or_else(|| Err(format!("{}: the loading thread stopped", path.display()))),
        );
        true
    }

    fn loaded(&mut self, result: Result<Trace, String>) {
        match result {
            Ok(trace) => {
                self.message = Some(format!(
                    "overlaid {} ({} samples, {} events)",
                    trace.label,
                    trace.samples.len(),
                    trace.events.len()
                ));
                self.overlays.push(trace);
                self.walk_view = true;
            }
            Err(err) => self.message = Some(err),
        }
    }

    /// Says why no trace file was chosen.
    pub(super) fn nothing_chosen(&mut self) {
        self.message = Some(
            "No file was chosen. If no dialog appeared, type a path in the trace path field."
                .into(),
        );
    }

    /// The selected moment on the session clock.
    pub(super) fn selected_moment(&self) -> Option<f64> {
        self.selected_secs
    }

    /// Selects a moment (as clicking an event row does).
    pub(super) fn select_moment(&mut self, t_secs: f64) {
        self.selected_secs = Some(t_secs);
    }

    /// Forgets MLX-side state tied to the machine (snapshot tests).
    pub(super) fn set_machine(&mut self, machine: MachineMemory) {
        self.machine = machine;
    }

    /// Draws the tab; returns the actions asked for.
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        inputs: &ProfilerInputs<'_>,
    ) -> Vec<ProfilerAction> {
        if self.poll_trace_load(false) && self.loading.is_some() {
            ui.ctx().request_repaint_after(Duration::from_millis(50));
        }
        if inputs.checkpoint.is_some() {
            self.walk_controls_ui(ui, inputs);
        } else {
            ui.horizontal_wrapped(|ui| {
                ui.label("Open a checkpoint to walk it, or record a job of your own:");
                self.record_buttons_ui(ui);
            });
        }
        self.record_status_ui(ui);
        ui.separator();
        self.limits_ui(ui, inputs);
        ui.separator();
        self.trace_controls_ui(ui);
        if let Some(message) = &self.message {
            ui.label(message);
        }
        ui.separator();
        // Beside the plot, never more than half of the tab's width.
        let width = ui.available_width();
        egui::Panel::right("profiler-side")
            .default_size(430.0_f32.min(width * 0.45))
            .size_range(200.0..=(width * 0.5).max(200.0))
            .show(ui, |ui| self.profiler_side_ui(ui, inputs));
        egui::CentralPanel::default().show(ui, |ui| {
            // In a small window the plots keep a usable height and the
            // column scrolls (the plots never take the wheel).
            let room = ui.available_height();
            egui::ScrollArea::vertical()
                .id_salt("profiler-plots")
                .auto_shrink(false)
                .show(ui, |ui| self.timeline_ui(ui, inputs, room));
        });
        self.take_actions()
    }

    /// "Record a command…" and "Attach to process…" (off while one runs).
    fn record_buttons_ui(&mut self, ui: &mut egui::Ui) {
        let busy = self.recording.is_some();
        ui.add_enabled_ui(!busy, |ui| {
            if ui
                .button("Record a command…")
                .on_hover_text("Run your own job (a conversion, a script) and record its memory: RSS, open shard files, MLX's counters from inside Python jobs")
                .clicked()
            {
                self.record_form.open(FormKind::Command);
            }
            if ui
                .button("Attach to process…")
                .on_hover_text("Follow a running process and its children from outside")
                .clicked()
            {
                self.record_form.open(FormKind::Attach);
            }
        });
    }

    /// The recording while it runs (its figures now, Stop), and the open form.
    fn record_status_ui(&mut self, ui: &mut egui::Ui) {
        if let Some(live) = &mut self.recording {
            ui.horizontal_wrapped(|ui| {
                ui.spinner();
                ui.label(live.status_text());
                let stop = ui
                    .button("Stop")
                    .on_hover_text("Send the job SIGINT (again: SIGTERM, then SIGKILL); the recording keeps what it saw. Attached: detach.");
                if stop.clicked() {
                    live.stopping = true;
                    self.actions.push(ProfilerAction::StopRecording);
                }
            });
            // Keep the elapsed time and the live graph moving.
            ui.ctx().request_repaint_after(Duration::from_millis(100));
        }
        if let Some((target, checkpoint)) = self.record_form.ui(ui.ctx()) {
            self.actions
                .push(ProfilerAction::Record(target, checkpoint));
        }
    }

    fn walk_controls_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("Walk");
            let walking = self.running.is_some();
            ui.add_enabled_ui(!walking, |ui| {
                let label = ui.label("Policy");
                egui::ComboBox::from_id_salt("walk-policy")
                    .selected_text(self.policy.as_str())
                    .show_ui(ui, |ui| {
                        for policy in Policy::ALL {
                            ui.selectable_value(&mut self.policy, policy, policy.as_str());
                        }
                    })
                    .response
                    .labelled_by(label.id);
                let label = ui.label("Transform");
                egui::ComboBox::from_id_salt("walk-transform")
                    .selected_text(self.transform.as_str())
                    .show_ui(ui, |ui| {
                        for transform in Transform::ALL {
                            ui.selectable_value(
                                &mut self.transform,
                                transform,
                                transform.as_str(),
                            );
                        }
                    })
                    .response
                    .labelled_by(label.id)
                    .on_hover_text("none: read only; f16: cast f32/bf16 to f16; q4: MLX 4-bit quantize 2-D weights");
            });
            if walking {
                if ui.button("Cancel walk").clicked()
                    && let Some(token) = &self.cancel
                {
                    token.cancel();
                }
            } else if ui
                .button("Run walk")
                .on_hover_text(
                    "Materialize every tensor in shard order under the policy (releases everything first)",
                )
                .clicked()
            {
                self.start_walk(inputs);
            }
            if let Some(expected) = self.expected_now() {
                ui.label(format!(
                    "expected peak: {}",
                    human_bytes(self.policy.expected(&expected))
                ));
            }
            ui.separator();
            ui.strong("Record");
            self.record_buttons_ui(ui);
        });
        if let Some(walk) = &self.running {
            let fraction = if walk.total == 0 {
                0.0
            } else {
                walk.done as f32 / walk.total as f32
            };
            ui.add(egui::ProgressBar::new(fraction).text(format!(
                "{} {}: {} of {} tensors, {:.1} s",
                walk.policy.as_str(),
                walk.transform.as_str(),
                walk.done,
                walk.total,
                walk.started.elapsed().as_secs_f64()
            )));
        }
    }

    fn limits_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("MLX memory limit");
            let field = ui.add(
                egui::TextEdit::singleline(&mut self.memory_limit_input)
                    .hint_text(human_bytes(inputs.memory.limit_bytes))
                    .desired_width(90.0),
            );
            field.labelled_by(label.id);
            if ui.button("Set limit").clicked() {
                match crate::units::parse_size(&self.memory_limit_input) {
                    Some(bytes) if bytes > 0 => self
                        .actions
                        .push(ProfilerAction::Send(Command::SetMemoryLimit(bytes))),
                    _ => {
                        self.message = Some("the memory limit is a size such as 8G or 512M".into());
                    }
                }
            }
            let label = ui.label("MLX cache limit");
            let field = ui.add(
                egui::TextEdit::singleline(&mut self.cache_limit_input)
                    .hint_text("e.g. 1G")
                    .desired_width(90.0),
            );
            field.labelled_by(label.id);
            if ui.button("Set cache limit").clicked() {
                match crate::units::parse_size(&self.cache_limit_input) {
                    Some(bytes) => self
                        .actions
                        .push(ProfilerAction::Send(Command::SetCacheLimit(bytes))),
                    None => {
                        self.message = Some("the cache limit is a size such as 1G or 0".into());
                    }
                }
            }
            ui.separator();
            let label = ui.label("Sample every (ms)");
            let changed = ui
                .add(egui::DragValue::new(&mut self.interval_ms).range(5..=5000))
                .labelled_by(label.id)
                .changed();
            if changed {
                self.actions
                    .push(ProfilerAction::SetSampleInterval(Duration::from_millis(
                        self.interval_ms,
                    )));
            }
            if let Some(sampler) = &inputs.sampler {
                let interval = Duration::from_millis(self.interval_ms);
                ui.label(format!(
                    "sampler: {:.0} us a sample, {:.2} % of one core",
                    sampler.mean_sample_time().as_secs_f64() * 1e6,
                    sampler.cost_percent(interval)
                ))
                .on_hover_text("Measured by the sampler on itself (wall time, an upper bound)");
            }
        });
    }

    fn trace_controls_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            if ui
                .button("Save trace…")
                .on_hover_text(
                    "The last walk (or the whole session before any walk), as JSON or CSV",
                )
                .clicked()
            {
                self.actions.push(ProfilerAction::Dialog(Action::SaveTrace));
            }
            if ui
                .button("Open trace…")
                .on_hover_text(
                    "Overlay a saved trace (from the app or `weightscope walk --csv/--trace`)",
                )
                .clicked()
            {
                self.actions.push(ProfilerAction::Dialog(Action::OpenTrace));
            }
            let label = ui.label("Trace path");
            let field = ui.add(
                egui::TextEdit::singleline(&mut self.trace_path_input)
                    .hint_text("/tmp/walk.json or .csv")
                    .desired_width(260.0),
            );
            field.labelled_by(label.id);
            let path = PathBuf::from(self.trace_path_input.trim());
            let has_path = !self.trace_path_input.trim().is_empty();
            if ui
                .add_enabled(has_path, egui::Button::new("Save to path"))
                .clicked()
            {
                self.actions.push(ProfilerAction::SaveTo(path.clone()));
            }
            if ui
                .add_enabled(has_path, egui::Button::new("Overlay from path"))
                .clicked()
            {
                self.actions.push(ProfilerAction::OverlayFrom(path));
            }
            ui.separator();
            ui.checkbox(&mut self.walk_view, "Last run view").on_hover_text(
                "The last walk or recording and the overlaid traces, on one clock from its start (off: the whole session)",
            );
            let mut remove = None;
            for (i, trace) in self.overlays.iter().enumerate() {
                if ui
                    .small_button(format!("x {}", trace.label))
                    .on_hover_text("Remove this overlay")
                    .clicked()
                {
                    remove = Some(i);
                }
            }
            if let Some(i) = remove {
                self.overlays.remove(i);
            }
        });
    }

    /// The memory timeline and the residency plot below it, in `room`
    /// points of height (or more, scrolled, where that is too little).
    fn timeline_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>, room: f32) {
        // Before anything borrows what is shown: the plots' span needs it.
        self.update_residency(inputs);
        // A recording as it runs, the last run on its own clock, or the
        // whole session: borrowed, never copied (the session holds up to
        // hours of samples).
        let shown = self.shown();
        let walk_view = shown.is_some();
        // Traces overlaid before any run of this session: on their own clock,
        // not over the session's (which started when the app did).
        let overlays_only = self.walk_view && !walk_view && !self.overlays.is_empty();
        let offset = shown.map_or(0.0, |(_, start)| start);
        let walk = shown.map(|(trace, _)| trace);
        let selected = self.selected_secs.map(|t| t - offset);
        let expected = walk
            .and_then(|t| t.expected)
            .or_else(|| self.expected_now());
        let policy = self.policy;
        let place = inputs
            .device
            .as_ref()
            .map_or("unknown device", DeviceInfo::mlx_memory_place);
        let height = (room * 0.62).max(160.0);
        ui.label(if self.recording.is_some() {
            "Memory (MiB) of the recorded job over seconds since it started (live); grey lines: events"
        } else if walk_view {
            "Memory (MiB) over seconds since the walk or job started; dashed: overlaid traces; grey lines: events; click to select a moment"
        } else if overlays_only {
            "Memory (MiB) of the overlaid traces (dashed) over seconds since each started; no walk or job has run in this session"
        } else {
            "Memory (MiB) over seconds since the app started; grey lines: events; click to select a moment"
        });
        let mlx_active = format!("MLX active ({place})");
        // A legend inside a short plot (a small window) would cover the
        // curves: then it is one line of names above the plot instead.
        let compact = height < COMPACT_PLOT_HEIGHT;
        if compact {
            timeline_legend_row(ui, &mlx_active, expected.is_some());
        }
        // Both plots over the same times (their x axes are linked, but each
        // would fit its own data until the user drags one): the samples'
        // span and the residency changes'.
        let x_span = span_of(
            match walk {
                Some(trace) => time_span(trace.samples.iter()),
                None if overlays_only => None,
                None => time_span(inputs.timeline.samples().iter()),
            },
            self.residency
                .as_ref()
                .and_then(|(_, r)| Some((r.changes.first()?.t_secs, r.changes.last()?.t_secs))),
        );
        let response = timeline_plot(compact, x_span)
            .include_y(0.0)
            .height(height)
            .allow_scroll(false)
            .show(ui, |plot| {
                use super::series_colors as c;
                let line = |f: fn(&TraceSample) -> u64| match walk {
                    Some(trace) => sample_line(trace.samples.iter(), f),
                    None if overlays_only => sample_line([].iter(), f),
                    None => sample_line(inputs.timeline.samples().iter(), f),
                };
                plot.line(Line::new("process RSS (host)", line(|s| s.rss_bytes)).color(c::RSS));
                plot.line(
                    Line::new("RSS anonymous", line(|s| s.rss_anon_bytes)).color(c::RSS_ANON),
                );
                plot.line(
                    Line::new(mlx_active.as_str(), line(|s| s.mlx_active_bytes))
                        .color(c::MLX_ACTIVE),
                );
                plot.line(Line::new("MLX cache", line(|s| s.mlx_cache_bytes)).color(c::MLX_CACHE));
                draw_overlays(plot, &self.overlays);
                if let Some(expected) = expected {
                    for (p, color) in Policy::ALL.into_iter().zip(c::EXPECTED) {
                        let width = if p == policy { 2.0 } else { 0.8 };
                        plot.hline(
                            HLine::new(expected_label(p), p.expected(&expected) as f64 / MIB)
                                .width(width)
                                .color(color),
                        );
                    }
                }
                let marked: Vec<f64> = match walk {
                    Some(trace) => marker_times(trace.events.iter(), 400).collect(),
                    None if overlays_only => Vec::new(),
                    None => marker_times(inputs.timeline.events().iter(), 400).collect(),
                };
                for t in marked {
                    plot.vline(
                        // Unnamed: out of the legend (said in the caption).
                        VLine::new("", t)
                            .width(0.5)
                            .color(super::series_colors::EVENTS),
                    );
                }
                if let Some(t) = selected {
                    plot.vline(VLine::new("", t).width(2.0));
                }
                plot.pointer_coordinate()
            });
        if let (true, Some(point)) = (response.response.clicked(), response.inner) {
            self.selected_secs = Some(point.x + offset);
        }
        let used = ui.min_rect().height();
        self.residency_plot_ui(ui, room - used, x_span);
    }

    /// The residency steps of what is shown, computed again only when
    /// that changed.
    fn update_residency(&mut self, inputs: &ProfilerInputs<'_>) {
        // Keyed by what is shown (session, last run, live recording), its
        // event count, and the run it belongs to.
        let shown = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view)
            .map(|(trace, _)| trace);
        let mode = match (&self.recording, shown) {
            (Some(_), _) => 2,
            (None, Some(_)) => 1,
            (None, None) => 0,
        };
        let key = (
            inputs.timeline.events().len(),
            shown.map_or(0, |t| t.events.len()),
            mode,
            self.runs,
        );
        if self.residency.as_ref().is_none_or(|(k, _)| *k != key) {
            let computed = match shown {
                Some(trace) => trace.residency_steps(),
                None => profile::residency_steps(inputs.timeline.events()),
            };
            self.residency = Some((key, computed));
        }
    }

    /// The residency plot with its caption, in `room` points of height (the
    /// plot 120 at least), over the times `x_span` (the timeline's). The
    /// residency is the one [`Self::timeline_ui`] brought up to date.
    fn residency_plot_ui(&mut self, ui: &mut egui::Ui, room: f32, x_span: Option<(f64, f64)>) {
        let top = ui.cursor().top();
        let shown = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view)
            .map(|(trace, _)| trace);
        let Some((_, residency)) = &self.residency else {
            return;
        };
        let recorded = shown.is_some_and(|t| t.job.is_some());
        ui.label(if recorded {
            "Shard files the job held open (MiB): one band a file, its size while open"
        } else {
            "Resident bytes per shard (MiB), by the Weights core's bookkeeping"
        });
        let shards = &residency.shards;
        let picked = residency.sampled(600);
        // Each change drawn as a riser a hair before it, so bands are steps.
        let span = picked.last().map_or(0.0, |l| l.0) - picked.first().map_or(0.0, |f| f.0);
        let riser = (span * 1e-4).max(1e-9);
        let mut xs = Vec::with_capacity(picked.len() * 2);
        let mut rows: Vec<&[u64]> = Vec::with_capacity(picked.len() * 2);
        for (i, (t, bytes)) in picked.iter().enumerate() {
            if i > 0 {
                xs.push(t - riser);
                rows.push(&picked[i - 1].1);
            }
            xs.push(*t);
            rows.push(bytes);
        }
        // The first BANDS shards get their own band; the rest share one.
        let bands = shards.len().min(BANDS + 1);
        // What the caption took comes out of the plot's height.
        let height = (room - (ui.cursor().top() - top)).max(120.0);
        let plot = Plot::new("profiler-residency")
            .link_axis(egui::Id::unique("profiler-time"), [true, false])
            .y_axis_min_width(Y_AXIS_WIDTH)
            .set_margin_fraction(egui::vec2(X_MARGIN, 0.05));
        let plot = match x_span {
            Some((from, to)) => plot.include_x(from).include_x(to),
            None => plot,
        };
        plot.height(height)
            .include_y(0.0)
            .allow_scroll(false)
            .show(ui, |plot| {
                let mut lower = vec![0.0; xs.len()];
                for k in 0..bands {
                    let (name, range) = if k < BANDS || shards.len() == BANDS + 1 {
                        (shards[k].clone(), k..k + 1)
                    } else {
                        (
                            format!("{} more shards", shards.len() - BANDS),
                            k..shards.len(),
                        )
                    };
                    let upper: Vec<f64> = rows
                        .iter()
                        .zip(&lower)
                        .map(|(row, low)| {
                            let band: u64 = row.get(range.clone()).map_or(0, |b| b.iter().sum());
                            low + band as f64 / MIB
                        })
                        .collect();
                    let hue = (k as f32 * 0.618_034).fract();
                    let color = egui::ecolor::Hsva::new(hue, 0.65, 0.8, 0.85);
                    plot.add(
                        egui_plot::FilledArea::new(name, &xs, &lower, &upper)
                            .fill_color(egui::Color32::from(color)),
                    );
                    lower = upper;
                }
            });
    }

    fn profiler_side_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        egui::ScrollArea::vertical()
            .id_salt("profiler-side-scroll")
            .show(ui, |ui| {
                self.findings_ui(ui);
                ui.separator();
                self.fit_ui(ui, inputs);
                ui.separator();
                self.resident_ui(ui, inputs);
                ui.separator();
                self.events_table_ui(ui, inputs);
            });
    }

    fn findings_ui(&mut self, ui: &mut egui::Ui) {
        ui.heading("Findings");
        let Some(last) = &self.last else {
            ui.label("Run a walk or record a job: findings appear when it ends.");
            return;
        };
        match &last.run {
            Run::Walk(o) => walk_summary_ui(ui, o),
            Run::Record(r) => record_summary_ui(ui, r),
        }
        if last.findings.is_empty() {
            ui.label(match last.run {
                Run::Walk(_) => "No findings: memory behaved as the headers predict.",
                Run::Record(_) => "No findings: nothing in this job's memory calls for a change.",
            });
        }
        let mut select = None;
        for finding in &last.findings {
            let color = match finding.kind.severity() {
                crate::checkpoint::check::Severity::Error => ui.visuals().error_fg_color,
                _ => ui.visuals().warn_fg_color,
            };
            let text = egui::RichText::new(&finding.text).color(color);
            let response = ui.add(egui::Label::new(text).sense(egui::Sense::click()));
            let response = response.on_hover_text("Click to select this moment");
            if let (true, Some(t)) = (response.clicked(), finding.t_secs) {
                select = Some(last.start_secs + t);
            }
        }
        if select.is_some() {
            self.selected_secs = select;
        }
    }

    fn fit_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.heading("Fit");
        let Some(expected) = self.expected_now() else {
            return;
        };
        ui.horizontal(|ui| {
            let label = ui.label("Budget");
            ui.add(
                egui::TextEdit::singleline(&mut self.budget_input)
                    .hint_text("e.g. 24G")
                    .desired_width(80.0),
            )
            .labelled_by(label.id);
        });
        let budget = crate::units::parse_size(&self.budget_input).filter(|b| *b > 0);
        let report =
            profile::fit_report(&expected, &self.machine, inputs.memory.limit_bytes, budget);
        ui.label(format!(
            "Largest shard: {} (transform {})",
            human_bytes(self.largest_shard_bytes),
            self.transform.as_str()
        ));
        for line in &report.lines {
            ui.label(line);
        }
    }

    fn resident_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.heading("Resident at the selected moment");
        let Some(t) = self.selected_secs else {
            ui.label("Click the graph or an event to select a moment.");
            return;
        };
        let recorded = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view)
            .filter(|(trace, _)| trace.job.is_some());
        let events = EventList::new(recorded.map(|(t, _)| t), inputs.timeline);
        let key = (events.len(), t.to_bits(), recorded.is_some(), self.runs);
        if self.resident.as_ref().is_none_or(|(k, _)| *k != key) {
            let shards = match recorded {
                Some((trace, start)) => profile::resident_at(&trace.events, t - start),
                None => profile::resident_at(inputs.timeline.events(), t),
            };
            self.resident = Some((key, shards));
        }
        let Some((_, shards)) = &self.resident else {
            return;
        };
        let total: u64 = shards.iter().map(|s| s.bytes).sum();
        // On the clock of what is shown: the recording's own when it is one.
        let (shown_t, what) = match recorded {
            Some((_, start)) => (t - start, "shard files open"),
            None => (t, "shards"),
        };
        ui.label(format!(
            "at {shown_t:.2} s: {} in {} {what}",
            human_bytes(total),
            shards.len()
        ));
        for shard in shards.iter().take(50) {
            if recorded.is_some() {
                // A file the job holds: its path and size, nothing inside.
                ui.label(format!(
                    "{} {}",
                    crate::units::printable(&shard.shard),
                    human_bytes(shard.bytes)
                ));
                continue;
            }
            egui::CollapsingHeader::new(format!(
                "{}: {} ({} tensors)",
                shard.shard,
                human_bytes(shard.bytes),
                shard.tensors.len()
            ))
            .id_salt(("resident", &shard.shard))
            .show(ui, |ui| {
                for tensor in shard.tensors.iter().take(200) {
                    let note = if tensor.released {
                        " (released, still held by the shard map)"
                    } else {
                        ""
                    };
                    ui.label(format!(
                        "{} {}{note}",
                        tensor.name,
                        human_bytes(tensor.bytes)
                    ));
                }
            });
        }
    }

    fn events_table_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.heading("Events");
        // A recording's own events (its loads, marks, files) when one is
        // shown, on its clock; else the session's.
        let recorded = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view)
            .filter(|(trace, _)| trace.job.is_some());
        let offset = recorded.map_or(0.0, |(_, start)| start);
        let events = EventList::new(recorded.map(|(t, _)| t), inputs.timeline);
        ui.label(format!(
            "{} events{}; click one to select its moment",
            events.len(),
            if recorded.is_some() {
                " of the job"
            } else {
                ""
            }
        ));
        let row_height = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
        let mut select = None;
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Truncate);
        egui::ScrollArea::vertical()
            .id_salt("events-scroll")
            .max_height(320.0)
            .stick_to_bottom(true)
            .show_rows(ui, row_height, events.len(), |ui, rows| {
                for i in rows {
                    let Some(event) = events.get(i) else { continue };
                    let text = format!(
                        "{:>8.2} s  {}  active {}",
                        event.t_secs,
                        event.label(),
                        human_bytes(event.mlx_active_bytes)
                    );
                    let at = event.t_secs + offset;
                    let chosen = self.selected_secs.is_some_and(|t| (t - at).abs() < 1e-9);
                    if ui.selectable_label(chosen, text).clicked() {
                        select = Some(at);
                    }
                }
            });
        if select.is_some() {
            self.selected_secs = select;
        }
    }
}

/// Events by position: a recording's, or the session's.
enum EventList<'a> {
    Trace(&'a [TraceEvent]),
    Session(&'a std::collections::VecDeque<TraceEvent>),
}

impl<'a> EventList<'a> {
    fn new(trace: Option<&'a Trace>, timeline: &'a Timeline) -> Self {
        match trace {
            Some(trace) => Self::Trace(&trace.events),
            None => Self::Session(timeline.events()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Trace(events) => events.len(),
            Self::Session(events) => events.len(),
        }
    }

    fn get(&self, i: usize) -> Option<&'a TraceEvent> {
        match self {
            Self::Trace(events) => events.get(i),
            Self::Session(events) => events.get(i),
        }
    }
}

/// The trace drawn instead of the session (see `ProfilerPanel::shown`), from
/// the fields it depends on, so a cache beside them can be updated.
fn shown<'a>(
    recording: Option<&'a LiveRecording>,
    last: Option<&'a FinishedRun>,
    walk_view: bool,
) -> Option<(&'a Trace, f64)> {
    if let Some(live) = recording {
        return Some((&live.trace, live.start_secs));
    }
    last.filter(|_| walk_view).map(|l| (&l.trace, l.start_secs))
}

/// The last walk in two lines.
fn walk_summary_ui(ui: &mut egui::Ui, o: &WalkOutcome) {
    ui.label(format!(
        "{} {}: {} of {} tensors in {:.2} s{}",
        o.policy.as_str(),
        o.transform.as_str(),
        o.steps_done,
        o.steps_total,
        o.elapsed_secs,
        if o.cancelled { " (cancelled)" } else { "" }
    ));
    ui.label(format!(
        "peak MLX active {} (expected {}), peak RSS {}",
        human_bytes(o.peak_mlx_active_bytes),
        human_bytes(o.expected_peak_bytes()),
        human_bytes(o.peak_rss_bytes)
    ));
    if let Some(error) = &o.error {
        ui.colored_label(ui.visuals().error_fg_color, error);
    }
}

/// The last recording in a few lines: how it ended, its peaks, the files
/// open at the peak.
fn record_summary_ui(ui: &mut egui::Ui, r: &Recording) {
    let ended = r.exit.map_or_else(
        || "detached".to_owned(),
        crate::profile::record::JobExit::describe,
    );
    ui.label(format!(
        "`{}`: {ended} after {:.1} s",
        crate::units::printable(&r.command),
        r.elapsed_secs
    ));
    let mlx = r.peak_mlx_active_bytes.map_or_else(
        || "no MLX figures from inside (no probe reported)".to_owned(),
        |b| format!("peak MLX active {}", human_bytes(b)),
    );
    ui.label(format!(
        "peak RSS {} at {:.1} s; {mlx}",
        human_bytes(r.peak_rss_bytes),
        r.peak_rss_secs
    ));
    let open: u64 = r.files_open_at_peak.iter().map(|f| f.bytes).sum();
    ui.label(format!(
        "{} shard files open at the peak ({}); {} used in all",
        r.files_open_at_peak.len(),
        human_bytes(open),
        r.files_used()
    ));
    if let Some(c) = &r.checkpoint {
        ui.label(format!(
            "checkpoint {}: {}; a release-shard walk would peak at {}",
            crate::units::printable(&c.path.display().to_string()),
            human_bytes(c.total_bytes),
            human_bytes(c.expected.release_shard)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::decimate;

    #[test]
    fn decimation_keeps_the_peak() {
        let points: Vec<[f64; 2]> = (0..100_000)
            .map(|i| [f64::from(i), if i == 54_321 { 99.0 } else { 1.0 }])
            .collect();
        let out = decimate(points.iter().copied());
        assert!(out.len() <= super::PLOT_POINTS + 2);
        assert!(
            out.iter()
                .any(|p| (p[1] - 99.0).abs() < 1e-9 && (p[0] - 54_321.0).abs() < 1e-9)
        );
        assert!(out.windows(2).all(|w| w[0][0] <= w[1][0]), "in time order");
    }
}
