//! The profiler's recordings: the phases of the last one, its growth by
//! stack as an icicle chart, and the list of recordings made or opened
//! since the window opened, any one compared with the shown one (drawn over
//! it, the difference of their peaks by line).

use std::sync::Arc;

use crate::profile::analysis::recording::Recording;
use crate::profile::analysis::stacks;
use crate::profile::trace::stacks::Frame;
use crate::units::human_bytes;

use super::{FinishedRun, ProfilerPanel, Run};

/// The icicle's rows at most (deeper frames are left out).
const ICICLE_DEPTH: usize = 14;
/// One row's height, in points.
const ICICLE_ROW: f32 = 18.0;

/// The icicle's trees, kept while the recording and the figure shown stay
/// the same (a long job has thousands of stacks: not a frame's work).
#[derive(Default)]
pub(super) struct Icicle {
    /// The run shown (the panel's run number) and whether "held at the peak".
    key: Option<(u64, bool)>,
    roots: Vec<Node>,
}

/// A node of the icicle: a frame under its callers, with the bytes of the
/// stacks through it.
struct Node {
    frame: u32,
    bytes: u64,
    children: Vec<Node>,
}

impl Node {
    fn add(nodes: &mut Vec<Self>, path: &[u32], bytes: u64) {
        let Some((&first, rest)) = path.split_first() else {
            return;
        };
        let at = if let Some(at) = nodes.iter().position(|n| n.frame == first) {
            at
        } else {
            nodes.push(Self {
                frame: first,
                bytes: 0,
                children: Vec::new(),
            });
            nodes.len() - 1
        };
        nodes[at].bytes += bytes;
        Self::add(&mut nodes[at].children, rest, bytes);
    }

    fn sort(nodes: &mut [Self]) {
        nodes.sort_by_key(|n| std::cmp::Reverse(n.bytes));
        for n in nodes {
            Self::sort(&mut n.children);
        }
    }
}

/// The icicle's trees: every stack's bytes (held at the peak, or all that
/// grew) down its frames, outermost at the top.
fn icicle_roots(r: &Recording, held: bool) -> Vec<Node> {
    let Some(trace) = &r.stacks else {
        return Vec::new();
    };
    let mut roots = Vec::new();
    for g in &r.by_stack {
        let bytes = if held {
            g.held_at_peak_bytes
        } else {
            g.grew_bytes
        };
        let Some(frames) = trace.stacks.get(g.stack as usize) else {
            continue;
        };
        if bytes == 0 {
            continue;
        }
        let outermost_first: Vec<u32> = frames.iter().rev().copied().collect();
        Node::add(&mut roots, &outermost_first, bytes);
    }
    Node::sort(&mut roots);
    roots
}

/// A frame's colour: the job's own code warm (by function), libraries grey.
fn frame_color(frame: &Frame) -> egui::Color32 {
    if frame.is_library() {
        return egui::Color32::from_rgb(120, 128, 140);
    }
    let hash = frame
        .function
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    #[allow(clippy::cast_precision_loss)] // a hue from a hash
    let hue = 0.02 + (hash % 1000) as f32 / 1000.0 * 0.12;
    egui::Color32::from(egui::ecolor::Hsva::new(hue, 0.6, 0.85, 1.0))
}

impl ProfilerPanel {
    /// The last recording's phases, its icicle and the list of recordings.
    pub(super) fn recordings_ui(&mut self, ui: &mut egui::Ui) {
        let last = match &self.last {
            Some(FinishedRun {
                run: Run::Record(r),
                ..
            }) => Some(Arc::clone(r)),
            _ => None,
        };
        if let Some(r) = &last {
            phases_ui(ui, r);
            self.icicle_ui(ui, r);
        }
        self.list_ui(ui, last.as_ref());
    }

