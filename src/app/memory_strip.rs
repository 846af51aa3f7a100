//! The memory strip: process RSS and MLX active/cache over the last minutes,
//! with a marker for each materialize and release. The profiler issue grows
//! this into the full timeline.

use egui_plot::{Legend, Line, Plot, PlotPoints, VLine};

use super::WeightscopeApp;

const MIB: f64 = 1024.0 * 1024.0;

impl WeightscopeApp {
    pub(super) fn memory_strip_ui(&mut self, ui: &mut egui::Ui) {
        let Some(last) = self.series.last() else {
            ui.label("Memory: waiting for the first sample");
            return;
        };
        ui.label(format!(
            "Memory (MiB, seconds since start): process RSS {:.1}, MLX active {:.1}, MLX cache {:.1}",
            last.rss_bytes as f64 / MIB,
            last.mlx_active_bytes as f64 / MIB,
            last.mlx_cache_bytes as f64 / MIB
        ));
        if let Some((at, label)) = self.markers.back() {
            ui.label(format!(
                "last event at {:.1} s: {label}",
                at.saturating_duration_since(self.started).as_secs_f64()
            ));
        }
        let start = self.started;
        let secs = |at: std::time::Instant| at.saturating_duration_since(start).as_secs_f64();
        let series = |f: fn(&crate::profile::MemorySample) -> u64| -> PlotPoints<'static> {
            self.series
                .iter()
                .map(|s| [secs(s.at), f(s) as f64 / MIB])
                .collect()
        };
        let rss = series(|s| s.rss_bytes);
        let active = series(|s| s.mlx_active_bytes);
        let cache = series(|s| s.mlx_cache_bytes);
        Plot::new("memory-strip")
            .legend(Legend::default())
            .include_y(0.0)
            .allow_scroll(false)
            .show(ui, |plot| {
                plot.line(Line::new("process RSS", rss));
                plot.line(Line::new("MLX active", active));
                plot.line(Line::new("MLX cache", cache));
                // One legend entry for all markers; the newest is named above.
                for (at, _) in &self.markers {
                    plot.vline(VLine::new("events", secs(*at)).width(1.0));
                }
            });
    }
}
