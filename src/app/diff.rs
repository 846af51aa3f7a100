//! The diff tab: compare the open checkpoint (A, through its view) with
//! another (B, through its own), one tensor at a time on the MLX worker, with
//! progress, cancel and a sortable result table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::units::Shown;
use crate::weights::{Common, DiffReport, PairDetail, Progress, ViewChoice};
use crate::worker::{CancelToken, RequestError};

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
            let label = ui.label("Compare with (B)");
            let field = ui
                .add(
                    egui::TextEdit::singleline(&mut self.other_input)
                        .hint_text("folder or .safetensors file; Enter runs the diff")
                        .desired_width(360.0_f32.min(ui.available_width() - 80.0).max(120.0)),
                )
                .labelled_by(label.id);
            if std::mem::take(&mut self.focus_other) {
                super::widgets::focus_selecting_all(ui, &field, &mut self.other_input, "");
            }
            let entered = field.lost_focus()
                && ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Enter));
            if ui.button("Choose B…").clicked() {
                commands.send(AppCommand::Dialog(super::Dialog::PickDiffFolder));
            }
            let label = ui.label("B's view");
            ui.add(
                egui::TextEdit::singleline(&mut self.view_input)
                    .hint_text("auto, identity, qwen3-next, llama-cpp or a view file")
                    .desired_width(200.0),
            )
            .labelled_by(label.id);
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
                if ui
                    .button("Back to the results")
                    .on_hover_text("Esc")
                    .clicked()
                {
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

/// What a row's colour says about its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowKind {
    /// A side has NaN or Inf.
    NonFinite,
    /// More than twice its storage mode's typical error.
    Outlier,
    /// Changed, within twice its mode's typical error.
    Typical,
    /// The values are equal.
    Equal,
}

/// How far above its mode's typical (median) error a row must be to be
/// coloured as an outlier.
const OUTLIER_FACTOR: f64 = 2.0;

impl RowKind {
    fn colour(self, ui: &egui::Ui) -> egui::Color32 {
        match self {
            Self::NonFinite => ui.visuals().error_fg_color,
            Self::Outlier => ui.visuals().warn_fg_color,
            Self::Typical => ui.visuals().text_color(),
            Self::Equal => ui.visuals().weak_text_color(),
        }
    }

    const LEGEND: [(Self, &'static str); 4] = [
        (Self::NonFinite, "NaN or Inf on a side"),
        (Self::Outlier, "over twice its mode's typical error"),
        (Self::Typical, "changed, typical for its mode"),
        (Self::Equal, "equal"),
    ];
}

impl DiffPanel {
    fn row_kind(&self, c: &Common) -> RowKind {
        if c.nan || c.inf {
            RowKind::NonFinite
        } else if c.max_abs_diff == 0.0 {
            RowKind::Equal
        } else if self
            .typical
            .get(&c.b_dtype)
            .is_some_and(|&t| c.rel_error > OUTLIER_FACTOR * t)
        {
            RowKind::Outlier
        } else {
            RowKind::Typical
        }
    }

    fn results_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        let Some(report) = self.report.as_deref() else {
            return;
        };
        // The summary scrolls within at most 45 % of the tab: the table
        // under it keeps the rest, also beside an opened row.
        let summary_height = (ui.available_height() * 0.45).max(120.0);
        egui::ScrollArea::vertical()
            .id_salt("diff-summary")
            .max_height(summary_height)
            .auto_shrink([false, true])
            .show(ui, |ui| {
                summary_ui(ui, report, self.compared.as_ref().map(|(b, _)| b.as_path()));
            });
        ui.separator();
        self.table_ui(ui, commands);
    }

