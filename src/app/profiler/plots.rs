//! The profiler's two plots on one time axis: memory over time (samples,
//! events, the expected peaks, overlaid traces) and the bytes each shard
//! holds, from the Weights core's residency events.

use egui_plot::{HLine, Legend, Line, Plot, PlotPoints, VLine};

use crate::memory::{ExpectedPeaks, MarkKind, Policy, Sample};
use crate::profile::{self, Trace, TraceEvent};

use crate::mlx::DeviceInfo;

use super::{Below, ProfilerInputs, ProfilerPanel, shown};

const MIB: f64 = 1024.0 * 1024.0;

/// Below this height (points) the timeline's legend goes above the plot.
const COMPACT_PLOT_HEIGHT: f32 = 400.0;

/// The x margin of both plots (a fraction of the span), the same so that
/// their times line up.
const X_MARGIN: f32 = 0.02;

/// The y axes' width in both plots (room for `1500 MiB`), the same so that
/// their plot areas start at one x.
const Y_AXIS_WIDTH: f32 = 64.0;

/// Shards with their own band in the residency plot; the rest share one.
const BANDS: usize = 24;
/// Points drawn per line at most (min/max per bucket keeps the peaks).
const PLOT_POINTS: usize = 1500;

/// The timeline's plot, before its height: linked in time with the
/// residency plot and over `x_span`, its legend inside unless `compact`.
fn timeline_plot(compact: bool, x_span: Option<(f64, f64)>) -> Plot<'static> {
    let plot = Plot::new("profiler-timeline")
        .link_axis(egui::Id::unique("profiler-time"), [true, false])
        .y_axis_min_width(Y_AXIS_WIDTH);
    let plot = match x_span {
        Some((from, to)) => plot.include_x(from).include_x(to),
        None => plot,
    };
    // No margin under zero (memory is never negative): the room above the
    // curves is the memory axis's headroom.
    let plot = plot.set_margin_fraction(egui::vec2(X_MARGIN, 0.0));
    let plot = time_axis(plot);
    if compact {
        plot
    } else {
        // Room above the curves for the legend, which is see-through.
        // Top left: walks and jobs start low and peak later, to the right.
        plot.legend(
            Legend::default()
                .position(egui_plot::Corner::LeftTop)
                .background_alpha(0.6),
        )
    }
}

/// The seconds axis shared by the profiler's plots: round marks, each
/// labelled.
fn time_axis(plot: Plot<'_>) -> Plot<'_> {
    plot.x_grid_spacer(crate::app::axes::value_grid)
        .x_axis_formatter(|mark, _| crate::app::axes::value_label(mark.value, mark.step_size))
}

/// The highest of the figures the timeline draws for `samples`, in MiB.
pub(in crate::app) fn samples_top_mib<'a>(samples: impl Iterator<Item = &'a Sample>) -> f64 {
    let top = samples
        .map(|s| {
            let mlx = s.mlx_or_zero();
            s.process
                .rss_bytes
                .max(s.process.anon_bytes)
                .max(mlx.active_bytes)
                .max(mlx.cache_bytes)
        })
        .max()
        .unwrap_or(0);
    top as f64 / MIB
}

/// The first and last time of `samples` (in time order).
fn time_span<'a>(mut samples: impl DoubleEndedIterator<Item = &'a Sample>) -> Option<(f64, f64)> {
    let first = samples.next()?.at;
    let last = samples.next_back().map_or(first, |s| s.at);
    Some((first, last))
}

/// The span covering both (either may be missing).
fn span_of(a: Option<(f64, f64)>, b: Option<(f64, f64)>) -> Option<(f64, f64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    }
}

/// The timeline's legend as a row above it (see `COMPACT_PLOT_HEIGHT`).
fn timeline_legend_row(
    ui: &mut egui::Ui,
    mlx_active: &str,
    expected: bool,
    overlays: &[(String, egui::Color32)],
) {
    use crate::app::widgets::series_colors as c;
    let mut items = vec![
        ("process RSS (host)", c::RSS),
        ("RSS anonymous", c::RSS_ANON),
        (mlx_active, c::MLX_ACTIVE),
        ("MLX cache", c::MLX_CACHE),
    ];
    if expected {
        for (p, color) in Policy::ALL.into_iter().zip(c::EXPECTED) {
            items.push((expected_label(p), color));
        }
    }
    for (name, colour) in overlays {
        items.push((name.as_str(), *colour));
    }
    crate::app::widgets::legend_row(ui, &items);
}

