//! The command palette (Ctrl+K or Ctrl+Shift+P): one field that finds an
//! action, a recent checkpoint or a tensor by a few letters of its name,
//! driven from the keyboard (Up, Down, Enter, Esc).

use std::path::PathBuf;

use crate::checkpoint::Checkpoint;

use super::AppCommand;

/// How many tensors a query lists (the best matches).
const TENSORS_LISTED: usize = 200;

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    /// An action: its position in [`keymap::commands`](super::keymap::commands).
    Action(usize),
    /// A recent checkpoint.
    Recent(PathBuf),
    /// A tensor of the open checkpoint (its position).
    Tensor(usize),
}

impl Entry {
    /// What choosing it asks of the app: one command of the bus, as its
    /// key or button would send.
    pub(super) fn command(&self) -> Option<AppCommand> {
        Some(match self {
            Self::Action(i) => super::keymap::commands().into_iter().nth(*i)?.command,
            Self::Recent(path) => AppCommand::Open(path.clone()),
            Self::Tensor(i) => AppCommand::SelectTensor(*i),
        })
    }
}

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
    /// How far the list was scrolled in the last frame.
    list_offset: f32,
}

/// Whether `c` separates words in a name (`model.layers.0.mlp`,
/// `gate_proj`, a path).
fn separates(c: char) -> bool {
    matches!(c, '.' | '_' | '/' | '-' | ' ' | ':')
}

/// How a query was found contiguous in a text, best last: somewhere, from
/// a word's start, or as whole words (`mlp` in `layers.0.mlp.up_proj`).
/// Letters found only scattered rank below all three (rank 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Found {
    Contiguous = 1,
    AtWordStart = 2,
    WholeWords = 3,
}

/// How `query` (lower case) was found in `text` when it appears there
/// contiguously, the best of its occurrences.
fn contiguous(query: &str, text: &str) -> Option<Found> {
    let lower = text.to_ascii_lowercase();
    let mut best = None;
    let mut from = 0;
    while let Some(at) = lower.get(from..).and_then(|rest| rest.find(query)) {
        let start = from + at;
        let end = start + query.len();
        let starts_word = lower[..start].chars().next_back().is_none_or(separates);
        let ends_word = lower[end..].chars().next().is_none_or(separates);
        let found = match (starts_word, ends_word) {
            (true, true) => Found::WholeWords,
            (true, false) => Found::AtWordStart,
            _ => Found::Contiguous,
        };
        best = best.max(Some(found));
        if found == Found::WholeWords {
            break;
        }
        from = start + lower[start..].chars().next().map_or(1, char::len_utf8);
    }
    best
}

/// The letters of `query` matched in order in `text`, each letter taken
/// where it continues a run, else at the next word start that has it when
/// `word_starts_first`, else at its next occurrence; scored with runs of
/// consecutive letters, word starts and whole words (a run from a word's
/// start to its end: the `1` of `layers.1.`, not of `layers.10.`) counting
/// more. `None` when the letters are not all there in order.
fn subsequence_score(query: &str, text: &[char], word_starts_first: bool) -> Option<i64> {
    let at_word_start = |p: usize| p == 0 || separates(text[p - 1]);
    let at_word_end = |p: usize| p + 1 == text.len() || separates(text[p + 1]);
    let mut at = Vec::with_capacity(query.len());
    let mut next = 0;
    for wanted in query.chars() {
        let same = |p: usize| text[p].to_ascii_lowercase() == wanted;
        let continuing = at.last().is_some_and(|&l: &usize| l + 1 == next);
        let p = if continuing && next < text.len() && same(next) {
            next
        } else {
            let start = (next..text.len()).find(|&p| same(p) && at_word_start(p));
            match start {
                Some(p) if word_starts_first => p,
                _ => (next..text.len()).find(|&p| same(p))?,
            }
        };
        at.push(p);
        next = p + 1;
    }
    // Letters far apart count less: `l1gate` finds layer 1's gate before
    // expert 1's gate in layer 0.
    let span = at
        .last()
        .zip(at.first())
        .map_or(0, |(last, first)| last - first);
    let gaps = i64::try_from(span + 1 - at.len()).unwrap_or(i64::MAX);
    let mut score = 0_i64;
    let mut run = 0_i64;
    let mut run_from_word_start = false;
    for (k, &p) in at.iter().enumerate() {
        let continues = k > 0 && at[k - 1] + 1 == p;
        if continues {
            run += 1;
        } else {
            run = 1;
            run_from_word_start = at_word_start(p);
        }
        score += 1 + 2 * (run - 1);
        if !continues && run_from_word_start {
            score += 3;
        }
        let run_ends = at.get(k + 1).is_none_or(|&q| q != p + 1);
        if run_ends && run_from_word_start && at_word_end(p) {
            score += 3;
        }
    }
    Some(score * 16 - gaps.min(15))
}

