//! The tensors table: its columns, lines (layer groups, a weight's parts),
//! clicks, and the keyboard that moves in it.

use super::{
    COMPACT_BELOW, Checkpoint, Line, PREVIEW_AFTER_SECS, RENAMED_FROM, SortBy, TensorsPanel,
    human_bytes, shown_names,
};

/// Room at the right of the last column for the scroll bar drawn over it.
fn scroll_bar_room(ui: &egui::Ui) -> f32 {
    ui.spacing().scroll.bar_width + ui.spacing().scroll.bar_outer_margin
}

/// What a click in the table asked for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Clicked {
    /// Show this line's tensor.
    Tensor(Line),
    /// Open or close this group, or show or hide this weight's parts.
    Toggle(Line),
}

impl TensorsPanel {
    /// Opens or closes a group line, or shows or hides a weight's parts
    /// (`open`: which; `None` flips it).
    pub(super) fn toggle(&mut self, checkpoint: &Checkpoint, line: Line, open: Option<bool>) {
        match line {
            Line::Layer(layer) => {
                let now = open.unwrap_or(!self.open_layers.contains(&layer));
                if now {
                    self.open_layers.insert(layer);
                } else {
                    self.open_layers.remove(&layer);
                }
            }
            Line::Tensor(i) if self.has_parts(i) => {
                let now = open.unwrap_or(!self.expanded.contains(&i));
                if now {
                    self.expanded.insert(i);
                } else {
                    self.expanded.remove(&i);
                }
            }
            Line::Tensor(_) | Line::Part(_) => return,
        }
        self.relayout(checkpoint);
    }

    /// Whether row `i` is a folded weight with parts to show.
    pub(super) fn has_parts(&self, i: usize) -> bool {
        self.fold
            && self
                .encodings
                .weights
                .get(&i)
                .is_some_and(|e| !e.parts.is_empty())
    }

    /// Column widths for a table `width` wide: the name takes what the
    /// others leave, and the others shrink on a narrow window so that the
    /// size stays on screen.
    pub(super) fn column_widths(width: f32) -> [f32; 3] {
        [
            (width * 0.2).clamp(70.0, 190.0),
            (width * 0.18).clamp(64.0, 170.0),
            (width * 0.12).clamp(100.0, 110.0),
        ]
    }

    /// The table: name (cut in the middle so its end shows), how it is
    /// stored, its shape (logical for a packed weight) and its size; a
    /// click on a header sorts by it. Only the visible lines are laid out.
    /// The name column's width when the longest name needs less than the
    /// room the other columns leave (the rest then goes to an empty last
    /// column: on a 4K window no 1,700-point gap opens beside the names),
    /// and whether it does.
    pub(super) fn name_column(&self, ui: &egui::Ui, width: f32, compact: bool) -> (f32, bool) {
        let [stored_w, shape_w, size_w] = Self::column_widths(width);
        let others = if compact {
            size_w
        } else {
            stored_w + shape_w + size_w
        };
        let font = egui::TextStyle::Monospace.resolve(ui.style());
        let char_width = ui.fonts_mut(|f| f.glyph_width(&font, 'm')).max(1.0);
        // The group triangle, a part's indent and the button's padding.
        #[allow(clippy::cast_precision_loss)]
        let name_needs = self.widest_name as f32 * char_width + 96.0;
        let spare = width - others - scroll_bar_room(ui) - 24.0 > name_needs;
        (name_needs, spare)
    }

