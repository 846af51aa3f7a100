//! The inspector: one materialized tensor's summary, histogram, heatmap and
//! first values.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

use crate::mlx::{Heatmap, Histogram, Stats};
use crate::units::{Shown, grouped, human_bytes};
use crate::weights::TensorPreview;

use super::heatmap::{
    HeatmapLook, Heatmaps, Pooling, heatmap_look_ui, heatmap_ui, heatmap_with, painted,
};

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
        heatmap_look_ui(ui, drawn.extents(), look.clip);
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
    if crate::app::widgets::explained_button(ui, "Copy", "Copy the summary as text") {
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
