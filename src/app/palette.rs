//! The command palette (Ctrl+K or Ctrl+Shift+P): one field that finds an
//! action, a recent checkpoint or a tensor by a few letters of its name,
//! driven from the keyboard (Up, Down, Enter, Esc).

use std::path::PathBuf;

use crate::checkpoint::Checkpoint;

use super::Tab;

/// How many tensors a query lists (the best matches).
const TENSORS_LISTED: usize = 200;

/// What the palette can do besides opening a checkpoint or a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// Focus the checkpoint path field.
    Open,
    /// Focus the path field with `hf://` typed.
    OpenHub,
    /// Walk the open checkpoint with the profiler's policy.
    Walk,
    /// Focus the Diff tab's B field (or run the diff when B is set).
    Diff,
    /// Read every value (the Check tab).
    Check,
    /// Show a tab.
    Show(Tab),
    /// The keyboard shortcuts.
    Shortcuts,
}

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    /// An action, with its label and key.
    Action(Action, &'static str, &'static str),
    /// A recent checkpoint.
    Recent(PathBuf),
    /// A tensor of the open checkpoint (its position).
    Tensor(usize),
}

/// The actions, in the order they are listed, with their keys.
const ACTIONS: &[(Action, &str, &str)] = &[
    (Action::Open, "Open a checkpoint (path field)", "Ctrl+O"),
    (Action::OpenHub, "Open a Hub repo (hf://ORG/REPO)", ""),
    (
        Action::Walk,
        "Walk the checkpoint (the profiler's policy)",
        "Ctrl+Shift+W",
    ),
    (Action::Diff, "Diff with another checkpoint", "Ctrl+Shift+D"),
    (Action::Check, "Check: read every value", "Ctrl+Shift+R"),
    (Action::Show(Tab::Tensors), "Show Tensors", "Ctrl+1"),
    (Action::Show(Tab::Profiler), "Show Profiler", "Ctrl+2"),
    (Action::Show(Tab::Diff), "Show Diff", "Ctrl+3"),
    (Action::Show(Tab::Check), "Show Check", "Ctrl+4"),
    (Action::Shortcuts, "Keyboard shortcuts", "F1"),
];

/// The palette's state while it is open.
#[derive(Debug, Default)]
pub(super) struct Palette {
    open: bool,
    query: String,
    /// The highlighted entry.
    chosen: usize,
    /// The entries for `query` (recomputed when it changes).
    entries: Vec<Entry>,
    /// The query `entries` were computed for, and the checkpoint's size.
    computed_for: Option<(String, usize)>,
    /// Focus the field in the next frame.
    focus: bool,
}

/// How well `query` (lower case) matches `text` as a subsequence, higher is
/// better; `None` when it does not. Runs of consecutive letters and letters
/// at the start of a word (after `.`, `_`, `/`, `-` or a space) count more,
/// long texts a little less.
#[must_use]
pub(super) fn fuzzy_score(query: &str, text: &str) -> Option<i64> {
    if query.is_empty() {
        return Some(0);
    }
    let mut score = 0_i64;
    let mut wanted = query.chars().peekable();
    let mut previous: Option<char> = None;
    let mut run = 0_i64;
    for c in text.chars() {
        let Some(&w) = wanted.peek() else { break };
        let lower = c.to_ascii_lowercase();
        if lower == w {
            wanted.next();
            run += 1;
            score += 1 + 2 * (run - 1);
            if previous.is_none_or(|p| matches!(p, '.' | '_' | '/' | '-' | ' ')) {
                score += 3;
            }
        } else {
            run = 0;
        }
        previous = Some(c);
    }
    if wanted.peek().is_some() {
        return None;
    }
    let length = i64::try_from(text.len()).unwrap_or(i64::MAX);
    Some(score * 8 - length / 8)
}

impl Palette {
    /// Opens the palette with `typed` in its field (or closes it when
    /// open).
    pub(super) fn toggle(&mut self, typed: &str) {
        self.open = !self.open;
        if self.open {
            typed.clone_into(&mut self.query);
            self.chosen = 0;
            self.computed_for = None;
            self.focus = true;
        }
    }

