//! Traces and journals the profiler saves and opens: read on a
//! `trace-load` thread, merged when a pattern names several journals.

use std::path::PathBuf;
use std::sync::Arc;

use super::{
    AppCommand, Below, CommandSender, Dialog, MergeError, MergedChoice, MergedJournals,
    ProfilerInputs, ProfilerPanel, Recording, Trace, TraceError, overlay_name,
};
use crate::profile::analysis::journals::{ShownLane, lane_label};

/// A trace to write on a `trace-write` thread ([`TraceWrite::run`]): saved
/// as weightscope's own trace, or exported for another viewer.
pub(in crate::app) struct TraceWrite {
    source: WriteSource,
    kind: WriteKind,
    out: crate::files::Output,
    path: PathBuf,
}

/// What a [`TraceWrite`] writes.
enum WriteKind {
    /// The trace itself (CSV or JSON by the path's extension).
    Save,
    /// In a viewer's format (`weightscope export`'s code).
    Export(crate::profile::export::Format),
}

/// What a write holds: one trace (named as the window names it), or the
/// journals of a merged view, read from their files.
enum WriteSource {
    Trace(String, Arc<Trace>),
    Journals(Vec<PathBuf>),
}

impl TraceWrite {
    /// Writes it (on its thread); returns the line to show.
    pub(in crate::app) fn run(self) -> String {
        let text = match self.kind {
            WriteKind::Save => match self.source {
                WriteSource::Trace(_, trace) => match trace.save(&self.out) {
                    Ok(()) => format!("trace saved to {}", self.path.display()),
                    Err(err) => err.to_string(),
                },
                WriteSource::Journals(_) => "nothing to save".to_owned(),
            },
            WriteKind::Export(format) => export_text(self.source, format, &self.out, &self.path),
        };
        crate::units::Shown::new(&text).into_string()
    }
}

/// Exports `source` in `format` to `out` (named `path`); the line to show.
fn export_text(
    source: WriteSource,
    format: crate::profile::export::Format,
    out: &crate::files::Output,
    path: &std::path::Path,
) -> String {
    use crate::profile::export::{Format, Weight, export};
    let traces = match source {
        // A copy only when the window still shows the trace, and made here,
        // on the writing thread.
        WriteSource::Trace(name, trace) => vec![(name, Arc::unwrap_or_clone(trace))],
        WriteSource::Journals(paths) => {
            let mut traces = Vec::with_capacity(paths.len());
            for path in &paths {
                match Trace::load(path) {
                    Ok(trace) => {
                        traces.push((crate::units::Shown::path(path).into_string(), trace));
                    }
                    Err(err) => return err.to_string(),
                }
            }
            traces
        }
    };
    let lanes = traces.len();
    let said = export(traces, format, Weight::HeldAtPeak)
        .map_err(|e| e.to_string())
        .and_then(|made| {
            out.write(&made.bytes).map_err(|e| e.to_string())?;
            Ok(made.stacks)
        });
    match said {
        Ok(stacks) => format!(
            "exported ({}{}) to {}{}",
            format.name(),
            if lanes > 1 {
                format!(", {lanes} journals merged")
            } else {
                String::new()
            },
            path.display(),
            if stacks == 0 && format != Format::Perfetto {
                ": the flame graph is empty (nothing grown was still held at the peak)"
            } else {
                ""
            }
        ),
        Err(err) => err,
    }
}

