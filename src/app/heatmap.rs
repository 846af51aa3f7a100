//! A 2-D heatmap drawn as a texture (the inspector's and the diff's):
//! its colour scale, chosen by the values, clipping, pooling and the cache
//! of painted textures.

use std::collections::HashMap;

use crate::mlx::Heatmap;

/// What a heatmap cell shows of its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Pooling {
    #[default]
    Mean,
    MaxAbs,
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

impl Painted {
    /// The extents of its whole and its clipped colour scales.
    pub(super) fn extents(&self) -> (f32, f32) {
        (self.whole_extent, self.clipped_extent)
    }
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
pub(super) fn heatmap_look_ui(ui: &mut egui::Ui, (whole, clipped): (f32, f32), clip: &mut bool) {
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
pub(super) fn painted<'a>(
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
    // Ticks at the start, the middle and the end of each axis: rows down
    // the left edge, columns along the bottom.
    let ticks = [
        (egui::Align2::RIGHT_TOP, egui::Align2::LEFT_TOP),
        (egui::Align2::RIGHT_CENTER, egui::Align2::CENTER_TOP),
        (egui::Align2::RIGHT_BOTTOM, egui::Align2::RIGHT_TOP),
    ];
    for (k, (row_align, col_align)) in ticks.into_iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let along = k as f32 / 2.0;
        let y = image_rect.top() + image_rect.height() * along;
        let x = image_rect.left() + image_rect.width() * along;
        for (at, align, tick) in [
            (
                egui::pos2(image_rect.left() - 3.0, y),
                row_align,
                rows_total * k / 2,
            ),
            (
                egui::pos2(x, image_rect.bottom() + 1.0),
                col_align,
                cols_total * k / 2,
            ),
        ] {
            painter.text(at, align, tick.to_string(), font.clone(), colour);
        }
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
