//! The profiler tab: run a walk under a policy, watch memory against what the
//! headers predict, read the findings, see which shards and tensors were
//! resident at any moment, set MLX's limits, and save, open and overlay traces.
//! The panel, its controls and its routing live here; the two plots in
//! `plots`, the side column (findings, fit, resident, events) in `side`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::Checkpoint;
use crate::memory::{ExpectedPeaks, MachineMemory, MarkKind, Policy};
use crate::mlx::{DeviceInfo, MemoryStats};
use crate::profile::TraceError;
use crate::profile::analysis::hosts::MergeError;
use crate::profile::analysis::journals::MergedJournals;
use crate::profile::analysis::recording::Recording;
use crate::profile::capture::{RecordError, Update};
use crate::profile::{self, Finding, Sampler, Timeline, Trace, Transform, WalkOutcome};
use crate::units::human_bytes;
use crate::worker::CancelToken;

use super::Dialog;
use super::commands::{AppCommand, CommandSender};
use super::record::{FormKind, LiveRecording, RecordForm};

mod controls;
mod plots;
mod recordings;
mod side;
mod traces;

pub(super) use plots::{marker_times, sample_line, samples_top_mib};
use traces::TraceLoad;
pub(in crate::app) use traces::{Loaded, TraceWrite, read_trace, read_traces};

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
    /// A recorded job (also in the list of recordings).
    Record(Arc<Recording>),
}

/// The last finished walk or recording, kept for study.
#[derive(Debug, Clone)]
pub(super) struct FinishedRun {
    pub run: Run,
    /// Its trace, on its own clock (from walk or job start); shared, so
    /// that saving or exporting it hands it to the writing thread without
    /// a copy (a recording can be hundreds of MB).
    pub trace: Arc<Trace>,
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
    pub device: &'a Result<DeviceInfo, crate::mlx::MlxError>,
    /// Where the tab's requests go.
    pub commands: &'a CommandSender,
}

impl ProfilerInputs<'_> {
    fn device_name(&self) -> String {
        self.device
            .as_ref()
            .map(DeviceInfo::name)
            .unwrap_or_default()
    }
}

/// How often the window redraws a live recording at most (the recorder's
/// wakes come when samples arrive, throttled to this too).
pub(super) const LIVE_FRAME: Duration = Duration::from_millis(250);

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
    /// The merged report of the journals shown (see [`MergedJournals`]);
    /// empty for any other run.
    merged_report: Vec<String>,
    /// Every rank's trace of the merged journals shown, on the shown one's
    /// clock (the lanes below the timeline); empty for any other run.
    merged_lanes: Vec<Trace>,
    /// The merged journals and which is shown whole, for the choice of
    /// another.
    merged_choice: Option<MergedChoice>,
    /// A trace being saved or exported: its thread's answer, the line to
    /// show.
    exported: Option<std::sync::mpsc::Receiver<String>>,
    /// Recordings made or opened since the window opened, newest last.
    recordings: Vec<Arc<Recording>>,
    /// Each recording's name in the list (what the user typed, or their
    /// own name for it) and when it started on the session clock.
    listed: Vec<Listed>,
    /// The recording being renamed, and the name typed so far.
    renaming: Option<(usize, String)>,
    /// The recording compared with the shown one: its position in
    /// `recordings` and its trace (drawn over the shown one).
    compared: Option<(usize, Trace)>,
    /// What the plot below the timeline shows.
    below: Below,
    /// The icicle chart's figure: held at the peak (else all growth).
    icicle_held: bool,
    /// The icicle chart's trees, for the shown recording and figure.
    icicle: recordings::Icicle,
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
    /// A typed save path that names an existing file, until the user says
    /// whether to replace it.
    confirm_overwrite: Option<PathBuf>,
    /// The format "Export to path" writes.
    export_format: crate::profile::export::Format,
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
}

/// The most recordings the list keeps (the oldest go).
const RECORDINGS_KEPT: usize = 16;

