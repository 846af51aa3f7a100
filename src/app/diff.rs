//! The diff tab: compare the open checkpoint (A, through its view) with
//! another (B, through its own), one tensor at a time on the MLX worker, with
//! progress, cancel and a sortable result table.

use std::path::PathBuf;
use std::time::Instant;

use crate::weights::{DiffReport, Progress, ViewChoice};
use crate::worker::{CancelToken, JobError};

use super::commands::{AppCommand, CommandSender};

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
    running: Option<(Progress, Instant)>,
    report: Option<Box<DiffReport>>,
    error: Option<String>,
    sort: DiffSort,
    descending: bool,
    /// Positions in `report.common`, sorted.
    rows: Vec<usize>,
    /// Show only tensors whose values differ.
    only_differing: bool,
    /// The running diff's cancel token.
    cancel: Option<CancelToken>,
}

impl Default for DiffPanel {
    fn default() -> Self {
        Self {
            other_input: String::new(),
            view_input: String::new(),
            running: None,
            report: None,
            error: None,
            sort: DiffSort::Relative,
            descending: true,
            rows: Vec::new(),
            only_differing: false,
            cancel: None,
        }
    }
}

impl DiffPanel {
    fn resort(&mut self) {
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
        match self.sort {
            DiffSort::Order => {}
            DiffSort::Name => self
                .rows
                .sort_by(|&a, &b| common[a].name.cmp(&common[b].name)),
            DiffSort::MaxAbs => self
                .rows
                .sort_by(|&a, &b| common[a].max_abs_diff.total_cmp(&common[b].max_abs_diff)),
            DiffSort::Relative => self
                .rows
                .sort_by(|&a, &b| common[a].rel_error.total_cmp(&common[b].rel_error)),
            DiffSort::Snr => self
                .rows
                .sort_by(|&a, &b| common[a].snr_db.total_cmp(&common[b].snr_db)),
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
        self.running.is_some()
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

    /// Says why no B was chosen.
    pub(super) fn nothing_chosen(&mut self) {
        self.error =
            Some("No folder was chosen. If no dialog appeared, type B's path in the field.".into());
    }

    /// Asks for a diff of the open checkpoint against `other`, with B's
    /// view from the view field; what the last diff showed goes.
    fn request(&mut self, other: PathBuf, commands: &CommandSender) {
        let view = ViewChoice::parse(match self.view_input.trim() {
            "" => "auto",
            text => text,
        });
        self.error = None;
        self.report = None;
        self.rows.clear();
        commands.send(AppCommand::Diff { other, view });
    }

    /// The app sent the diff to the worker with `cancel` (the Cancel
    /// button's): this panel shows it running.
    pub(super) fn started(&mut self, cancel: CancelToken) {
        self.cancel = Some(cancel);
        self.running = Some((
            Progress {
                done: 0,
                total: 0,
                name: String::new(),
            },
            Instant::now(),
        ));
    }

    /// The worker compared one more tensor.
    pub fn progress(&mut self, progress: Progress) {
        if let Some((current, _)) = &mut self.running {
            *current = progress;
        }
    }

    /// The worker's diff ended (or B could not be opened).
    pub fn finished(&mut self, result: Result<Box<DiffReport>, JobError>) {
        self.running = None;
        match result {
            Ok(report) => {
                self.report = Some(report);
                self.resort();
            }
            Err(error) => self.error = Some(error.to_string()),
        }
    }

    /// Draws the tab for an open checkpoint (`has_checkpoint`); what the
    /// user asks for goes to `commands`.
    pub fn ui(&mut self, ui: &mut egui::Ui, has_checkpoint: bool, commands: &CommandSender) {
        if !has_checkpoint {
            ui.label("Open a checkpoint (A), then choose B to compare it with.");
            return;
        }
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("Compare with (B)");
            ui.add(
                egui::TextEdit::singleline(&mut self.other_input)
                    .hint_text("folder or .safetensors file")
                    .desired_width(360.0_f32.min(ui.available_width() - 80.0).max(120.0)),
            )
            .labelled_by(label.id);
            if ui.button("Choose B…").clicked() {
                commands.send(AppCommand::Dialog(super::Action::PickDiffFolder));
            }
            let label = ui.label("B's view");
            ui.add(
                egui::TextEdit::singleline(&mut self.view_input)
                    .hint_text("auto, identity, qwen3-next or a view file")
                    .desired_width(200.0),
            )
            .labelled_by(label.id);
            if self.running.is_some() {
                if ui.button("Cancel diff").clicked()
                    && let Some(token) = &self.cancel
                {
                    token.cancel();
                }
            } else {
                let has_b = !self.other_input.trim().is_empty();
                if ui
                    .add_enabled(has_b, egui::Button::new("Run diff"))
                    .on_hover_text("A is the open checkpoint, through the view above")
                    .clicked()
                {
                    let other = PathBuf::from(self.other_input.trim());
                    self.request(other, commands);
                }
            }
        });
        if let Some((p, since)) = &self.running {
            super::widgets::job_progress(ui, (p.done, p.total), "", *since, &p.name);
        }
        if let Some(error) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("diff: {error}"));
        }
        self.results_ui(ui);
    }

    fn results_ui(&mut self, ui: &mut egui::Ui) {
        let Some(report) = self.report.as_deref() else {
            return;
        };
        let differing = report.differing().count();
        ui.label(format!(
            "{} compared, {differing} differ; {} only in A, {} only in B, {} changed shape, {} failed{}",
            report.common.len(),
            report.only_in_a.len(),
            report.only_in_b.len(),
            report.changed.len(),
            report.failed.len(),
            if report.cancelled { "; cancelled" } else { "" }
        ));
        if let Some(overall) = report.overall_text() {
            ui.label(format!("Overall: {}", crate::units::printable(&overall)));
        }
        ui.label(format!(
            "Peak MLX active {} {} the bound {} (largest shard of A + of B {}, plus one band's decoding temporaries on each side)",
            crate::units::human_bytes(report.peak_mlx_active_bytes),
            if report.peak_mlx_active_bytes <= report.bound_bytes { "within" } else { "over" },
            crate::units::human_bytes(report.bound_bytes),
            crate::units::human_bytes(report.two_shards_bytes),
        ));
        for (title, names) in [
            ("Only in A", &report.only_in_a),
            ("Only in B", &report.only_in_b),
        ] {
            if !names.is_empty() {
                egui::CollapsingHeader::new(format!("{title} ({})", names.len()))
                    .id_salt(title)
                    .show(ui, |ui| {
                        for name in names.iter().take(1000) {
                            ui.monospace(name);
                        }
                    });
            }
        }
        if !report.changed.is_empty() {
            egui::CollapsingHeader::new(format!("Changed shape ({})", report.changed.len()))
                .id_salt("changed")
                .show(ui, |ui| {
                    for c in report.changed.iter().take(1000) {
                        ui.monospace(format!(
                            "{}: {} {:?} -> {} {:?}",
                            c.name, c.a_dtype, c.a_shape, c.b_dtype, c.b_shape
                        ));
                    }
                });
        }
        for f in &report.failed {
            ui.colored_label(
                ui.visuals().error_fg_color,
                format!("{}: {}", f.name, f.error),
            );
        }
        ui.separator();
        error_per_layer_ui(ui, report);
        ui.separator();
        self.table_ui(ui);
    }

    fn table_ui(&mut self, ui: &mut egui::Ui) {
        let mut sort_changed = false;
        ui.horizontal(|ui| {
            for (label, column) in [
                ("Order", DiffSort::Order),
                ("Name", DiffSort::Name),
                ("Relative error", DiffSort::Relative),
                ("SNR", DiffSort::Snr),
                ("Max |a-b|", DiffSort::MaxAbs),
            ] {
                let mark = match (self.sort == column, self.descending) {
                    (true, false) => " (asc)",
                    (true, true) => " (desc)",
                    (false, _) => "",
                };
                if ui.button(format!("{label}{mark}")).clicked() {
                    if self.sort == column {
                        self.descending = !self.descending;
                    } else {
                        self.sort = column;
                        self.descending = matches!(column, DiffSort::MaxAbs | DiffSort::Relative);
                    }
                    sort_changed = true;
                }
            }
            sort_changed |= ui
                .checkbox(&mut self.only_differing, "Only differing")
                .changed();
        });
        if sort_changed {
            self.resort();
        }
        let Some(report) = self.report.as_deref() else {
            return;
        };
        let rows = &self.rows;
        ui.label(
            egui::RichText::new(format!(
                "{:>10} {:>9} {:>9} {:>10}{:8}  {}",
                "rel error", "SNR dB", "cosine", "max |a-b|", "", "tensor (A dtype -> B dtype)"
            ))
            .monospace()
            .strong(),
        );
        let row_height = ui.text_style_height(&egui::TextStyle::Monospace) + 4.0;
        egui::ScrollArea::vertical()
            .id_salt("diff-scroll")
            .auto_shrink([false, false])
            .show_rows(ui, row_height, rows.len(), |ui, range| {
                for &i in &rows[range] {
                    let c = &report.common[i];
                    let flags = match (c.nan, c.inf) {
                        (true, true) => " NaN Inf",
                        (true, false) => " NaN",
                        (false, true) => " Inf",
                        (false, false) => "",
                    };
                    let snr = if c.snr_db.is_infinite() {
                        "equal".to_owned()
                    } else {
                        format!("{:.1}", c.snr_db)
                    };
                    let text = format!(
                        "{:>10.3e} {snr:>9} {:>9.6} {:>10.3e}{flags:8}  {}  ({} -> {})",
                        c.rel_error, c.cosine, c.max_abs_diff, c.name, c.a_dtype, c.b_dtype
                    );
                    let color = if c.max_abs_diff != 0.0 || c.nan || c.inf {
                        ui.visuals().warn_fg_color
                    } else {
                        ui.visuals().text_color()
                    };
                    ui.add(
                        egui::Label::new(egui::RichText::new(text).monospace().color(color))
                            .truncate(),
                    );
                }
            });
    }
}