impl ProfilerPanel {
    /// Where the session's plot starts: a running walk's start (the walk
    /// shows itself as it runs), else the session's.
    fn session_from(&self) -> f64 {
        self.running
            .as_ref()
            .map_or(f64::NEG_INFINITY, |r| r.start_secs)
    }

    /// The overlays drawn over what is shown: walks over a walk, recorded
    /// jobs over a recorded job (an earlier walk's overlay is not drawn
    /// over an unrelated job, nor sets its axes), all of them over the
    /// session; then the recording compared with the shown one.
    pub(super) fn drawn_overlays(&self) -> impl Iterator<Item = &Trace> {
        let shown_job = self.shown().map(|(t, _)| t.job.is_some());
        self.overlays
            .iter()
            .filter(move |t| shown_job.is_none_or(|job| t.job.is_some() == job))
            .chain(self.compared.as_ref().map(|(_, t)| t))
    }

    /// The overlays' legend entries, each in its colour.
    fn overlay_legend(&self) -> Vec<(String, egui::Color32)> {
        let palette = crate::app::widgets::series_colors::OVERLAYS;
        self.drawn_overlays()
            .enumerate()
            .map(|(i, t)| {
                let name = format!("- - {}", super::overlay_name(t));
                (name, palette[i % palette.len()])
            })
            .collect()
    }

    /// The session's samples from [`Self::session_from`].
    fn session_samples<'a>(
        &self,
        inputs: &'a ProfilerInputs<'_>,
    ) -> std::collections::vec_deque::Iter<'a, Sample> {
        let samples = inputs.timeline.samples();
        let first = samples.partition_point(|s| s.at < self.session_from());
        samples.range(first..)
    }

    /// The expected peaks to draw over `shown` (a run's trace, else the
    /// session), and the highest worth drawing. A recorded job is drawn to
    /// its own scale: the open checkpoint's predictions are not its, and
    /// its own checkpoint's are drawn only within twice what it reached.
    fn expected_lines(&self, shown: Option<&Trace>) -> (Option<ExpectedPeaks>, Option<u64>) {
        let job = self.recording.is_some() || shown.is_some_and(|t| t.job.is_some());
        let expected = shown
            .and_then(|t| t.expected)
            .or_else(|| if job { None } else { self.expected_now() });
        let ceiling = match shown {
            Some(t) if job => Some(2 * t.peak_rss_bytes().max(t.peak_mlx_active_bytes())),
            _ => None,
        };
        (expected, ceiling)
    }

    /// The highest figure the timeline draws, in MiB: the samples shown,
    /// the overlays, the expected peaks drawn.
    fn timeline_top_mib(
        &self,
        walk: Option<&Trace>,
        overlays_only: bool,
        inputs: &ProfilerInputs<'_>,
        expected: Option<ExpectedPeaks>,
        ceiling: Option<u64>,
    ) -> f64 {
        let mut top = match walk {
            Some(trace) => samples_top_mib(trace.samples.iter()),
            None if overlays_only => 0.0,
            None => samples_top_mib(self.session_samples(inputs)),
        };
        for trace in self.drawn_overlays() {
            top = top.max(samples_top_mib(trace.samples.iter()));
        }
        if let Some(expected) = expected {
            for p in Policy::ALL {
                let bytes = p.expected(&expected);
                if ceiling.is_none_or(|c| bytes <= c) {
                    top = top.max(bytes as f64 / MIB);
                }
            }
        }
        top
    }
}

