//! The tensors panel: a virtualized, sortable, filterable table.

use crate::checkpoint::{Checkpoint, layer_of};
use crate::units::human_bytes;

use super::WeightscopeApp;

/// Columns the table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum SortBy {
    /// Shard order, then data order (the file's own order).
    #[default]
    Stored,
    Name,
    Dtype,
    Bytes,
}

/// Filter, sort and selection of the tensors table.
#[derive(Debug, Default)]
pub(super) struct TableState {
    pub(super) filter: String,
    /// Treat the filter as a regular expression instead of a substring.
    pub(super) regex: bool,
    /// Why the regex does not compile, when it does not.
    pub(super) regex_error: Option<String>,
    /// Show the rows grouped by layer instead of as one table.
    pub(super) tree: bool,
    sort: SortBy,
    descending: bool,
    /// Positions in `Checkpoint::tensors`, filtered and sorted.
    rows: Vec<usize>,
    pub(super) selected: Option<usize>,
}

impl TableState {
    /// Recomputes the visible rows (on open, filter or sort change only).
    pub(super) fn refilter(&mut self, checkpoint: &Checkpoint) {
        let tensors = checkpoint.tensors();
        self.regex_error = None;
        if self.regex && !self.filter.is_empty() {
            match regex::RegexBuilder::new(&self.filter)
                .case_insensitive(true)
                .build()
            {
                Ok(re) => {
                    self.rows = (0..tensors.len())
                        .filter(|&i| re.is_match(&tensors[i].name))
                        .collect();
                }
                Err(err) => {
                    // Keep the last good rows; say what is wrong on one line.
                    let text = err.to_string();
                    self.regex_error = Some(text.lines().last().unwrap_or(&text).trim().to_owned());
                    return;
                }
            }
        } else {
            let needle = self.filter.to_lowercase();
            self.rows = (0..tensors.len())
                .filter(|&i| needle.is_empty() || tensors[i].name.to_lowercase().contains(&needle))
                .collect();
        }
        match self.sort {
            SortBy::Stored => {}
            SortBy::Name => self
                .rows
                .sort_by(|&a, &b| tensors[a].name.cmp(&tensors[b].name)),
            SortBy::Dtype => self.rows.sort_by_key(|&i| tensors[i].dtype),
            SortBy::Bytes => self.rows.sort_by_key(|&i| tensors[i].bytes()),
        }
        if self.descending {
            self.rows.reverse();
        }
    }
}

impl WeightscopeApp {
    pub(super) fn tensors_ui(&mut self, ui: &mut egui::Ui) {
        let Some(checkpoint) = self.checkpoint.clone() else {
            ui.centered_and_justified(|ui| {
                ui.label(
                    "Open a checkpoint: type a folder or .safetensors path above and press Enter.",
                );
            });
            return;
        };
        let focus_filter = ui.input_mut(|i| i.consume_key(egui::Modifiers::COMMAND, egui::Key::F));
        ui.horizontal(|ui| {
            let label = ui.label("Filter");
            let edit = ui.add(
                egui::TextEdit::singleline(&mut self.table.filter)
                    .hint_text("substring of the name"),
            );
            let edit = edit.labelled_by(label.id);
            if focus_filter {
                edit.request_focus();
            }
            ui.checkbox(&mut self.table.tree, "Group by layer")
                .on_hover_text("A collapsible group per layer number");
            let toggled = ui
                .checkbox(&mut self.table.regex, "Regex")
                .on_hover_text("Match names with a regular expression (case-insensitive)")
                .changed();
            if edit.changed() || toggled {
                self.table.refilter(&checkpoint);
            }
            ui.label(format!(
                "{} of {} tensors",
                self.table.rows.len(),
                checkpoint.tensors().len()
            ));
        });
        if let Some(error) = &self.table.regex_error {
            ui.colored_label(ui.visuals().error_fg_color, format!("regex: {error}"));
        }
        ui.separator();
        self.keyboard(ui);
        ui.horizontal(|ui| {
            for (label, column) in [
                ("Stored order", SortBy::Stored),
                ("Name", SortBy::Name),
                ("Dtype", SortBy::Dtype),
                ("Size", SortBy::Bytes),
            ] {
                let mark = match (self.table.sort == column, self.table.descending) {
                    (true, false) => " (asc)",
                    (true, true) => " (desc)",
                    (false, _) => "",
                };
                if ui.button(format!("{label}{mark}")).clicked() {
                    if self.table.sort == column {
                        self.table.descending = !self.table.descending;
                    } else {
                        self.table.sort = column;
                        self.table.descending = false;
                    }
                    self.table.refilter(&checkpoint);
                }
            }
        });
        // Borrowed, not copied: this runs every frame with up to 90k rows.
        let rows = &self.table.rows;
        let mut clicked = None;
        if self.table.tree {
            self.layer_tree_ui(ui, &checkpoint, rows, &mut clicked);
        } else {
            let row_height = ui.text_style_height(&egui::TextStyle::Monospace) + 4.0;
            egui::ScrollArea::vertical()
                .id_salt("tensors-scroll")
                .auto_shrink([false, false])
                .show_rows(ui, row_height, rows.len(), |ui, range| {
                    for &i in &rows[range] {
                        if self.tensor_row_ui(ui, &checkpoint, i) {
                            clicked = Some(i);
                        }
                    }
                });
        }
        if let Some(i) = clicked {
            self.table.selected = Some(i);
            let name = checkpoint.tensors()[i].name.clone();
            self.materialize(&name);
        }
    }