/// Largest and mean relative error per numbered layer (tensors outside
/// numbered layers, such as embeddings, are not drawn), on a log10 axis:
/// where in the depth of the model a conversion went wrong.
fn error_per_layer_ui(ui: &mut egui::Ui, report: &DiffReport) {
    let mut layers: std::collections::BTreeMap<u64, (f64, f64, usize)> =
        std::collections::BTreeMap::new();
    for c in &report.common {
        if let Some(layer) = c.layer {
            let entry = layers.entry(layer).or_insert((0.0, 0.0, 0));
            if c.rel_error.is_finite() {
                entry.0 = entry.0.max(c.rel_error);
                entry.1 += c.rel_error;
                entry.2 += 1;
            }
        }
    }
    let log = |x: f64| x.max(1e-12).log10();
    let max_points: Vec<[f64; 2]> = layers
        .iter()
        .filter(|(_, (_, _, n))| *n > 0)
        .map(|(l, (max, _, _))| [*l as f64, log(*max)])
        .collect();
    let mean_points: Vec<[f64; 2]> = layers
        .iter()
        .filter(|(_, (_, _, n))| *n > 0)
        .map(|(l, (_, sum, n))| [*l as f64, log(sum / *n as f64)])
        .collect();
    if max_points.is_empty() {
        return;
    }
    ui.label("Relative error per layer (log10; max and mean of the layer's tensors)");
    egui_plot::Plot::new("diff-error-per-layer")
        .height(140.0)
        .allow_scroll(false)
        .allow_drag(false)
        .x_axis_label("layer")
        .x_axis_formatter(|mark, _| {
            if mark.value.fract() == 0.0 && mark.value >= 0.0 {
                format!("{}", mark.value)
            } else {
                String::new()
            }
        })
        .y_axis_formatter(|mark, _| format!("{:.0e}", 10f64.powf(mark.value)))
        .label_formatter(|hover| match hover {
            egui_plot::HoverPosition::NearDataPoint {
                plot_name,
                position,
                ..
            } => Some(format!(
                "{plot_name}\nlayer {}: {:.3e}",
                position.x,
                10f64.powf(position.y)
            )),
            egui_plot::HoverPosition::Elsewhere { .. } => None,
        })
        .legend(egui_plot::Legend::default().position(egui_plot::Corner::RightBottom))
        .show(ui, |plot| {
            plot.line(egui_plot::Line::new("max", max_points));
            plot.line(egui_plot::Line::new("mean", mean_points));
        });
}