/// The events' markers (at most 400), a killed job's end, the selected
/// moment.
fn draw_markers(
    plot: &mut egui_plot::PlotUi<'_>,
    (walk, from): (Option<&Trace>, f64),
    overlays_only: bool,
    inputs: &ProfilerInputs<'_>,
    selected: Option<f64>,
) {
    let marked: Vec<f64> = match walk {
        Some(trace) => marker_times(trace.events.iter(), 400).collect(),
        None if overlays_only => Vec::new(),
        None => {
            let events = inputs.timeline.events();
            let first = events.partition_point(|e| e.t_secs < from);
            marker_times(events.range(first..), 400).collect()
        }
    };
    for t in marked {
        plot.vline(
            // Unnamed: out of the legend (said in the caption).
            VLine::new("", t)
                .width(0.5)
                .color(crate::app::widgets::series_colors::EVENTS),
        );
    }
    // A recorded job ended by a signal: the moment, in the
    // error colour, named in the legend ("killed: signal 9").
    if let Some(end) = walk.and_then(killed_at) {
        plot.vline(
            VLine::new(format!("ended by {}", end.target), end.t_secs)
                .width(2.0)
                .color(egui::Color32::from_rgb(235, 60, 60)),
        );
    }
    if let Some(t) = selected {
        plot.vline(VLine::new("", t).width(2.0));
    }
}

/// The end of a recorded job that a signal ended (its `job-end` event).
fn killed_at(trace: &Trace) -> Option<&TraceEvent> {
    trace
        .events
        .iter()
        .rev()
        .find(|e| e.kind == MarkKind::JobEnd)
        .filter(|e| e.target.starts_with("signal"))
}

/// The legend name of a policy's expected peak.
fn expected_label(policy: Policy) -> &'static str {
    match policy {
        Policy::Retain => "expected retain",
        Policy::ReleaseTensor => "expected release-tensor",
        Policy::ReleaseShard => "expected release-shard",
    }
}

/// Min/max per bucket of `(t, value)` points, so that peaks survive.
fn decimate(points: impl ExactSizeIterator<Item = [f64; 2]>) -> Vec<[f64; 2]> {
    let n = points.len();
    if n <= PLOT_POINTS {
        return points.collect();
    }
    let per_bucket = n.div_ceil(PLOT_POINTS / 2);
    let mut out = Vec::with_capacity(PLOT_POINTS + 2);
    let mut bucket: Vec<[f64; 2]> = Vec::with_capacity(per_bucket);
    let flush = |bucket: &mut Vec<[f64; 2]>, out: &mut Vec<[f64; 2]>| {
        let lo = bucket.iter().copied().min_by(|a, b| a[1].total_cmp(&b[1]));
        let hi = bucket.iter().copied().max_by(|a, b| a[1].total_cmp(&b[1]));
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if lo[0] <= hi[0] {
                out.extend([lo, hi]);
            } else {
                out.extend([hi, lo]);
            }
        }
        bucket.clear();
    };
    for point in points {
        bucket.push(point);
        if bucket.len() == per_bucket {
            flush(&mut bucket, &mut out);
        }
    }
    flush(&mut bucket, &mut out);
    out
}

/// A line of one sample field, in MiB, decimated.
pub(in crate::app) fn sample_line<'a>(
    samples: impl ExactSizeIterator<Item = &'a Sample>,
    field: fn(&Sample) -> u64,
) -> PlotPoints<'static> {
    PlotPoints::from(decimate(samples.map(|s| [s.at, field(s) as f64 / MIB])))
}

/// An MLX series as its segments: broken where a sample has no MLX
/// figures (the probe's were stale, or not there yet), so a gap is drawn
/// as a gap, never as a flat line or a fall to zero. A trace with no MLX
/// figures at all is one line of zeros, as before.
pub(in crate::app) fn mlx_segments<'a>(
    samples: impl ExactSizeIterator<Item = &'a Sample> + Clone,
    field: fn(&Sample) -> u64,
) -> Vec<PlotPoints<'static>> {
    if !samples.clone().any(|s| s.mlx.is_some()) {
        return vec![sample_line(samples, field)];
    }
    let mut segments = Vec::new();
    let mut points = Vec::new();
    for s in samples {
        if s.mlx.is_some() {
            points.push([s.at, field(s) as f64 / MIB]);
        } else if !points.is_empty() {
            segments.push(PlotPoints::from(decimate(
                std::mem::take(&mut points).into_iter(),
            )));
        }
    }
    if !points.is_empty() {
        segments.push(PlotPoints::from(decimate(points.into_iter())));
    }
    segments
}

