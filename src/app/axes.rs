//! Plot axes a person can read: a few labelled marks on every axis
//! whatever its range (a ±0.036 weight, a ±5.3 tensor, 700 GB of expected
//! peak), memory in the unit its range calls for (KiB, MiB, GiB), never
//! below zero.
//!
//! `egui_plot`'s own spacer labels only the marks it finds room for, which
//! on a short axis or a lopsided range can be one "0"; these spacers give
//! four to six marks, each labelled.

use egui_plot::{GridInput, GridMark, Plot};

/// Bytes in a MiB: the memory plots' data are in MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// A round step (1, 2 or 5 times a power of ten) near `span / ticks`.
#[must_use]
pub(crate) fn nice_step(span: f64, ticks: f64) -> f64 {
    if !(span.is_finite() && span > 0.0 && ticks > 0.0) {
        return 1.0;
    }
    let raw = span / ticks;
    let power = 10_f64.powf(raw.log10().floor());
    let m = raw / power;
    let nice = if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// The smallest round step (1, 2 or 5 times a power of ten) of at least
/// `least`.
#[must_use]
fn round_step_at_least(least: f64) -> f64 {
    if !(least.is_finite() && least > 0.0) {
        return 0.0;
    }
    let power = 10_f64.powf(least.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= least * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

/// `egui_plot` draws a y label only when marks are 20 points apart (fully
/// from 30), an x label from 60 (fully from 80); `base_step_size` is 8
/// points' worth of value. A step at least that far apart keeps every
/// mark labelled on a short or narrow plot (fewer marks there).
fn labelled_step(input: &GridInput, step: f64, points: f64) -> f64 {
    step.max(round_step_at_least(input.base_step_size / 8.0 * points))
}

/// Marks every `step` within `bounds`, none below `floor`.
fn marks(bounds: (f64, f64), step: f64, floor: f64) -> Vec<GridMark> {
    if !(step.is_finite() && step > 0.0) {
        return Vec::new();
    }
    let low = bounds.0.max(floor);
    #[allow(clippy::cast_possible_truncation)]
    let (first, last) = ((low / step).ceil() as i64, (bounds.1 / step).floor() as i64);
    (first..=last)
        .take(200)
        .map(|k| GridMark {
            #[allow(clippy::cast_precision_loss)]
            value: k as f64 * step,
            step_size: step,
        })
        .collect()
}

/// A value axis (a histogram's values, seconds): four to six marks over
/// whatever is in view.
#[must_use]
#[allow(clippy::needless_pass_by_value)] // egui_plot's spacer signature
pub(crate) fn value_grid(input: GridInput) -> Vec<GridMark> {
    let step = labelled_step(
        &input,
        nice_step(input.bounds.1 - input.bounds.0, 5.0),
        80.0,
    );
    marks(input.bounds, step, f64::NEG_INFINITY)
}

/// A count axis (a histogram's bars): marks from zero up, whole numbers.
#[must_use]
#[allow(clippy::needless_pass_by_value)] // egui_plot's spacer signature
pub(crate) fn count_grid(input: GridInput) -> Vec<GridMark> {
    let step = nice_step(input.bounds.1 - input.bounds.0.max(0.0), 4.0).max(1.0);
    let step = labelled_step(&input, step, 30.0);
    marks(input.bounds, step, 0.0)
}

/// A histogram's axes: its values below, round and labelled whatever
/// their range; its counts up the side from zero.
#[must_use]
pub(crate) fn histogram_axes(plot: Plot<'_>) -> Plot<'_> {
    plot.x_grid_spacer(value_grid)
        .x_axis_formatter(|mark, _| value_label(mark.value, mark.step_size))
        .y_grid_spacer(count_grid)
        .y_axis_formatter(|mark, _| count_label(mark.value))
        .include_y(0.0)
}

/// A count as an axis says it: `0`, `750`, `12.5K`, `2M`; nothing below
/// zero.
#[must_use]
pub(crate) fn count_label(value: f64) -> String {
    if value < 0.0 {
        return String::new();
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = value.round() as u64;
    if n < 10_000 {
        n.to_string()
    } else {
        crate::units::short_count(n)
    }
}

/// `value` as a mark spaced `step` reads: as many decimals as the step
/// needs (`0.02`, `1.5`, `300`), in scientific notation for steps below
/// 1e-4 or from 1e6 up.
#[must_use]
pub(crate) fn value_label(value: f64, step: f64) -> String {
    // Within a hundredth of a step of zero is zero (no "-0.00").
    if value.abs() < step.abs() * 1e-2 {
        return "0".to_owned();
    }
    let step = step.abs();
    if !(1e-4..1e6).contains(&step) {
        return format!("{value:.1e}");
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    // A step of 2.5 or 0.25 needs one more.
    #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
    let decimals = if (step * 10_f64.powi(decimals as i32)).fract().abs() > 1e-6 {
        decimals + 1
    } else {
        decimals
    };
    format!("{value:.decimals$}")
}

/// The unit of a memory axis, chosen by the largest value the plot shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemoryUnit {
    /// Under 2 MiB.
    KiB,
    /// Under 2 GiB.
    MiB,
    /// From 2 GiB.
    GiB,
}

impl MemoryUnit {
    /// The unit for an axis up to `top_mib` MiB.
    #[must_use]
    pub(crate) fn for_top(top_mib: f64) -> Self {
        if top_mib >= 2048.0 {
            Self::GiB
        } else if top_mib >= 2.0 || top_mib <= 0.0 {
            Self::MiB
        } else {
            Self::KiB
        }
    }

    /// The unit for an axis up to `top` bytes.
    #[must_use]
    pub(crate) fn for_top_bytes(top: u64) -> Self {
        #[allow(clippy::cast_precision_loss)]
        Self::for_top(top as f64 / MIB)
    }

    /// Its name, for captions and labels.
    #[must_use]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::KiB => "KiB",
            Self::MiB => "MiB",
            Self::GiB => "GiB",
        }
    }

    /// MiB in one of it.
    fn mib(self) -> f64 {
        match self {
            Self::KiB => 1.0 / 1024.0,
            Self::MiB => 1.0,
            Self::GiB => 1024.0,
        }
    }

    /// `plot`'s y axis (its data in MiB) marked in this unit: four or five
    /// round marks from zero up, each labelled ("1.5 GiB"), none below
    /// zero, and its bounds from zero (no margin under it) to `top_mib`
    /// with `headroom` (a fraction) above for a legend.
    #[must_use]
    pub(crate) fn y_axis(self, plot: Plot<'_>, top_mib: f64, headroom: f64) -> Plot<'_> {
        let top = if top_mib.is_finite() && top_mib > 0.0 {
            top_mib
        } else {
            self.mib()
        };
        let name = self.name();
        let mib = self.mib();
        plot.include_y(0.0)
            .include_y(top * (1.0 + headroom.max(0.05)))
            .y_grid_spacer(move |input| {
                let span = (input.bounds.1 - input.bounds.0.max(0.0)) / mib;
                let least = round_step_at_least(input.base_step_size / 8.0 * 30.0 / mib);
                marks(input.bounds, nice_step(span, 4.0).max(least) * mib, 0.0)
            })
            .y_axis_formatter(move |mark, _| {
                if mark.value < 0.0 {
                    String::new()
                } else {
                    format!(
                        "{} {name}",
                        value_label(mark.value / mib, mark.step_size / mib)
                    )
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(bounds: (f64, f64)) -> Vec<String> {
        value_grid(GridInput {
            bounds,
            base_step_size: 0.0,
        })
        .into_iter()
        .map(|m| value_label(m.value, m.step_size))
        .collect()
    }

    #[test]
    fn every_range_gets_at_least_three_labelled_marks() {
        for bounds in [
            (-5.3, 5.3),
            (-0.036, 0.036),
            (0.0, 1e-6),
            (-130.0, 15.0),
            (0.0, 800_000.0),
            (1e9, 1e9 + 3.0),
        ] {
            let shown = labels(bounds);
            assert!(shown.len() >= 3, "{bounds:?}: {shown:?}");
            assert!(shown.iter().all(|l| !l.is_empty()), "{bounds:?}: {shown:?}");
            let distinct: std::collections::HashSet<&String> = shown.iter().collect();
            assert_eq!(distinct.len(), shown.len(), "{bounds:?}: {shown:?}");
        }
        assert_eq!(labels((-5.3, 5.3)), ["-4", "-2", "0", "2", "4"]);
        // On a plot 40 points tall (2.5 a point: 20 in egui_plot's 8-point
        // base) a count axis keeps its marks 30 points apart: 0 and 100.
        let short = count_grid(GridInput {
            bounds: (0.0, 100.0),
            base_step_size: 20.0,
        });
        let values: Vec<f64> = short.iter().map(|m| m.value).collect();
        assert_eq!(values, [0.0, 100.0]);
        assert_eq!(
            labels((-0.036, 0.036)),
            ["-0.03", "-0.02", "-0.01", "0", "0.01", "0.02", "0.03"]
        );
    }

    #[test]
    fn memory_is_marked_in_the_unit_its_range_calls_for_and_never_below_zero() {
        assert_eq!(MemoryUnit::for_top(800_000.0), MemoryUnit::GiB);
        assert_eq!(MemoryUnit::for_top(220.0), MemoryUnit::MiB);
        assert_eq!(MemoryUnit::for_top(1.7), MemoryUnit::KiB);
        assert_eq!(MemoryUnit::for_top_bytes(3 << 30), MemoryUnit::GiB);
        // The spacer in GiB over an axis that (zoomed out) reaches below 0.
        let unit = MemoryUnit::GiB;
        let span = (800_000.0 - 0.0) / unit.mib();
        let step = nice_step(span, 4.0) * unit.mib();
        let shown = marks((-200_000.0, 800_000.0), step, 0.0);
        assert!(shown.len() >= 3, "{shown:?}");
        assert!(shown.iter().all(|m| m.value >= 0.0));
        let text: Vec<String> = shown
            .iter()
            .map(|m| value_label(m.value / unit.mib(), m.step_size / unit.mib()))
            .collect();
        assert_eq!(text, ["0", "200", "400", "600"]);
        assert_eq!(value_label(1.5 * 1024.0 / 1024.0, 0.5), "1.5");
        assert_eq!(value_label(2.5, 2.5), "2.5");
    }
}
