//! The inspector: one materialized tensor's summary, histogram, heatmap and
//! first values.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

use crate::mlx::{Heatmap, Histogram, Stats};
use crate::units::{Shown, grouped, human_bytes};
use crate::weights::TensorPreview;

/// The tensor the inspector shows.
enum Inspected {
    Nothing,
    Pending {
        name: String,
        since: Instant,
    },
    Ready(Box<TensorPreview>),
    Failed {
        name: String,
        error: String,
    },
    /// Selected by moving, too big to materialize unasked.
    HeldBack {
        name: String,
        bytes: u64,
        limit: u64,
    },
}

/// The inspector panel: the tensor asked for, its preview when the worker
/// sends it, and the heatmap textures drawn from that preview.
pub(super) struct InspectorPanel {
    inspected: Inspected,
    /// Heatmap textures keyed by preview (its generation), tensor and kind:
    /// a new preview, of a new checkpoint or view above all, can never show
    /// an old one's picture.
    heatmap_texture: Heatmaps,
    /// Counts previews shown: part of the heatmap textures' keys.
    preview_generation: u64,
    /// The values heatmap's cells: each block's mean, or its largest
    /// |value| (where a mean hides an outlier).
    pooling: Pooling,
    /// Colours clipped to the 1st-99th percentile (an outlier no longer
    /// whitens the rest).
    clip: bool,
    /// The histogram or heatmap opened large, in a window of its own.
    large: Option<Large>,
}

/// What is opened large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Large {
    Histogram,
    Heatmap,
}

/// How the preview's plots are drawn (the user's choices).
pub(super) struct Look<'a> {
    pooling: &'a mut Pooling,
    clip: &'a mut bool,
    large: &'a mut Option<Large>,
}

/// What a heatmap cell shows of its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Pooling {
    #[default]
    Mean,
    MaxAbs,
}

impl Default for InspectorPanel {
    fn default() -> Self {
        Self {
            inspected: Inspected::Nothing,
            heatmap_texture: HashMap::new(),
            preview_generation: 0,
            pooling: Pooling::Mean,
            clip: false,
            large: None,
        }
    }
}

impl InspectorPanel {
    /// Forgets the tensor and every texture (a checkpoint opened or closed).
    pub(super) fn clear(&mut self) {
        self.inspected = Inspected::Nothing;
        self.heatmap_texture.clear();
    }

    /// `name` was asked of the worker.
    pub(super) fn pending(&mut self, name: &str) {
        self.inspected = Inspected::Pending {
            name: name.to_owned(),
            since: Instant::now(),
        };
    }

    /// `name` could not be materialized (or not even asked for).
    pub(super) fn failed(&mut self, name: &str, error: String) {
        self.inspected = Inspected::Failed {
            name: name.to_owned(),
            error,
        };
    }

    /// `name` was selected by moving onto it, and its `bytes` are over the
    /// `limit` a preview may take unasked: its size is said, and a button
    /// (or Enter in the table) materializes it.
    pub(super) fn held_back(&mut self, name: &str, bytes: u64, limit: u64) {
        self.inspected = Inspected::HeldBack {
            name: name.to_owned(),
            bytes,
            limit,
        };
    }

    /// The worker reported an error about `target`: shown when it is the
    /// tensor waited for.
    pub(super) fn worker_failed(&mut self, target: &str, error: &str) {
        if self.is_waiting_for(target) {
            self.failed(target, error.to_owned());
        }
    }

    /// A preview came: shown when it is the tensor waited for (an answer to
    /// an older click is dropped).
    pub(super) fn materialized(&mut self, preview: Box<TensorPreview>) {
        if self.is_waiting_for(&preview.name) {
            self.preview_generation += 1;
            self.inspected = Inspected::Ready(preview);
        }
    }

    fn is_waiting_for(&self, target: &str) -> bool {
        matches!(&self.inspected, Inspected::Pending { name, .. } if name == target)
    }

