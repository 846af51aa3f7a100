//! One pair of tensors, A beside B: their histograms and the error's
//! heatmap.

use crate::units::Shown;
use crate::weights::PairDetail;

/// One opened tensor: A's, B's and the error's figures side by side, the
/// two histograms overlaid, the error's heatmap and its worst groups.
pub(super) fn pair_ui(
    ui: &mut egui::Ui,
    d: &PairDetail,
    (opened, pooling): (u64, &mut crate::app::heatmap::Pooling),
    textures: &mut crate::app::heatmap::Heatmaps,
) {
    ui.label(
        egui::RichText::new(Shown::new(&d.name))
            .monospace()
            .strong(),
    );
    ui.label(format!("A: {}    B: {}", d.a_dtype, d.b_dtype));
    egui::Grid::new("diff-pair-stats")
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            type Figure = fn(&crate::mlx::Stats) -> String;
            for title in ["", "A", "B", "|a - b|"] {
                ui.strong(title);
            }
            ui.end_row();
            let sides = [&d.a.stats, &d.b.stats, &d.error.stats];
            let rows: [(&str, Figure); 6] = [
                ("min", |s| format!("{:.4e}", s.min)),
                ("max", |s| format!("{:.4e}", s.max)),
                ("mean", |s| format!("{:.4e}", s.mean)),
                ("std", |s| format!("{:.4e}", s.std)),
                ("NaN", |s| s.nan.to_string()),
                ("Inf", |s| s.inf.to_string()),
            ];
            for (label, value) in rows {
                ui.label(label);
                for s in sides {
                    ui.monospace(value(s));
                }
                ui.end_row();
            }
        });
    ui.separator();
    ui.label("Histograms overlaid (finite values)");
    let colours = [
        egui::Color32::from_rgba_unmultiplied(90, 150, 240, 150),
        egui::Color32::from_rgba_unmultiplied(240, 150, 60, 150),
    ];
    crate::app::axes::histogram_axes(egui_plot::Plot::new(("diff-histograms", opened)))
        .height(140.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .legend(egui_plot::Legend::default().position(egui_plot::Corner::RightTop))
        .show(ui, |plot| {
            for ((name, h), colour) in [("A", &d.a.histogram), ("B", &d.b.histogram)]
                .into_iter()
                .zip(colours)
            {
                plot.bar_chart(egui_plot::BarChart::new(name, histogram_bars(h)).color(colour));
            }
        });
    if let (Some(mean), largest) = (&d.error.heatmap, d.error.heatmap_max_abs.as_ref()) {
        ui.separator();
        ui.horizontal_wrapped(|ui| {
            ui.label("|a - b| cells:");
            ui.selectable_value(pooling, crate::app::heatmap::Pooling::Mean, "mean");
            ui.add_enabled_ui(largest.is_some(), |ui| {
                ui.selectable_value(pooling, crate::app::heatmap::Pooling::MaxAbs, "max");
            });
        });
        let (map, what, key) = match (*pooling, largest) {
            (crate::app::heatmap::Pooling::MaxAbs, Some(m)) => (m, "the largest", "max"),
            _ => (mean, "the mean", "mean"),
        };
        ui.label(format!(
            "Error |a - b| ({} x {} cells, each {what} of {} x {} values)",
            map.rows, map.cols, map.row_step, map.col_step
        ));
        crate::app::heatmap::heatmap_ui(
            ui,
            map,
            &format!("{opened}:{}#error-{key}", d.name),
            textures,
        );
    }
    if let Some(g) = &d.groups {
        ui.separator();
        ui.label(format!(
            "Per group ({}'s groups of {} along each row): {} groups; relative error median {:.3e}, p99 {:.3e}, worst {:.3e}",
            g.side, g.group_size, g.groups, g.median, g.p99, g.max
        ));
        egui::Grid::new("diff-worst-groups")
            .striped(true)
            .num_columns(4)
            .show(ui, |ui| {
                for title in ["row", "columns", "rel error", "max |a-b|"] {
                    ui.strong(title);
                }
                ui.end_row();
                let size = i64::from(g.group_size);
                for w in &g.worst {
                    ui.monospace(w.row.to_string());
                    ui.monospace(format!("{}..{}", w.group * size, (w.group + 1) * size));
                    ui.monospace(format!("{:.3e}", w.rel_error));
                    ui.monospace(format!("{:.3e}", w.max_abs));
                    ui.end_row();
                }
            });
    }
}

/// A histogram's bars at their own bin centres (two sides' bins differ).
pub(super) fn histogram_bars(h: &crate::mlx::Histogram) -> Vec<egui_plot::Bar> {
    let bins = h.counts.len().max(1);
    #[allow(clippy::cast_precision_loss)]
    let width = (h.max - h.min) / bins as f64;
    h.counts
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            #[allow(clippy::cast_precision_loss)]
            let centre = h.min + (i as f64 + 0.5) * width;
            #[allow(clippy::cast_precision_loss)]
            egui_plot::Bar::new(centre, count as f64).width(width.max(f64::MIN_POSITIVE))
        })
        .collect()
}
