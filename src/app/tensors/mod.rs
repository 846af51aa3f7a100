//! The tensors panel: a virtualized table of the open checkpoint's tensors
//! (filtered, sorted by a click on a column header, grouped by layer, packed
//! weights folded with their scales), driven by the mouse or the keyboard.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::checkpoint::{Checkpoint, TensorRef, layer_of};
use crate::units::{Shown, human_bytes};
use crate::weights::ViewInfo;

use super::commands::{AppCommand, CommandSender};

mod table;

use table::Clicked;

/// How long the selection must rest before the keyboard's preview
/// materializes it (holding Down does not queue every tensor passed).
const PREVIEW_AFTER_SECS: f64 = 0.15;

/// Below this width (points) the table shows the name and the size only.
const COMPACT_BELOW: f32 = 480.0;

/// Columns the table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum SortBy {
    /// Shard order, then data order (the file's own order).
    #[default]
    Stored,
    Name,
    /// How it is stored ("affine 4-bit g64", "BF16").
    Encoding,
    /// Elements of its logical shape.
    Elements,
    Bytes,
}

/// One line of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Line {
    /// A layer's group (grouped by layer only): its number, none for
    /// tensors outside numbered layers.
    Layer(Option<u64>),
    /// A tensor's row.
    Tensor(usize),
    /// A scale or bias shown under its expanded weight.
    Part(usize),
}

impl Line {
    /// The tensor on this line, if it is one.
    fn tensor(self) -> Option<usize> {
        match self {
            Self::Tensor(i) | Self::Part(i) => Some(i),
            Self::Layer(_) => None,
        }
    }
}

/// The tensors panel: filter, sort, selection and the visible lines of the
/// open checkpoint. The app makes a new one for each opened checkpoint, so
/// the rows (a cache of filter and sort) never outlive the checkpoint they
/// index.
#[derive(Debug, Default)]
#[allow(clippy::struct_excessive_bools)] // independent toggles of the panel
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
    /// What the table draws: `rows` with group lines and expanded parts.
    lines: Vec<Line>,
    /// Each layer group's tensor count and bytes.
    layers: HashMap<Option<u64>, (usize, u64)>,
    /// Layer groups shown open.
    open_layers: HashSet<Option<u64>>,
    /// Folded weights whose parts are shown under them.
    expanded: HashSet<usize>,
    /// The highlighted line (mouse or keyboard).
    cursor: Option<Line>,
    /// Scroll the table to the cursor in the next frame.
    scroll_to_cursor: bool,
    /// A keyboard move's preview: the tensor and when to materialize it.
    preview_at: Option<(usize, f64)>,
    /// Lines that fit in the table (for Page Up and Page Down).
    page_lines: usize,
    /// A new checkpoint: the table starts at its top, not where the last
    /// one's was scrolled.
    scroll_to_top: bool,
    /// The longest name the rows show, in characters (the name column
    /// takes what it needs, not the whole width of a 4K window).
    widest_name: usize,
    /// Whether the table ends with an empty column taking the room left.
    spare_column: bool,
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
    /// "affine 4-bit g64", "mxfp4 4-bit g32", "e4m3 128x128" (FP8 with
    /// 128x128 block scales).
    encoding: String,
    /// The dequantized shape.
    logical_shape: Vec<u64>,
    /// The weight's bytes with its scales, biases and global scale.
    bytes_with_parts: u64,
    /// Its scales, biases, global scale or block scale (positions).
    parts: Vec<usize>,
}

/// How each tensor is stored, computed once per checkpoint from the header
/// summary: packed and scaled weights by position, and their parts (scales,
/// biases, FP8 `weight_scale_inv`) with the weight each belongs to.
#[derive(Debug, Default)]
struct Encodings {
    weights: std::collections::HashMap<usize, Encoded>,
    parts: std::collections::HashMap<usize, usize>,
    /// Whether each tensor (by position) is a part: one read per row where
    /// a filter over 90k rows asks it of every one.
    is_part: Vec<bool>,
}