    /// Shows the preview's times as 0 (snapshots must not change with the
    /// machine's speed).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn freeze_times(&mut self) {
        if let Inspected::Ready(preview) = &mut self.inspected {
            preview.materialize_millis = 0.0;
            preview.summary_millis = 0.0;
        }
    }

    /// Whether a tensor is being materialized.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn is_pending(&self) -> bool {
        matches!(self.inspected, Inspected::Pending { .. })
    }

    /// The tensor shown or waited for, if any.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn name(&self) -> Option<&str> {
        match &self.inspected {
            Inspected::Nothing => None,
            Inspected::Pending { name, .. }
            | Inspected::Failed { name, .. }
            | Inspected::HeldBack { name, .. } => Some(name),
            Inspected::Ready(preview) => Some(&preview.name),
        }
    }

    /// The keys of the cached heatmap textures, sorted.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn heatmap_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.heatmap_texture.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Draws the tensor waited for, its error, or its preview.
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        pinned: &[String],
        commands: &super::commands::CommandSender,
    ) {
        ui.heading("Inspector");
        ui.separator();
        match &self.inspected {
            Inspected::Nothing => {
                ui.label("Click a tensor (or select it with the arrows and press Enter) to materialize it through MLX.");
            }
            Inspected::Pending { name, since } => {
                // The name on its own line, cut to the panel: a long one
                // never widens it.
                super::widgets::name_label(ui, name, false);
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!(
                        "materializing ... {:.1} s",
                        since.elapsed().as_secs_f32()
                    ));
                });
                // Keep the elapsed time moving while the worker works.
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_millis(100));
            }
            Inspected::HeldBack { name, bytes, limit } => {
                super::widgets::name_label(ui, name, false);
                ui.label(format!(
                    "{} to materialize: more than a preview takes unasked ({}, the preview budget or what MLX's limit leaves). Enter or a click materializes it.",
                    crate::units::human_bytes(*bytes),
                    crate::units::human_bytes(*limit)
                ));
                if ui
                    .button(format!(
                        "Materialize ({})",
                        crate::units::human_bytes(*bytes)
                    ))
                    .clicked()
                {
                    commands.send(super::AppCommand::Materialize(name.clone()));
                }
            }
            Inspected::Failed { name, error } => {
                super::widgets::name_label(ui, name, false);
                ui.colored_label(
                    ui.visuals().error_fg_color,
                    format!("could not materialize: {error}"),
                );
            }
            Inspected::Ready(preview) => {
                // Disjoint fields: the preview is borrowed, not copied each frame.
                let texture = &mut self.heatmap_texture;
                let generation = self.preview_generation;
                let mut look = Look {
                    pooling: &mut self.pooling,
                    clip: &mut self.clip,
                    large: &mut self.large,
                };
                let mut pin = pinned.contains(&preview.name);
                if ui
                    .checkbox(&mut pin, "Pin: keep it in memory")
                    .on_hover_text("The previews are kept within a budget (the status bar says how much they hold), the least recently shown let go first; a pinned tensor stays")
                    .changed()
                {
                    commands.send(super::AppCommand::PinPreview(preview.name.clone(), pin));
                }
                // Keyed by the tensor: a new tensor opens at the top. Wide
                // content wraps or scrolls; it never widens the panel. No
                // edge fade: over a heatmap cut by the panel it reads as a
                // dark band of data (the scroll bars say there is more).
                ui.scope(|ui| {
                    ui.spacing_mut().scroll.fade.strength = 0.0;
                    egui::ScrollArea::both()
                        // The generation too: the same name in the next
                        // checkpoint opens at the top as well.
                        .id_salt(("inspector-scroll", generation, preview.name.as_str()))
                        .auto_shrink([false, false])
                        .show(ui, |ui| {
                            preview_ui(ui, preview, (generation, &mut look), texture);
                        });
                });
            }
        }
        self.large_ui(ui.ctx());
    }

    /// The histogram or heatmap opened large, in a window of its own (Esc
    /// or its close button closes it).
    fn large_ui(&mut self, ctx: &egui::Context) {
        let (Some(kind), Inspected::Ready(preview)) = (self.large, &self.inspected) else {
            return;
        };
        let mut open = !ctx.input(|i| i.key_pressed(egui::Key::Escape));
        let what = match kind {
            Large::Histogram => "Histogram",
            Large::Heatmap => "Heatmap",
        };
        let texture = &mut self.heatmap_texture;
        let generation = self.preview_generation;
        let clip = self.clip;
        let pooling = self.pooling;
        egui::Window::new(format!("{what}: {}", Shown::new(&preview.name)))
            .id(egui::Id::unique("inspector-large"))
            .open(&mut open)
            .default_size([900.0, 640.0])
            .show(ctx, |ui| match kind {
                Large::Histogram => histogram_ui(
                    ui,
                    &preview.values.histogram,
                    &preview.values.stats,
                    (ui.available_height() - 30.0).max(300.0),
                ),
                Large::Heatmap => {
                    let largest = preview.values.heatmap_max_abs.as_ref();
                    let chosen = match (pooling, largest) {
                        (Pooling::MaxAbs, Some(m)) => Some((m, "max-abs")),
                        _ => preview.values.heatmap.as_ref().map(|h| (h, "mean")),
                    };
                    if let Some((heatmap, key)) = chosen {
                        heatmap_with(
                            ui,
                            heatmap,
                            &format!("{generation}:{}#values-{key}", preview.name),
                            texture,
                            HeatmapLook {
                                clip,
                                max_side: (ui.available_height() - 80.0).max(300.0),
                            },
                        );
                    }
                }
            });
        if !open {
            self.large = None;
        }
    }
}