/// The times of the newest `limit` events worth a marker (walk steps and
/// tensor releases are too many; the table lists them), newest first.
pub(in crate::app) fn marker_times<'a>(
    events: impl DoubleEndedIterator<Item = &'a TraceEvent>,
    limit: usize,
) -> impl Iterator<Item = f64> {
    events
        .rev()
        .filter(|e| !matches!(e.kind, MarkKind::WalkStep | MarkKind::Release))
        .map(|e| e.t_secs)
        .take(limit)
}

/// Saved traces over the walk view: MLX active dashed, RSS dotted.
fn draw_overlays<'a>(plot: &mut egui_plot::PlotUi<'_>, overlays: impl Iterator<Item = &'a Trace>) {
    // Each overlay keeps its colour, by its position in the list.
    let palette = crate::app::widgets::series_colors::OVERLAYS;
    for (i, trace) in overlays.enumerate() {
        let color = palette[i % palette.len()];
        let name = super::overlay_name(trace);
        plot.line(
            Line::new(
                format!("{name}: MLX active"),
                sample_line(trace.samples.iter(), |s| s.mlx_or_zero().active_bytes),
            )
            .color(color)
            .style(egui_plot::LineStyle::dashed_loose()),
        );
        plot.line(
            Line::new(
                format!("{name}: RSS"),
                sample_line(trace.samples.iter(), |s| s.process.rss_bytes),
            )
            .color(color)
            .style(egui_plot::LineStyle::dotted_loose()),
        );
    }
}

impl ProfilerPanel {
    /// The memory timeline and the residency plot below it, in `room`
    /// points of height (or more, scrolled, where that is too little).
    pub(super) fn timeline_ui(
        &mut self,
        ui: &mut egui::Ui,
        inputs: &ProfilerInputs<'_>,
        room: f32,
    ) {
        // Before anything borrows what is shown: the plots' span needs it.
        self.update_residency(inputs);
        // A recording as it runs, the last run on its own clock, or the
        // whole session: borrowed, never copied (the session holds up to
        // hours of samples).
        let shown = self.shown();
        let walk_view = shown.is_some();
        // Traces overlaid before any run of this session: on their own clock,
        // not over the session's (which started when the app did).
        let overlays_only = self.walk_view && !walk_view && !self.overlays.is_empty();
        let offset = shown.map_or(0.0, |(_, start)| start);
        let walk = shown.map(|(trace, _)| trace);
        let selected = self.selected_secs.map(|t| t - offset);
        let (expected, ceiling) = self.expected_lines(walk);
        let policy = self.policy;
        let place = inputs
            .device
            .as_ref()
            .map_or("unknown device", DeviceInfo::mlx_memory_place);
        // The plot below keeps room for its caption and 120 points (with
        // the job's output shown above, 62 % would push its axis out of
        // view at 1400x900); in a small window the column scrolls.
        let height = (room * 0.62).min(room - 250.0).max(160.0);
        // One unit for the axis, chosen by the highest figure drawn.
        let top = self.timeline_top_mib(walk, overlays_only, inputs, expected, ceiling);
        let unit = crate::app::axes::MemoryUnit::for_top(top);
        let mlx_active = format!("MLX active ({place})");
        let unit_name = unit.name();
        ui.label(if self.recording.is_some() {
            format!("Memory ({unit_name}) of the recorded job over seconds since it started (live); grey lines: events")
        } else if walk_view {
            format!("Memory ({unit_name}) over seconds since the walk or job started; dashed: overlaid traces; grey lines: events; click to select a moment")
        } else if overlays_only {
            format!("Memory ({unit_name}) of the overlaid traces (dashed) over seconds since each started; no walk or job has run in this session")
        } else {
            format!("Memory ({unit_name}) over seconds since the app started; grey lines: events; click to select a moment")
        });
        // A legend inside a short plot (a small window) would cover the
        // curves: then it is one line of names above the plot instead.
        let compact = height < COMPACT_PLOT_HEIGHT;
        if compact {
            let overlays = self.overlay_legend();
            timeline_legend_row(ui, &mlx_active, expected.is_some(), &overlays);
        }
        let from = self.session_from();
        // Both plots over the same times (their x axes are linked, but each
        // would fit its own data until the user drags one): the samples'
        // span and the residency changes'.
        // Nothing yet on the clock: its first ten seconds (else the plot
        // would size time by the expected peaks' lines).
        let x_span = span_of(
            match walk {
                Some(trace) => time_span(trace.samples.iter()),
                None if overlays_only => None,
                None => time_span(self.session_samples(inputs)),
            },
            self.residency
                .as_ref()
                .and_then(|(_, r)| Some((r.changes.first()?.t_secs, r.changes.last()?.t_secs))),
        );
        let x_span = x_span.or(Some((0.0, 10.0)));
        let headroom = if compact { 0.05 } else { 0.5 };
        let response = unit
            .y_axis(timeline_plot(compact, x_span), top, headroom)
            .height(height)
            .allow_scroll(false)
            .show(ui, |plot| {
                use crate::app::widgets::series_colors as c;
                let line = |f: fn(&Sample) -> u64| match walk {
                    Some(trace) => sample_line(trace.samples.iter(), f),
                    None if overlays_only => sample_line([].iter(), f),
                    None => sample_line(self.session_samples(inputs), f),
                };
                plot.line(
                    Line::new("process RSS (host)", line(|s| s.process.rss_bytes)).color(c::RSS),
                );
                plot.line(
                    Line::new("RSS anonymous", line(|s| s.process.anon_bytes)).color(c::RSS_ANON),
                );
                let segments = |f: fn(&Sample) -> u64| match walk {
                    Some(trace) => mlx_segments(trace.samples.iter(), f),
                    None if overlays_only => Vec::new(),
                    None => mlx_segments(self.session_samples(inputs), f),
                };
                for points in segments(|s| s.mlx_or_zero().active_bytes) {
                    plot.line(Line::new(mlx_active.as_str(), points).color(c::MLX_ACTIVE));
                }
                for points in segments(|s| s.mlx_or_zero().cache_bytes) {
                    plot.line(Line::new("MLX cache", points).color(c::MLX_CACHE));
                }
                draw_overlays(plot, self.drawn_overlays());
                if let Some(expected) = expected {
                    for (p, color) in Policy::ALL.into_iter().zip(c::EXPECTED) {
                        if ceiling.is_some_and(|top| p.expected(&expected) > top) {
                            continue;
                        }
                        let width = if p == policy { 2.0 } else { 0.8 };
                        plot.hline(
                            HLine::new(expected_label(p), p.expected(&expected) as f64 / MIB)
                                .width(width)
                                .color(color),
                        );
                    }
                }
                draw_markers(plot, (walk, from), overlays_only, inputs, selected);
                plot.pointer_coordinate()
            });
        if let (true, Some(point)) = (response.response.clicked(), response.inner) {
            self.selected_secs = Some(point.x + offset);
        }
        let used = ui.min_rect().height();
        self.below_ui(ui, inputs, room - used, x_span);
    }

