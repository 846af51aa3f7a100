//! The result table: rows coloured by kind, sorting, the keyboard, and the
//! opened row's detail.

use crate::units::Shown;
use crate::weights::Common;

use crate::app::commands::{AppCommand, CommandSender};

use super::pair::pair_ui;
use super::report::summary_ui;
use super::{Detail, DiffPanel, DiffSort};

/// What a row's colour says about its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowKind {
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
pub(super) const OUTLIER_FACTOR: f64 = 2.0;

impl RowKind {
    pub(super) fn colour(self, ui: &egui::Ui) -> egui::Color32 {
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
    pub(super) fn row_kind(&self, c: &Common) -> RowKind {
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

    pub(super) fn results_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
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
    pub(super) fn sort_buttons_ui(&mut self, ui: &mut egui::Ui) -> bool {
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

    pub(super) fn table_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        let sort_changed = self.sort_buttons_ui(ui);
        if sort_changed {
            self.resort();
        }
        let legend: Vec<(&str, egui::Color32)> = RowKind::LEGEND
            .iter()
            .map(|(kind, text)| (*text, kind.colour(ui)))
            .collect();
        crate::app::widgets::legend_row(ui, &legend);
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
    pub(super) fn keyboard(&mut self, ui: &egui::Ui, page: usize) -> (bool, Option<String>) {
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
    pub(super) fn detail_ui(&mut self, ui: &mut egui::Ui) {
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
pub(super) fn row_text(c: &Common, fits: usize) -> String {
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