/// The values heatmap: its cells' pooling, the clip choice, the map and
/// the button that opens it large.
fn values_heatmap_ui(
    ui: &mut egui::Ui,
    p: &TensorPreview,
    mean: &Heatmap,
    (generation, look): (u64, &mut Look<'_>),
    texture: &mut Heatmaps,
) {
    let pooling = &mut *look.pooling;
    ui.separator();
    let largest = p.values.heatmap_max_abs.as_ref();
    ui.horizontal_wrapped(|ui| {
        ui.label("Cells:");
        ui.selectable_value(pooling, Pooling::Mean, "mean")
            .on_hover_text("Each cell the mean of its block (signed)");
        ui.add_enabled_ui(largest.is_some(), |ui| {
            ui.selectable_value(pooling, Pooling::MaxAbs, "max |x|")
                .on_hover_text("Each cell the largest |value| of its block: outliers show");
        });
    });
    let (heatmap, what, key) = match (*pooling, largest) {
        (Pooling::MaxAbs, Some(m)) => (m, "the largest |value|", "max-abs"),
        _ => (mean, "the mean", "mean"),
    };
    ui.label(format!(
        "Heatmap ({} x {} cells, each {what} of {} x {} values)",
        heatmap.rows, heatmap.cols, heatmap.row_step, heatmap.col_step
    ));
    let name = format!("{generation}:{}#values-{key}", p.name);
    if let Some(drawn) = painted(ui, heatmap, &name, texture, *look.clip) {
        let extents = (drawn.whole_extent, drawn.clipped_extent);
        heatmap_look_ui(ui, extents, look.clip);
    }
    heatmap_with(
        ui,
        heatmap,
        &name,
        texture,
        HeatmapLook {
            clip: *look.clip,
            max_side: 400.0,
        },
    );
    if ui.small_button("Open the heatmap large").clicked() {
        *look.large = Some(Large::Heatmap);
    }
}

/// The summary as plain text (what "Copy" puts on the clipboard).
fn summary_text(p: &TensorPreview) -> String {
    let s = &p.values.stats;
    let mut text = format!(
        "{}\ndtype {} shape {:?} {} in {}\ndevice {} materialized in {:.1} ms\nmin {} max {} mean {} std {} nan {} inf {}\n",
        p.name,
        p.stored_type(),
        p.shape,
        human_bytes(p.bytes),
        p.shard,
        p.device,
        p.materialize_millis,
        s.min,
        s.max,
        s.mean,
        s.std,
        s.nan,
        s.inf
    );
    if let Some(decoding) = &p.decoding {
        let _ = writeln!(text, "{}", decoding.describe());
    }
    text
}

/// The tensor's dtype, shape, size, device and times, wrapped in a narrow
/// panel rather than run off its edge.
fn facts_ui(ui: &mut egui::Ui, p: &TensorPreview) {
    egui::Grid::new("facts").num_columns(2).show(ui, |ui| {
        ui.label("dtype");
        // Values wrap in a narrow panel rather than run off its edge.
        let wrapped = |ui: &mut egui::Ui, text: String| ui.add(egui::Label::new(text).wrap());
        wrapped(ui, format!("{}  shape {:?}", p.stored_type(), p.shape));
        ui.end_row();
        ui.label("size");
        wrapped(ui, format!("{} in {}", human_bytes(p.bytes), p.shard));
        ui.end_row();
        ui.label("device");
        let device = if p.device.starts_with("cpu") {
            format!("{} (no GPU: CPU)", p.device)
        } else {
            format!("{} ({})", p.device, crate::mlx::GPU_BACKEND)
        };
        wrapped(ui, device);
        ui.end_row();
        ui.label("time");
        wrapped(
            ui,
            format!(
                "materialized in {:.1} ms, statistics in {:.1} ms",
                p.materialize_millis, p.summary_millis
            ),
        );
        ui.end_row();
    });
}

fn preview_ui(
    ui: &mut egui::Ui,
    p: &TensorPreview,
    (generation, look): (u64, &mut Look<'_>),
    texture: &mut Heatmaps,
) {
    ui.label(
        egui::RichText::new(Shown::new(&p.name))
            .monospace()
            .strong(),
    );
    if p.stored_name != p.name {
        ui.label(format!("stored as {}", Shown::new(&p.stored_name)));
    }
    facts_ui(ui, p);
    if let Some(decoding) = &p.decoding {
        // How the values were decoded: a fact, not a warning.
        ui.label(decoding.describe());
    }
    if !p.fixups.is_empty() {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "Values shown after the view's fix-ups:",
        );
        for rule in &p.fixups {
            ui.label(format!("  {rule}"));
        }
    }
    if ui
        .button("Copy")
        .on_hover_text("Copy the summary as text")
        .clicked()
    {
        ui.ctx().copy_text(summary_text(p));
    }
    ui.separator();

    stats_ui(ui, "stats", &p.values.stats);
    if let Some(before) = &p.before_fixup {
        ui.label("Before the fix-ups (as stored):");
        stats_ui(ui, "stats-before", &before.stats);
    } else if !p.fixups.is_empty() {
        ui.label(format!(
            "Before the fix-ups: not shown (stored as {} codes, which are values only once decoded)",
            p.dtype.name()
        ));
    }
    ui.separator();
    histogram_ui(ui, &p.values.histogram, &p.values.stats, 140.0);
    if ui.small_button("Open the histogram large").clicked() {
        *look.large = Some(Large::Histogram);
    }

    if let Some(mean) = &p.values.heatmap {
        values_heatmap_ui(ui, p, mean, (generation, look), texture);
    }
    quant_maps_ui(ui, p, generation, texture);

    ui.separator();
    ui.label(format!("First {} values", p.values.first.len()));
    // Aligned: one width for every value (sign, digits and exponent), in
    // their own scroll area so a narrow panel scrolls them, never cuts.
    egui::ScrollArea::horizontal()
        .id_salt("first-values")
        .show(ui, |ui| {
            egui::Grid::new("first")
                .num_columns(8)
                .striped(true)
                .show(ui, |ui| {
                    for (i, v) in p.values.first.iter().enumerate() {
                        ui.monospace(format!("{v:>11.4e}"));
                        if i % 8 == 7 {
                            ui.end_row();
                        }
                    }
                });
        });
}

fn stats_ui(ui: &mut egui::Ui, id: &str, s: &Stats) {
    egui::Grid::new(id).num_columns(4).show(ui, |ui| {
        ui.label("min");
        ui.monospace(format!("{:.6e}", s.min));
        ui.label("max");
        ui.monospace(format!("{:.6e}", s.max));
        ui.end_row();
        ui.label("mean");
        ui.monospace(format!("{:.6e}", s.mean));
        ui.label("std");
        ui.monospace(format!("{:.6e}", s.std));
        ui.end_row();
        let bad = ui.visuals().error_fg_color;
        ui.label("NaN");
        if s.nan > 0 {
            ui.colored_label(bad, grouped(s.nan));
        } else {
            ui.monospace("0");
        }
        ui.label("Inf");
        if s.inf > 0 {
            ui.colored_label(bad, grouped(s.inf));
        } else {
            ui.monospace("0");
        }
        ui.end_row();
    });
}

fn histogram_ui(ui: &mut egui::Ui, h: &Histogram, s: &Stats, height: f32) {
    ui.label("Histogram (finite values)");
    // An empty or one-bar histogram says why in words.
    if s.finite == 0 {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "No finite values: every value is NaN or Inf.",
        );
        return;
    }
    #[allow(clippy::float_cmp)] // one value: the range is exactly empty
    if h.min == h.max {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            if h.min.abs() < f64::MIN_POSITIVE {
                "All finite values are 0.".to_owned()
            } else {
                format!("All finite values are {:.6e}.", h.min)
            },
        );
    }
    let bins = h.counts.len().max(1);
    // One value: a bar of its own width around it, and an x range a little
    // wider (an empty range made the plot pick +-5e8).
    #[allow(clippy::float_cmp)]
    let constant = h.min == h.max;
    let span = if constant {
        (h.min.abs() * 0.02).max(1e-6)
    } else {
        h.max - h.min
    };
    let width = span / bins as f64;
    let bars: Vec<egui_plot::Bar> = h
        .counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let centre = if constant {
                h.min
            } else {
                h.min + (i as f64 + 0.5) * width
            };
            egui_plot::Bar::new(centre, c as f64).width(if constant { span / 4.0 } else { width })
        })
        .filter(|b| b.value > 0.0 || !constant)
        .collect();
    let (left, right) = if constant {
        (h.min - span, h.max + span)
    } else {
        (h.min, h.max)
    };
    super::axes::histogram_axes(egui_plot::Plot::new(("histogram", height.to_bits())))
        .x_axis_label("value")
        .y_axis_label("count")
        .include_x(left)
        .include_x(right)
        .height(height)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .show(ui, |plot| {
            plot.bar_chart(egui_plot::BarChart::new("count", bars));
        });
}