impl Encodings {
    fn of(checkpoint: &Checkpoint, summary: &crate::checkpoint::Summary) -> Self {
        let tensors = checkpoint.tensors();
        let bytes = |i: usize| tensors.get(i).map_or(0, TensorRef::bytes);
        let mut out = Self::default();
        if checkpoint.is_gguf() {
            // GGUF block types: "Q4_K 4.50 b/w", decoded as gguf-py does.
            for t in tensors {
                if let Some(kind) = checkpoint.ggml_block_at(t.position()) {
                    out.weights.insert(
                        t.position(),
                        Encoded {
                            encoding: format!("{} {:.2} b/w", kind.name, kind.bits_per_value()),
                            logical_shape: t.shape().to_vec(),
                            bytes_with_parts: t.bytes(),
                            parts: Vec::new(),
                        },
                    );
                }
            }
        }
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
                        parts,
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
                            Some([r, c]) if t.block_inferred => {
                                format!("{} {r}x{c} inferred", t.format.name())
                            }
                            Some([r, c]) => format!("{} {r}x{c}", t.format.name()),
                            None => t.format.name().to_owned(),
                        },
                        logical_shape: shape,
                        bytes_with_parts: bytes(t.weight) + bytes(scale),
                        parts: vec![scale],
                    },
                );
            }
        }
        out.is_part = vec![false; tensors.len()];
        for &p in out.parts.keys() {
            if let Some(slot) = out.is_part.get_mut(p) {
                *slot = true;
            }
        }
        out
    }
}

