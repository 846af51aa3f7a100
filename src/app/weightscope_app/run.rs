//! Commands run at the end of a frame, and the requests they send to the
//! worker and the recorder.

use crate::app::background;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::profile::analysis::journals::ShownLane;
use crate::profile::capture::{RecordControl, RecordError, RecordOptions, Target};
use crate::profile::export::Format;
use crate::worker::Request;

use crate::app::commands::AppCommand;

use super::{RecorderHandle, Tab, WeightscopeApp};

impl WeightscopeApp {
    /// Runs every queued command, oldest first (after each frame).
    /// The Profiler with the record form (`attach`: the attach form) open.
    pub(in crate::app) fn open_record_form(&mut self, attach: bool) {
        self.tab = Tab::Profiler;
        self.profiler.open_record_form(attach);
    }

    pub(in crate::app) fn run_commands(&mut self) {
        while let Ok(command) = self.queue.try_recv() {
            self.run(command);
        }
    }

    /// The one place commands are carried out: worker commands, jobs with
    /// the cancel token the app makes for them, dialogs, tabs.
    pub(in crate::app) fn run(&mut self, command: AppCommand) {
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
            AppCommand::SaveTrace { path, replace } => self.save_trace(&path, replace),
            AppCommand::ExportTrace {
                path,
                format,
                replace,
            } => self.export_trace(&path, format, replace),
            AppCommand::LoadTrace(path) => self.load_traces(vec![path]),
            AppCommand::LoadTraces(paths) => self.load_traces(paths),
            AppCommand::ShowMergedLane { paths, lane } => {
                self.merge_traces(&paths, ShownLane::Index(lane));
            }
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
    pub(in crate::app) fn open(&mut self, path: PathBuf) {
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

    /// Loads one trace (overlaid, or a recording shown as a run) or merges
    /// several journals of one job, on a thread of its own.
    pub(in crate::app) fn load_traces(&mut self, mut paths: Vec<PathBuf>) {
        if paths.len() == 1 {
            let path = paths.swap_remove(0);
            let loading = background::load_trace(path.clone(), Arc::clone(&self.wake));
            self.profiler.load_trace(&path, loading);
        } else {
            self.merge_traces(&paths, ShownLane::Peak);
        }
    }

    /// Exports the profiler's trace (or merged journals) to `path` on a
    /// thread, when the output is allowed.
    fn export_trace(&mut self, path: &std::path::Path, format: Format, replace: bool) {
        let job = self
            .with_profiler(|profiler, inputs| profiler.export_job(path, format, replace, inputs));
        self.write_trace(job);
    }

    /// Saves the profiler's trace to `path` on a thread, when allowed.
    fn save_trace(&mut self, path: &std::path::Path, replace: bool) {
        let job = self.with_profiler(|profiler, inputs| profiler.save_trace(path, inputs, replace));
        self.write_trace(job);
    }

    /// Saves or exports on the `trace-write` thread, when allowed.
    fn write_trace(&mut self, job: Option<crate::app::profiler::TraceWrite>) {
        if let Some(job) = job {
            let answer = background::write_trace(job, Arc::clone(&self.wake));
            self.profiler.writing(answer);
        }
    }

    /// Reads and merges the journals at `paths` on a thread, `shown` whole.
    fn merge_traces(&mut self, paths: &[PathBuf], shown: ShownLane) {
        let loading = background::load_traces(paths.to_vec(), shown, Arc::clone(&self.wake));
        self.profiler.load_traces(paths, shown, loading);
    }

    /// Keeps the previews within `bytes` from now on, and in the settings.
    pub(in crate::app) fn set_preview_budget(&mut self, bytes: u64) {
        self.settings.preview_budget = Some(bytes);
        self.settings_dirty = true;
        self.send(Request::SetPreviewBudget(bytes));
    }

    /// The most a preview the selection merely moved onto may take: the
    /// preview budget, and what MLX's memory limit leaves.
    pub(in crate::app) fn preview_limit_bytes(&self) -> u64 {
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
    pub(in crate::app) fn preview(&mut self, name: &str, bytes: u64) {
        let limit = self.preview_limit_bytes();
        if bytes <= limit {
            self.materialize(name);
        } else {
            self.inspector.held_back(name, bytes, limit);
        }
    }

    /// Materializes `name` on the worker; the inspector shows it when ready.
    pub(in crate::app) fn materialize(&mut self, name: &str) {
        match self.worker.try_send(Request::Materialize(name.to_owned())) {
            Ok(()) => self.inspector.pending(name),
            Err(err) => self.inspector.failed(name, err.to_string()),
        }
    }

    /// Queues `command` without ever blocking the frame; a full queue or a
    /// stopped worker is said in the error line.
    pub(in crate::app) fn send(&mut self, command: Request) {
        if let Err(err) = self.worker.try_send(command) {
            self.open_error = Some(err.to_string());
        }
    }

    /// What the palette's keys, the palette and the top bar ask that needs
    /// an open checkpoint; without one, says so in the notice line.
    pub(in crate::app) fn needs_checkpoint(&mut self) -> bool {
        if self.checkpoint.is_none() {
            self.notice = Some("Open a checkpoint first (Ctrl+O).".to_owned());
            return false;
        }
        true
    }

    /// [`AppCommand::StartWalk`].
    pub(in crate::app) fn walk_from_keys(&mut self) {
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
    pub(in crate::app) fn check_values(&mut self) {
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
    pub(in crate::app) fn select_stored(&mut self, stored: &str) {
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
    pub(in crate::app) fn select_tensor(&mut self, position: usize) {
        self.tab = Tab::Tensors;
        if let Some(checkpoint) = self.checkpoint.clone()
            && let Some(name) = self.tensors.select(&checkpoint, position)
        {
            let bytes = self.tensors.materialized_bytes(&checkpoint, position);
            self.preview(&name, bytes);
        }
    }

    /// Starts recording `target` on the `recorder` thread, measured against
    /// `checkpoint` (else the folder of the first shard the job opens); the
    /// profiler tab draws it live and shows its findings when it ends.
    pub(in crate::app) fn start_recording(&mut self, target: Target, checkpoint: Option<PathBuf>) {
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
}