/// How a heatmap's values map to colours, chosen by the values: signed
/// values on a diverging scale around 0 (blue, white, red; symmetric in the
/// largest |value|), values of one sign (scales, |x|) on a sequential one
/// from their smallest to their largest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ColourScale {
    /// Blue below 0, red above, white at 0.
    Diverging { extent: f32 },
    /// Dark at `lo`, bright at `hi`.
    Sequential { lo: f32, hi: f32 },
    /// Every cell holds this one value (or none is finite).
    Constant(f32),
}

impl ColourScale {
    /// The scale for `values` (non-finite ones ignored).
    pub(super) fn for_values(values: &[f32]) -> Self {
        let (lo, hi) = values
            .iter()
            .filter(|v| v.is_finite())
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        if lo > hi {
            return Self::Constant(f32::NAN);
        }
        if hi - lo <= 0.0 {
            return Self::Constant(lo);
        }
        if lo >= 0.0 || hi <= 0.0 {
            Self::Sequential { lo, hi }
        } else {
            Self::Diverging {
                extent: lo.abs().max(hi.abs()),
            }
        }
    }

    /// [`Self::for_values`] over the 1st to 99th percentile of the finite
    /// values (of |values| for a signed set): one outlier no longer sets
    /// the scale; the rest is drawn at its ends.
    pub(super) fn clipped(values: &[f32]) -> Self {
        let mut finite: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if finite.len() < 3 {
            return Self::for_values(values);
        }
        let at = |sorted: &mut [f32], q: f64| -> f32 {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let k = ((sorted.len() - 1) as f64 * q).round() as usize;
            *sorted.select_nth_unstable_by(k, f32::total_cmp).1
        };
        match Self::for_values(&finite) {
            Self::Diverging { .. } => {
                for v in &mut finite {
                    *v = v.abs();
                }
                let extent = at(&mut finite, 0.99);
                if extent > 0.0 {
                    Self::Diverging { extent }
                } else {
                    Self::for_values(values)
                }
            }
            Self::Sequential { .. } => {
                let (lo, hi) = (at(&mut finite, 0.01), at(&mut finite, 0.99));
                if hi > lo {
                    Self::Sequential { lo, hi }
                } else {
                    Self::for_values(values)
                }
            }
            constant @ Self::Constant(_) => constant,
        }
    }

