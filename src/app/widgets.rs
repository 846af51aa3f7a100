//! Widgets more than one panel draws: a job's progress bar, a legend row,
//! the memory series' colours. Panels import them from here, never from the
//! app.

use std::time::Instant;

/// A running job's progress bar: `done` of `total` tensors `what`, the time
/// since it started and the tensor just done (escaped: names come from files).
pub(crate) fn job_progress(
    ui: &mut egui::Ui,
    (done, total): (usize, usize),
    what: &str,
    since: Instant,
    name: &str,
) {
    let fraction = if total == 0 {
        0.0
    } else {
        done as f32 / total as f32
    };
    ui.add(egui::ProgressBar::new(fraction).text(format!(
        "{done} of {total} tensors{what}, {:.1} s {}",
        since.elapsed().as_secs_f64(),
        crate::units::Shown::new(name)
    )));
}

/// A one-line text field after its label, named by it (screen readers and
/// tests find the field by the label's text).
pub(crate) fn labelled_field(
    ui: &mut egui::Ui,
    label: &str,
    text: &mut String,
    hint: impl Into<egui::WidgetText>,
    width: f32,
) -> egui::Response {
    let label = ui.label(label);
    ui.add(
        egui::TextEdit::singleline(text)
            .hint_text(hint)
            .desired_width(width),
    )
    .labelled_by(label.id)
}

/// A button with its explanation on hover; whether it was clicked.
pub(crate) fn explained_button(ui: &mut egui::Ui, text: &str, explained: &str) -> bool {
    ui.button(text).on_hover_text(explained).clicked()
}

/// A striped grid, a column for each of `titles`, its first row `titles` in bold.
pub(crate) fn titled_grid(
    ui: &mut egui::Ui,
    id: impl egui::AsIdSalt,
    titles: &[&str],
    rows: impl FnOnce(&mut egui::Ui),
) {
    egui::Grid::new(id)
        .num_columns(titles.len())
        .striped(true)
        .show(ui, |ui| {
            header_row(ui, titles);
            rows(ui);
        });
}

/// A section that opens unfolded, under `title`, kept apart by `id`.
pub(crate) fn open_section(
    ui: &mut egui::Ui,
    title: impl Into<egui::WidgetText>,
    id: impl egui::AsIdSalt,
    body: impl FnOnce(&mut egui::Ui),
) {
    egui::CollapsingHeader::new(title)
        .id_salt(id)
        .default_open(true)
        .show(ui, body);
}

/// A grid's header row: each title in bold, then the row ends.
pub(crate) fn header_row(ui: &mut egui::Ui, titles: &[&str]) {
    for title in titles {
        ui.strong(*title);
    }
    ui.end_row();
}

/// A legend as one wrapped line of coloured names, for plots too short to
/// hold one inside.
pub(crate) fn legend_row(ui: &mut egui::Ui, items: &[(&str, egui::Color32)]) {
    ui.horizontal_wrapped(|ui| {
        let font = egui::TextStyle::Body.resolve(ui.style());
        let text = ui.visuals().text_color();
        for &(name, color) in items {
            // One label per entry, never broken: a coloured dash and the
            // name wrap together.
            let mut job = egui::text::LayoutJob::default();
            job.append(
                "\u{2014} ",
                0.0,
                egui::TextFormat::simple(font.clone(), color),
            );
            job.append(name, 0.0, egui::TextFormat::simple(font.clone(), text));
            ui.add(egui::Label::new(job).wrap_mode(egui::TextWrapMode::Extend));
        }
    });
}

/// `text` (strong) with `mark` (an arrow or a triangle) before or after
/// it: the mark in the monospace font, which has those glyphs (the
/// proportional one does not).
pub(crate) fn marked_text(
    ui: &egui::Ui,
    mark: &str,
    text: &str,
    mark_first: bool,
) -> egui::text::LayoutJob {
    let body = egui::TextStyle::Body.resolve(ui.style());
    let mono = egui::FontId::monospace(body.size);
    let color = ui.visuals().strong_text_color();
    let mut job = egui::text::LayoutJob::default();
    let mark_part = |job: &mut egui::text::LayoutJob| {
        if !mark.is_empty() {
            job.append(mark, 0.0, egui::TextFormat::simple(mono.clone(), color));
        }
    };
    if mark_first {
        mark_part(&mut job);
        job.append(text, 4.0, egui::TextFormat::simple(body.clone(), color));
    } else {
        job.append(text, 0.0, egui::TextFormat::simple(body.clone(), color));
        if !mark.is_empty() {
            job.append(" ", 0.0, egui::TextFormat::simple(body.clone(), color));
        }
        mark_part(&mut job);
    }
    job
}

