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
use crate::profile::analysis::hosts::{MergeError, MergedJournals};
use crate::profile::analysis::recording::Recording;
use crate::profile::capture::{RecordError, Update};
use crate::profile::{self, Finding, Sampler, Timeline, Trace, Transform, WalkOutcome};
use crate::units::human_bytes;
use crate::worker::CancelToken;

use super::Dialog;
use super::commands::{AppCommand, CommandSender};
use super::record::{FormKind, LiveRecording, RecordForm};

mod plots;
mod recordings;
mod side;

pub(super) use plots::{marker_times, sample_line, samples_top_mib};

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

/// A trace file read and parsed on a `trace-load` thread.
struct TraceLoad {
    path: PathBuf,
    result: std::sync::mpsc::Receiver<Loaded>,
}

/// What a loading thread sends: one trace, or the journals of one job's
/// hosts merged.
pub(in crate::app) enum Loaded {
    One(LoadedTrace),
    Several(LoadedTraces),
}

/// Journals merged, or why not (one line, naming the file).
pub(in crate::app) type LoadedTraces = Result<MergedJournals, MergeError>;

/// Reads the journals at `paths` and merges them (on a loading thread).
pub(in crate::app) fn read_traces(paths: &[PathBuf]) -> LoadedTraces {
    crate::profile::analysis::hosts::merge_journals(paths)
}

/// A trace as read: with its recording when it is one (the summary's
/// figures, computed on the reading thread: a long recording's replay is
/// not a frame's work).
pub(in crate::app) type LoadedTrace = Result<(Trace, Option<Recording>), TraceError>;