/// How well `query` (lower case) matches `text`, higher is better; `None`
/// when its letters are not all in `text` in order. Whole words rank
/// first (`mlp` finds the MLP's tensors before `model.layers` matches
/// its letters), then the query contiguous from a word start, contiguous
/// anywhere (equal within each), and last its letters scattered, scored
/// by runs, word starts and how close together they are. Equal scores are ordered by the caller (a weight before its
/// scales, shorter names first).
#[must_use]
pub(super) fn fuzzy_score(query: &str, text: &str) -> Option<i64> {
    if query.is_empty() {
        return Some(0);
    }
    if let Some(found) = contiguous(query, text) {
        return Some(found as i64 * 1_000_000);
    }
    let chars: Vec<char> = text.chars().collect();
    subsequence_score(query, &chars, true).max(subsequence_score(query, &chars, false))
}

/// [`fuzzy_score`] for a query of several words (`open recent`,
/// `l3 q_proj`): each word must match on its own, in any order; the scores
/// add, and the query found whole (spaces and all, as in a label) ranks
/// above its words found apart.
#[must_use]
pub(super) fn words_score(query: &str, text: &str) -> Option<i64> {
    let mut words = query.split_whitespace().peekable();
    let first = words.next()?;
    if words.peek().is_none() {
        return fuzzy_score(first, text);
    }
    let mut total = contiguous(query, text).map_or(0, |found| found as i64 * 10_000_000);
    for word in query.split_whitespace() {
        total = total.saturating_add(fuzzy_score(word, text)?);
    }
    Some(total)
}

/// Whether a tensor's name is a companion of another (a quantized
/// weight's scales or biases, an FP8 weight's scale): listed after the
/// tensor it belongs to when both match as well.
fn is_companion(name: &str) -> bool {
    [
        ".scales",
        ".biases",
        "_scale_inv",
        ".weight_scale",
        ".weight_scale_2",
        ".input_scale",
        ".global_scale",
    ]
    .iter()
    .any(|suffix| name.ends_with(suffix))
}

/// [`scored_names_where`] among all the tensors, positions only.
#[cfg(test)]
fn rank_names<'a>(query: &str, names: impl Iterator<Item = &'a str>, limit: usize) -> Vec<usize> {
    scored_names_where(query, names, &|_| true, limit)
        .into_iter()
        .map(|(_, i)| i)
        .collect()
}

/// The tensors `keep` keeps (by position) whose names match `query`
/// (lower case), each with its score, best first: by [`fuzzy_score`], then
/// a weight before its companions, then shorter names, then the
/// checkpoint's order; at most `limit`. An empty `query` ranks them all
/// equal (shorter names first).
fn scored_names_where<'a>(
    query: &str,
    names: impl Iterator<Item = &'a str>,
    keep: &dyn Fn(usize) -> bool,
    limit: usize,
) -> Vec<(i64, usize)> {
    let mut found: Vec<(std::cmp::Reverse<i64>, bool, usize, usize)> = names
        .enumerate()
        .filter(|&(i, _)| keep(i))
        .filter_map(|(i, name)| {
            let score = if query.trim().is_empty() {
                Some(0)
            } else {
                words_score(query, name)
            };
            score.map(|s| (std::cmp::Reverse(s), is_companion(name), name.len(), i))
        })
        .collect();
    let limit = limit.min(found.len());
    if limit < found.len() {
        found.select_nth_unstable(limit);
        found.truncate(limit);
    }
    found.sort_unstable();
    found
        .into_iter()
        .map(|(std::cmp::Reverse(score), .., i)| (score, i))
        .collect()
}

