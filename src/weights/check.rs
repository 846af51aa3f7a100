//! `weightscope check --values`: every tensor's values read in a
//! release-shard walk (bounded memory, progress, cancel), looking for what
//! headers cannot show: NaN and Inf, all-zero tensors, zero or non-finite
//! quantization scales. The findings are the checkpoint layer's type.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::checkpoint::check::{Finding, finding};
use crate::mlx::{self, ValueCounts};

use super::diff::{release_when_done, remaining};
use super::{Native, Weights};

/// Progress of a value scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanProgress {
    /// Tensors read.
    pub done: usize,
    /// Tensors to read.
    pub total: usize,
    /// The tensor just read.
    pub name: String,
}

/// What a value scan found.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueScan {
    /// Findings, in walk order.
    pub findings: Vec<Finding>,
    /// Tensors read.
    pub scanned: usize,
    /// Tensors to read.
    pub total: usize,
    /// Whether it was cancelled before the end.
    pub cancelled: bool,
    /// MLX's peak active memory over the scan.
    pub peak_mlx_active_bytes: u64,
    /// Largest shard plus one band's decoding temporaries: the bound the
    /// shard releases and the bands keep the peak within.
    pub bound_bytes: u64,
}

/// Reads every parameter tensor of `weights` (with its scales) in walk
/// order, releasing each shard as soon as nothing left needs it; `cancel` is
/// checked before each tensor.
pub fn scan_values<N: Native>(
    weights: &mut Weights<N>,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(ScanProgress),
) -> ValueScan {
    let names = weights.parameter_names();
    let mut left = remaining(weights, &names);
    let largest_shard = weights
        .checkpoint()
        .shards()
        .iter()
        .map(|s| s.data_bytes)
        .max()
        .unwrap_or(0);
    weights.release_all();
    let _ = mlx::clear_cache();
    // Without a reset MLX's peak is the process's, not this job's: then
    // the highest MLX active seen after each tensor is reported instead.
    let peak_reset = mlx::reset_peak().is_ok();
    let mut highest_active = 0u64;
    let mut scan = ValueScan {
        findings: Vec::new(),
        scanned: 0,
        total: names.len(),
        cancelled: false,
        peak_mlx_active_bytes: 0,
        bound_bytes: largest_shard + super::decode::band_bytes_bound(),
    };
    for name in &names {
        if cancel.load(Ordering::Relaxed) {
            scan.cancelled = true;
            break;
        }
        if let Err(err) = scan_one(weights, name, &mut scan.findings) {
            scan.findings.push(located(
                weights,
                name,
                finding(
                    "values.unreadable",
                    format!("`{name}` could not be read: {err}"),
                ),
            ));
        }
        weights.release(name);
        release_when_done(weights, &mut left, name);
        scan.scanned += 1;
        highest_active = highest_active.max(mlx::memory().map_or(0, |m| m.active_bytes));
        progress(ScanProgress {
            done: scan.scanned,
            total: scan.total,
            name: name.clone(),
        });
    }
    weights.release_all();
    scan.peak_mlx_active_bytes = match mlx::memory() {
        Ok(m) if peak_reset => m.peak_bytes,
        _ => highest_active,
    };
    scan
}

fn located<N: Native>(weights: &Weights<N>, name: &str, mut f: Finding) -> Finding {
    if let Some(info) = weights.info(name) {
        f.tensor = Some(info.name().to_owned());
        f.file = Some(weights.checkpoint().shards()[info.shard()].file.clone());
    }
    f
}

fn scan_one<N: Native>(
    weights: &mut Weights<N>,
    name: &str,
    out: &mut Vec<Finding>,
) -> Result<(), super::WeightsError> {
    let values = weights.bands(name)?;
    let mut counts = ValueCounts::default();
    let step = super::decode::band_rows(values.cols, values.align, 1);
    let mut r0 = 0;
    while r0 < values.rows {
        let r1 = values.rows.min(r0.saturating_add(step));
        counts.add(mlx::count_values(&values.band(r0, r1)?)?);
        r0 = r1;
    }
    let shown = if values.decoding.is_some() {
        " (decoded)"
    } else {
        ""
    };
    let ValueCounts {
        elements,
        nan,
        inf,
        zero,
    } = counts;
    if nan > 0 {
        out.push(located(
            weights,
            name,
            finding(
                "values.nan",
                format!("`{name}` has {nan} NaN of {elements} values{shown}"),
            ),
        ));
    }
    if inf > 0 {
        out.push(located(
            weights,
            name,
            finding(
                "values.inf",
                format!("`{name}` has {inf} ±Inf of {elements} values{shown}"),
            ),
        ));
    }
    if elements > 1 && zero == elements {
        out.push(located(
            weights,
            name,
            finding(
                "values.all-zero",
                format!("`{name}` is all zeros ({elements} values){shown}"),
            ),
        ));
    }
    if let Some(scales) = &values.scales {
        let s = mlx::count_values(scales)?;
        let what = if matches!(values.decoding, Some(super::Decoding::Quantized { .. })) {
            "quantization scales"
        } else {
            "block scales"
        };
        if s.nan + s.inf > 0 {
            out.push(located(
                weights,
                name,
                finding(
                    "values.bad-scale",
                    format!(
                        "`{name}` has {} non-finite {what} of {}",
                        s.nan + s.inf,
                        s.elements
                    ),
                ),
            ));
        }
        if s.zero > 0 {
            out.push(located(
                weights,
                name,
                finding(
                    "values.zero-scale",
                    format!(
                        "`{name}` has {} zero {what} of {}: those groups dequantize to a constant",
                        s.zero, s.elements
                    ),
                ),
            ));
        }
    }
    Ok(())
}