    /// Below the timeline: the shard files' bands, or the memory by kind.
    fn below_ui(
        &mut self,
        ui: &mut egui::Ui,
        inputs: &ProfilerInputs<'_>,
        room: f32,
        x_span: Option<(f64, f64)>,
    ) {
        let top = ui.cursor().top();
        ui.horizontal(|ui| {
            ui.label("Below:");
            ui.selectable_value(&mut self.below, Below::Files, "shard files")
                .on_hover_text("Each shard file as a band: its bytes while held");
            ui.selectable_value(&mut self.below, Below::Kinds, "memory by kind")
                .on_hover_text("Resident memory stacked by kind: MLX active, MLX cache, host memory that is not MLX's (anonymous less MLX's), file-backed and shared");
            if !self.merged_lanes.is_empty() {
                ui.selectable_value(&mut self.below, Below::Ranks, "ranks")
                    .on_hover_text("Each rank's memory as a band, stacked on one clock: the top is the job's total");
            }
        });
        let room = room - (ui.cursor().top() - top);
        match self.below {
            Below::Files => self.residency_plot_ui(ui, room, x_span),
            Below::Kinds => match self.shown() {
                Some((trace, _)) => kinds_plot_ui(ui, trace.samples.iter(), room, x_span),
                None => kinds_plot_ui(ui, self.session_samples(inputs), room, x_span),
            },
            Below::Ranks => {
                // Each rank in its colour above: an overlay's, or the run's
                // own MLX active colour for the rank shown as the run.
                let palette = crate::app::widgets::series_colors::OVERLAYS;
                let colours: Vec<egui::Color32> = self
                    .merged_lanes
                    .iter()
                    .map(|lane| {
                        self.overlays
                            .iter()
                            .position(|o| o.label == lane.label)
                            .map_or(crate::app::widgets::series_colors::MLX_ACTIVE, |i| {
                                palette[i % palette.len()]
                            })
                    })
                    .collect();
                ranks_plot_ui(ui, &self.merged_lanes, &colours, room, x_span);
            }
        }
    }