/// The positions in `0..len` that `keep`, in order, checked on every core
/// (the filter of 90k names within a frame).
fn matching(len: usize, keep: &(dyn Fn(usize) -> bool + Sync)) -> Vec<usize> {
    crate::par::on_cores(len, 8192, "tensor-filter", &|range| {
        range.filter(|&i| keep(i)).collect::<Vec<usize>>()
    })
    .concat()
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
            page_lines: 20,
            scroll_to_top: true,
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
        let is_part =
            |i: usize| self.fold && self.encodings.is_part.get(i).copied().unwrap_or(false);
        let names = |i: usize| {
            let stored = tensors.at(i).name();
            if is_part(i) {
                return (None, stored);
            }
            let canonical = match view {
                Some(view) => view.canonical_of.get(i).and_then(Option::as_deref),
                None => Some(stored),
            };
            (canonical, stored)
        };
        self.regex_error = None;
        if self.regex && !self.filter.is_empty() {
            match regex::RegexBuilder::new(&self.filter)
                .case_insensitive(true)
                .build()
            {
                Ok(re) => {
                    self.rows = matching(tensors.len(), &|i| match names(i) {
                        (Some(canonical), stored) => re.is_match(canonical) || re.is_match(stored),
                        (None, _) => false,
                    });
                }
                Err(err) => {
                    // Keep the last good rows; say what is wrong on one line.
                    let text = err.to_string();
                    self.regex_error = Some(text.lines().last().unwrap_or(&text).trim().to_owned());
                    return;
                }
            }
        } else {
            // Words match names; `shape:`, `dtype:`, `mode:` and `size>`
            // terms what the headers say (checkpoint::query).
            let query = match crate::checkpoint::query::TensorQuery::parse(&self.filter) {
                Ok(query) => query,
                Err(err) => {
                    self.regex_error = Some(err.to_string());
                    return;
                }
            };
            let this = &*self;
            self.rows = matching(tensors.len(), &|i| match names(i) {
                (Some(canonical), stored) => {
                    query.is_empty()
                        || query.matches(&crate::checkpoint::query::TensorFacts {
                            names: [Some(canonical), (canonical != stored).then_some(stored)],
                            ..this.facts(checkpoint, i)
                        })
                }
                (None, _) => false,
            });
        }
        self.widest_name = self
            .rows
            .iter()
            .map(|&i| {
                let (canonical, stored) = names(i);
                let canonical = canonical.unwrap_or(stored);
                canonical.chars().count()
                    + if canonical == stored {
                        0
                    } else {
                        RENAMED_FROM.len() + stored.chars().count()
                    }
            })
            .max()
            .unwrap_or(0);
        self.resort(checkpoint);
    }

    /// Sorts the rows the filter kept (a click on a header sorts them
    /// without filtering again). Each row's key is read once (a name or a
    /// size per tensor), not at every comparison (90k rows make 1.5M of
    /// those), and the rows are sorted in runs on every core.
    fn resort(&mut self, checkpoint: &Checkpoint) {
        let tensors = checkpoint.tensors();
        let view = self.view.as_deref();
        let name = |i: usize| match view {
            Some(view) => view.canonical_of.get(i).and_then(Option::as_deref),
            None => Some(tensors.at(i).name()),
        };
        let mut rows = std::mem::take(&mut self.rows);
        // From the file's order, sorted stably: ties keep the file's order
        // in either direction (layers 0, 1, 2… among equal sizes).
        rows.sort_unstable();
        let this = &*self;
        let descending = self.descending;
        match self.sort {
            SortBy::Stored => {
                if descending {
                    rows.reverse();
                }
            }
            SortBy::Name => {
                sort_rows(&mut rows, descending, &|i| {
                    name(i).map(crate::units::Natural)
                });
            }
            SortBy::Encoding => {
                sort_rows(&mut rows, descending, &|i| this.encoding_key(checkpoint, i));
            }
            SortBy::Elements => {
                sort_rows(&mut rows, descending, &|i| this.elements_of(checkpoint, i));
            }
            SortBy::Bytes => sort_rows(&mut rows, descending, &|i| this.bytes_of(checkpoint, i)),
        }
        self.rows = rows;
        self.relayout(checkpoint);
    }

    /// Rebuilds the lines from the rows: a group line per layer (grouped),
    /// the open groups' rows, and the parts of expanded weights. A cursor
    /// on a line no longer shown goes.
    fn relayout(&mut self, checkpoint: &Checkpoint) {
        let expanded = |i: usize| {
            self.fold
                && !self.expanded.is_empty()
                && self.expanded.contains(&i)
                && self.encodings.weights.contains_key(&i)
        };
        let mut lines = Vec::with_capacity(self.rows.len());
        let push_row = |lines: &mut Vec<Line>, i: usize| {
            lines.push(Line::Tensor(i));
            if expanded(i) {
                let parts = &self.encodings.weights[&i].parts;
                lines.extend(parts.iter().map(|&p| Line::Part(p)));
            }
        };
        self.layers.clear();
        if self.tree {
            let mut groups: BTreeMap<Option<u64>, Vec<usize>> = BTreeMap::new();
            for &i in &self.rows {
                let name = display_name(self.view.as_deref(), checkpoint, i).unwrap_or("");
                groups.entry(layer_of(name)).or_default().push(i);
            }
            for (layer, members) in groups {
                let bytes = members.iter().map(|&i| self.bytes_of(checkpoint, i)).sum();
                self.layers.insert(layer, (members.len(), bytes));
                lines.push(Line::Layer(layer));
                if self.open_layers.contains(&layer) {
                    for i in members {
                        push_row(&mut lines, i);
                    }
                }
            }
        } else {
            for &i in &self.rows {
                push_row(&mut lines, i);
            }
        }
        self.lines = lines;
        if self.cursor.is_some_and(|c| !self.lines.contains(&c)) {
            self.cursor = None;
            self.preview_at = None;
        }
    }

    /// Row `i`'s bytes: with its folded parts when they are folded.
    fn bytes_of(&self, checkpoint: &Checkpoint, i: usize) -> u64 {
        match self.encodings.weights.get(&i) {
            Some(e) if self.fold => e.bytes_with_parts,
            _ => checkpoint.tensors().at(i).bytes(),
        }
    }

    /// What sorts row `i` by how it is stored, without building its text:
    /// the encoding of a packed weight ("affine 4-bit g64"), else the
    /// dtype, parts after their kind of weight.
    fn encoding_key<'a>(&'a self, checkpoint: &'a Checkpoint, i: usize) -> (&'a str, bool) {
        match self.encodings.weights.get(&i) {
            Some(e) => (e.encoding.as_str(), false),
            None => (
                checkpoint.tensors().at(i).dtype().name(),
                self.encodings.parts.contains_key(&i),
            ),
        }
    }

    /// Row `i`'s elements as its model sees them (its logical shape's).
    fn elements_of(&self, checkpoint: &Checkpoint, i: usize) -> u64 {
        match self.encodings.weights.get(&i) {
            Some(e) => e.logical_shape.iter().product(),
            None => checkpoint.tensors().at(i).shape().iter().product(),
        }
    }

    /// Row `i`'s encoding: "affine 4-bit g64" for a packed weight, its
    /// dtype and its weight for a part, else the dtype.
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
        // A PyTorch tensor on another's storage: a tied weight or a view.
        if let Some(at) = checkpoint.torch_tensor_at(i) {
            if let Some(other) = at.tied_to.and_then(|o| checkpoint.tensors().get(o)) {
                let how = if at.same_view { "tied to" } else { "view of" };
                return format!("{} {how} {}", t.dtype().name(), other.name());
            }
            if !at.contiguous {
                return format!("{} strided", t.dtype().name());
            }
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

    /// The tensor the cursor is on.
    fn selected(&self) -> Option<usize> {
        self.cursor.and_then(Line::tensor)
    }

    /// Draws the filter and the table (or layer groups) of `checkpoint`; a
    /// tensor clicked, chosen with Enter or rested on with the arrows is
    /// asked to be materialized through `commands`.
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        checkpoint: &Checkpoint,
        commands: &CommandSender,
    ) {
        let mut action = self.toolbar_ui(ui, checkpoint);
        self.view_summary_ui(ui, checkpoint);
        if let Some(error) = &self.regex_error {
            // The error quotes what was typed: shown escaped.
            let what = if self.regex { "regex" } else { "filter" };
            ui.colored_label(
                ui.visuals().error_fg_color,
                format!("{what}: {}", crate::units::Shown::new(error)),
            );
        }
        ui.separator();
        action = action.or(self.keyboard(ui, checkpoint));
        let clicked = self.table_ui(ui, checkpoint);
        match clicked {
            Some(Clicked::Tensor(line)) => {
                self.cursor = Some(line);
                self.preview_at = None;
                action = line
                    .tensor()
                    .and_then(|i| self.materialize_row(checkpoint, i));
            }
            Some(Clicked::Toggle(line)) => {
                self.cursor = Some(line);
                self.toggle(checkpoint, line, None);
            }
            None => {}
        }
        // The keyboard's preview, once the selection has rested: within
        // the preview budget only (the app decides; Enter asks for any).
        let mut moved_onto = None;
        if let Some((i, at)) = self.preview_at {
            let now = ui.input(|input| input.time);
            if now >= at {
                self.preview_at = None;
                if self.selected() == Some(i) && action.is_none() {
                    moved_onto = self
                        .materialize_row(checkpoint, i)
                        .map(|name| (name, self.materialized_bytes(checkpoint, i)));
                }
            } else {
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_secs_f64(at - now));
            }
        }
        if let Some(name) = action {
            commands.send(AppCommand::Materialize(name));
        } else if let Some((name, bytes)) = moved_onto {
            commands.send(AppCommand::Preview(name, bytes));
        }
    }

    /// What the filter reads of row `i` (its names aside).
    pub(super) fn facts<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        i: usize,
    ) -> crate::checkpoint::query::TensorFacts<'a> {
        let tensor = checkpoint.tensors().get(i);
        let encoded = self.encodings.weights.get(&i);
        crate::checkpoint::query::TensorFacts {
            names: [None, None],
            dtype: tensor.map_or("", |t| t.dtype().name()),
            shapes: [
                tensor.map(TensorRef::shape),
                encoded.map(|e| e.logical_shape.as_slice()),
            ],
            bytes: self.bytes_of(checkpoint, i),
            mode: encoded.map(|e| e.encoding.as_str()),
        }
    }

    /// What materializing tensor `i` makes, as the headers give it: a
    /// packed or scaled weight dequantized to float32 (its logical shape),
    /// else its stored bytes.
    pub(super) fn materialized_bytes(&self, checkpoint: &Checkpoint, i: usize) -> u64 {
        let stored = checkpoint.tensors().get(i).map_or(0, TensorRef::bytes);
        match self.encodings.weights.get(&i) {
            Some(e) => e
                .logical_shape
                .iter()
                .try_fold(4_u64, |n, &d| n.checked_mul(d))
                .unwrap_or(u64::MAX)
                .max(stored),
            None => stored,
        }
    }

    /// The filter, the toggles, the count and the file-order button;
    /// returns the tensor Enter in the filter opened.
    fn toolbar_ui(&mut self, ui: &mut egui::Ui, checkpoint: &Checkpoint) -> Option<String> {
        let focus_filter = super::widgets::shortcut_with_typing(ui.ctx(), egui::Key::F);
        let mut action = None;
        ui.horizontal_wrapped(|ui| {
            let edit = crate::app::widgets::labelled_field(ui, "Filter", &mut self.filter, "part of the name", 200.0_f32.min(ui.available_width() - 60.0).max(80.0));
            let mut changed = edit.changed();
            if let Some(typed) = &focus_filter {
                changed |= super::widgets::focus_selecting_all(ui, &edit, &mut self.filter, typed);
            }
            // Down leaves the filter for the table; Enter opens the
            // selected match (the first when none is).
            let down = edit.has_focus()
                && ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::ArrowDown));
            let entered = edit.lost_focus()
                && ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Enter));
            if down {
                edit.surrender_focus();
            }
            changed |= ui
                .checkbox(&mut self.tree, "Group by layer")
                .on_hover_text("A group per layer number (Right opens, Left closes)")
                .changed();
            changed |= ui
                .checkbox(&mut self.regex, "Regex")
                .on_hover_text("Match names with a regular expression (case-insensitive)")
                .changed();
            changed |= !self.encodings.parts.is_empty()
                && ui
                    .checkbox(&mut self.fold, "Fold scales")
                    .on_hover_text("Scales, biases and FP8 block scales under their weight (its size includes them; Right shows them), not rows of their own")
                    .changed();
            if changed {
                self.refilter(checkpoint);
            }
            if (down || entered) && self.cursor.is_none() {
                self.cursor = self.lines.iter().copied().find(|l| l.tensor().is_some());
                self.scroll_to_cursor = true;
            }
            if down {
                self.schedule_preview(ui);
            }
            if entered {
                action = self.selected().and_then(|i| self.materialize_row(checkpoint, i));
            }
            let hidden = if self.fold { self.encodings.parts.len() } else { 0 };
            ui.label(if hidden > 0 {
                format!(
                    "{} of {} tensors ({hidden} scales folded)",
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
            if self.sort != SortBy::Stored
                && ui
                    .small_button("File order")
                    .on_hover_text("Sort as stored: shard by shard, in data order")
                    .clicked()
            {
                self.sort = SortBy::Stored;
                self.descending = false;
                self.resort(checkpoint);
            }
        });
        action
    }

    /// Row `i` by the name the graph asks for (none when the view drops it).
    fn materialize_row(&self, checkpoint: &Checkpoint, i: usize) -> Option<String> {
        display_name(self.view.as_deref(), checkpoint, i).map(str::to_owned)
    }

    /// Selects tensor `i` (the check panel, the palette): its layer
    /// opens, a folded part shows under its weight, the table scrolls to
    /// it. Returns the name to materialize it by.
    pub(super) fn select(&mut self, checkpoint: &Checkpoint, i: usize) -> Option<String> {
        let weight = self.encodings.parts.get(&i).copied().filter(|_| self.fold);
        let row = weight.unwrap_or(i);
        if !self.rows.contains(&row) {
            // Hidden by the filter: the filter goes, not the user's choice.
            self.filter.clear();
            self.refilter(checkpoint);
        }
        if let Some(w) = weight {
            self.expanded.insert(w);
        }
        if self.tree {
            let name = display_name(self.view.as_deref(), checkpoint, row).unwrap_or("");
            self.open_layers.insert(layer_of(name));
        }
        self.relayout(checkpoint);
        self.cursor = Some(if weight.is_some() {
            Line::Part(i)
        } else {
            Line::Tensor(i)
        });
        self.scroll_to_cursor = true;
        self.preview_at = None;
        // Under a view the worker asks by canonical name; a stored tensor
        // the view drops has none and is not materialized.
        self.materialize_row(checkpoint, i)
    }

    /// Sets the filter (as if typed) and applies it.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn set_filter(&mut self, checkpoint: &Checkpoint, filter: &str) {
        filter.clone_into(&mut self.filter);
        self.refilter(checkpoint);
    }

    /// The stored name of the selected tensor.
    pub(super) fn selected_name<'a>(&self, checkpoint: &'a Checkpoint) -> Option<&'a str> {
        self.selected()
            .and_then(|i| checkpoint.tensors().get(i))
            .map(TensorRef::name)
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

    /// The names of row `i`: the one the view gives (canonical), and the
    /// stored one when the view renamed it. Names from the file are shown
    /// escaped: no line breaks, no right-to-left overrides, no NULs in a
    /// label.
    fn row_names(&self, checkpoint: &Checkpoint, i: usize) -> (String, Option<String>) {
        let t = checkpoint.tensors().at(i);
        let canonical = display_name(self.view.as_deref(), checkpoint, i).unwrap_or("");
        if canonical == t.name() {
            (Shown::new(t.name()).into_string(), None)
        } else {
            (
                Shown::new(canonical).into_string(),
                Some(Shown::new(t.name()).into_string()),
            )
        }
    }
}