/// Whether the shortcut Ctrl (Cmd) + `key` was pressed this frame, and the
/// text typed after it in the same frame (consumed with it): on a busy
/// machine the keys typed right after Ctrl+F reach the window in the
/// shortcut's frame, before the field has focus, and would be lost.
pub(crate) fn shortcut_with_typing(ctx: &egui::Context, key: egui::Key) -> Option<String> {
    ctx.input_mut(|i| {
        let at = i.events.iter().position(|e| {
            matches!(e, egui::Event::Key { key: k, pressed: true, modifiers, .. }
                if *k == key && modifiers.command && !modifiers.shift && !modifiers.alt)
        })?;
        let typed: String = i.events[at + 1..]
            .iter()
            .filter_map(|e| match e {
                egui::Event::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        // Those keys are the field's now: nothing else reads them.
        let mut index = 0;
        i.events.retain(|e| {
            let keep = index <= at || !matches!(e, egui::Event::Text(_));
            index += 1;
            keep
        });
        i.consume_key(egui::Modifiers::COMMAND, key);
        Some(typed)
    })
}

/// Focuses the text field `field` (holding `text`) for a shortcut: with
/// nothing typed yet, its text selected (what is typed next replaces it);
/// with `typed` (keys that came with the shortcut), the text replaced by
/// them and the cursor at the end. Returns whether `text` changed.
pub(crate) fn focus_selecting_all(
    ui: &egui::Ui,
    field: &egui::Response,
    text: &mut String,
    typed: &str,
) -> bool {
    field.request_focus();
    let mut state = egui::text_edit::TextEditState::load(ui.ctx(), field.id).unwrap_or_default();
    let range = if typed.is_empty() {
        egui::text_selection::CCursorRange::select_all_str(text)
    } else {
        typed.clone_into(text);
        egui::text_selection::CCursorRange::one(egui::text::CCursor::new(text.chars().count()))
    };
    state.cursor.set_char_range(Some(range));
    state.store(ui.ctx(), field.id);
    !typed.is_empty()
}

pub(crate) mod series_colors {
    use egui::Color32;
    /// Process RSS (the host's figure).
    pub const RSS: Color32 = Color32::from_rgb(230, 90, 80);
    /// RSS anonymous.
    pub const RSS_ANON: Color32 = Color32::from_rgb(240, 170, 90);
    /// MLX active.
    pub const MLX_ACTIVE: Color32 = Color32::from_rgb(90, 150, 240);
    /// MLX cache.
    pub const MLX_CACHE: Color32 = Color32::from_rgb(120, 200, 120);
    /// Event markers.
    pub const EVENTS: Color32 = Color32::from_rgb(150, 150, 150);
    /// The expected peaks of retain, release-tensor and release-shard (in
    /// the order of `Policy::ALL`), apart from the measured series.
    pub const EXPECTED: [Color32; 3] = [
        Color32::from_rgb(205, 92, 155),
        Color32::from_rgb(100, 190, 210),
        Color32::from_rgb(215, 215, 120),
    ];
    /// Overlaid traces, one colour each, by position.
    pub const OVERLAYS: [Color32; 6] = [
        Color32::from_rgb(200, 120, 220),
        Color32::from_rgb(80, 200, 200),
        Color32::from_rgb(220, 200, 80),
        Color32::from_rgb(160, 160, 240),
        Color32::from_rgb(240, 130, 170),
        Color32::from_rgb(140, 220, 140),
    ];
}

impl From<crate::units::Shown<'_>> for egui::RichText {
    fn from(shown: crate::units::Shown<'_>) -> Self {
        Self::new(shown.into_string())
    }
}

impl From<crate::units::Shown<'_>> for egui::WidgetText {
    fn from(shown: crate::units::Shown<'_>) -> Self {
        Self::from(shown.into_string())
    }
}

/// How many monospace characters fit in `width` points (at least 8).
pub(crate) fn monospace_chars(ui: &egui::Ui, width: f32) -> usize {
    let font = egui::TextStyle::Monospace.resolve(ui.style());
    let char_width = ui.fonts_mut(|f| f.glyph_width(&font, 'm')).max(1.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let fits = (width / char_width).floor().max(8.0) as usize;
    fits
}

/// A tensor or variable name in monospace, cut where it must be so that
/// what tells it from its neighbours stays (its end, its layer number:
/// [`crate::units::fit_name`]), in the width left; the whole name on hover
/// and for screen readers.
pub(crate) fn name_label(ui: &mut egui::Ui, name: &str, strong: bool) -> egui::Response {
    let fits = monospace_chars(ui, ui.available_width());
    name_label_in(ui, name, strong, fits)
}

/// [`name_label`] in at most `fits` characters (a grid's cell, whose width
/// comes from what it holds).
pub(crate) fn name_label_in(
    ui: &mut egui::Ui,
    name: &str,
    strong: bool,
    fits: usize,
) -> egui::Response {
    let shown = crate::units::Shown::new(name).into_string();
    let cut = crate::units::fit_name(&shown, fits);
    let mut text = egui::RichText::new(cut.as_ref()).monospace();
    if strong {
        text = text.strong();
    }
    let response = ui.add(egui::Label::new(text));
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &shown));
    if cut.as_ref() == shown {
        response
    } else {
        response.on_hover_text(shown)
    }
}