/// What the filter's terms read of the tensor at a position (the tensor
/// table's facts: its dtype, shapes, bytes and encoding).
pub(super) type Facts<'a> = dyn Fn(usize) -> crate::checkpoint::query::TensorFacts<'a> + 'a;

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

    /// The highlighted row's text.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn chosen_label(&self, checkpoint: Option<&Checkpoint>) -> Option<String> {
        let entry = self.entries.get(self.chosen)?;
        Some(Self::label_of(entry, checkpoint))
    }

    fn recompute(
        &mut self,
        checkpoint: Option<&Checkpoint>,
        recent: &[PathBuf],
        facts: &Facts<'_>,
    ) {
        let key = (
            self.query.clone(),
            checkpoint.map_or(0, |c| c.tensors().len()),
        );
        if self.computed_for.as_ref() == Some(&key) {
            return;
        }
        let query = self.query.trim().to_lowercase();
        // Every row scored alike, best first; among equal scores an action
        // before a recent checkpoint before a tensor. So `mlp` lists the
        // MLP's tensors (whole words) above a recent folder whose random
        // name holds the letters m, l, p apart.
        let mut entries: Vec<(i64, u8, Entry)> = super::keymap::commands()
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                words_score(&query, c.label)
                    .or_else(|| query.is_empty().then_some(0))
                    .map(|s| (s, 0, Entry::Action(i)))
            })
            .collect();
        entries.extend(recent.iter().filter_map(|p| {
            // Matched against what the row shows, "Open recent: PATH".
            words_score(&query, &format!("open recent: {}", p.display()))
                .or_else(|| query.is_empty().then_some(0))
                .map(|s| (s, 1, Entry::Recent(p.clone())))
        }));
        if let Some(checkpoint) = checkpoint
            && !query.is_empty()
        {
            let names = checkpoint
                .tensors()
                .iter()
                .map(crate::checkpoint::TensorRef::name);
            // The table filter's terms (`shape:`, `dtype:`, `mode:`,
            // `size>`) keep tensors; the words rank them.
            let ranked = match crate::checkpoint::query::TensorQuery::parse(&query) {
                Ok(parsed) if parsed.has_terms() => scored_names_where(
                    &parsed.words_text(),
                    names,
                    &|i| parsed.matches_terms(&facts(i)),
                    TENSORS_LISTED,
                ),
                Ok(_) => scored_names_where(&query, names, &|_| true, TENSORS_LISTED),
                Err(_) => Vec::new(),
            };
            entries.extend(ranked.into_iter().map(|(s, i)| (s, 2, Entry::Tensor(i))));
        }
        // Stable: the tensors keep their own order (a weight before its
        // scales, shorter names first) within a score.
        entries.sort_by_key(|(score, kind, _)| (std::cmp::Reverse(*score), *kind));
        let out: Vec<Entry> = entries.into_iter().map(|(.., e)| e).collect();
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
        facts: &Facts<'_>,
    ) -> Option<Entry> {
        use egui::{Key, Modifiers};
        if !self.open {
            return None;
        }
        let (up, down, enter, escape) = ctx.input_mut(|i| {
            (
                // Every press, however fast they came.
                i.count_and_consume_key(Modifiers::NONE, Key::ArrowUp),
                i.count_and_consume_key(Modifiers::NONE, Key::ArrowDown),
                i.consume_key(Modifiers::NONE, Key::Enter),
                i.consume_key(Modifiers::NONE, Key::Escape),
            )
        });
        if escape {
            self.open = false;
            return None;
        }
        self.recompute(checkpoint, recent, facts);
        self.chosen = (self.chosen + down)
            .saturating_sub(up)
            .min(self.entries.len().saturating_sub(1));
        let (up, down) = (up > 0, down > 0);
        let mut picked = enter.then_some(self.chosen);
        let width = (ctx.content_rect().width() - 40.0).clamp(200.0, 640.0);
        egui::Window::new("Command palette")
            .collapsible(false)
            .resizable(false)
            .title_bar(false)
            .default_width(width)
            .min_width(width)
            .max_width(width)
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
                    self.recompute(checkpoint, recent, facts);
                }
                let row_height = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
                let spacing = ui.spacing().item_spacing.y;
                // Room for at least 10 rows, most of the window when taller.
                let height = (ctx.content_rect().height() - 180.0)
                    .clamp(4.0 * (row_height + spacing), 26.0 * (row_height + spacing));
                let mut scroll = egui::ScrollArea::vertical()
                    .id_salt("palette-list")
                    .max_height(height)
                    .min_scrolled_height(height)
                    .auto_shrink([false, true]);
                if up || down {
                    // Keep the highlighted row in view: only the rows in
                    // view are drawn, so a row cannot scroll itself there.
                    let offset = self.list_offset;
                    #[allow(clippy::cast_precision_loss)]
                    let top = self.chosen as f32 * (row_height + spacing);
                    let bottom = top + row_height + spacing;
                    if top < offset {
                        scroll = scroll.vertical_scroll_offset(top);
                    } else if bottom > offset + height {
                        scroll = scroll.vertical_scroll_offset(bottom - height);
                    }
                }
                let shown = scroll.show_rows(ui, row_height, self.entries.len(), |ui, range| {
                    for index in range {
                        let text = Self::label_of(&self.entries[index], checkpoint);
                        let selected = index == self.chosen;
                        let response = ui.add(egui::Button::selectable(selected, text).truncate());
                        if response.clicked() {
                            picked = Some(index);
                        }
                    }
                });
                self.list_offset = shown.state.clamped_offset().y;
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
            Entry::Action(i) => super::keymap::commands()
                .get(*i)
                .map_or_else(String::new, |c| format!("{}    {}", c.label, c.keys.text())),
            Entry::Recent(path) => format!(
                "Open recent: {}",
                crate::units::Shown::new(&path.display().to_string())
            ),
            Entry::Tensor(i) => {
                let name = checkpoint
                    .and_then(|c| c.tensors().get(*i))
                    .map_or("", crate::checkpoint::TensorRef::name);
                format!("Tensor: {}", crate::units::Shown::new(name))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{fuzzy_score, rank_names, words_score};

    #[test]
    fn a_query_of_several_words_matches_each_word() {
        assert!(words_score("open recent", "Open recent: /models/m").is_some());
        assert!(words_score("l3 q_proj", "model.layers.3.self_attn.q_proj.weight").is_some());
        assert!(words_score("l3 k_proj", "model.layers.3.self_attn.q_proj.weight").is_none());
        let whole = words_score("open recent", "Open recent: /m").expect("whole");
        let apart = words_score("recent open", "Open recent: /m").expect("apart");
        assert!(whole > apart);
        let ranked = rank_names(
            "l3 q_proj",
            ["layers.3.k_proj.weight", "layers.3.q_proj.weight"].into_iter(),
            10,
        );
        assert_eq!(ranked, vec![1]);
    }

    #[test]
    fn letters_in_order_match_and_word_starts_rank_first() {
        assert!(fuzzy_score("qproj", "model.layers.0.self_attn.q_proj.weight").is_some());
        assert!(fuzzy_score("jorpq", "model.layers.0.self_attn.q_proj.weight").is_none());
        let whole = fuzzy_score("o_proj", "layers.3.o_proj.weight").expect("matches");
        let scattered = fuzzy_score("o_proj", "layers.3.o_gate_up_proj.weight").expect("matches");
        assert!(whole > scattered, "{whole} <= {scattered}");
        assert_eq!(fuzzy_score("", "anything"), Some(0));
    }

    /// Names as a DeepSeek-V3-shaped checkpoint has them (FP8 weights with
    /// `weight_scale_inv`), three layers of them, and an mlx-lm
    /// quantization's (`.scales`, `.biases`).
    fn names() -> Vec<String> {
        let mut names = vec!["model.embed_tokens.weight".to_owned()];
        for layer in 0..3 {
            let at = format!("model.layers.{layer}");
            names.push(format!("{at}.input_layernorm.weight"));
            for proj in [
                "q_a_proj",
                "q_b_proj",
                "kv_a_proj_with_mqa",
                "kv_b_proj",
                "o_proj",
            ] {
                names.push(format!("{at}.self_attn.{proj}.weight"));
                names.push(format!("{at}.self_attn.{proj}.weight_scale_inv"));
            }
            names.push(format!("{at}.post_attention_layernorm.weight"));
            for expert in 0..4 {
                for proj in ["gate_proj", "up_proj", "down_proj"] {
                    let base = format!("{at}.mlp.experts.{expert}.{proj}");
                    names.push(format!("{base}.weight"));
                    names.push(format!("{base}.weight_scale_inv"));
                }
            }
            names.push(format!("{at}.mlp.gate.weight"));
            for proj in ["gate_proj", "up_proj", "down_proj"] {
                for part in ["biases", "scales", "weight"] {
                    names.push(format!("{at}.mlp.shared_experts.{proj}.{part}"));
                }
            }
        }
        for layer in 10..13 {
            names.push(format!("model.layers.{layer}.mlp.gate.weight"));
        }
        names.push("lm_head.weight".to_owned());
        names
    }

    fn ranked(query: &str, limit: usize) -> Vec<String> {
        let names = names();
        rank_names(query, names.iter().map(String::as_str), limit)
            .into_iter()
            .map(|i| names[i].clone())
            .collect()
    }

    #[test]
    fn a_whole_word_ranks_above_letters_across_the_name() {
        // `mlp` as letters at word starts: model.layers...proj. The MLP's
        // own tensors come first, every one of them.
        let mlp_tensors = names().iter().filter(|n| n.contains(".mlp.")).count();
        let found = ranked("mlp", usize::MAX);
        assert!(found.len() > mlp_tensors, "letters match elsewhere too");
        for name in &found[..mlp_tensors] {
            assert!(name.contains(".mlp."), "{name} ranked among the MLP's");
        }
        // The shortest first at the same rank.
        assert_eq!(found[0], "model.layers.0.mlp.gate.weight");
    }

    #[test]
    fn a_weight_ranks_above_its_scales_and_biases_and_shorter_names_first() {
        // Layer 1's gate first; weights before their scales (which match
        // as well, and as short as `.biases` is to `.weight`).
        let found = ranked("l1gate", 4);
        assert_eq!(found[0], "model.layers.1.mlp.gate.weight");
        assert!(found.iter().all(|n| n.ends_with(".weight")), "{found:?}");
        let found = ranked("shared_experts.gate", 3);
        assert_eq!(
            found[0],
            "model.layers.0.mlp.shared_experts.gate_proj.weight"
        );
        assert!(
            found[1..].iter().all(|n| n.ends_with(".weight")),
            "{found:?}"
        );
        let found = ranked("kv_b_proj", 2);
        assert_eq!(
            found,
            [
                "model.layers.0.self_attn.kv_b_proj.weight",
                "model.layers.1.self_attn.kv_b_proj.weight",
            ]
        );
    }

    #[test]
    fn the_limit_keeps_the_best() {
        let all = ranked("proj", usize::MAX);
        let some = ranked("proj", 7);
        assert_eq!(some, all[..7]);
    }
}