    /// Growth by stack: each stack's bytes down its frames (outermost at
    /// the top, a frame as wide as what grew under it).
    fn icicle_ui(&mut self, ui: &mut egui::Ui, r: &Recording) {
        if r.by_stack.is_empty() {
            return;
        }
        crate::app::widgets::open_section(ui, "Growth by stack (icicle)", "record-icicle", |ui| {
            ui.horizontal(|ui| {
                ui.selectable_value(&mut self.icicle_held, true, "held at the peak");
                ui.selectable_value(&mut self.icicle_held, false, "all that grew");
            });
            // Each recording shown is a new run.
            let key = (self.runs, self.icicle_held);
            if self.icicle.key != Some(key) {
                self.icicle = Icicle {
                    key: Some(key),
                    roots: icicle_roots(r, self.icicle_held),
                };
            }
            let roots = &self.icicle.roots;
            let total: u64 = roots.iter().map(|n| n.bytes).sum();
            if total == 0 {
                ui.label("Nothing held at the peak by a line the probe saw.");
                return;
            }
            let depth = depth_of(roots).min(ICICLE_DEPTH);
            #[allow(clippy::cast_precision_loss)] // a count of rows
            let height = depth as f32 * ICICLE_ROW;
            let (rect, response) = ui.allocate_exact_size(
                egui::vec2(ui.available_width(), height),
                egui::Sense::hover(),
            );
            let painter = ui.painter_at(rect);
            let mut boxes = Vec::new();
            let frames = r.stacks.as_ref().map_or(&[][..], |s| s.frames.as_slice());
            draw_nodes(
                &painter,
                roots,
                (rect.left(), rect.width()),
                rect.top(),
                0,
                (total, frames),
                &mut boxes,
            );
            if let Some(pointer) = response.hover_pos()
                && let Some((_, frame, bytes)) = boxes.iter().find(|(b, ..)| b.contains(pointer))
            {
                let text = format!(
                    "{}\n{} ({:.0} %){}",
                    crate::units::Shown::new(&frame.label()),
                    human_bytes(*bytes),
                    fraction(*bytes, total) * 100.0,
                    if frame.text.is_empty() {
                        String::new()
                    } else {
                        format!("\n{}", crate::units::Shown::new(&frame.text))
                    }
                );
                response.on_hover_text_at_pointer(text);
            }
        });
    }

    /// The recordings made or opened since the window opened: show one,
    /// compare one with the shown.
    fn list_ui(&mut self, ui: &mut egui::Ui, shown: Option<&Arc<Recording>>) {
        if self.recordings.is_empty() {
            return;
        }
        ui.separator();
        ui.heading("Recordings");
        ui.label("Since the window opened (newest last). Show one, or compare one with the shown one: drawn over it, its peak's difference by line.");
        let mut show = None;
        let mut compare = None;
        let mut rename: Option<(usize, String)> = None;
        let mut start_rename = None;
        crate::app::widgets::titled_grid(ui, "record-list", &["", "", "peak", "job"], |ui| {
            for (i, r) in self.recordings.iter().enumerate() {
                let is_shown = shown.is_some_and(|s| Arc::ptr_eq(s, r));
                if ui
                    .add_enabled(
                        !is_shown,
                        egui::Button::new(if is_shown { "shown" } else { "show" }),
                    )
                    .clicked()
                {
                    show = Some(i);
                }
                let compared = self.compared.as_ref().is_some_and(|(c, _)| *c == i);
                let mut on = compared;
                ui.add_enabled(!is_shown, egui::Checkbox::new(&mut on, "compare"))
                        .on_hover_text("Draw it over the shown recording; the difference of their peaks by line below");
                if on != compared {
                    compare = Some(on.then_some(i));
                }
                let (bytes, what) = peak_of(r);
                ui.label(format!("{} {what}", human_bytes(bytes)));
                let ended = r.ended();
                let listed = self
                    .listed
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| super::Listed {
                        name: super::typed_name(&r.command),
                        start_secs: 0.0,
                    });
                let (renamed, started) =
                    name_cell_ui(ui, &mut self.renaming, i, &listed, r, &ended);
                if renamed.is_some() {
                    rename = renamed;
                }
                if started.is_some() {
                    start_rename = started;
                }
                ui.end_row();
            }
        });
        if let Some(start) = start_rename {
            self.renaming = Some(start);
        }
        if let Some((i, name)) = rename {
            self.renaming = None;
            if let (false, Some(listed)) = (name.is_empty(), self.listed.get_mut(i)) {
                listed.name = name;
            }
        }
        if let Some(i) = show {
            // Shown in its place: the list keeps its order, and the run
            // that was shown is not overlaid unasked ("Overlay this run"
            // does that).
            let r = Arc::clone(&self.recordings[i]);
            self.compared = None;
            let trace = r.to_trace();
            self.show_listed_recording(r, trace);
        }
        match compare {
            Some(Some(i)) => {
                let mut trace = self.recordings[i].to_trace();
                let name = self
                    .listed
                    .get(i)
                    .map_or_else(|| self.recordings[i].command.clone(), |l| l.name.clone());
                trace.label = format!("compared: {name}");
                self.compared = Some((i, trace));
            }
            Some(None) => self.compared = None,
            None => {}
        }
        if let (Some(a), Some((j, _))) = (shown, &self.compared) {
            difference_ui(ui, a, &self.recordings[*j]);
        }
    }
}