/// What the plot below the timeline shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Below {
    /// The shard files, one band each.
    Files,
    /// The memory by kind: MLX active, MLX cache, host memory that is not
    /// MLX's, file-backed.
    Kinds,
    /// Journals of several hosts merged: each rank's memory a band,
    /// stacked, the top the job's total.
    Ranks,
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
            merged_report: Vec::new(),
            merged_lanes: Vec::new(),
            merged_choice: None,
            exported: None,
            recordings: Vec::new(),
            listed: Vec::new(),
            renaming: None,
            compared: None,
            below: Below::Files,
            icicle_held: true,
            icicle: recordings::Icicle::default(),
            loading: None,
            selected_secs: None,
            walk_view: false,
            memory_limit_input: String::new(),
            cache_limit_input: String::new(),
            budget_input: String::new(),
            trace_path_input: String::new(),
            confirm_overwrite: None,
            export_format: crate::profile::export::Format::Perfetto,
            interval_ms: 50,
            expected: Vec::new(),
            largest_shard_bytes: 0,
            machine: MachineMemory::default(),
            message: None,
            residency: None,
            runs: 0,
            resident: None,
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
        // Overlays and a selected moment belong to the checkpoint's runs
        // they were made on.
        self.overlays.clear();
        self.run_changed();
    }

    /// What is shown changed run: a moment selected on the old one is not
    /// a moment of the new one.
    fn run_changed(&mut self) {
        self.merged_report.clear();
        self.merged_lanes.clear();
        self.merged_choice = None;
        if self.below == Below::Ranks {
            self.below = Below::Files;
        }
        self.selected_secs = None;
        self.resident = None;
    }

    fn expected_now(&self) -> Option<ExpectedPeaks> {
        self.expected
            .iter()
            .find(|(t, _)| *t == self.transform)
            .map(|(_, e)| *e)
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
        let end_secs = inputs.timeline.last_sample().map_or(start_secs, |s| s.at);
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
            trace: Arc::new(trace),
            start_secs,
            findings,
        });
        // The walk is what the user came to study: show it at walk time.
        self.walk_view = true;
        self.run_changed();
    }

    /// A recording of `command` began at `start_secs` (session clock).
    pub(super) fn recording_started(&mut self, command: String, start_secs: f64) {
        self.recording = Some(LiveRecording::new(command, start_secs));
        self.message = None;
        // The new run shows itself alone (with the overlays the user
        // chose); the last run's findings belong to it.
        self.last = None;
        self.run_changed();
    }

    /// What the recorder sent.
    pub(super) fn recording_update(&mut self, update: Update) {
        if let Some(live) = &mut self.recording {
            live.apply(update);
        }
    }

    /// The recording ended: it becomes the last run, with its findings.
    pub(super) fn recording_finished(&mut self, result: Result<Box<Recording>, RecordError>) {
        let Some(live) = self.recording.take() else {
            return;
        };
        match result {
            Ok(recording) => {
                let mut trace = recording.to_trace();
                trace.label = format!(
                    "record {} (at {:.1} s)",
                    typed_name(&live.command),
                    live.start_secs
                );
                self.message = Some(format!(
                    "recorded `{}`: {}",
                    crate::units::Shown::new(&typed_name(&recording.command)),
                    recording.ended()
                ));
                self.show_recording(Arc::from(recording), trace, live.start_secs);
            }
            Err(error) => self.message = Some(format!("record: {error}")),
        }
    }

    /// A recording of the list shown again: the last run, the list as it
    /// was.
    fn show_listed_recording(&mut self, recording: Arc<Recording>, trace: Trace) {
        self.runs += 1;
        self.last = Some(FinishedRun {
            findings: recording.findings.clone(),
            run: Run::Record(recording),
            trace: Arc::new(trace),
            start_secs: 0.0,
        });
        self.walk_view = true;
        self.run_changed();
    }

    /// `recording` (with its trace, which starts at `start_secs` on the
    /// session clock) becomes the last run and joins the list.
    fn show_recording(&mut self, recording: Arc<Recording>, trace: Trace, start_secs: f64) {
        if self.recordings.len() == RECORDINGS_KEPT {
            self.recordings.remove(0);
            if !self.listed.is_empty() {
                self.listed.remove(0);
            }
            self.compared = None;
            self.renaming = None;
        }
        self.listed.push(Listed {
            name: typed_name(&recording.command),
            start_secs,
        });
        self.recordings.push(Arc::clone(&recording));
        self.runs += 1;
        self.last = Some(FinishedRun {
            findings: recording.findings.clone(),
            run: Run::Record(recording),
            trace: Arc::new(trace),
            start_secs,
        });
        self.walk_view = true;
        self.run_changed();
    }

    /// The recording in progress, in a few words (the tab bar shows it on
    /// other tabs).
    pub(super) fn recording_brief(&self) -> Option<String> {
        self.recording.as_ref().map(|live| {
            format!(
                "recording `{}`: {:.0} s",
                crate::units::Shown::new(&live.command),
                live.started.elapsed().as_secs_f64()
            )
        })
    }

    /// Whether a recording runs.
    #[cfg(any(test, feature = "test-hooks"))]
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
    pub(super) fn start_walk(&self, inputs: &ProfilerInputs<'_>) {
        inputs.commands.send(AppCommand::Walk {
            policy: self.policy,
            transform: self.transform,
        });
    }

    /// The app sent the walk to the worker with `cancel` (the Stop button's).
    pub(super) fn walk_started(
        &mut self,
        (policy, transform): (Policy, Transform),
        cancel: CancelToken,
        inputs: &ProfilerInputs<'_>,
    ) {
        self.cancel = Some(cancel);
        // The walk shows itself as it runs, on the session's clock from its
        // start (not the last run, not the session before it).
        self.walk_view = false;
        self.run_changed();
        self.running = Some(RunningWalk {
            policy,
            transform,
            done: 0,
            total: inputs.checkpoint.map_or(0, |c| c.tensors().len()),
            started: Instant::now(),
            start_secs: inputs.timeline.secs(Instant::now()),
        });
    }

    /// Whether a walk is running.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn is_walking(&self) -> bool {
        self.running.is_some()
    }

    /// The running walk, if any (the tab bar shows its progress).
    pub(super) fn running(&self) -> Option<&RunningWalk> {
        self.running.as_ref()
    }

    /// The last finished walk's outcome and findings.
    #[cfg(any(test, feature = "test-hooks"))]
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

    /// The selected moment on the session clock.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn selected_moment(&self) -> Option<f64> {
        self.selected_secs
    }

    /// The merged report shown (journals of several hosts).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn merged_report(&self) -> &[String] {
        &self.merged_report
    }

    /// The ranks banded below the timeline of merged journals, by name.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn merged_lane_names(&self) -> Vec<String> {
        self.merged_lanes.iter().map(|l| l.label.clone()).collect()
    }

    /// The overlays, as their chips name them.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn overlay_names(&self) -> Vec<String> {
        self.overlays.iter().map(overlay_name).collect()
    }

    /// Selects a moment (as clicking an event row does).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn select_moment(&mut self, t_secs: f64) {
        self.selected_secs = Some(t_secs);
    }

    /// Forgets MLX-side state tied to the machine (snapshot tests).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn set_machine(&mut self, machine: MachineMemory) {
        self.machine = machine;
    }

    /// Draws the tab; what it asks for goes to `inputs.commands`.
    pub(super) fn ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        if self.poll_trace_load(false) && self.loading.is_some() {
            ui.ctx().request_repaint_after(Duration::from_millis(50));
        }
        // A small window (800x500): the graph first, most of the height,
        // then the controls and the findings, in one column that scrolls.
        if ui.available_height() < SMALL_BELOW_HEIGHT || ui.available_width() < SMALL_BELOW_WIDTH {
            let room = ui.available_height();
            egui::ScrollArea::vertical()
                .id_salt("profiler-small")
                .auto_shrink(false)
                .show(ui, |ui| {
                    // timeline_ui gives the plot min(62 %, room - 250): this
                    // room makes it 85 % of what is visible.
                    self.timeline_ui(ui, inputs, room * 0.85 + 250.0);
                    ui.separator();
                    self.controls_ui(ui, inputs);
                    ui.separator();
                    self.profiler_side_ui(ui, inputs);
                });
            return;
        }
        self.controls_ui(ui, inputs);
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
    }

    /// A chip per overlay (a click removes it; one not drawn over what is
    /// shown says so), and "Clear overlays".
    fn overlay_chips_ui(&mut self, ui: &mut egui::Ui) {
        let mut remove = None;
        let palette = crate::app::widgets::series_colors::OVERLAYS;
        let drawn: Vec<*const Trace> = self.drawn_overlays().map(std::ptr::from_ref).collect();
        let mut colour_at = 0;
        for (i, trace) in self.overlays.iter().enumerate() {
            let is_drawn = drawn.contains(&std::ptr::from_ref(trace));
            let text = if is_drawn {
                let colour = palette[colour_at % palette.len()];
                colour_at += 1;
                egui::RichText::new(format!("x {}", overlay_name(trace))).color(colour)
            } else {
                egui::RichText::new(format!("x {} (not drawn here)", overlay_name(trace))).weak()
            };
            let hover = if is_drawn {
                format!(
                    "Remove this overlay: {}",
                    crate::units::Shown::new(&trace.checkpoint)
                )
            } else {
                "Remove this overlay; it is a walk's and a recorded job is shown (or the other way round), so it is not drawn over it".to_owned()
            };
            if ui.small_button(text).on_hover_text(hover).clicked() {
                remove = Some(i);
            }
        }
        // A rank's overlay removed takes its band below with it.
        if let Some(i) = remove {
            let gone = self.overlays.remove(i);
            self.merged_lanes.retain(|lane| lane.label != gone.label);
        }
        if !self.overlays.is_empty()
            && ui
                .small_button("Clear overlays")
                .on_hover_text("Remove every overlaid trace")
                .clicked()
        {
            let gone: Vec<Trace> = std::mem::take(&mut self.overlays);
            self.merged_lanes
                .retain(|lane| !gone.iter().any(|o| o.label == lane.label));
        }
    }
}