    /// The residency steps of what is shown, computed again only when
    /// that changed.
    fn update_residency(&mut self, inputs: &ProfilerInputs<'_>) {
        // Keyed by what is shown (session, last run, live recording), its
        // event count, and the run it belongs to.
        let shown = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view)
            .map(|(trace, _)| trace);
        let mode = match (&self.recording, shown) {
            (Some(_), _) => 2,
            (None, Some(_)) => 1,
            (None, None) => 0,
        };
        let key = (
            inputs.timeline.events().len(),
            shown.map_or(0, |t| t.events.len()),
            mode,
            self.runs,
        );
        if self.residency.as_ref().is_none_or(|(k, _)| *k != key) {
            let computed = match shown {
                Some(trace) => trace.residency_steps(),
                None => profile::residency_steps(inputs.timeline.events()),
            };
            self.residency = Some((key, computed));
        }
    }

    /// The residency plot with its caption, in `room` points of height (the
    /// plot 120 at least), over the times `x_span` (the timeline's). The
    /// residency is the one [`Self::timeline_ui`] brought up to date.
    fn residency_plot_ui(&mut self, ui: &mut egui::Ui, room: f32, x_span: Option<(f64, f64)>) {
        let top = ui.cursor().top();
        let shown = shown(self.recording.as_ref(), self.last.as_ref(), self.walk_view)
            .map(|(trace, _)| trace);
        let Some((_, residency)) = &self.residency else {
            return;
        };
        let recorded = shown.is_some_and(|t| t.job.is_some());
        let shards = &residency.shards;
        let picked = residency.sampled(600);
        let most = picked
            .iter()
            .map(|(_, bytes)| bytes.iter().sum::<u64>())
            .max()
            .unwrap_or(0);
        let unit = crate::app::axes::MemoryUnit::for_top_bytes(most);
        let unit_name = unit.name();
        ui.label(if recorded {
            format!(
                "Shard files the job held open ({unit_name}): one band a file, its size while open"
            )
        } else {
            format!("Resident bytes per shard ({unit_name}), by the Weights core's bookkeeping")
        });
        // Each change drawn as a riser a hair before it, so bands are steps.
        let span = picked.last().map_or(0.0, |l| l.0) - picked.first().map_or(0.0, |f| f.0);
        let riser = (span * 1e-4).max(1e-9);
        let mut xs = Vec::with_capacity(picked.len() * 2);
        let mut rows: Vec<&[u64]> = Vec::with_capacity(picked.len() * 2);
        for (i, (t, bytes)) in picked.iter().enumerate() {
            if i > 0 {
                xs.push(t - riser);
                rows.push(&picked[i - 1].1);
            }
            xs.push(*t);
            rows.push(bytes);
        }
        // The first BANDS shards get their own band; the rest share one.
        let bands = shards.len().min(BANDS + 1);
        // What the caption took comes out of the plot's height.
        let height = (room - (ui.cursor().top() - top)).max(120.0);
        let plot = Plot::new("profiler-residency")
            .link_axis(egui::Id::unique("profiler-time"), [true, false])
            .y_axis_min_width(Y_AXIS_WIDTH)
            .set_margin_fraction(egui::vec2(X_MARGIN, 0.0));
        let plot = unit.y_axis(time_axis(plot), most as f64 / MIB, 0.05);
        let plot = match x_span {
            Some((from, to)) => plot.include_x(from).include_x(to),
            None => plot,
        };
        plot.height(height).allow_scroll(false).show(ui, |plot| {
            let mut lower = vec![0.0; xs.len()];
            for k in 0..bands {
                let (name, range) = if k < BANDS || shards.len() == BANDS + 1 {
                    (shards[k].clone(), k..k + 1)
                } else {
                    (
                        format!("{} more shards", shards.len() - BANDS),
                        k..shards.len(),
                    )
                };
                let upper: Vec<f64> = rows
                    .iter()
                    .zip(&lower)
                    .map(|(row, low)| {
                        let band: u64 = row.get(range.clone()).map_or(0, |b| b.iter().sum());
                        low + band as f64 / MIB
                    })
                    .collect();
                let hue = (k as f32 * 0.618_034).fract();
                let color = egui::ecolor::Hsva::new(hue, 0.65, 0.8, 0.85);
                plot.add(
                    egui_plot::FilledArea::new(name, &xs, &lower, &upper)
                        .fill_color(egui::Color32::from(color)),
                );
                lower = upper;
            }
        });
    }
}

