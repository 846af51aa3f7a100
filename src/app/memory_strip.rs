//! The memory strip: process RSS and MLX active/cache over the last minutes,
//! with a marker for each event. The profiler tab draws the whole timeline
//! from the same data.

use egui_plot::{Line, Plot, VLine};

use crate::profile::Timeline;

use super::profiler::{marker_times, sample_line, samples_top_mib};

const MIB: f64 = 1024.0 * 1024.0;

/// The memory strip at the bottom of the window. It keeps no copy of the
/// samples: it draws the app's timeline, the one the profiler draws too.
pub(super) struct MemoryStrip {
    /// How far back the strip looks.
    window_secs: f64,
}

impl Default for MemoryStrip {
    fn default() -> Self {
        // Ten minutes: a walk of a large model fits; hours do not crowd it.
        Self { window_secs: 600.0 }
    }
}

impl MemoryStrip {
    /// Draws the last `window_secs` of `timeline`; `gpu` says that MLX's
    /// figures are device memory, not host memory; `budget` is the
    /// previews' budget, drawn while previews are kept.
    pub(super) fn ui(
        &self,
        ui: &mut egui::Ui,
        timeline: &Timeline,
        gpu: bool,
        budget: Option<u64>,
    ) {
        let Some(last) = timeline.last_sample().copied() else {
            ui.label("Memory: waiting for the first sample");
            return;
        };
        // One line of figures and the last event (wrapped in a narrow
        // window): the plot below keeps the height for labelled marks.
        ui.horizontal_wrapped(|ui| {
            ui.label(format!(
                "Memory (MiB, seconds since start): process RSS {:.1} (anonymous {:.1}), MLX active {:.1}, MLX cache {:.1}",
                last.process.rss_bytes as f64 / MIB,
                last.process.anon_bytes as f64 / MIB,
                last.mlx_or_zero().active_bytes as f64 / MIB,
                last.mlx_or_zero().cache_bytes as f64 / MIB
            ));
            if gpu {
                ui.label("(MLX figures are GPU memory; RSS is host memory only)");
            }
            if let Some(event) = timeline.events().back() {
                ui.label(format!(
                    "| last event at {:.1} s: {}",
                    event.t_secs,
                    crate::units::Shown::new(&event.label())
                ));
            }
        });
        let from = last.at - self.window_secs;
        let samples = timeline.samples();
        let first = samples.partition_point(|s| s.at < from);
        #[allow(clippy::cast_precision_loss)]
        let top_mib = samples_top_mib(samples.range(first..)).max(budget.unwrap_or(0) as f64 / MIB);
        let line = |f| sample_line(samples.range(first..), f);
        let rss = line(|s| s.process.rss_bytes);
        let active = line(|s| s.mlx_or_zero().active_bytes);
        let cache = line(|s| s.mlx_or_zero().cache_bytes);
        let events = timeline.events();
        let first_event = events.partition_point(|e| e.t_secs < from);
        // The legend is one line of coloured names above the plot: a legend
        // inside a plot this short would be taller than the plot.
        {
            use super::widgets::series_colors as c;
            super::widgets::legend_row(
                ui,
                &[
                    ("process RSS", c::RSS),
                    ("MLX active", c::MLX_ACTIVE),
                    ("MLX cache", c::MLX_CACHE),
                    ("events", c::EVENTS),
                    ("- - previews' budget", c::MLX_ACTIVE),
                ],
            );
        }
        // The plot takes what the panel leaves it (never less than 30
        // points): on a short window the strip stays short.
        let unit = super::axes::MemoryUnit::for_top(top_mib);
        unit.y_axis(
            Plot::new("memory-strip")
                .set_margin_fraction(egui::vec2(0.0, 0.0))
                .y_axis_min_width(56.0),
            top_mib,
            0.1,
        )
        .min_size(egui::vec2(64.0, 30.0))
        .height(ui.available_height().max(30.0))
        .allow_scroll(false)
        .show(ui, |plot| {
            use super::widgets::series_colors as c;
            plot.line(Line::new("process RSS", rss).color(c::RSS));
            plot.line(Line::new("MLX active", active).color(c::MLX_ACTIVE));
            plot.line(Line::new("MLX cache", cache).color(c::MLX_CACHE));
            if let Some(budget) = budget {
                plot.hline(
                    egui_plot::HLine::new("previews' budget", budget as f64 / MIB)
                        .color(c::MLX_ACTIVE)
                        .style(egui_plot::LineStyle::dashed_loose())
                        .width(1.0),
                );
            }
            for t in marker_times(events.range(first_event..), 300) {
                plot.vline(VLine::new("events", t).width(1.0).color(c::EVENTS));
            }
        });
    }
}