/// Between a renamed tensor's canonical name and its stored one.
const RENAMED_FROM: &str = "  <-  ";

/// What a name cell shows in `fits` characters: the canonical name first,
/// cut in the middle when it must be; the stored name after it, cut in the
/// middle too, only when at least a few of its characters fit beside it.
fn shown_names(canonical: &str, stored: Option<&str>, fits: usize) -> String {
    const STORED_AT_LEAST: usize = 12;
    let first = canonical.chars().count();
    match stored {
        Some(stored) if first + RENAMED_FROM.len() + STORED_AT_LEAST <= fits => format!(
            "{canonical}{RENAMED_FROM}{}",
            crate::units::fit_name(stored, fits - first - RENAMED_FROM.len())
        ),
        _ => crate::units::fit_name(canonical, fits).into_owned(),
    }
}

/// `rows` sorted stably by `key`, largest first when `descending` (equal
/// keys keep their order either way).
fn sort_rows<K: Ord + Send>(
    rows: &mut Vec<usize>,
    descending: bool,
    key: &(dyn Fn(usize) -> K + Sync),
) {
    if descending {
        crate::par::sort_by_key(rows, &|i| std::cmp::Reverse(key(i)));
    } else {
        crate::par::sort_by_key(rows, key);
    }
}

#[cfg(test)]
mod tests {
    use super::shown_names;

    #[test]
    fn a_renamed_tensor_shows_its_canonical_name_first_and_whole() {
        let canonical = "model.layers.0.mlp.down_proj.weight";
        let stored = "blk.0.ffn_down.weight";
        // Room for both.
        assert_eq!(
            shown_names(canonical, Some(stored), 80),
            format!("{canonical}  <-  {stored}")
        );
        // Room for the canonical name and a few of the stored one's
        // characters: the stored one is cut, its end (what differs) kept.
        let shown = shown_names(canonical, Some(stored), 55);
        assert!(shown.starts_with(&format!("{canonical}  <-  ")), "{shown}");
        assert!(shown.ends_with("weight"), "{shown}");
        assert_eq!(shown.chars().count(), 55);
        // Less: the canonical name alone, whole.
        assert_eq!(shown_names(canonical, Some(stored), 40), canonical);
        // Less still: the canonical name cut, its end kept.
        let shown = shown_names(canonical, Some(stored), 20);
        assert!(shown.ends_with("down_proj.weight"), "{shown}");
        assert!(shown.chars().count() <= 20, "{shown}");
    }
}