    /// How far the scale reaches: the largest |value| of a diverging one,
    /// the range of a sequential one, 0 for one colour.
    pub(super) fn extent(self) -> f32 {
        match self {
            Self::Diverging { extent } => extent,
            Self::Sequential { lo, hi } => hi - lo,
            Self::Constant(_) => 0.0,
        }
    }

    /// The colour of `v`.
    pub(super) fn colour(self, v: f32) -> egui::Color32 {
        if !v.is_finite() {
            return egui::Color32::GRAY;
        }
        match self {
            Self::Constant(_) => egui::Color32::from_gray(190),
            Self::Diverging { extent } => {
                let t = (v / extent).clamp(-1.0, 1.0);
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let fade = |x: f32| (255.0 * (1.0 - x)) as u8;
                if t >= 0.0 {
                    egui::Color32::from_rgb(255, fade(t), fade(t))
                } else {
                    egui::Color32::from_rgb(fade(-t), fade(-t), 255)
                }
            }
            Self::Sequential { lo, hi } => sequential(((v - lo) / (hi - lo)).clamp(0.0, 1.0)),
        }
    }

    /// The values at the left, middle and right of the colour bar.
    fn ends(self) -> [f32; 3] {
        match self {
            Self::Diverging { extent } => [-extent, 0.0, extent],
            Self::Sequential { lo, hi } => [lo, lo + (hi - lo) / 2.0, hi],
            Self::Constant(v) => [v, v, v],
        }
    }

    /// What the colours mean, in words.
    fn describe(self) -> &'static str {
        match self {
            Self::Diverging { .. } => "diverging around 0: blue below, white at 0, red above",
            Self::Constant(_) => "every cell holds the same value: one colour",
            Self::Sequential { lo, .. } if lo >= 0.0 => {
                "sequential (every value >= 0): dark at the smallest, bright at the largest"
            }
            Self::Sequential { .. } => {
                "sequential (every value <= 0): dark at the most negative, bright at the largest"
            }
        }
    }
}