/// A band of the memory-by-kind plot: its name, its figure, its colour.
type Band = (
    &'static str,
    fn(&crate::memory::MemoryKinds) -> u64,
    egui::Color32,
);

/// A plot of stacked bands below the timeline: on its time axis (linked
/// to it), over `x_span`, the memory axis in `unit` up to `top` bytes,
/// `room` points high (120 at least).
fn stacked_plot(
    id: &'static str,
    unit: crate::app::axes::MemoryUnit,
    top: u64,
    x_span: Option<(f64, f64)>,
    room: f32,
) -> Plot<'static> {
    let plot = Plot::new(id)
        .link_axis(egui::Id::unique("profiler-time"), [true, false])
        .y_axis_min_width(Y_AXIS_WIDTH)
        .set_margin_fraction(egui::vec2(X_MARGIN, 0.0))
        .legend(Legend::default().position(egui_plot::Corner::LeftTop));
    let plot = unit.y_axis(time_axis(plot), top as f64 / MIB, 0.35);
    let plot = match x_span {
        Some((from, to)) => plot.include_x(from).include_x(to),
        None => plot,
    };
    plot.height(room.max(120.0)).allow_scroll(false)
}

/// `trace`'s memory at `at` (its last sample at or before; nothing before
/// its first or after its last), MLX active where its probe reported,
/// else RSS (as `profile::analysis::hosts` counts a lane).
fn memory_at(trace: &Trace, mlx: bool, at: f64) -> u64 {
    let samples = &trace.samples;
    if samples.last().is_none_or(|last| at > last.at) {
        return 0;
    }
    let i = samples.partition_point(|s| s.at <= at);
    i.checked_sub(1).map_or(0, |i| {
        crate::profile::analysis::hosts::memory_of(&samples[i], mlx)
    })
}

/// Each rank's memory as a band, stacked on the merged clock: the top is
/// the job's total at each moment.
fn ranks_plot_ui(
    ui: &mut egui::Ui,
    lanes: &[Trace],
    colours: &[egui::Color32],
    room: f32,
    x_span: Option<(f64, f64)>,
) {
    let mlx: Vec<bool> = lanes
        .iter()
        .map(|t| crate::profile::analysis::hosts::has_mlx_figures(&t.samples))
        .collect();
    // Every lane's sample times, at most 2,000 of them.
    let mut xs: Vec<f64> = lanes
        .iter()
        .flat_map(|t| t.samples.iter().map(|s| s.at))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let step = xs.len().div_ceil(2000).max(1);
    let xs: Vec<f64> = xs.into_iter().step_by(step).collect();
    let values: Vec<Vec<u64>> = lanes
        .iter()
        .zip(&mlx)
        .map(|(t, &m)| xs.iter().map(|&x| memory_at(t, m, x)).collect())
        .collect();
    let top = (0..xs.len())
        .map(|i| values.iter().map(|v| v[i]).sum::<u64>())
        .max()
        .unwrap_or(0);
    let unit = crate::app::axes::MemoryUnit::for_top_bytes(top);
    let before = ui.cursor().top();
    ui.label(format!(
        "Each rank's memory ({}), stacked on one clock (MLX active where the probe reported it, else RSS); the top is the job's total.",
        unit.name()
    ));
    // The caption's rows come out of the plot's room.
    let room = room - (ui.cursor().top() - before);
    stacked_plot("profiler-ranks", unit, top, x_span, room).show(ui, |plot| {
        let mut lower = vec![0.0; xs.len()];
        for ((trace, band), colour) in lanes.iter().zip(&values).zip(colours) {
            let upper: Vec<f64> = band
                .iter()
                .zip(&lower)
                .map(|(v, low)| low + *v as f64 / MIB)
                .collect();
            plot.add(
                egui_plot::FilledArea::new(
                    crate::units::Shown::new(&trace.label).into_string(),
                    &xs,
                    &lower,
                    &upper,
                )
                .fill_color(colour.gamma_multiply(0.85)),
            );
            lower = upper;
        }
    });
}