    /// Whether it is open.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    fn recompute(&mut self, checkpoint: Option<&Checkpoint>, recent: &[PathBuf]) {
        let key = (
            self.query.clone(),
            checkpoint.map_or(0, |c| c.tensors().len()),
        );
        if self.computed_for.as_ref() == Some(&key) {
            return;
        }
        let query = self.query.trim().to_lowercase();
        let mut entries: Vec<(i64, Entry)> = ACTIONS
            .iter()
            .filter_map(|&(action, label, key)| {
                fuzzy_score(&query, label).map(|s| (s, Entry::Action(action, label, key)))
            })
            .collect();
        entries.sort_by_key(|(s, _)| std::cmp::Reverse(*s));
        let mut out: Vec<Entry> = entries.into_iter().map(|(_, e)| e).collect();
        out.extend(
            recent
                .iter()
                .filter(|p| fuzzy_score(&query, &p.display().to_string()).is_some())
                .map(|p| Entry::Recent(p.clone())),
        );
        if let Some(checkpoint) = checkpoint
            && !query.is_empty()
        {
            let mut tensors: Vec<(i64, usize)> = checkpoint
                .tensors()
                .iter()
                .enumerate()
                .filter_map(|(i, t)| fuzzy_score(&query, t.name()).map(|s| (s, i)))
                .collect();
            tensors.sort_by_key(|&(s, i)| (std::cmp::Reverse(s), i));
            out.extend(
                tensors
                    .into_iter()
                    .take(TENSORS_LISTED)
                    .map(|(_, i)| Entry::Tensor(i)),
            );
        }
        self.entries = out;
        self.chosen = self.chosen.min(self.entries.len().saturating_sub(1));
        self.computed_for = Some(key);
    }

    /// Draws the palette when open; returns the entry chosen (Enter or a
    /// click), which closes it. Esc closes it too.
    pub(super) fn ui(
        &mut self,
        ctx: &egui::Context,
        checkpoint: Option<&Checkpoint>,
        recent: &[PathBuf],
    ) -> Option<Entry> {
        use egui::{Key, Modifiers};
        if !self.open {
            return None;
        }
        let (up, down, enter, escape) = ctx.input_mut(|i| {
            (
                i.consume_key(Modifiers::NONE, Key::ArrowUp),
                i.consume_key(Modifiers::NONE, Key::ArrowDown),
                i.consume_key(Modifiers::NONE, Key::Enter),
                i.consume_key(Modifiers::NONE, Key::Escape),
            )
        });
        if escape {
            self.open = false;
            return None;
        }
        self.recompute(checkpoint, recent);
        if down {
            self.chosen = (self.chosen + 1).min(self.entries.len().saturating_sub(1));
        }
        if up {
            self.chosen = self.chosen.saturating_sub(1);
        }
        let mut picked = enter.then_some(self.chosen);
        let width = (ctx.content_rect().width() - 40.0).clamp(200.0, 640.0);
        egui::Window::new("Command palette")
            .collapsible(false)
            .resizable(false)
            .title_bar(false)
            .fixed_size(egui::vec2(width, 0.0))
            .anchor(egui::Align2::CENTER_TOP, egui::vec2(0.0, 60.0))
            .show(ctx, |ui| {
                let field = ui.add(
                    egui::TextEdit::singleline(&mut self.query)
                        .hint_text("an action, a recent checkpoint, or letters of a tensor's name")
                        .desired_width(f32::INFINITY),
                );
                let field = field.labelled_by(ui.label("Go to").id);
                if std::mem::take(&mut self.focus) {
                    field.request_focus();
                    // The cursor after what came with Ctrl+K.
                    let mut state = egui::text_edit::TextEditState::load(ui.ctx(), field.id)
                        .unwrap_or_default();
                    let end = egui::text::CCursor::new(self.query.chars().count());
                    state
                        .cursor
                        .set_char_range(Some(egui::text_selection::CCursorRange::one(end)));
                    state.store(ui.ctx(), field.id);
                }
                if field.changed() {
                    self.chosen = 0;
                    self.recompute(checkpoint, recent);
                }
                let row_height = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
                let height = (ctx.content_rect().height() * 0.6).clamp(80.0, 420.0);
                egui::ScrollArea::vertical()
                    .max_height(height)
                    .auto_shrink([false, true])
                    .show_rows(ui, row_height, self.entries.len(), |ui, range| {
                        for index in range {
                            let text = Self::label_of(&self.entries[index], checkpoint);
                            let selected = index == self.chosen;
                            let response =
                                ui.add(egui::Button::selectable(selected, text).truncate());
                            if selected && (up || down) {
                                response.scroll_to_me(None);
                            }
                            if response.clicked() {
                                picked = Some(index);
                            }
                        }
                    });
                if self.entries.is_empty() {
                    ui.label("Nothing matches.");
                }
            });
        let entry = picked.and_then(|i| self.entries.get(i).cloned());
        if entry.is_some() {
            self.open = false;
        }
        entry
    }

    fn label_of(entry: &Entry, checkpoint: Option<&Checkpoint>) -> String {
        match entry {
            Entry::Action(_, label, key) => format!("{label}    {key}"),
            Entry::Recent(path) => format!(
                "Open recent: {}",
                crate::units::printable(&path.display().to_string())
            ),
            Entry::Tensor(i) => {
                let name = checkpoint
                    .and_then(|c| c.tensors().get(*i))
                    .map_or("", crate::checkpoint::TensorRef::name);
                format!("Tensor: {}", crate::units::printable(name))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fuzzy_score;

    #[test]
    fn letters_in_order_match_and_word_starts_rank_first() {
        assert!(fuzzy_score("qproj", "model.layers.0.self_attn.q_proj.weight").is_some());
        assert!(fuzzy_score("jorpq", "model.layers.0.self_attn.q_proj.weight").is_none());
        let whole = fuzzy_score("o_proj", "layers.3.o_proj.weight").expect("matches");
        let scattered = fuzzy_score("o_proj", "layers.3.o_gate_up_proj.weight").expect("matches");
        assert!(whole > scattered, "{whole} <= {scattered}");
        assert_eq!(fuzzy_score("", "anything"), Some(0));
    }
}