/// A dark-to-bright ramp (deep blue, purple, orange, pale yellow) at
/// `t` in `[0, 1]`: brightness rises steadily, so order reads without a key.
#[allow(clippy::many_single_char_names)] // a ramp's usual names
fn sequential(t: f32) -> egui::Color32 {
    const STOPS: [(f32, [f32; 3]); 4] = [
        (0.0, [20.0, 12.0, 60.0]),
        (0.35, [120.0, 40.0, 130.0]),
        (0.7, [235.0, 110.0, 60.0]),
        (1.0, [252.0, 245.0, 170.0]),
    ];
    let mut k = 1;
    while k < STOPS.len() - 1 && t > STOPS[k].0 {
        k += 1;
    }
    let ((t0, a), (t1, b)) = (STOPS[k - 1], STOPS[k]);
    let f = ((t - t0) / (t1 - t0)).clamp(0.0, 1.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mix = |i: usize| (a[i] + (b[i] - a[i]) * f).round() as u8;
    egui::Color32::from_rgb(mix(0), mix(1), mix(2))
}

/// Heatmaps of a quantized weight's per-group scales (decoded) and biases,
/// or of an FP8 weight's block scales.
fn quant_maps_ui(ui: &mut egui::Ui, p: &TensorPreview, generation: u64, texture: &mut Heatmaps) {
    let Some(maps) = &p.quant_maps else {
        return;
    };
    let scales = match &p.decoding {
        Some(crate::weights::Decoding::Fp8 { .. }) => "block scales (weight_scale_inv)",
        Some(crate::weights::Decoding::Quantized { params, .. }) if !params.mode.has_biases() => {
            "scales (decoded)"
        }
        _ => "scales",
    };
    for (what, map) in [(scales, &maps.scales), ("biases", &maps.biases)] {
        if let Some(heatmap) = map {
            ui.separator();
            ui.label(format!(
                "Per-group {what} ({} x {} cells, each the mean of {} x {} groups)",
                heatmap.rows, heatmap.cols, heatmap.row_step, heatmap.col_step
            ));
            heatmap_ui(
                ui,
                heatmap,
                &format!("{generation}:{}#{what}", p.name),
                texture,
            );
        }
    }
}

pub(super) fn heatmap_ui(ui: &mut egui::Ui, heatmap: &Heatmap, name: &str, cache: &mut Heatmaps) {
    heatmap_with(ui, heatmap, name, cache, HeatmapLook::default());
}

/// A heatmap drawn once: its texture and its colour scale, with the
/// extents of its whole and its clipped scales (each computed once, never
/// per frame: the clipped one is a selection over 262k cells).
pub(super) struct Painted {
    texture: egui::TextureHandle,
    scale: ColourScale,
    whole_extent: f32,
    clipped_extent: f32,
}

/// The heatmaps drawn, by preview, tensor and kind.
pub(super) type Heatmaps = HashMap<String, Painted>;

/// How big a heatmap is drawn, and whether its colours are clipped.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeatmapLook {
    /// Colours over the 1st-99th percentile of the cells.
    pub clip: bool,
    /// The longest side, in points.
    pub max_side: f32,
}

impl Default for HeatmapLook {
    fn default() -> Self {
        Self {
            clip: false,
            max_side: 400.0,
        }
    }
}

/// The clip choice under a heatmap, and a word when an outlier sets its
/// scale (most cells then look white).
fn heatmap_look_ui(ui: &mut egui::Ui, (whole, clipped): (f32, f32), clip: &mut bool) {
    ui.checkbox(clip, "Clip colours to the 1st-99th percentile")
        .on_hover_text("The colour scale over the 1st to 99th percentile of the cells: an outlier no longer whitens the rest; cells beyond are drawn at the ends");
    if !*clip && whole > 10.0 * clipped {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!(
                "An outlier sets the colours: 98 % of the cells are within {clipped:.3e} of {whole:.3e}; clip to see them."
            ),
        );
    }
}