/// The peak a recording is compared by: MLX active when it has MLX's
/// figures, else RSS.
fn peak_of(r: &Recording) -> (u64, &'static str) {
    match r.peak_mlx_active_bytes {
        Some(b) => (b, "MLX active"),
        None => (r.peak_rss_bytes, "RSS"),
    }
}

/// The difference of two recordings' peaks, by line.
fn difference_ui(ui: &mut egui::Ui, a: &Recording, b: &Recording) {
    let (pa, what_a) = peak_of(a);
    let (pb, what_b) = peak_of(b);
    let change = i128::from(pb) - i128::from(pa);
    let sign = if change < 0 { "−" } else { "+" };
    ui.label(format!(
        "Peak of the compared {} {what_b} against the shown {} {what_a}: {sign}{}",
        human_bytes(pb),
        human_bytes(pa),
        human_bytes(u64::try_from(change.unsigned_abs()).unwrap_or(u64::MAX))
    ));
    roots_difference_ui(ui, a, b);
    let lines = stacks::line_differences(&a.lines, &b.lines);
    let rows: Vec<(u64, u64, String)> = lines
        .iter()
        .take(10)
        .map(|d| {
            (
                d.a_bytes,
                d.b_bytes,
                crate::units::Shown::new(&d.key.label()).into_string(),
            )
        })
        .collect();
    difference_grid(ui, "record-difference", "line (held at the peak)", &rows);
}

/// Rows of (shown, compared, what) bytes with their change.
fn difference_grid(ui: &mut egui::Ui, id: &str, what: &str, rows: &[(u64, u64, String)]) {
    if rows.is_empty() {
        return;
    }
    egui::Grid::new(id)
        .num_columns(4)
        .striped(true)
        .show(ui, |ui| {
            crate::app::widgets::header_row(ui, &["shown", "compared", "change", what]);
            for (a, b, label) in rows {
                ui.label(human_bytes(*a));
                ui.label(human_bytes(*b));
                let c = i128::from(*b) - i128::from(*a);
                ui.label(format!(
                    "{}{}",
                    if c < 0 { "−" } else { "+" },
                    human_bytes(u64::try_from(c.unsigned_abs()).unwrap_or(u64::MAX))
                ));
                ui.add(egui::Label::new(label.as_str()).truncate());
                ui.end_row();
            }
        });
}

/// The difference of two recordings' holders at the peak, root by root.
fn roots_difference_ui(ui: &mut egui::Ui, a: &Recording, b: &Recording) {
    let roots =
        crate::profile::analysis::held::root_differences(a.held_by.as_ref(), b.held_by.as_ref());
    let rows: Vec<(u64, u64, String)> = roots
        .iter()
        .take(10)
        .map(|d| {
            (
                d.a_bytes,
                d.b_bytes,
                format!("{} ({})", crate::units::Shown::new(&d.key.root), d.key.kind),
            )
        })
        .collect();
    difference_grid(ui, "record-held-difference", "held by (at the peak)", &rows);
}

/// The lines between the job's marks.
fn phases_ui(ui: &mut egui::Ui, r: &Recording) {
    if r.phases.is_empty() {
        return;
    }
    crate::app::widgets::open_section(
        ui,
        "By phase (between the job's marks)",
        "record-phases",
        |ui| {
            crate::app::widgets::titled_grid(
                ui,
                "record-phases-grid",
                &["from mark", "seconds", "peak / grew", "grew most at"],
                |ui| {
                    for p in &r.phases {
                        ui.label(crate::units::Shown::new(&p.mark));
                        ui.label(format!("{:.1}–{:.1}", p.start_secs, p.end_secs));
                        ui.label(format!(
                            "{} / {}",
                            human_bytes(p.peak_bytes),
                            human_bytes(p.grew_bytes)
                        ));
                        ui.add(
                            egui::Label::new(p.lines.first().map_or(String::new(), |l| {
                                format!(
                                    "{} ({:.0} %)",
                                    crate::units::Shown::new(&l.frame.label()),
                                    l.share * 100.0
                                )
                            }))
                            .truncate(),
                        );
                        ui.end_row();
                    }
                },
            );
        },
    );
}