/// Reads the trace at `path`, and its recording when it is one.
pub(in crate::app) fn read_trace(path: &std::path::Path) -> LoadedTrace {
    let trace = Trace::load(path)?;
    let recording = trace
        .job
        .is_some()
        .then(|| Recording::from_trace(trace.clone()));
    Ok((trace, recording))
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
            trace,
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
                    recording.exit.map_or_else(
                        || "detached".to_owned(),
                        crate::profile::analysis::recording::JobExit::describe
                    )
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
            trace,
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
            trace,
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
    /// A path inside the open checkpoint or over a checkpoint file is
    /// refused; an existing file is replaced only when `replace` (a file
    /// dialog asked already), else the panel asks first.
    pub(super) fn save_trace(
        &mut self,
        path: &std::path::Path,
        inputs: &ProfilerInputs<'_>,
        replace: bool,
    ) {
        self.confirm_overwrite = None;
        let inputs_read: Vec<&std::path::Path> =
            inputs.checkpoint.iter().map(|c| c.root()).collect();
        let out = match crate::files::check_output(path, &inputs_read) {
            Ok(out) => out,
            Err(err) => {
                self.message = Some(crate::units::Shown::new(&err.to_string()).into_string());
                return;
            }
        };
        if !replace && std::fs::symlink_metadata(path).is_ok() {
            self.message = Some(format!(
                "{} exists: replace it?",
                crate::units::Shown::new(&path.display().to_string())
            ));
            self.confirm_overwrite = Some(path.to_path_buf());
            return;
        }
        self.message = Some(
            crate::units::Shown::new(&match self.trace_to_save(inputs).save(&out) {
                Ok(()) => format!("trace saved to {}", path.display()),
                Err(err) => err.to_string(),
            })
            .into_string(),
        );
    }

    /// A saved trace is loading (`spawned`: its `trace-load` thread's
    /// answer); it is overlaid on the walk view when it is in.
    pub(super) fn load_trace(
        &mut self,
        path: &std::path::Path,
        spawned: std::io::Result<std::sync::mpsc::Receiver<Loaded>>,
    ) {
        match spawned {
            Ok(result) => {
                self.message = Some(format!("loading {}…", path.display()));
                self.loading = Some(TraceLoad {
                    path: path.to_path_buf(),
                    result,
                });
            }
            // No thread to be had: read it here rather than not at all.
            Err(_) => self.loaded(read_trace(path)),
        }
    }

    /// Opens what the trace path field names: one trace, or the journals a
    /// pattern matches, merged.
    fn open_typed(&mut self, path: &std::path::Path, commands: &CommandSender) {
        match typed_paths(path) {
            Ok(paths) => commands.send(AppCommand::LoadTraces(paths)),
            Err(why) => self.message = Some(why.to_string()),
        }
    }

    /// Starts showing the journals at `paths` merged (`spawned`: the thread
    /// reading them).
    pub(super) fn load_traces(
        &mut self,
        paths: &[PathBuf],
        spawned: std::io::Result<std::sync::mpsc::Receiver<Loaded>>,
    ) {
        match spawned {
            Ok(result) => {
                self.message = Some(format!("merging {} journals…", paths.len()));
                self.loading = Some(TraceLoad {
                    path: paths.first().cloned().unwrap_or_default(),
                    result,
                });
            }
            Err(_) => self.loaded_several(read_traces(paths)),
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
        match result {
            Some(Loaded::One(result)) => self.loaded(result),
            Some(Loaded::Several(result)) => self.loaded_several(result),
            None => {
                self.message = Some(format!(
                    "{}: the loading thread stopped",
                    crate::units::Shown::new(&path.display().to_string())
                ));
            }
        }
        true
    }

    /// Shows journals merged: the first as a recording, the other ranks
    /// overlaid (in place of any overlays), the report above the plots.
    fn loaded_several(&mut self, result: LoadedTraces) {
        match result {
            Ok(merged) => {
                let count = merged.lanes.len() + 1;
                let shown = crate::units::Shown::new(&merged.trace.label).into_string();
                let overlaid: Vec<String> = merged.lanes.iter().map(overlay_name).collect();
                let mut lanes = vec![merged.trace.clone()];
                lanes.extend(merged.lanes.iter().cloned());
                lanes.sort_by(|a, b| a.label.cmp(&b.label));
                self.show_recording(Arc::new(merged.recording), merged.trace, 0.0);
                self.overlays = merged.lanes;
                self.message = Some(format!(
                    "merged {count} journals of one job: {shown} shown as the run, {} overlaid",
                    overlaid.join(", ")
                ));
                self.merged_report = merged.report;
                self.merged_lanes = lanes;
                self.below = Below::Ranks;
            }
            Err(err) => self.message = Some(err.to_string()),
        }
    }

    fn loaded(&mut self, result: LoadedTrace) {
        match result {
            Ok((trace, Some(recording))) => {
                self.message = Some(format!(
                    "opened {} ({} samples, {} events){}",
                    crate::units::Shown::new(&trace.label),
                    trace.samples.len(),
                    trace.events.len(),
                    if recording.cut_short {
                        ": the recorder was killed before the job ended"
                    } else {
                        ""
                    }
                ));
                self.show_recording(Arc::new(recording), trace, 0.0);
            }
            Ok((trace, None)) => {
                self.message = Some(format!(
                    "overlaid {} ({} samples, {} events)",
                    crate::units::Shown::new(&trace.label),
                    trace.samples.len(),
                    trace.events.len()
                ));
                self.overlays.push(trace);
                self.walk_view = true;
            }
            Err(err) => {
                self.message = Some(crate::units::Shown::new(&err.to_string()).into_string());
            }
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
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn selected_moment(&self) -> Option<f64> {
        self.selected_secs
    }

    /// The merged report shown (journals of several hosts).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn merged_report(&self) -> &[String] {
        &self.merged_report
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
        if let Some(i) = remove {
            self.overlays.remove(i);
        }
        if !self.overlays.is_empty()
            && ui
                .small_button("Clear overlays")
                .on_hover_text("Remove every overlaid trace")
                .clicked()
        {
            self.overlays.clear();
        }
    }

    /// The walk and record controls, the job's output, the limits, the
    /// trace buttons and the last message.
    fn controls_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        if inputs.checkpoint.is_some() {
            self.walk_controls_ui(ui, inputs);
        } else {
            ui.horizontal_wrapped(|ui| {
                ui.label("Open a checkpoint to walk it, or record a job of your own:");
                self.record_buttons_ui(ui);
            });
        }
        self.record_status_ui(ui, inputs.commands);
        self.output_ui(ui);
        ui.separator();
        self.limits_ui(ui, inputs);
        ui.separator();
        self.trace_controls_ui(ui, inputs.commands);
        if let Some(message) = &self.message {
            ui.label(message);
        }
    }

    /// The recorded job's output (stdout and stderr, the last lines), while
    /// it runs and after.
    fn output_ui(&self, ui: &mut egui::Ui) {
        let lines: Vec<&crate::profile::trace::job_end::OutputLine> =
            match (&self.recording, &self.last) {
                (Some(live), _) => live.output.iter().collect(),
                (
                    None,
                    Some(FinishedRun {
                        run: Run::Record(recording),
                        ..
                    }),
                ) => recording.output.iter().collect(),
                _ => return,
            };
        if lines.is_empty() {
            return;
        }
        egui::CollapsingHeader::new(format!(
            "Output of the job (last {} line{})",
            lines.len(),
            if lines.len() == 1 { "" } else { "s" }
        ))
        .id_salt("job-output")
        .default_open(true)
        .show(ui, |ui| {
            egui::ScrollArea::vertical()
                .id_salt("job-output-lines")
                .max_height(140.0)
                .stick_to_bottom(true)
                .auto_shrink([false, true])
                .show(ui, |ui| {
                    let warn = ui.visuals().warn_fg_color;
                    for line in lines {
                        let text =
                            egui::RichText::new(crate::units::Shown::new(&line.text)).monospace();
                        ui.label(if line.stderr { text.color(warn) } else { text });
                    }
                });
        });
    }

    /// Opens the record form (`attach`: the attach form), unless a
    /// recording runs (the forms are off then, as their buttons are).
    pub(super) fn open_record_form(&mut self, attach: bool) {
        if self.recording.is_none() {
            self.record_form.open(if attach {
                FormKind::Attach
            } else {
                FormKind::Command
            });
        }
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
    fn record_status_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        if let Some(live) = &mut self.recording {
            ui.horizontal_wrapped(|ui| {
                // A still mark, not a spinner: a spinner redraws the window
                // every frame, which a recorded job on a small machine pays
                // for (the window redraws a live recording a few times a
                // second, when samples come).
                ui.colored_label(egui::Color32::from_rgb(235, 60, 60), "REC");
                ui.label(live.status_text());
                let stop = ui
                    .button("Stop")
                    .on_hover_text("Send the job SIGINT (again: SIGTERM, then SIGKILL); the recording keeps what it saw. Attached: detach.");
                if stop.clicked() {
                    live.stopping = true;
                    commands.send(AppCommand::StopRecording);
                }
                let ask = ui
                    .button("Who holds it now?")
                    .on_hover_text("Ask the job's Python probe for a held-by walk now: the variables keeping MLX's memory alive (select the moment to see it).");
                if ask.clicked() {
                    commands.send(AppCommand::AskWhoHolds);
                }
            });
            // Keep the elapsed time moving should samples stop coming (the
            // recorder's wakes redraw a live recording a few times a second).
            ui.ctx().request_repaint_after(Duration::from_secs(1));
        }
        if let Some((target, checkpoint)) = self.record_form.ui(ui.ctx()) {
            commands.send(AppCommand::Record(target, checkpoint));
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
                    Some(bytes) if bytes > 0 => {
                        inputs.commands.send(AppCommand::SetMemoryLimit(bytes));
                    }
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
                    Some(bytes) => inputs.commands.send(AppCommand::SetCacheLimit(bytes)),
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
                let interval = Duration::from_millis(self.interval_ms);
                inputs
                    .commands
                    .send(AppCommand::SetSampleInterval(interval));
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

    fn trace_controls_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        ui.horizontal_wrapped(|ui| {
            if ui
                .button("Save trace…")
                .on_hover_text(
                    "The last walk (or the whole session before any walk), as JSON or CSV",
                )
                .clicked()
            {
                commands.send(AppCommand::Dialog(Dialog::SaveTrace));
            }
            if ui
                .button("Open traces…")
                .on_hover_text(
                    "A walk's trace (from the app or `weightscope walk --csv/--trace`) is overlaid; a recording (`weightscope record --trace`, a journal cut short included) opens as a run: its lines, stacks, findings. Several journals of one job's ranks (one per host) open merged: aligned by their collectives, each rank overlaid, the peak, stragglers and ranks left waiting said",
                )
                .clicked()
            {
                commands.send(AppCommand::Dialog(Dialog::OpenTrace));
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
                commands.send(AppCommand::SaveTrace {
                    path: path.clone(),
                    replace: false,
                });
            }
            if let Some(existing) = self.confirm_overwrite.clone() {
                if ui
                    .button("Replace")
                    .on_hover_text("Write the trace over the existing file")
                    .clicked()
                {
                    commands.send(AppCommand::SaveTrace {
                        path: existing,
                        replace: true,
                    });
                }
                if ui.button("Keep it").clicked() {
                    self.confirm_overwrite = None;
                    self.message = Some("nothing saved; the existing file is kept".into());
                }
            }
            if ui
                .add_enabled(has_path, egui::Button::new("Open from path"))
                .on_hover_text(
                    "A walk's trace is overlaid; a recording opens as a run; a pattern (rank-*.jsonl) opens the journals of one job's hosts merged",
                )
                .clicked()
            {
                self.open_typed(&path, commands);
            }
            ui.separator();
            if ui
                .checkbox(&mut self.walk_view, "Last run view")
                .on_hover_text(
                    "The last walk or recording and the overlaid traces, on one clock from its start (off: the whole session)",
                )
                .changed()
            {
                self.run_changed();
            }
            if let Some(last) = &self.last
                && ui
                    .small_button("Overlay this run")
                    .on_hover_text("Keep the last run on the plot, dashed, to compare the next runs of this checkpoint with")
                    .clicked()
            {
                self.overlays.push(last.trace.clone());
            }
            self.overlay_chips_ui(ui);
        });
    }
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

/// The most journals a pattern opens merged.
const MOST_MERGED: usize = 256;

/// The trace path field's files: the path itself, or the files a pattern
/// in its last part (`*`, `?`, `[...]`) names, in name order.
fn typed_paths(path: &std::path::Path) -> Result<Vec<PathBuf>, MergeError> {
    let text = path.to_string_lossy();
    let pattern = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains(['*', '?', '[']));
    if !pattern {
        return Ok(vec![path.to_path_buf()]);
    }
    let shown = crate::units::Shown::new(&text).into_string();
    let matches = glob::glob(&text).map_err(|e| MergeError::Pattern {
        pattern: shown.clone(),
        why: e.to_string(),
    })?;
    let mut paths: Vec<PathBuf> = matches
        .filter_map(Result::ok)
        .filter(|p| p.is_file())
        .take(MOST_MERGED + 1)
        .collect();
    paths.sort();
    match paths.len() {
        0 => Err(MergeError::NoMatch { pattern: shown }),
        n if n > MOST_MERGED => Err(MergeError::TooMany {
            pattern: shown,
            most: MOST_MERGED,
        }),
        _ => Ok(paths),
    }
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
    last.filter(|_| walk_view).map(|l| (&l.trace, l.start_secs))
}