    /// One row; returns whether it was clicked.
    fn tensor_row_ui(&self, ui: &mut egui::Ui, checkpoint: &Checkpoint, i: usize) -> bool {
        let t = &checkpoint.tensors()[i];
        let text = format!(
            "{:<8} {:<18} {:>11}  {}",
            t.dtype.name(),
            format!("{:?}", t.shape),
            human_bytes(t.bytes()),
            t.name,
        );
        let selected = self.table.selected == Some(i);
        // One line per row (the scroll area assumes a fixed row height);
        // long names are cut with an ellipsis, the full line is the tooltip.
        let button =
            egui::Button::selectable(selected, egui::RichText::new(text).monospace()).truncate();
        ui.add(button)
            .on_hover_text(format!("{}\n{}", t.name, checkpoint.shards()[t.shard].file))
            .clicked()
    }

    /// The visible rows grouped by layer number, one collapsible group each
    /// (closed groups lay out nothing, so 90k tensors stay cheap).
    fn layer_tree_ui(
        &self,
        ui: &mut egui::Ui,
        checkpoint: &Checkpoint,
        rows: &[usize],
        clicked: &mut Option<usize>,
    ) {
        let mut groups: std::collections::BTreeMap<Option<u64>, Vec<usize>> =
            std::collections::BTreeMap::new();
        for &i in rows {
            groups
                .entry(layer_of(&checkpoint.tensors()[i].name))
                .or_default()
                .push(i);
        }
        egui::ScrollArea::vertical()
            .id_salt("tensors-tree")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                for (layer, members) in &groups {
                    let bytes: u64 = members
                        .iter()
                        .map(|&i| checkpoint.tensors()[i].bytes())
                        .sum();
                    let title = match layer {
                        Some(n) => format!(
                            "layer {n}: {} tensors, {}",
                            members.len(),
                            human_bytes(bytes)
                        ),
                        None => format!(
                            "not in a layer: {} tensors, {}",
                            members.len(),
                            human_bytes(bytes)
                        ),
                    };
                    egui::CollapsingHeader::new(title)
                        .id_salt(("layer", *layer))
                        .show(ui, |ui| {
                            for &i in members {
                                if self.tensor_row_ui(ui, checkpoint, i) {
                                    *clicked = Some(i);
                                }
                            }
                        });
                }
            });
    }

    /// Arrows move the selection, Enter materializes it.
    fn keyboard(&mut self, ui: &egui::Ui) {
        let Some(checkpoint) = self.checkpoint.clone() else {
            return;
        };
        if ui.memory(|m| m.focused().is_some()) {
            return; // typing in a text field
        }
        let (down, up, enter) = ui.input(|i| {
            (
                i.key_pressed(egui::Key::ArrowDown),
                i.key_pressed(egui::Key::ArrowUp),
                i.key_pressed(egui::Key::Enter),
            )
        });
        let position = self
            .table
            .selected
            .and_then(|s| self.table.rows.iter().position(|&r| r == s));
        let next = match (position, down, up) {
            (None, true, _) | (None, _, true) => Some(0),
            (Some(p), true, _) => Some((p + 1).min(self.table.rows.len().saturating_sub(1))),
            (Some(p), _, true) => Some(p.saturating_sub(1)),
            _ => None,
        };
        if let Some(p) = next {
            self.table.selected = self.table.rows.get(p).copied();
        }
        if enter && let Some(i) = self.table.selected {
            let name = checkpoint.tensors()[i].name.clone();
            self.materialize(&name);
        }
    }
}