/// The heatmap `name` drawn as `clip` says, built on first use and kept.
fn painted<'a>(
    ui: &egui::Ui,
    heatmap: &Heatmap,
    name: &str,
    cache: &'a mut Heatmaps,
    clip: bool,
) -> Option<&'a Painted> {
    let name = &format!("{name}{}", if clip { "#clipped" } else { "" });
    // Built once per preview and kept: uploading 512 x 512 texels (and
    // choosing their scale) every frame would cost more than the rest of
    // the window.
    if !cache.contains_key(name) {
        // A few previews' maps at most: older textures are dropped.
        if cache.len() >= 6 {
            cache.clear();
        }
        let whole = ColourScale::for_values(&heatmap.values);
        let clipped = ColourScale::clipped(&heatmap.values);
        let scale = if clip { clipped } else { whole };
        let pixels: Vec<egui::Color32> = heatmap.values.iter().map(|&v| scale.colour(v)).collect();
        let image = egui::ColorImage::new([heatmap.cols, heatmap.rows], pixels);
        let texture = ui.ctx().load_texture(
            format!("heatmap:{name}"),
            image,
            egui::TextureOptions::NEAREST,
        );
        cache.insert(
            name.to_owned(),
            Painted {
                texture,
                scale,
                whole_extent: whole.extent(),
                clipped_extent: clipped.extent(),
            },
        );
    }
    cache.get(name)
}

/// [`heatmap_ui`] as `look` says: with ticks of the rows and columns the
/// cells stand for.
pub(super) fn heatmap_with(
    ui: &mut egui::Ui,
    heatmap: &Heatmap,
    name: &str,
    cache: &mut Heatmaps,
    look: HeatmapLook,
) {
    let Some(drawn) = painted(ui, heatmap, name, cache, look.clip) else {
        return;
    };
    let (texture, scale) = (drawn.texture.clone(), drawn.scale);
    // Row ticks at the left, column ticks under it.
    let font = egui::TextStyle::Small.resolve(ui.style());
    let rows_total = heatmap.rows * heatmap.row_step;
    let cols_total = heatmap.cols * heatmap.col_step;
    let tick_room = ui.fonts_mut(|f| f.glyph_width(&font, '0')).max(1.0)
        * (rows_total.to_string().len() as f32 + 1.0);
    let side = (ui.available_width() - tick_room)
        .min(look.max_side)
        .max(40.0);
    let aspect = heatmap.rows as f32 / heatmap.cols.max(1) as f32;
    let image_size = egui::vec2(side, (side * aspect).clamp(40.0, look.max_side));
    let line = font.size + 2.0;
    let (area, response) = ui.allocate_exact_size(
        egui::vec2(tick_room + image_size.x, image_size.y + line),
        egui::Sense::hover(),
    );
    let image_rect = egui::Rect::from_min_size(area.min + egui::vec2(tick_room, 0.0), image_size);
    egui::Image::new((texture.id(), image_size)).paint_at(ui, image_rect);
    let painter = ui.painter();
    let colour = ui.visuals().weak_text_color();
    for (k, align) in [
        (0, egui::Align2::RIGHT_TOP),
        (1, egui::Align2::RIGHT_CENTER),
        (2, egui::Align2::RIGHT_BOTTOM),
    ] {
        #[allow(clippy::cast_precision_loss)]
        let y = image_rect.top() + image_rect.height() * k as f32 / 2.0;
        let row = rows_total * k / 2;
        painter.text(
            egui::pos2(image_rect.left() - 3.0, y),
            align,
            row.to_string(),
            font.clone(),
            colour,
        );
    }
    for (k, align) in [
        (0, egui::Align2::LEFT_TOP),
        (1, egui::Align2::CENTER_TOP),
        (2, egui::Align2::RIGHT_TOP),
    ] {
        #[allow(clippy::cast_precision_loss)]
        let x = image_rect.left() + image_rect.width() * k as f32 / 2.0;
        let col = cols_total * k / 2;
        painter.text(
            egui::pos2(x, image_rect.bottom() + 1.0),
            align,
            col.to_string(),
            font.clone(),
            colour,
        );
    }
    if let Some(pos) = response.hover_pos().filter(|p| image_rect.contains(*p)) {
        let rel = (pos - image_rect.min) / image_rect.size();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let (c, r) = (
            ((rel.x * heatmap.cols as f32) as usize).min(heatmap.cols - 1),
            ((rel.y * heatmap.rows as f32) as usize).min(heatmap.rows - 1),
        );
        let value = heatmap.values[r * heatmap.cols + c];
        response.on_hover_text(format!(
            "rows {}..{}, cols {}..{}: {value:.6}",
            r * heatmap.row_step,
            (r + 1) * heatmap.row_step,
            c * heatmap.col_step,
            (c + 1) * heatmap.col_step
        ));
    }
    colour_scale_ui(ui, scale, side);
}