/// Merged journals: their files, their lanes' names, the one shown whole.
#[derive(Debug, Clone)]
struct MergedChoice {
    paths: Vec<std::path::PathBuf>,
    names: Vec<String>,
    shown: usize,
}

/// Below this height or width of the tab, the graph comes first and the
/// rest scrolls under it (at 800x500 the controls above it left 120 points
/// of graph).
const SMALL_BELOW_HEIGHT: f32 = 520.0;
const SMALL_BELOW_WIDTH: f32 = 760.0;

/// A recording as the list names it.
#[derive(Debug, Clone)]
struct Listed {
    /// What the user typed (the form's line, not the `sh -c` that ran
    /// it), or the name they gave it.
    name: String,
    /// When it started, on the session clock (0 for one opened from disk).
    start_secs: f64,
}

/// A recorded command as the user typed it: the form runs a line through
/// `sh -c`, which says nothing.
fn typed_name(command: &str) -> String {
    command.strip_prefix("sh -c ").unwrap_or(command).to_owned()
}

/// An overlay as its chip and legend name it: its run, and the checkpoint
/// (or job) it was made on.
pub(super) fn overlay_name(trace: &Trace) -> String {
    let place = std::path::Path::new(&trace.checkpoint)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty());
    let label = crate::units::Shown::new(&trace.label);
    match place {
        Some(place) => format!("{label} on {}", crate::units::Shown::new(&place)),
        None => label.into_string(),
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
    last.filter(|_| walk_view)
        .map(|l| (&*l.trace, l.start_secs))
}