    pub(super) fn table_ui(
        &mut self,
        ui: &mut egui::Ui,
        checkpoint: &Checkpoint,
    ) -> Option<Clicked> {
        use egui_extras::{Column, TableBuilder};
        let row_height = ui.text_style_height(&egui::TextStyle::Monospace) + 6.0;
        let width = ui.available_width();
        let [stored_w, shape_w, size_w] = Self::column_widths(width);
        // Widths are remembered per width band: after the window is
        // resized a lot, the columns start again from widths that fit.
        #[allow(clippy::cast_possible_truncation)]
        let band = (width / 240.0) as i32;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let fitting = (ui.available_height() / row_height).max(0.0) as usize;
        self.page_lines = fitting.saturating_sub(2).max(1);
        // A narrow table keeps the name and the size; how it is stored and
        // its shape show on hover of the name.
        let compact = width < COMPACT_BELOW;
        // Labels that select text would take a click meant for the row.
        let selectable =
            std::mem::replace(&mut ui.style_mut().interaction.selectable_labels, false);
        let (name_needs, spare) = self.name_column(ui, width, compact);
        let mut builder = TableBuilder::new(ui)
            .id_salt(("tensors-table", band, spare))
            .striped(true)
            .resizable(true)
            // Every cell of a row selects it, blank space and sizes too.
            .sense(egui::Sense::click())
            .auto_shrink([false, false]);
        if std::mem::take(&mut self.scroll_to_top) {
            builder = builder.vertical_scroll_offset(0.0);
        }
        builder = builder.column(if spare {
            Column::exact(name_needs).clip(true).resizable(false)
        } else {
            Column::remainder()
                .at_least(100.0)
                .clip(true)
                .resizable(false)
        });
        if !compact {
            builder = builder
                .column(Column::initial(stored_w).at_least(40.0).clip(true))
                .column(Column::initial(shape_w).at_least(40.0).clip(true));
        }
        let mut builder = builder.column(Column::initial(size_w).at_least(40.0).clip(true));
        // The room the columns leave, as an empty last column.
        self.spare_column = spare;
        if spare {
            builder = builder.column(Column::remainder());
        }
        if std::mem::take(&mut self.scroll_to_cursor)
            && let Some(position) = self
                .cursor
                .and_then(|c| self.lines.iter().position(|&l| l == c))
        {
            builder = builder.scroll_to_row(position, None);
        }
        let mut sort_clicked = None;
        let mut clicked = None;
        builder
            .header(row_height, |mut header| {
                for (title, column, hover) in [
                    ("Name", SortBy::Name, "Sort by name"),
                    ("Stored as", SortBy::Encoding, "Sort by how it is stored"),
                    ("Shape (logical)", SortBy::Elements, "Sort by element count"),
                    ("Size", SortBy::Bytes, "Sort by bytes (with folded scales)"),
                ] {
                    if compact && matches!(column, SortBy::Encoding | SortBy::Elements) {
                        continue;
                    }
                    header.col(|ui| {
                        let mark = match (self.sort == column, self.descending) {
                            (true, false) => "\u{2191}",
                            (true, true) => "\u{2193}",
                            (false, _) => "",
                        };
                        let text = super::super::widgets::marked_text(ui, mark, title, false);
                        let button = egui::Button::new(text).frame(false);
                        if ui.add(button).on_hover_text(hover).clicked() {
                            sort_clicked = Some(column);
                        }
                    });
                }
                if self.spare_column {
                    header.col(|_| {});
                }
            })
            .body(|body| {
                body.rows(row_height, self.lines.len(), |mut row| {
                    let Some(&line) = self.lines.get(row.index()) else {
                        return;
                    };
                    row.set_selected(self.cursor == Some(line));
                    let on_widget = self.line_ui(&mut row, checkpoint, line, compact);
                    let on_row = row.response().clicked().then_some(match line {
                        Line::Layer(_) => Clicked::Toggle(line),
                        Line::Tensor(_) | Line::Part(_) => Clicked::Tensor(line),
                    });
                    if let Some(c) = on_widget.or(on_row) {
                        clicked = Some(c);
                    }
                });
            });
        ui.style_mut().interaction.selectable_labels = selectable;
        if let Some(column) = sort_clicked {
            self.sort_by_header(checkpoint, column);
        }
        clicked
    }

    /// A click on a column's header: sorts by it, or reverses it.
    pub(super) fn sort_by_header(&mut self, checkpoint: &Checkpoint, column: SortBy) {
        if self.sort == column {
            self.descending = !self.descending;
        } else {
            self.sort = column;
            // Largest first for sizes, A to Z for words.
            self.descending = matches!(column, SortBy::Bytes | SortBy::Elements);
        }
        self.resort(checkpoint);
        self.scroll_to_cursor = true;
    }