/// The heatmap's key: a colour bar over its range, the values at its ends
/// and middle under it, and what the colours mean.
fn colour_scale_ui(ui: &mut egui::Ui, scale: ColourScale, width: f32) {
    let (rect, _) = ui.allocate_exact_size(egui::vec2(width, 12.0), egui::Sense::hover());
    let steps = 64;
    let painter = ui.painter_at(rect);
    let [left, _, right] = scale.ends();
    for k in 0..steps {
        #[allow(clippy::cast_precision_loss)]
        let (a, b) = (k as f32 / steps as f32, (k + 1) as f32 / steps as f32);
        let v = left + f32::midpoint(a, b) * (right - left);
        let cell = egui::Rect::from_min_max(
            egui::pos2(rect.left() + a * rect.width(), rect.top()),
            egui::pos2(rect.left() + b * rect.width(), rect.bottom()),
        );
        painter.rect_filled(cell, 0.0, scale.colour(v));
    }
    let [lo, mid, hi] = scale.ends();
    ui.allocate_ui(egui::vec2(width, ui.spacing().interact_size.y), |ui| {
        ui.horizontal(|ui| {
            ui.label(format!("{lo:.3e}"));
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.label(format!("{hi:.3e}"));
                ui.add_space((ui.available_width() / 2.0 - 30.0).max(0.0));
                ui.label(if mid == 0.0 {
                    "0".to_owned()
                } else {
                    format!("{mid:.3e}")
                });
            });
        });
    });
    ui.add(egui::Label::new(egui::RichText::new(scale.describe()).small()).wrap());
}

#[cfg(test)]
mod colour_tests {
    use super::ColourScale;

    fn brightness(c: egui::Color32) -> u32 {
        u32::from(c.r()) + u32::from(c.g()) + u32::from(c.b())
    }

    #[test]
    fn clipping_takes_the_scale_from_the_1st_to_99th_percentile() {
        // 999 small values and one outlier: the whole scale is the
        // outlier's, the clipped one the rest's.
        let mut values: Vec<f32> = (0..999).map(|i| (i as f32 - 499.0) / 499.0).collect();
        values.push(1000.0);
        let whole = ColourScale::for_values(&values);
        let clipped = ColourScale::clipped(&values);
        assert!((whole.extent() - 1000.0).abs() < 1e-3);
        assert!(
            clipped.extent() <= 1.0 && clipped.extent() > 0.9,
            "{clipped:?}"
        );
        // The small values get colours again.
        assert_ne!(clipped.colour(0.5), egui::Color32::WHITE);
        assert!(brightness(whole.colour(0.5)) > 740);
        // Positive only: sequential between the percentiles.
        let scales: Vec<f32> = (1..=100).map(|i| i as f32).chain([1e6]).collect();
        assert!(
            matches!(ColourScale::clipped(&scales), ColourScale::Sequential { lo, hi } if lo <= 3.0 && hi <= 100.0)
        );
        // Too few or constant values: as before.
        assert_eq!(
            ColourScale::clipped(&[2.0, 2.0, 2.0]),
            ColourScale::Constant(2.0)
        );
        assert_eq!(
            ColourScale::clipped(&[1.0]),
            ColourScale::for_values(&[1.0])
        );
    }

    #[test]
    fn the_scale_follows_the_values_sign() {
        // Scales (positive only): sequential over their own range, the
        // smallest darkest; never the solid red of a scale centred on 0.
        let scale = ColourScale::for_values(&[0.5, 1.0, 2.0, f32::NAN]);
        assert_eq!(scale, ColourScale::Sequential { lo: 0.5, hi: 2.0 });
        let (dark, mid, bright) = (scale.colour(0.5), scale.colour(1.25), scale.colour(2.0));
        assert!(brightness(dark) < brightness(mid) && brightness(mid) < brightness(bright));
        // Signed weights: diverging, symmetric in the largest |value|.
        let scale = ColourScale::for_values(&[-1.0, 0.25, 3.0]);
        assert_eq!(scale, ColourScale::Diverging { extent: 3.0 });
        assert_eq!(scale.colour(0.0), egui::Color32::WHITE);
        assert_eq!(scale.colour(3.0), egui::Color32::from_rgb(255, 0, 0));
        assert_eq!(scale.colour(-3.0), egui::Color32::from_rgb(0, 0, 255));
        // Negative only: sequential too; nothing finite: one colour.
        assert!(matches!(
            ColourScale::for_values(&[-2.0, -1.0]),
            ColourScale::Sequential { .. }
        ));
        assert_eq!(
            ColourScale::for_values(&[0.0, 0.0]),
            ColourScale::Constant(0.0)
        );
        assert!(
            matches!(ColourScale::for_values(&[f32::NAN]), ColourScale::Constant(v) if v.is_nan())
        );
        assert_eq!(
            ColourScale::for_values(&[1.0]).colour(f32::INFINITY),
            egui::Color32::GRAY
        );
    }
}
