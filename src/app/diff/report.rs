//! The report's summary, its lists, its figures by kind and the error per
//! layer.

use std::path::Path;

use crate::units::Shown;
use crate::weights::DiffReport;

/// The report's counts, overall figure, memory, lists, the summary by
/// module kind and the per-layer plot (side by side where there is room).
pub(super) fn summary_ui(ui: &mut egui::Ui, report: &DiffReport, b: Option<&Path>) {
    if let Some(b) = b {
        ui.label(format!("B: {}", Shown::new(&b.display().to_string())));
    }
    let differing = report.differing().count();
    ui.label(format!(
        "{} compared, {differing} differ; {} only in A, {} only in B, {} changed shape, {} failed{}",
        report.common.len(),
        report.only_in_a.len(),
        report.only_in_b.len(),
        report.changed.len(),
        report.failed.len(),
        if report.cancelled { "; cancelled" } else { "" }
    ));
    if let Some(overall) = report.overall_text() {
        ui.add(egui::Label::new(format!("Overall: {}", Shown::new(&overall))).wrap());
    }
    ui.label(format!(
        "Peak MLX active {} {} the bound {} (largest shard of A + of B {}, plus one band's decoding temporaries on each side)",
        crate::units::human_bytes(report.peak_mlx_active_bytes),
        if report.peak_mlx_active_bytes <= report.bound_bytes { "within" } else { "over" },
        crate::units::human_bytes(report.bound_bytes),
        crate::units::human_bytes(report.two_shards_bytes),
    ));
    lists_ui(ui, report);
    if ui.available_width() >= 1000.0 {
        ui.columns(2, |columns| {
            by_kind_ui(&mut columns[0], report);
            error_per_layer_ui(&mut columns[1], report);
        });
    } else {
        by_kind_ui(ui, report);
        ui.separator();
        error_per_layer_ui(ui, report);
    }
}

/// Only in A, only in B, changed shape and failed, collapsed.
pub(super) fn lists_ui(ui: &mut egui::Ui, report: &DiffReport) {
    for (title, names) in [
        ("Only in A", &report.only_in_a),
        ("Only in B", &report.only_in_b),
    ] {
        if !names.is_empty() {
            egui::CollapsingHeader::new(format!("{title} ({})", names.len()))
                .id_salt(title)
                .show(ui, |ui| {
                    for name in names.iter().take(1000) {
                        ui.monospace(Shown::new(name));
                    }
                });
        }
    }
    if !report.changed.is_empty() {
        egui::CollapsingHeader::new(format!("Changed shape ({})", report.changed.len()))
            .id_salt("changed")
            .show(ui, |ui| {
                for c in report.changed.iter().take(1000) {
                    ui.monospace(format!(
                        "{}: {} {:?} -> {} {:?}",
                        Shown::new(&c.name),
                        c.a_dtype,
                        c.a_shape,
                        c.b_dtype,
                        c.b_shape
                    ));
                }
            });
    }
    for f in &report.failed {
        ui.colored_label(
            ui.visuals().error_fg_color,
            format!("{}: {}", Shown::new(&f.name), Shown::new(&f.error)),
        );
    }
}