    /// One line's cells; returns what a click on it asked for.
    pub(super) fn line_ui(
        &self,
        row: &mut egui_extras::TableRow<'_, '_>,
        checkpoint: &Checkpoint,
        line: Line,
        compact: bool,
    ) -> Option<Clicked> {
        let centred = egui::Layout::left_to_right(egui::Align::Center);
        let right = egui::Layout::right_to_left(egui::Align::Center);
        let mut clicked = None;
        let i = match line {
            Line::Layer(layer) => {
                let (count, bytes) = self.layers.get(&layer).copied().unwrap_or_default();
                let open = self.open_layers.contains(&layer);
                row.col(|ui| {
                    let arrow = if open { "\u{25be}" } else { "\u{25b8}" };
                    let title = match layer {
                        Some(n) => format!("layer {n}: {count} tensors"),
                        None => format!("not in a layer: {count} tensors"),
                    };
                    let text = super::super::widgets::marked_text(ui, arrow, &title, true);
                    let button = egui::Button::selectable(self.cursor == Some(line), text);
                    if ui.add(button).clicked() {
                        clicked = Some(Clicked::Toggle(line));
                    }
                });
                if !compact {
                    row.col(|_| {});
                    row.col(|_| {});
                }
                row.col(|ui| {
                    ui.with_layout(right, |ui| {
                        ui.add_space(scroll_bar_room(ui));
                        ui.monospace(human_bytes(bytes));
                    });
                });
                if self.spare_column {
                    row.col(|_| {});
                }
                return clicked;
            }
            Line::Tensor(i) | Line::Part(i) => i,
        };
        row.col(|ui| {
            ui.with_layout(centred, |ui| {
                ui.spacing_mut().item_spacing.x = 2.0;
                let depth = usize::from(self.tree) + usize::from(matches!(line, Line::Part(_)));
                ui.add_space(14.0 * depth as f32);
                if self.has_parts(i) && matches!(line, Line::Tensor(_)) {
                    let arrow = if self.expanded.contains(&i) {
                        "\u{25be}"
                    } else {
                        "\u{25b8}"
                    };
                    if ui
                        .add(egui::Button::new(egui::RichText::new(arrow).monospace()).frame(false))
                        .on_hover_text("Show or hide its scales and biases (Right / Left)")
                        .clicked()
                    {
                        clicked = Some(Clicked::Toggle(line));
                    }
                } else if self.fold && !self.encodings.parts.is_empty() {
                    ui.add_space(14.0);
                }
                if self.name_cell_ui(ui, checkpoint, i, self.cursor == Some(line)) {
                    clicked = Some(Clicked::Tensor(line));
                }
            });
        });
        if !compact {
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
        }
        row.col(|ui| {
            ui.with_layout(right, |ui| {
                ui.add_space(scroll_bar_room(ui));
                ui.monospace(human_bytes(self.bytes_of(checkpoint, i)));
            });
        });
        if self.spare_column {
            row.col(|_| {});
        }
        clicked
    }

    /// The name cell of row `i`: a selectable button, the name cut in the
    /// middle so that its end (what differs between siblings) shows; the
    /// full name and shard on hover, Copy name on a right click. Returns
    /// whether it was clicked.
    pub(super) fn name_cell_ui(
        &self,
        ui: &mut egui::Ui,
        checkpoint: &Checkpoint,
        i: usize,
        selected: bool,
    ) -> bool {
        let t = checkpoint.tensors().at(i);
        let room = ui.available_width() - 2.0 * ui.spacing().button_padding.x;
        let fits = super::super::widgets::monospace_chars(ui, room);
        let (canonical, stored) = self.row_names(checkpoint, i);
        let shown = shown_names(&canonical, stored.as_deref(), fits);
        let button = egui::Button::selectable(selected, egui::RichText::new(shown).monospace());
        let (shape, _) = self.shape_of(checkpoint, i);
        // Screen readers (and tests) read the whole names, not the cut ones.
        let full = match &stored {
            Some(stored) => format!("{canonical}{RENAMED_FROM}{stored}"),
            None => canonical.clone(),
        };
        let response = ui.add(button);
        response.widget_info(|| {
            egui::WidgetInfo::selected(egui::Role::Button, true, selected, full.clone())
        });
        let names = match &stored {
            Some(stored) => format!("{canonical}\nstored as {stored}"),
            None => canonical.clone(),
        };
        let response = response.on_hover_text(format!(
            "{names}\n{} {shape}, {}\n{}",
            self.encoding_of(checkpoint, i),
            human_bytes(self.bytes_of(checkpoint, i)),
            checkpoint.shard(t.shard()).file
        ));
        response.context_menu(|ui| {
            if ui.button("Copy name").clicked() {
                ui.ctx().copy_text(t.name().to_owned());
                ui.close();
            }
        });
        if response.clicked() {
            // The table's keys go on working after a click on a name.
            response.surrender_focus();
        }
        response.clicked()
    }

