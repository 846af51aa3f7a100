//! The diff tab: compare the open checkpoint (A, through its view) with
//! another (B, through its own), one tensor at a time on the MLX worker, with
//! progress, cancel and a sortable result table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::units::Shown;
use crate::weights::{DiffReport, PairDetail, Progress, ViewChoice};
use crate::worker::{CancelToken, RequestError};

mod pair;
mod report;
mod table;

use super::commands::{AppCommand, CommandSender};
use super::job_view::JobView;

/// Columns the result table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum DiffSort {
    /// A's walk order.
    Order,
    Name,
    MaxAbs,
    /// Relative error (the default, worst first).
    #[default]
    Relative,
    Snr,
}

/// The diff panel: it owns what the tab shows and remembers, is fed the
/// worker's diff events by the app, and pushes its requests as commands.
pub(super) struct DiffPanel {
    other_input: String,
    view_input: String,
    /// The running (or last) diff.
    job: JobView,
    report: Option<Box<DiffReport>>,
    sort: DiffSort,
    descending: bool,
    /// Positions in `report.common`, sorted.
    rows: Vec<usize>,
    /// Show only tensors whose values differ.
    only_differing: bool,
    /// Focus B's path field in the next frame (Ctrl+Shift+D).
    focus_other: bool,
    /// B and its view as the shown report compared them (a row opens
    /// against these, whatever the fields say now).
    compared: Option<(PathBuf, ViewChoice)>,
    /// Each way B stores tensors, with its typical (median) error.
    typical: HashMap<String, f64>,
    /// The opened row.
    detail: Detail,
    /// Heatmap textures of opened rows.
    textures: super::heatmap::Heatmaps,
    /// Counts rows opened: part of the textures' keys.
    opened: u64,
    /// The error heatmap's cells: mean or largest |a - b|.
    pooling: super::heatmap::Pooling,
    /// The keyboard's row (a position in `rows`).
    cursor: Option<usize>,
}

/// The row opened beside the table.
#[derive(Default)]
enum Detail {
    #[default]
    Nothing,
    Pending {
        name: String,
        since: Instant,
    },
    Ready(Box<PairDetail>),
    Failed {
        name: String,
        error: String,
    },
}

impl Default for DiffPanel {
    fn default() -> Self {
        Self {
            other_input: String::new(),
            view_input: String::new(),
            job: JobView::default(),
            report: None,
            sort: DiffSort::Relative,
            descending: true,
            rows: Vec::new(),
            only_differing: false,
            focus_other: false,
            compared: None,
            typical: HashMap::new(),
            detail: Detail::Nothing,
            textures: HashMap::new(),
            opened: 0,
            pooling: super::heatmap::Pooling::Mean,
            cursor: None,
        }
    }
}

impl DiffPanel {
    fn resort(&mut self) {
        // The keyboard's row is a position in the rows: it goes with them.
        self.cursor = None;
        let Some(report) = &self.report else {
            self.rows.clear();
            return;
        };
        let common = &report.common;
        self.rows = (0..common.len())
            .filter(|&i| {
                let c = &common[i];
                !self.only_differing || c.max_abs_diff != 0.0 || c.nan || c.inf
            })
            .collect();
        let figure: fn(&crate::weights::Common) -> f64 = match self.sort {
            DiffSort::Order => |_| 0.0,
            DiffSort::Name => {
                self.rows
                    .sort_by(|&a, &b| common[a].name.cmp(&common[b].name));
                |_| 0.0
            }
            DiffSort::MaxAbs => |c| c.max_abs_diff,
            DiffSort::Relative => |c| c.rel_error,
            DiffSort::Snr => |c| c.snr_db,
        };
        if !matches!(self.sort, DiffSort::Order | DiffSort::Name) {
            self.rows
                .sort_by(|&a, &b| figure(&common[a]).total_cmp(&figure(&common[b])));
        }
        if self.descending {
            self.rows.reverse();
        }
    }
}