/// Resident memory stacked by kind over time (each sample's
/// [`Sample::kinds`]): MLX active at the bottom, then MLX's cache, host
/// memory that is not MLX's, and file-backed memory; its top is RSS.
fn kinds_plot_ui<'a>(
    ui: &mut egui::Ui,
    samples: impl ExactSizeIterator<Item = &'a Sample>,
    room: f32,
    x_span: Option<(f64, f64)>,
) {
    use crate::app::widgets::series_colors as c;
    // At most 2,000 points a band: every n-th sample.
    let step = samples.len().div_ceil(2000).max(1);
    let picked: Vec<&Sample> = samples.step_by(step).collect();
    let xs: Vec<f64> = picked.iter().map(|s| s.at).collect();
    let kinds: Vec<crate::memory::MemoryKinds> = picked
        .iter()
        .map(|s| {
            s.kinds().unwrap_or(crate::memory::MemoryKinds {
                host_not_mlx: s.process.anon_bytes,
                file_backed: s.process.file_bytes,
                ..crate::memory::MemoryKinds::default()
            })
        })
        .collect();
    let top = kinds
        .iter()
        .map(|k| k.mlx_active + k.mlx_cache + k.host_not_mlx + k.file_backed)
        .max()
        .unwrap_or(0);
    let unit = crate::app::axes::MemoryUnit::for_top_bytes(top);
    let before = ui.cursor().top();
    ui.label(format!("Resident memory by kind ({}), stacked; its top is RSS. The host band is the anonymous memory less MLX's, as on MLX's CPU backend, where MLX's arrays are anonymous memory.", unit.name()));
    // The caption's rows come out of the plot's room.
    let room = room - (ui.cursor().top() - before);
    let bands: [Band; 4] = [
        ("MLX active", |k| k.mlx_active, c::MLX_ACTIVE),
        ("MLX cache", |k| k.mlx_cache, c::MLX_CACHE),
        ("host memory not MLX's", |k| k.host_not_mlx, c::RSS_ANON),
        ("file-backed and shared", |k| k.file_backed, c::EVENTS),
    ];
    stacked_plot("profiler-kinds", unit, top, x_span, room).show(ui, |plot| {
        let mut lower = vec![0.0; xs.len()];
        for (name, figure, color) in bands {
            let upper: Vec<f64> = kinds
                .iter()
                .zip(&lower)
                .map(|(k, low)| low + figure(k) as f64 / MIB)
                .collect();
            plot.add(
                egui_plot::FilledArea::new(name, &xs, &lower, &upper)
                    .fill_color(color.gamma_multiply(0.85)),
            );
            lower = upper;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::decimate;

    #[test]
    fn decimation_keeps_the_peak() {
        let points: Vec<[f64; 2]> = (0..100_000)
            .map(|i| [f64::from(i), if i == 54_321 { 99.0 } else { 1.0 }])
            .collect();
        let out = decimate(points.iter().copied());
        assert!(out.len() <= super::PLOT_POINTS + 2);
        assert!(
            out.iter()
                .any(|p| (p[1] - 99.0).abs() < 1e-9 && (p[0] - 54_321.0).abs() < 1e-9)
        );
        assert!(out.windows(2).all(|w| w[0][0] <= w[1][0]), "in time order");
    }

    use super::{MarkKind, Trace, TraceEvent, killed_at};

    fn ended(target: &str) -> Trace {
        let mut trace = Trace::new("job");
        trace
            .events
            .push(TraceEvent::bare(1.5, MarkKind::JobEnd, target.into()));
        trace
    }

    #[test]
    fn a_job_ended_by_a_signal_is_marked_and_one_that_exited_is_not() {
        let killed = ended("signal 9 (SIGKILL)");
        assert_eq!(killed_at(&killed).map(|e| e.t_secs), Some(1.5));
        assert!(killed_at(&ended("exit 0")).is_none());
        assert!(killed_at(&Trace::new("walk")).is_none());
    }
}