    /// The sort buttons and "Only differing"; returns whether the rows
    /// must be sorted again.
    fn sort_buttons_ui(&mut self, ui: &mut egui::Ui) -> bool {
        let mut sort_changed = false;
        ui.horizontal_wrapped(|ui| {
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
        sort_changed
    }

    fn table_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        let sort_changed = self.sort_buttons_ui(ui);
        if sort_changed {
            self.resort();
        }
        let legend: Vec<(&str, egui::Color32)> = RowKind::LEGEND
            .iter()
            .map(|(kind, text)| (*text, kind.colour(ui)))
            .collect();
        super::widgets::legend_row(ui, &legend);
        if self.report.is_none() {
            return;
        }
        ui.label(
            egui::RichText::new(format!(
                "{:>10} {:>9} {:>9} {:>10}{:8}  {}",
                "rel error",
                "SNR dB",
                "cosine",
                "max |a-b|",
                "",
                "tensor (A dtype -> B dtype); a click opens it"
            ))
            .monospace()
            .strong(),
        );
        let row_height = ui.text_style_height(&egui::TextStyle::Monospace) + 6.0;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let page = ((ui.available_height() / row_height).max(0.0) as usize)
            .saturating_sub(1)
            .max(1);
        let (moved, mut clicked) = self.keyboard(ui, page);
        let cursor = self.cursor;
        let mut scroll = egui::ScrollArea::vertical()
            .id_salt("diff-scroll")
            .auto_shrink([false, false]);
        if let (true, Some(at)) = (moved, cursor) {
            // Keep the keyboard's row in view.
            #[allow(clippy::cast_precision_loss)]
            let top = at as f32 * (row_height + ui.spacing().item_spacing.y);
            scroll = scroll.vertical_scroll_offset((top - ui.available_height() / 2.0).max(0.0));
        }
        let opened = match &self.detail {
            Detail::Pending { name, .. } | Detail::Failed { name, .. } => Some(name.as_str()),
            Detail::Ready(d) => Some(d.name.as_str()),
            Detail::Nothing => None,
        };
        let Some(report) = self.report.as_deref() else {
            return;
        };
        let rows = &self.rows;
        let mut clicked_at = None;
        scroll.show_rows(ui, row_height, rows.len(), |ui, range| {
            for (position, &i) in rows[range.clone()].iter().enumerate() {
                let position = range.start + position;
                let c = &report.common[i];
                let text = row_text(
                    c,
                    crate::app::widgets::monospace_chars(
                        ui,
                        ui.available_width() - 2.0 * ui.spacing().button_padding.x,
                    ),
                );
                let colour = self.row_kind(c).colour(ui);
                let button = egui::Button::selectable(
                    opened == Some(c.name.as_str()) || cursor == Some(position),
                    egui::RichText::new(text).monospace().color(colour),
                )
                .truncate();
                let typical = self.typical.get(&c.b_dtype).copied();
                let response = ui.add(button);
                let response = match typical {
                    Some(t) => response.on_hover_text(format!(
                        "{} ({} -> {})\ntypical for {}: {t:.3e} (the median of its changed tensors)",
                        Shown::new(&c.name),
                        c.a_dtype,
                        c.b_dtype,
                        c.b_dtype
                    )),
                    None => response.on_hover_text(Shown::new(&c.name).into_string()),
                };
                if response.clicked() {
                    clicked = Some(c.name.clone());
                    clicked_at = Some(position);
                }
            }
        });
        if clicked_at.is_some() {
            self.cursor = clicked_at;
        }
        if let (Some(name), Some((other, view))) = (clicked, &self.compared) {
            commands.send(AppCommand::DiffTensor {
                other: other.clone(),
                view: view.clone(),
                name,
            });
        }
    }

    /// The table's keys (outside a text field): Up, Down, Page Up, Page
    /// Down, Home and End move its row; Enter or Space opens it; Esc
    /// closes the opened row. Returns whether the row moved, and the row
    /// to open.
    fn keyboard(&mut self, ui: &egui::Ui, page: usize) -> (bool, Option<String>) {
        use egui::{Key, Modifiers};
        // Typing in a text field; a focused button leaves the keys here.
        if ui.ctx().text_edit_focused() || self.rows.is_empty() {
            return (false, None);
        }
        let last = self.rows.len() - 1;
        let page = isize::try_from(page).unwrap_or(1);
        let (moved, open, close) = ui.input_mut(|i| {
            let mut at = self.cursor;
            for (key, step) in [
                (Key::ArrowDown, 1_isize),
                (Key::ArrowUp, -1),
                (Key::PageDown, page),
                (Key::PageUp, -page),
            ] {
                for _ in 0..i.count_and_consume_key(Modifiers::NONE, key) {
                    at = Some(at.map_or(0, |p| p.saturating_add_signed(step).min(last)));
                }
            }
            if i.consume_key(Modifiers::NONE, Key::Home) {
                at = Some(0);
            }
            if i.consume_key(Modifiers::NONE, Key::End) {
                at = Some(last);
            }
            let open = i.consume_key(Modifiers::NONE, Key::Enter)
                || i.consume_key(Modifiers::NONE, Key::Space);
            let close = i.consume_key(Modifiers::NONE, Key::Escape);
            let moved = at != self.cursor;
            self.cursor = at;
            (moved, open, close)
        });
        if close {
            self.detail = Detail::Nothing;
        }
        let report = self.report.as_deref();
        let name = self
            .cursor
            .and_then(|p| self.rows.get(p))
            .and_then(|&i| report.map(|r| r.common[i].name.clone()));
        (moved, name.filter(|_| open))
    }

    /// The opened row: A beside B, the error's heatmap, its worst groups.
    fn detail_ui(&mut self, ui: &mut egui::Ui) {
        let mut close = false;
        egui::ScrollArea::vertical()
            .id_salt(("diff-detail-scroll", self.opened))
            .auto_shrink([false, false])
            .show(ui, |ui| match &self.detail {
                Detail::Nothing => {}
                Detail::Pending { name, since } => {
                    ui.horizontal(|ui| {
                        ui.spinner();
                        ui.label(format!(
                            "comparing {} … {:.1} s",
                            Shown::new(name),
                            since.elapsed().as_secs_f32()
                        ));
                    });
                    ui.ctx()
                        .request_repaint_after(std::time::Duration::from_millis(100));
                }
                Detail::Failed { name, error } => {
                    close = ui.button("Close").clicked();
                    ui.label(egui::RichText::new(Shown::new(name)).monospace());
                    ui.colored_label(ui.visuals().error_fg_color, Shown::new(error));
                }
                Detail::Ready(detail) => {
                    close = ui.button("Close").clicked();
                    pair_ui(
                        ui,
                        detail,
                        (self.opened, &mut self.pooling),
                        &mut self.textures,
                    );
                }
            });
        if close {
            self.detail = Detail::Nothing;
        }
    }
}

/// A row of the table: its figures, name and dtypes, aligned.
/// A result row in `fits` monospace characters: its figures, its name cut
/// where it must be (its end and layer number kept, never the
/// `…self_attn.v_…` a cut at the end made), its dtypes.
fn row_text(c: &Common, fits: usize) -> String {
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
    let figures = format!(
        "{:>10.3e} {snr:>9} {:>9.6} {:>10.3e}{flags:8}  ",
        c.rel_error, c.cosine, c.max_abs_diff
    );
    let dtypes = format!("  ({} -> {})", c.a_dtype, c.b_dtype);
    let name = Shown::new(&c.name).into_string();
    // The name first: the dtypes only where the whole name fits beside
    // them (they are in the row's tooltip too).
    let (figures_n, name_n, dtypes_n) = (
        figures.chars().count(),
        name.chars().count(),
        dtypes.chars().count(),
    );
    if figures_n + name_n + dtypes_n <= fits {
        format!("{figures}{name}{dtypes}")
    } else {
        let room = fits.saturating_sub(figures_n).max(12);
        format!("{figures}{}", crate::units::fit_name(&name, room))
    }
}

/// The report's counts, overall figure, memory, lists, the summary by
/// module kind and the per-layer plot (side by side where there is room).
fn summary_ui(ui: &mut egui::Ui, report: &DiffReport, b: Option<&Path>) {
    if let Some(b) = b {
        ui.label(format!("B: {}", Shown::new(&b.display().to_string())));
    }
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
        ui.add(egui::Label::new(format!("Overall: {}", Shown::new(&overall))).wrap());
    }
    ui.label(format!(
        "Peak MLX active {} {} the bound {} (largest shard of A + of B {}, plus one band's decoding temporaries on each side)",
        crate::units::human_bytes(report.peak_mlx_active_bytes),
        if report.peak_mlx_active_bytes <= report.bound_bytes { "within" } else { "over" },
        crate::units::human_bytes(report.bound_bytes),
        crate::units::human_bytes(report.two_shards_bytes),
    ));
    lists_ui(ui, report);
    if ui.available_width() >= 1000.0 {
        ui.columns(2, |columns| {
            by_kind_ui(&mut columns[0], report);
            error_per_layer_ui(&mut columns[1], report);
        });
    } else {
        by_kind_ui(ui, report);
        ui.separator();
        error_per_layer_ui(ui, report);
    }
}