fn depth_of(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| 1 + depth_of(&n.children))
        .max()
        .unwrap_or(0)
}

#[allow(clippy::cast_precision_loss)] // a share
fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Draws `nodes` side by side in `(left, width)` at row `depth`, each as
/// wide as its share of `total`; records each box with its frame and bytes.
fn draw_nodes<'a>(
    painter: &egui::Painter,
    nodes: &[Node],
    (left, width): (f32, f32),
    top: f32,
    depth: usize,
    (total, frames): (u64, &'a [Frame]),
    boxes: &mut Vec<(egui::Rect, &'a Frame, u64)>,
) {
    if depth >= ICICLE_DEPTH {
        return;
    }
    let mut x = left;
    #[allow(clippy::cast_precision_loss)] // a row
    let y = top + depth as f32 * ICICLE_ROW;
    for node in nodes {
        #[allow(clippy::cast_possible_truncation)] // points on a screen
        let w = (fraction(node.bytes, total) * f64::from(width)) as f32;
        let Some(frame) = frames.get(node.frame as usize) else {
            continue;
        };
        if w >= 1.0 {
            let rect =
                egui::Rect::from_min_size(egui::pos2(x, y), egui::vec2(w - 1.0, ICICLE_ROW - 1.0));
            painter.rect_filled(rect, 2.0, frame_color(frame));
            if w > 40.0 {
                let name = frame.label();
                painter.with_clip_rect(rect).text(
                    rect.left_center() + egui::vec2(3.0, 0.0),
                    egui::Align2::LEFT_CENTER,
                    crate::units::Shown::new(&name),
                    egui::FontId::proportional(11.0),
                    egui::Color32::BLACK,
                );
            }
            boxes.push((rect, frame, node.bytes));
            draw_nodes(
                painter,
                &node.children,
                (x, width),
                top,
                depth + 1,
                (total, frames),
                boxes,
            );
        }
        x += w;
    }
}

/// A recording's name in the list (with when it started and how it
/// ended), or the field that renames it; returns a finished rename (empty:
/// left as it was) and a rename asked for.
#[allow(clippy::type_complexity)]
fn name_cell_ui(
    ui: &mut egui::Ui,
    renaming: &mut Option<(usize, String)>,
    i: usize,
    listed: &super::Listed,
    r: &Recording,
    ended: &str,
) -> (Option<(usize, String)>, Option<(usize, String)>) {
    match renaming {
        Some((at, typed)) if *at == i => {
            ui.horizontal(|ui| {
                let field = crate::app::widgets::labelled_field(
                    ui,
                    "Name",
                    typed,
                    "a name for this recording",
                    240.0,
                );
                field.request_focus();
            });
            if ui.input(|input| input.key_pressed(egui::Key::Enter)) {
                (Some((i, typed.trim().to_owned())), None)
            } else if ui.input(|input| input.key_pressed(egui::Key::Escape)) {
                (Some((i, String::new())), None)
            } else {
                (None, None)
            }
        }
        _ => {
            let when = if listed.start_secs > 0.0 {
                format!(", started at {:.0} s", listed.start_secs)
            } else {
                String::new()
            };
            let text = format!("{}: {ended}{when}", crate::units::Shown::new(&listed.name));
            let mut start = None;
            ui.horizontal(|ui| {
                if ui
                    .small_button("rename")
                    .on_hover_text(
                        "Give this recording a name of your own (Enter keeps it, Esc leaves it)",
                    )
                    .clicked()
                {
                    start = Some((i, listed.name.clone()));
                }
                ui.add(egui::Label::new(text.as_str()).truncate())
                    .on_hover_text(format!(
                        "{text}\nran: {}",
                        crate::units::Shown::new(&r.command)
                    ));
            });
            (None, start)
        }
    }
}