/// A trace file read and parsed on a `trace-load` thread.
pub(super) struct TraceLoad {
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

/// Reads the journals at `paths` and merges them, `shown` whole (on a
/// loading thread).
pub(in crate::app) fn read_traces(paths: &[PathBuf], shown: ShownLane) -> LoadedTraces {
    crate::profile::analysis::journals::merge_journals(paths, shown)
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

impl ProfilerPanel {
    /// The trace "Save trace…" writes: the last walk when there is one, else
    /// the whole session.
    pub(in crate::app) fn trace_to_save(&self, inputs: &ProfilerInputs<'_>) -> Arc<Trace> {
        if let Some(last) = &self.last {
            return Arc::clone(&last.trace);
        }
        let mut trace = inputs.timeline.to_trace("session");
        trace.device = inputs.device_name();
        Arc::new(trace)
    }

    /// Writes the trace to `path` (CSV or JSON by extension) and says so.
    /// A path inside the open checkpoint or over a checkpoint file is
    /// refused; an existing file is replaced only when `replace` (a file
    /// dialog asked already), else the panel asks first.
    #[must_use = "the write is started by the caller"]
    pub(in crate::app) fn save_trace(
        &mut self,
        path: &std::path::Path,
        inputs: &ProfilerInputs<'_>,
        replace: bool,
    ) -> Option<TraceWrite> {
        self.confirm_overwrite = None;
        let inputs_read: Vec<&std::path::Path> =
            inputs.checkpoint.iter().map(|c| c.root()).collect();
        let out = match crate::files::check_output(path, &inputs_read) {
            Ok(out) => out,
            Err(err) => {
                self.message = Some(crate::units::Shown::new(&err.to_string()).into_string());
                return None;
            }
        };
        if !replace && std::fs::symlink_metadata(path).is_ok() {
            self.message = Some(format!(
                "{} exists: replace it?",
                crate::units::Shown::new(&path.display().to_string())
            ));
            self.confirm_overwrite = Some(path.to_path_buf());
            return None;
        }
        let trace = self.trace_to_save(inputs);
        self.message = Some(format!(
            "saving the trace to {}…",
            crate::units::Shown::new(&path.display().to_string())
        ));
        Some(TraceWrite {
            source: WriteSource::Trace(trace.label.clone(), trace),
            kind: WriteKind::Save,
            out,
            path: path.to_path_buf(),
        })
    }

    /// What exporting to `path` in `format` will write: what "Save trace"
    /// would save, or the merged journals shown (all of them, read again
    /// from their files as `weightscope export` reads them), by the code of
    /// `weightscope export`; `None` (and why, said) when the output is
    /// refused: inside the open checkpoint, or a file already there unless
    /// `replace` (a file dialog asked).
    pub(in crate::app) fn export_job(
        &mut self,
        path: &std::path::Path,
        format: crate::profile::export::Format,
        replace: bool,
        inputs: &ProfilerInputs<'_>,
    ) -> Option<TraceWrite> {
        let shown = |text: String| Some(crate::units::Shown::new(&text).into_string());
        let inputs_read: Vec<&std::path::Path> =
            inputs.checkpoint.iter().map(|c| c.root()).collect();
        let out = match crate::files::check_output(path, &inputs_read) {
            Ok(out) => out,
            Err(err) => {
                self.message = shown(err.to_string());
                return None;
            }
        };
        if !replace && std::fs::symlink_metadata(path).is_ok() {
            self.message = shown(format!(
                "{} exists: nothing exported (choose another name)",
                path.display()
            ));
            return None;
        }
        let source = if let Some(choice) = &self.merged_choice {
            WriteSource::Journals(choice.paths.clone())
        } else {
            let trace = self.trace_to_save(inputs);
            WriteSource::Trace(trace.label.clone(), trace)
        };
        self.message = shown(format!(
            "exporting ({}) to {}…",
            format.name(),
            path.display()
        ));
        Some(TraceWrite {
            source,
            kind: WriteKind::Export(format),
            out,
            path: path.to_path_buf(),
        })
    }

    /// A trace is being saved or exported (`spawned`: its `trace-write`
    /// thread's answer, the line to show).
    pub(in crate::app) fn writing(
        &mut self,
        spawned: std::io::Result<std::sync::mpsc::Receiver<String>>,
    ) {
        match spawned {
            Ok(answer) => self.exported = Some(answer),
            Err(err) => {
                self.message = Some(format!("cannot start the trace's writing thread: {err}"));
            }
        }
    }

    /// A saved trace is loading (`spawned`: its `trace-load` thread's
    /// answer); it is overlaid on the walk view when it is in.
    pub(in crate::app) fn load_trace(
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
    pub(super) fn open_typed(&mut self, path: &std::path::Path, commands: &CommandSender) {
        match typed_paths(path) {
            Ok(paths) => commands.send(AppCommand::LoadTraces(paths)),
            Err(why) => self.message = Some(why.to_string()),
        }
    }

    /// Starts showing the journals at `paths` merged (`spawned`: the thread
    /// reading them).
    pub(in crate::app) fn load_traces(
        &mut self,
        paths: &[PathBuf],
        shown: ShownLane,
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
            Err(_) => self.loaded_several(read_traces(paths, shown)),
        }
    }

    /// Takes the loaded trace when its thread is done (`wait`: blocks until
    /// it is, for tests and scripted runs). Returns whether one was loading.
    pub(in crate::app) fn poll_trace_load(&mut self, wait: bool) -> bool {
        let exporting = self.poll_export(wait);
        let Some(load) = &self.loading else {
            return exporting;
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

    /// Shows journals merged: the chosen rank as a recording, the other
    /// ranks overlaid (in place of any overlays), the report above the
    /// plots.
    pub(super) fn loaded_several(&mut self, result: LoadedTraces) {
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
                self.merged_report = merged.merged.describe();
                self.merged_lanes = lanes;
                self.merged_choice = Some(MergedChoice {
                    paths: merged.paths,
                    names: merged
                        .merged
                        .lanes
                        .iter()
                        .map(|l| crate::units::Shown::new(&lane_label(l)).into_string())
                        .collect(),
                    shown: merged.shown,
                });
                self.below = Below::Ranks;
            }
            Err(err) => self.message = Some(err.to_string()),
        }
    }

    pub(super) fn loaded(&mut self, result: LoadedTrace) {
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

    /// The format picker and "Export to path".
    fn export_controls_ui(
        &mut self,
        ui: &mut egui::Ui,
        path: &std::path::Path,
        has_path: bool,
        commands: &CommandSender,
    ) {
        let format_label = ui.label("Export as");
        egui::ComboBox::from_id_salt("export-format")
            .selected_text(self.export_format.name())
            .show_ui(ui, |ui| {
                use crate::profile::export::Format;
                for format in [Format::Perfetto, Format::Speedscope, Format::Folded] {
                    ui.selectable_value(&mut self.export_format, format, format.name());
                }
            })
            .response
            .labelled_by(format_label.id);
        if ui
            .add_enabled(has_path, egui::Button::new("Export to path"))
            .on_hover_text(
                "What Save trace writes, for another viewer: Perfetto (chrome://tracing), speedscope, or folded stacks (flamegraph.pl); as `weightscope export` writes it",
            )
            .clicked()
        {
            commands.send(AppCommand::ExportTrace {
                path: path.to_path_buf(),
                format: self.export_format,
                replace: false,
            });
        }
        if crate::app::widgets::explained_button(
            ui,
            "Export…",
            "The same, to a file chosen in a dialog",
        ) {
            commands.send(AppCommand::Dialog(Dialog::ExportTrace(self.export_format)));
        }
    }

    /// Takes the export's answer when its thread is done (`wait`: blocks
    /// until it is). Returns whether one is still being written.
    fn poll_export(&mut self, wait: bool) -> bool {
        let Some(answer) = &self.exported else {
            return false;
        };
        let said = if wait {
            answer.recv().ok()
        } else {
            match answer.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => return true,
                other => other.ok(),
            }
        };
        self.exported = None;
        self.message =
            Some(said.unwrap_or_else(|| "the trace's writing thread stopped".to_owned()));
        false
    }

    /// Says why no trace file was chosen.
    pub(in crate::app) fn nothing_chosen(&mut self) {
        self.message = Some(
            "No file was chosen. If no dialog appeared, type a path in the trace path field."
                .into(),
        );
    }

    pub(super) fn trace_controls_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        ui.horizontal_wrapped(|ui| {
            if crate::app::widgets::explained_button(ui, "Save trace…", "The last walk (or the whole session before any walk), as JSON or CSV")
            {
                commands.send(AppCommand::Dialog(Dialog::SaveTrace));
            }
            if crate::app::widgets::explained_button(ui, "Open traces…", "A walk's trace (from the app or `weightscope walk --csv/--trace`) is overlaid; a recording (`weightscope record --trace`, a journal cut short included) opens as a run: its lines, stacks, findings. Several journals of one job's ranks (one per host) open merged: aligned by their collectives, each rank overlaid, the peak, stragglers and ranks left waiting said")
            {
                commands.send(AppCommand::Dialog(Dialog::OpenTrace));
            }
            crate::app::widgets::labelled_field(ui, "Trace path", &mut self.trace_path_input, "/tmp/walk.json or .csv", 260.0);
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
                if crate::app::widgets::explained_button(ui, "Replace", "Write the trace over the existing file")
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
            self.export_controls_ui(ui, &path, has_path, commands);
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
                self.overlays.push((*last.trace).clone());
            }
            self.overlay_chips_ui(ui);
        });
    }
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