/// Only in A, only in B, changed shape and failed, collapsed.
fn lists_ui(ui: &mut egui::Ui, report: &DiffReport) {
    for (title, names) in [
        ("Only in A", &report.only_in_a),
        ("Only in B", &report.only_in_b),
    ] {
        if !names.is_empty() {
            egui::CollapsingHeader::new(format!("{title} ({})", names.len()))
                .id_salt(title)
                .show(ui, |ui| {
                    for name in names.iter().take(1000) {
                        ui.monospace(Shown::new(name));
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
                        Shown::new(&c.name),
                        c.a_dtype,
                        c.a_shape,
                        c.b_dtype,
                        c.b_shape
                    ));
                }
            });
    }
    for f in &report.failed {
        ui.colored_label(
            ui.visuals().error_fg_color,
            format!("{}: {}", Shown::new(&f.name), Shown::new(&f.error)),
        );
    }
}

/// The changed tensors by module kind and by how B stores them, with each
/// storage mode's typical error.
fn by_kind_ui(ui: &mut egui::Ui, report: &DiffReport) {
    let kinds = report.by_kind();
    if kinds.is_empty() {
        return;
    }
    egui::CollapsingHeader::new(format!("By module kind ({})", kinds.len()))
        .id_salt("diff-by-kind")
        .default_open(true)
        .show(ui, |ui| {
            let modes = report.typical_by_mode();
            ui.label(
                modes
                    .iter()
                    .map(|(mode, n, median)| format!("{mode}: typical {median:.3e} over {n}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            )
            .on_hover_text(
                "Each way B stores tensors, with the median relative error of its changed tensors",
            );
            egui::ScrollArea::vertical()
                .id_salt("diff-by-kind-scroll")
                .max_height(120.0)
                .show(ui, |ui| {
                    egui::Grid::new("diff-by-kind-grid")
                        .striped(true)
                        .num_columns(5)
                        .show(ui, |ui| {
                            for title in ["kind", "B stored as", "tensors", "median", "worst"] {
                                ui.strong(title);
                            }
                            ui.end_row();
                            for k in &kinds {
                                ui.monospace(Shown::new(&k.kind));
                                ui.monospace(&k.b_dtype);
                                ui.monospace(k.tensors.to_string());
                                ui.monospace(format!("{:.3e}", k.median_rel_error));
                                ui.monospace(format!("{:.3e}", k.worst_rel_error))
                                    .on_hover_text(Shown::new(&k.worst).into_string());
                                ui.end_row();
                            }
                        });
                });
        });
}

/// One opened tensor: A's, B's and the error's figures side by side, the
/// two histograms overlaid, the error's heatmap and its worst groups.
fn pair_ui(
    ui: &mut egui::Ui,
    d: &PairDetail,
    (opened, pooling): (u64, &mut super::heatmap::Pooling),
    textures: &mut super::heatmap::Heatmaps,
) {
    ui.label(
        egui::RichText::new(Shown::new(&d.name))
            .monospace()
            .strong(),
    );
    ui.label(format!("A: {}    B: {}", d.a_dtype, d.b_dtype));
    egui::Grid::new("diff-pair-stats")
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            type Figure = fn(&crate::mlx::Stats) -> String;
            for title in ["", "A", "B", "|a - b|"] {
                ui.strong(title);
            }
            ui.end_row();
            let sides = [&d.a.stats, &d.b.stats, &d.error.stats];
            let rows: [(&str, Figure); 6] = [
                ("min", |s| format!("{:.4e}", s.min)),
                ("max", |s| format!("{:.4e}", s.max)),
                ("mean", |s| format!("{:.4e}", s.mean)),
                ("std", |s| format!("{:.4e}", s.std)),
                ("NaN", |s| s.nan.to_string()),
                ("Inf", |s| s.inf.to_string()),
            ];
            for (label, value) in rows {
                ui.label(label);
                for s in sides {
                    ui.monospace(value(s));
                }
                ui.end_row();
            }
        });
    ui.separator();
    ui.label("Histograms overlaid (finite values)");
    let colours = [
        egui::Color32::from_rgba_unmultiplied(90, 150, 240, 150),
        egui::Color32::from_rgba_unmultiplied(240, 150, 60, 150),
    ];
    super::axes::histogram_axes(egui_plot::Plot::new(("diff-histograms", opened)))
        .height(140.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .legend(egui_plot::Legend::default().position(egui_plot::Corner::RightTop))
        .show(ui, |plot| {
            for ((name, h), colour) in [("A", &d.a.histogram), ("B", &d.b.histogram)]
                .into_iter()
                .zip(colours)
            {
                plot.bar_chart(egui_plot::BarChart::new(name, histogram_bars(h)).color(colour));
            }
        });
    if let (Some(mean), largest) = (&d.error.heatmap, d.error.heatmap_max_abs.as_ref()) {
        ui.separator();
        ui.horizontal_wrapped(|ui| {
            ui.label("|a - b| cells:");
            ui.selectable_value(pooling, super::heatmap::Pooling::Mean, "mean");
            ui.add_enabled_ui(largest.is_some(), |ui| {
                ui.selectable_value(pooling, super::heatmap::Pooling::MaxAbs, "max");
            });
        });
        let (map, what, key) = match (*pooling, largest) {
            (super::heatmap::Pooling::MaxAbs, Some(m)) => (m, "the largest", "max"),
            _ => (mean, "the mean", "mean"),
        };
        ui.label(format!(
            "Error |a - b| ({} x {} cells, each {what} of {} x {} values)",
            map.rows, map.cols, map.row_step, map.col_step
        ));
        super::heatmap::heatmap_ui(
            ui,
            map,
            &format!("{opened}:{}#error-{key}", d.name),
            textures,
        );
    }
    if let Some(g) = &d.groups {
        ui.separator();
        ui.label(format!(
            "Per group ({}'s groups of {} along each row): {} groups; relative error median {:.3e}, p99 {:.3e}, worst {:.3e}",
            g.side, g.group_size, g.groups, g.median, g.p99, g.max
        ));
        egui::Grid::new("diff-worst-groups")
            .striped(true)
            .num_columns(4)
            .show(ui, |ui| {
                for title in ["row", "columns", "rel error", "max |a-b|"] {
                    ui.strong(title);
                }
                ui.end_row();
                let size = i64::from(g.group_size);
                for w in &g.worst {
                    ui.monospace(w.row.to_string());
                    ui.monospace(format!("{}..{}", w.group * size, (w.group + 1) * size));
                    ui.monospace(format!("{:.3e}", w.rel_error));
                    ui.monospace(format!("{:.3e}", w.max_abs));
                    ui.end_row();
                }
            });
    }
}

/// A histogram's bars at their own bin centres (two sides' bins differ).
fn histogram_bars(h: &crate::mlx::Histogram) -> Vec<egui_plot::Bar> {
    let bins = h.counts.len().max(1);
    #[allow(clippy::cast_precision_loss)]
    let width = (h.max - h.min) / bins as f64;
    h.counts
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            #[allow(clippy::cast_precision_loss)]
            let centre = h.min + (i as f64 + 0.5) * width;
            #[allow(clippy::cast_precision_loss)]
            egui_plot::Bar::new(centre, count as f64).width(width.max(f64::MIN_POSITIVE))
        })
        .collect()
}