impl DiffPanel {
    /// Whether a diff is running.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn is_running(&self) -> bool {
        self.job.is_running()
    }

    /// The last diff's report.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn report(&self) -> Option<&DiffReport> {
        self.report.as_deref()
    }

    /// B's path, as chosen in a dialog.
    pub(super) fn set_other(&mut self, path: &std::path::Path) {
        self.other_input = path.display().to_string();
    }

    /// Focuses B's path field, its text selected (Ctrl+Shift+D).
    pub(super) fn focus_other(&mut self) {
        self.focus_other = true;
    }

    /// Says why no B was chosen.
    pub(super) fn nothing_chosen(&mut self) {
        self.job.fail(
            "No folder was chosen. If no dialog appeared, type B's path in the field.".into(),
        );
    }

    /// Asks for a diff of the open checkpoint against `other`, with B's
    /// view from the view field; what the last diff showed goes.
    fn request(&mut self, other: PathBuf, commands: &CommandSender) {
        let view = ViewChoice::parse(match self.view_input.trim() {
            "" => "auto",
            text => text,
        });
        self.job.clear_error();
        self.report = None;
        self.rows.clear();
        self.detail = Detail::Nothing;
        self.compared = Some((other.clone(), view.clone()));
        commands.send(AppCommand::Diff { other, view });
    }

    /// The app sent the diff to the worker with `cancel` (the Cancel
    /// button's): this panel shows it running.
    pub(super) fn started(&mut self, cancel: CancelToken) {
        self.job.started(cancel);
    }

    /// The worker compared one more tensor.
    pub fn progress(&mut self, progress: Progress) {
        self.job.progress(progress);
    }

    /// The worker's diff ended (or B could not be opened).
    pub fn finished(&mut self, result: Result<Box<DiffReport>, RequestError>) {
        if let Some(report) = self.job.finished(result) {
            self.typical = report
                .typical_by_mode()
                .into_iter()
                .map(|(mode, _, median)| (mode, median))
                .collect();
            self.report = Some(report);
            self.resort();
        }
    }

    /// The app asked the worker to open `name` of the diff.
    pub(super) fn detail_pending(&mut self, name: &str) {
        self.detail = Detail::Pending {
            name: name.to_owned(),
            since: Instant::now(),
        };
    }

    /// The worker opened `name` (or could not).
    pub(super) fn detail_arrived(
        &mut self,
        name: &str,
        result: Result<Box<PairDetail>, RequestError>,
    ) {
        // Only the row asked for last: an older answer is dropped.
        if !matches!(&self.detail, Detail::Pending { name: asked, .. } if asked == name) {
            return;
        }
        self.opened += 1;
        self.textures.clear();
        self.detail = match result {
            Ok(detail) => Detail::Ready(detail),
            Err(error) => Detail::Failed {
                name: name.to_owned(),
                error: error.to_string(),
            },
        };
    }

    /// The opened row, when it has arrived.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn detail(&self) -> Option<&PairDetail> {
        match &self.detail {
            Detail::Ready(d) => Some(d),
            _ => None,
        }
    }

    /// Whether an opened row is being computed.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn detail_is_pending(&self) -> bool {
        matches!(self.detail, Detail::Pending { .. })
    }

    /// Draws the tab; `a`: the open checkpoint's folder (A), if any; what
    /// the user asks for goes to `commands`.
    pub fn ui(&mut self, ui: &mut egui::Ui, a: Option<&Path>, commands: &CommandSender) {
        let Some(a) = a else {
            ui.label("Open a checkpoint (A), then choose B to compare it with.");
            return;
        };
        ui.label(format!(
            "A: {} (the open checkpoint, through the view above)",
            Shown::new(&a.display().to_string())
        ));
        ui.horizontal_wrapped(|ui| {
            let field = crate::app::widgets::labelled_field(
                ui,
                "Compare with (B)",
                &mut self.other_input,
                "folder or .safetensors file; Enter runs the diff",
                360.0_f32.min(ui.available_width() - 80.0).max(120.0),
            );
            if std::mem::take(&mut self.focus_other) {
                super::widgets::focus_selecting_all(ui, &field, &mut self.other_input, "");
            }
            let entered = field.lost_focus()
                && ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Enter));
            if ui.button("Choose B…").clicked() {
                commands.send(AppCommand::Dialog(super::Dialog::PickDiffFolder));
            }
            crate::app::widgets::labelled_field(
                ui,
                "B's view",
                &mut self.view_input,
                "auto, identity, qwen3-next, llama-cpp or a view file",
                200.0,
            );
            if self.job.is_running() {
                self.job.cancel_button(ui, "Cancel diff", "");
            } else {
                let has_b = !self.other_input.trim().is_empty();
                if ui
                    .add_enabled(has_b, egui::Button::new("Run diff"))
                    .on_hover_text("A is the open checkpoint, through the view above")
                    .clicked()
                    || (entered && has_b)
                {
                    let other = PathBuf::from(self.other_input.trim());
                    self.request(other, commands);
                }
            }
        });
        self.job.progress_ui(ui, "");
        self.job.error_ui(ui, "diff");
        if self.report.is_none() {
            return;
        }
        // The opened row beside the results (above them on a narrow window).
        if !matches!(self.detail, Detail::Nothing) {
            let width = ui.available_width();
            if width < 900.0 && ui.available_height() < 420.0 {
                // A small window (800x500): the opened row takes the tab,
                // the results come back with the button (or Esc), rather
                // than both squeezed over each other.
                if crate::app::widgets::explained_button(ui, "Back to the results", "Esc") {
                    self.detail = Detail::Nothing;
                    return;
                }
                egui::ScrollArea::vertical()
                    .id_salt("diff-detail-small")
                    .auto_shrink(false)
                    .show(ui, |ui| self.detail_ui(ui));
                return;
            }
            if width >= 900.0 {
                egui::Panel::right("diff-detail")
                    .default_size(width * 0.42)
                    .size_range(320.0..=width * 0.6)
                    .show(ui, |ui| self.detail_ui(ui));
            } else {
                egui::Panel::bottom("diff-detail")
                    .default_size(ui.available_height() * 0.5)
                    .show(ui, |ui| self.detail_ui(ui));
            }
        }
        self.results_ui(ui, commands);
    }
}