/// The changed tensors by module kind and by how B stores them, with each
/// storage mode's typical error.
pub(super) fn by_kind_ui(ui: &mut egui::Ui, report: &DiffReport) {
    let kinds = report.by_kind();
    if kinds.is_empty() {
        return;
    }
    crate::app::widgets::open_section(
        ui,
        format!("By module kind ({})", kinds.len()),
        "diff-by-kind",
        |ui| {
            let modes = report.typical_by_mode();
            ui.label(
                modes
                    .iter()
                    .map(|(mode, n, median)| format!("{mode}: typical {median:.3e} over {n}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            )
            .on_hover_text(
                "Each way B stores tensors, with the median relative error of its changed tensors",
            );
            egui::ScrollArea::vertical()
                .id_salt("diff-by-kind-scroll")
                .max_height(120.0)
                .show(ui, |ui| {
                    egui::Grid::new("diff-by-kind-grid")
                        .striped(true)
                        .num_columns(5)
                        .show(ui, |ui| {
                            for title in ["kind", "B stored as", "tensors", "median", "worst"] {
                                ui.strong(title);
                            }
                            ui.end_row();
                            for k in &kinds {
                                ui.monospace(Shown::new(&k.kind));
                                ui.monospace(&k.b_dtype);
                                ui.monospace(k.tensors.to_string());
                                ui.monospace(format!("{:.3e}", k.median_rel_error));
                                ui.monospace(format!("{:.3e}", k.worst_rel_error))
                                    .on_hover_text(Shown::new(&k.worst).into_string());
                                ui.end_row();
                            }
                        });
                });
        },
    );
}

/// Largest and mean relative error per numbered layer (tensors outside
/// numbered layers, such as embeddings, are not drawn), on a log10 axis
/// with a tick at every power of ten and at least one decade shown: where
/// in the depth of the model a conversion went wrong.
pub(super) fn error_per_layer_ui(ui: &mut egui::Ui, report: &DiffReport) {
    let mut layers: std::collections::BTreeMap<u64, (f64, f64, usize)> =
        std::collections::BTreeMap::new();
    for c in &report.common {
        if let Some(layer) = c.layer {
            let entry = layers.entry(layer).or_insert((0.0, 0.0, 0));
            if c.rel_error.is_finite() {
                entry.0 = entry.0.max(c.rel_error);
                entry.1 += c.rel_error;
                entry.2 += 1;
            }
        }
    }
    let log = |x: f64| x.max(1e-12).log10();
    #[allow(clippy::cast_precision_loss)]
    let max_points: Vec<[f64; 2]> = layers
        .iter()
        .filter(|(_, (_, _, n))| *n > 0)
        .map(|(l, (max, _, _))| [*l as f64, log(*max)])
        .collect();
    #[allow(clippy::cast_precision_loss)]
    let mean_points: Vec<[f64; 2]> = layers
        .iter()
        .filter(|(_, (_, _, n))| *n > 0)
        .map(|(l, (_, sum, n))| [*l as f64, log(sum / *n as f64)])
        .collect();
    if max_points.is_empty() {
        return;
    }
    let (lo, hi) = max_points
        .iter()
        .chain(&mean_points)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p[1]), hi.max(p[1]))
        });
    ui.label("Relative error per layer (log scale; the max and the mean of each layer's tensors)");
    egui_plot::Plot::new("diff-error-per-layer")
        .height(140.0)
        .allow_scroll(false)
        .allow_drag(false)
        .allow_zoom(false)
        .x_axis_label("layer")
        .y_axis_label("rel error")
        .include_y(lo.floor())
        .include_y(hi.ceil().max(lo.floor() + 1.0))
        .x_axis_formatter(|mark, _| {
            if mark.value.fract() == 0.0 && mark.value >= 0.0 {
                format!("{}", mark.value)
            } else {
                String::new()
            }
        })
        .y_grid_spacer(|input| {
            // One mark per power of ten (a whole number on this log axis).
            let (lo, hi) = input.bounds;
            #[allow(clippy::cast_possible_truncation)]
            let (first, last) = (lo.ceil() as i64, hi.floor() as i64);
            #[allow(clippy::cast_precision_loss)]
            (first..=last)
                .map(|k| egui_plot::GridMark {
                    value: k as f64,
                    step_size: 1.0,
                })
                .collect()
        })
        .y_axis_formatter(|mark, _| {
            if mark.value.fract() == 0.0 {
                format!("1e{}", mark.value)
            } else {
                String::new()
            }
        })
        .label_formatter(|hover| match hover {
            egui_plot::HoverPosition::NearDataPoint {
                plot_name,
                position,
                ..
            } => Some(format!(
                "{plot_name}\nlayer {}: {:.3e}",
                position.x,
                10f64.powf(position.y)
            )),
            egui_plot::HoverPosition::Elsewhere { .. } => None,
        })
        .legend(egui_plot::Legend::default().position(egui_plot::Corner::RightBottom))
        .show(ui, |plot| {
            plot.line(egui_plot::Line::new("max", max_points));
            plot.line(egui_plot::Line::new("mean", mean_points));
        });
}