/// Largest and mean relative error per numbered layer (tensors outside
/// numbered layers, such as embeddings, are not drawn), on a log10 axis
/// with a tick at every power of ten and at least one decade shown: where
/// in the depth of the model a conversion went wrong.
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
    #[allow(clippy::cast_precision_loss)]
    let max_points: Vec<[f64; 2]> = layers
        .iter()
        .filter(|(_, (_, _, n))| *n > 0)
        .map(|(l, (max, _, _))| [*l as f64, log(*max)])
        .collect();
    #[allow(clippy::cast_precision_loss)]
    let mean_points: Vec<[f64; 2]> = layers
        .iter()
        .filter(|(_, (_, _, n))| *n > 0)
        .map(|(l, (_, sum, n))| [*l as f64, log(sum / *n as f64)])
        .collect();
    if max_points.is_empty() {
        return;
    }
    let (lo, hi) = max_points
        .iter()
        .chain(&mean_points)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p[1]), hi.max(p[1]))
        });
    ui.label("Relative error per layer (log scale; the max and the mean of each layer's tensors)");
    egui_plot::Plot::new("diff-error-per-layer")
        .height(140.0)
        .allow_scroll(false)
        .allow_drag(false)
        .allow_zoom(false)
        .x_axis_label("layer")
        .y_axis_label("rel error")
        .include_y(lo.floor())
        .include_y(hi.ceil().max(lo.floor() + 1.0))
        .x_axis_formatter(|mark, _| {
            if mark.value.fract() == 0.0 && mark.value >= 0.0 {
                format!("{}", mark.value)
            } else {
                String::new()
            }
        })
        .y_grid_spacer(|input| {
            // One mark per power of ten (a whole number on this log axis).
            let (lo, hi) = input.bounds;
            #[allow(clippy::cast_possible_truncation)]
            let (first, last) = (lo.ceil() as i64, hi.floor() as i64);
            #[allow(clippy::cast_precision_loss)]
            (first..=last)
                .map(|k| egui_plot::GridMark {
                    value: k as f64,
                    step_size: 1.0,
                })
                .collect()
        })
        .y_axis_formatter(|mark, _| {
            if mark.value.fract() == 0.0 {
                format!("1e{}", mark.value)
            } else {
                String::new()
            }
        })
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