    /// Materializes the cursor's tensor once it has rested (the arrows,
    /// Page Up and Down, Home and End move it).
    pub(super) fn schedule_preview(&mut self, ui: &egui::Ui) {
        self.preview_at = self
            .selected()
            .map(|i| (i, ui.input(|input| input.time) + PREVIEW_AFTER_SECS));
        ui.ctx()
            .request_repaint_after(std::time::Duration::from_secs_f64(PREVIEW_AFTER_SECS));
    }

    /// The table's keys (outside a text field): Up, Down, Page Up, Page
    /// Down, Home and End move the cursor and preview the tensor there;
    /// Enter or Space shows it at once (or opens a group); Right and Left
    /// open and close a group or a weight's parts; Ctrl+C copies its name.
    /// Returns the tensor to materialize now.
    pub(super) fn keyboard(&mut self, ui: &egui::Ui, checkpoint: &Checkpoint) -> Option<String> {
        use egui::Key;
        // Typing in a text field; a button focused by a click (a row's
        // name) leaves the keys to the table.
        if ui.ctx().text_edit_focused() || self.lines.is_empty() {
            return None;
        }
        let last = self.lines.len() - 1;
        let position = self
            .cursor
            .and_then(|c| self.lines.iter().position(|&l| l == c));
        let page = isize::try_from(self.page_lines).unwrap_or(1);
        let (moved, act, right, left, copy) = ui.input_mut(|i| {
            let mut moved = None;
            for (key, step) in [
                (Key::ArrowDown, 1_isize),
                (Key::ArrowUp, -1),
                (Key::PageDown, page),
                (Key::PageUp, -page),
            ] {
                for _ in 0..i.count_and_consume_key(egui::Modifiers::NONE, key) {
                    let from = moved.or(position);
                    moved = Some(match from {
                        None => 0,
                        Some(p) => p.saturating_add_signed(step).min(last),
                    });
                }
            }
            if i.consume_key(egui::Modifiers::NONE, Key::Home) {
                moved = Some(0);
            }
            if i.consume_key(egui::Modifiers::NONE, Key::End) {
                moved = Some(last);
            }
            let act = i.consume_key(egui::Modifiers::NONE, Key::Enter)
                || i.consume_key(egui::Modifiers::NONE, Key::Space);
            let right = i.consume_key(egui::Modifiers::NONE, Key::ArrowRight);
            let left = i.consume_key(egui::Modifiers::NONE, Key::ArrowLeft);
            let copy = i.events.iter().any(|e| matches!(e, egui::Event::Copy));
            (moved, act, right, left, copy)
        });
        if let Some(p) = moved {
            self.cursor = self.lines.get(p).copied();
            self.scroll_to_cursor = true;
            self.schedule_preview(ui);
        }
        let line = self.cursor?;
        if copy && let Some(name) = self.selected_name(checkpoint) {
            ui.ctx().copy_text(name.to_owned());
        }
        if right || left {
            // Left on a part goes to its weight.
            if let (true, Line::Part(p)) = (left, line) {
                self.cursor = self.encodings.parts.get(&p).map(|&w| Line::Tensor(w));
                self.scroll_to_cursor = true;
            }
            self.toggle(checkpoint, line, Some(right));
            return None;
        }
        if !act {
            return None;
        }
        self.preview_at = None;
        match line {
            Line::Layer(_) => {
                self.toggle(checkpoint, line, None);
                None
            }
            Line::Tensor(i) | Line::Part(i) => self.materialize_row(checkpoint, i),
        }
    }
}
