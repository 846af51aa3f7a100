//! The tensors panel: a virtualized, sortable, filterable table.

use std::sync::Arc;

use crate::checkpoint::{Checkpoint, TensorRef, layer_of};
use crate::units::{human_bytes, printable};
use crate::weights::ViewInfo;

use super::commands::{AppCommand, CommandSender};

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

/// The tensors panel: filter, sort, selection and the visible rows of the
/// open checkpoint. The app makes a new one for each opened checkpoint, so
/// the rows (a cache of filter and sort) never outlive the checkpoint they
/// index.
#[derive(Debug, Default)]
#[allow(clippy::struct_excessive_bools)] // four independent toggles of the panel
pub(super) struct TensorsPanel {
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
    /// The installed view: rows show canonical names beside stored ones,
    /// and dropped tensors are not rows.
    pub(super) view: Option<Arc<ViewInfo>>,
    /// How packed and scaled weights are stored (from the headers).
    encodings: Encodings,
    /// Scales, biases and FP8 block scales folded into their weight's row
    /// (not rows of their own).
    pub(super) fold: bool,
}

/// A packed or scaled weight as its model sees it: how it is encoded, its
/// logical shape, and its bytes with its scales (and biases).
#[derive(Debug, Clone)]
struct Encoded {
    /// "affine 4-bit g64", "mxfp4 4-bit g32", "`F8_E4M3` block 128x128".
    encoding: String,
    /// The dequantized shape.
    logical_shape: Vec<u64>,
    /// The weight's bytes with its scales, biases and global scale.
    bytes_with_parts: u64,
}

/// How each tensor is stored, computed once per checkpoint from the header
/// summary: packed and scaled weights by position, and their parts (scales,
/// biases, FP8 `weight_scale_inv`) with the weight each belongs to.
#[derive(Debug, Default)]
struct Encodings {
    weights: std::collections::HashMap<usize, Encoded>,
    parts: std::collections::HashMap<usize, usize>,
}

impl Encodings {
    fn of(checkpoint: &Checkpoint, summary: &crate::checkpoint::Summary) -> Self {
        let tensors = checkpoint.tensors();
        let bytes = |i: usize| tensors.get(i).map_or(0, TensorRef::bytes);
        let mut out = Self::default();
        if let Some(q) = &summary.quantization {
            for t in &q.tensors {
                let parts: Vec<usize> = std::iter::once(t.scales)
                    .chain(t.biases)
                    .chain(t.global_scale)
                    .collect();
                for &p in &parts {
                    out.parts.insert(p, t.weight);
                }
                out.weights.insert(
                    t.weight,
                    Encoded {
                        encoding: format!(
                            "{} {}-bit g{}",
                            t.params.mode, t.params.bits, t.params.group_size
                        ),
                        logical_shape: t.logical_shape.clone(),
                        bytes_with_parts: bytes(t.weight)
                            + parts.iter().map(|&p| bytes(p)).sum::<u64>(),
                    },
                );
            }
        }
        if let Some(f) = &summary.fp8 {
            for t in &f.tensors {
                let Some(scale) = t.scale else { continue };
                out.parts.insert(scale, t.weight);
                let shape = tensors
                    .get(t.weight)
                    .map(|w| w.shape().to_vec())
                    .unwrap_or_default();
                out.weights.insert(
                    t.weight,
                    Encoded {
                        encoding: match t.block {
                            Some([r, c]) => format!("{} block {r}x{c}", t.format.name()),
                            None => t.format.name().to_owned(),
                        },
                        logical_shape: shape,
                        bytes_with_parts: bytes(t.weight) + bytes(scale),
                    },
                );
            }
        }
        out
    }
}

/// The name the graph asks for: canonical under a view, else stored.
pub(super) fn display_name<'a>(
    view: Option<&'a ViewInfo>,
    checkpoint: &'a Checkpoint,
    i: usize,
) -> Option<&'a str> {
    match view {
        Some(view) => view.canonical_of.get(i).and_then(Option::as_deref),
        None => checkpoint.tensors().get(i).map(TensorRef::name),
    }
}

impl TensorsPanel {
    /// A panel for a newly opened checkpoint under `view`.
    pub(super) fn opened(
        checkpoint: &Checkpoint,
        summary: &crate::checkpoint::Summary,
        view: Option<Arc<ViewInfo>>,
    ) -> Self {
        let mut panel = Self {
            view,
            encodings: Encodings::of(checkpoint, summary),
            fold: true,
            ..Self::default()
        };
        panel.refilter(checkpoint);
        panel
    }

    /// Recomputes the visible rows (on open, filter or sort change only).
    pub(super) fn refilter(&mut self, checkpoint: &Checkpoint) {
        let tensors = checkpoint.tensors();
        let view = self.view.clone();
        let view = view.as_deref();
        // Under a view a row matches by its canonical or its stored name.
        // A folded part is no row: its weight's row stands for it.
        let parts = if self.fold {
            Some(&self.encodings.parts)
        } else {
            None
        };
        let names = |i: usize| {
            if parts.is_some_and(|p| p.contains_key(&i)) {
                return (None, tensors.at(i).name());
            }
            let canonical = display_name(view, checkpoint, i);
            (canonical, tensors.at(i).name())
        };
        self.regex_error = None;
        if self.regex && !self.filter.is_empty() {
            match regex::RegexBuilder::new(&self.filter)
                .case_insensitive(true)
                .build()
            {
                Ok(re) => {
                    self.rows = (0..tensors.len())
                        .filter(|&i| match names(i) {
                            (Some(canonical), stored) => {
                                re.is_match(canonical) || re.is_match(stored)
                            }
                            (None, _) => false,
                        })
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
                .filter(|&i| match names(i) {
                    (Some(canonical), stored) => {
                        needle.is_empty()
                            || canonical.to_lowercase().contains(&needle)
                            || (canonical != stored && stored.to_lowercase().contains(&needle))
                    }
                    (None, _) => false,
                })
                .collect();
        }
        // Each row's key is read once (a name or a size per tensor), not at
        // every comparison: 90k rows make 1.5M of those.
        match self.sort {
            SortBy::Stored => {}
            SortBy::Name => self.rows.sort_by_cached_key(|&i| names(i).0),
            SortBy::Dtype => self.rows.sort_by_cached_key(|&i| tensors.at(i).dtype()),
            SortBy::Bytes => {
                let mut rows = std::mem::take(&mut self.rows);
                rows.sort_by_cached_key(|&i| self.bytes_of(checkpoint, i));
                self.rows = rows;
            }
        }
        if self.descending {
            self.rows.reverse();
        }
    }
}

impl TensorsPanel {
    /// Row `i`'s bytes: with its folded parts when they are folded.
    fn bytes_of(&self, checkpoint: &Checkpoint, i: usize) -> u64 {
        match self.encodings.weights.get(&i) {
            Some(e) if self.fold => e.bytes_with_parts,
            _ => checkpoint.tensors().at(i).bytes(),
        }
    }

    /// Row `i`'s encoding: "affine 4-bit g64" for a packed weight (its
    /// stored dtype and shape on hover of its shape), its
    /// dtype and its weight for a part shown on its own, else the dtype.
    fn encoding_of(&self, checkpoint: &Checkpoint, i: usize) -> String {
        let t = checkpoint.tensors().at(i);
        if let Some(e) = self.encodings.weights.get(&i) {
            return e.encoding.clone();
        }
        if let Some(&w) = self.encodings.parts.get(&i) {
            let weight = checkpoint.tensors().at(w).name();
            let suffix = t.name().rsplit('.').next().unwrap_or("part");
            return format!(
                "{} {suffix} of {}",
                t.dtype().name(),
                weight.rsplit('.').nth(1).unwrap_or(weight)
            );
        }
        t.dtype().name().to_owned()
    }

    /// Row `i`'s shape as its model sees it (logical for a packed weight),
    /// and the stored one when they differ.
    fn shape_of(&self, checkpoint: &Checkpoint, i: usize) -> (String, Option<String>) {
        let stored = format!("{:?}", checkpoint.tensors().at(i).shape());
        match self.encodings.weights.get(&i) {
            Some(e) => {
                let logical = format!("{:?}", e.logical_shape);
                if logical == stored {
                    (stored, None)
                } else {
                    (logical, Some(stored))
                }
            }
            None => (stored, None),
        }
    }

    /// Draws the filter, sort buttons and the table (or layer tree) of
    /// `checkpoint`; a tensor clicked or chosen with Enter is asked to be
    /// materialized through `commands`.
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        checkpoint: &Checkpoint,
        commands: &CommandSender,
    ) {
        let focus_filter = ui.input_mut(|i| i.consume_key(egui::Modifiers::COMMAND, egui::Key::F));
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("Filter");
            let edit = ui.add(
                egui::TextEdit::singleline(&mut self.filter)
                    .hint_text("substring of the name")
                    .desired_width(200.0_f32.min(ui.available_width() - 60.0).max(80.0)),
            );
            let edit = edit.labelled_by(label.id);
            if focus_filter {
                super::widgets::focus_selecting_all(ui, &edit, &self.filter);
            }
            ui.checkbox(&mut self.tree, "Group by layer")
                .on_hover_text("A collapsible group per layer number");
            let toggled = ui
                .checkbox(&mut self.regex, "Regex")
                .on_hover_text("Match names with a regular expression (case-insensitive)")
                .changed();
            let folded = !self.encodings.parts.is_empty()
                && ui
                    .checkbox(&mut self.fold, "Fold scales")
                    .on_hover_text("Scales, biases and FP8 block scales in their weight's row (its size includes them), not rows of their own")
                    .changed();
            if edit.changed() || toggled || folded {
                self.refilter(checkpoint);
            }
            let hidden = if self.fold { self.encodings.parts.len() } else { 0 };
            ui.label(if hidden > 0 {
                format!(
                    "{} of {} tensors ({hidden} scales and biases folded)",
                    self.rows.len(),
                    checkpoint.tensors().len()
                )
            } else {
                format!(
                    "{} of {} tensors",
                    self.rows.len(),
                    checkpoint.tensors().len()
                )
            });
        });
        self.view_summary_ui(ui, checkpoint);
        if let Some(error) = &self.regex_error {
            ui.colored_label(ui.visuals().error_fg_color, format!("regex: {error}"));
        }
        ui.separator();
        let mut action = self.keyboard(ui, checkpoint);
        ui.horizontal_wrapped(|ui| {
            for (label, column) in [
                ("Stored order", SortBy::Stored),
                ("Name", SortBy::Name),
                ("Dtype", SortBy::Dtype),
                ("Size", SortBy::Bytes),
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
                        self.descending = false;
                    }
                    self.refilter(checkpoint);
                }
            }
        });
        // Borrowed, not copied: this runs every frame with up to 90k rows.
        let rows = &self.rows;
        let mut clicked = None;
        if self.tree {
            self.layer_tree_ui(ui, checkpoint, rows, &mut clicked);
        } else {
            self.tensor_table_ui(ui, checkpoint, rows, &mut clicked);
        }
        if let Some(i) = clicked {
            self.selected = Some(i);
            action = self.materialize_row(checkpoint, i);
        }
        if let Some(name) = action {
            commands.send(AppCommand::Materialize(name));
        }
    }

    /// Row `i` by the name the graph asks for (none when the view drops it).
    fn materialize_row(&self, checkpoint: &Checkpoint, i: usize) -> Option<String> {
        display_name(self.view.as_deref(), checkpoint, i).map(str::to_owned)
    }

    /// Selects the tensor stored as `stored` (when the check panel opens
    /// one); returns the name to materialize it by.
    pub(super) fn select_stored(
        &mut self,
        checkpoint: &Checkpoint,
        stored: &str,
    ) -> Option<String> {
        let position = checkpoint.tensors().iter().position(|t| t.name() == stored);
        self.selected = position;
        // Under a view the worker asks by canonical name; a stored tensor
        // the view drops has none and is not materialized.
        position.and_then(|i| self.materialize_row(checkpoint, i))
    }

    /// Sets the filter (as if typed) and applies it.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn set_filter(&mut self, checkpoint: &Checkpoint, filter: &str) {
        filter.clone_into(&mut self.filter);
        self.refilter(checkpoint);
    }

    /// Under a view: its name, what it renamed, and the tensors it dropped
    /// with the rule that dropped each.
    fn view_summary_ui(&self, ui: &mut egui::Ui, checkpoint: &Checkpoint) {
        let Some(view) = &self.view else {
            return;
        };
        let renamed = view.renamed(checkpoint);
        egui::CollapsingHeader::new(format!(
            "View {}: {renamed} renamed, {} dropped, {} fix-up rules",
            view.name,
            view.dropped.len(),
            view.fixup_rules.len()
        ))
        .id_salt("view-summary")
        .show(ui, |ui| {
            for rule in &view.fixup_rules {
                ui.label(format!("fix-up: {rule}"));
            }
            egui::ScrollArea::vertical()
                .id_salt("dropped-scroll")
                .max_height(160.0)
                .show(ui, |ui| {
                    for (i, rule) in view.dropped.iter().take(2000) {
                        let name = checkpoint.tensors().at(*i).name();
                        ui.label(format!("dropped {name}: {rule}"));
                    }
                });
        });
    }

    /// The name shown for row `i`: canonical and stored side by side when a
    /// view renamed it. Names from the file are shown escaped: no line
    /// breaks, no right-to-left overrides, no NULs in a label.
    fn row_name(&self, checkpoint: &Checkpoint, i: usize) -> String {
        let t = checkpoint.tensors().at(i);
        let canonical = display_name(self.view.as_deref(), checkpoint, i).unwrap_or("");
        if canonical == t.name() {
            printable(t.name()).into_owned()
        } else {
            format!("{}  <-  {}", printable(canonical), printable(t.name()))
        }
    }

    /// The name cell of row `i` (a selectable button, cut with an ellipsis,
    /// the full name and shard on hover); returns whether it was clicked.
    fn name_cell_ui(&self, ui: &mut egui::Ui, checkpoint: &Checkpoint, i: usize) -> bool {
        let t = checkpoint.tensors().at(i);
        let selected = self.selected == Some(i);
        let button = egui::Button::selectable(
            selected,
            egui::RichText::new(self.row_name(checkpoint, i)).monospace(),
        )
        .truncate();
        ui.add(button)
            .on_hover_text(format!(
                "{}\n{}",
                t.name(),
                checkpoint.shard(t.shard()).file
            ))
            .clicked()
    }

    /// The flat table: the name first, then how it is stored, its shape
    /// (logical for a packed weight) and size; every
    /// column resizable; only the visible rows laid out (90k rows stay cheap).
    fn tensor_table_ui(
        &self,
        ui: &mut egui::Ui,
        checkpoint: &Checkpoint,
        rows: &[usize],
        clicked: &mut Option<usize>,
    ) {
        use egui_extras::{Column, TableBuilder};
        let row_height = ui.text_style_height(&egui::TextStyle::Monospace) + 6.0;
        TableBuilder::new(ui)
            .id_salt("tensors-table")
            .striped(true)
            .resizable(true)
            .auto_shrink([false, false])
            .column(Column::remainder().at_least(160.0).clip(true))
            .column(Column::initial(150.0).at_least(40.0).clip(true))
            .column(Column::initial(130.0).at_least(60.0).clip(true))
            .column(Column::initial(88.0).at_least(60.0).clip(true))
            .header(row_height, |mut header| {
                for title in ["Name", "Stored as", "Shape (logical)", "Size"] {
                    header.col(|ui| {
                        ui.strong(title);
                    });
                }
            })
            .body(|body| {
                body.rows(row_height, rows.len(), |mut row| {
                    let Some(&i) = rows.get(row.index()) else {
                        return;
                    };
                    row.set_selected(self.selected == Some(i));
                    row.col(|ui| {
                        if self.name_cell_ui(ui, checkpoint, i) {
                            *clicked = Some(i);
                        }
                    });
                    let centred = egui::Layout::left_to_right(egui::Align::Center);
                    row.col(|ui| {
                        ui.with_layout(centred, |ui| ui.monospace(self.encoding_of(checkpoint, i)));
                    });
                    row.col(|ui| {
                        let (shape, stored) = self.shape_of(checkpoint, i);
                        let label = ui.with_layout(centred, |ui| ui.monospace(shape)).inner;
                        if let Some(stored) = stored {
                            label.on_hover_text(format!(
                                "stored (packed) as {} {stored}",
                                checkpoint.tensors().at(i).dtype().name()
                            ));
                        }
                    });
                    row.col(|ui| {
                        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                            ui.monospace(human_bytes(self.bytes_of(checkpoint, i)));
                        });
                    });
                });
            });
    }

    /// One row of the layer tree, the name first; returns whether it was clicked.
    fn tensor_row_ui(&self, ui: &mut egui::Ui, checkpoint: &Checkpoint, i: usize) -> bool {
        let facts = format!(
            "{:<8} {:<18} {:>11}",
            self.encoding_of(checkpoint, i),
            self.shape_of(checkpoint, i).0,
            human_bytes(self.bytes_of(checkpoint, i))
        );
        let mut clicked = false;
        ui.horizontal(|ui| {
            // The facts keep their width; the name takes the rest, cut.
            let facts_width = 300.0_f32.min(ui.available_width() * 0.5);
            let name_width = (ui.available_width() - facts_width).max(40.0);
            ui.allocate_ui(egui::vec2(name_width, ui.spacing().interact_size.y), |ui| {
                clicked = self.name_cell_ui(ui, checkpoint, i);
            });
            ui.add(egui::Label::new(egui::RichText::new(facts).monospace()).truncate());
        });
        clicked
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
                .entry(layer_of(
                    display_name(self.view.as_deref(), checkpoint, i).unwrap_or(""),
                ))
                .or_default()
                .push(i);
        }
        egui::ScrollArea::vertical()
            .id_salt("tensors-tree")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                for (layer, members) in &groups {
                    let bytes: u64 = members.iter().map(|&i| self.bytes_of(checkpoint, i)).sum();
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
    fn keyboard(&mut self, ui: &egui::Ui, checkpoint: &Checkpoint) -> Option<String> {
        if ui.memory(|m| m.focused().is_some()) {
            return None; // typing in a text field
        }
        let (down, up, enter) = ui.input(|i| {
            (
                i.key_pressed(egui::Key::ArrowDown),
                i.key_pressed(egui::Key::ArrowUp),
                i.key_pressed(egui::Key::Enter),
            )
        });
        let position = self
            .selected
            .and_then(|s| self.rows.iter().position(|&r| r == s));
        let next = match (position, down, up) {
            (None, true, _) | (None, _, true) => Some(0),
            (Some(p), true, _) => Some((p + 1).min(self.rows.len().saturating_sub(1))),
            (Some(p), _, true) => Some(p.saturating_sub(1)),
            _ => None,
        };
        if let Some(p) = next {
            self.selected = self.rows.get(p).copied();
        }
        match (enter, self.selected) {
            (true, Some(i)) => self.materialize_row(checkpoint, i),
            _ => None,
        }
    }
}
