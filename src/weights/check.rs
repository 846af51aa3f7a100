//! `weightscope check --values`: every tensor's values read in a
//! release-shard walk (bounded memory, progress, cancel), looking for what
//! headers cannot show: NaN and Inf, all-zero tensors, zero or non-finite
//! quantization scales. The findings are the checkpoint layer's type.

use std::sync::atomic::AtomicBool;

use crate::checkpoint::check::finding;
use crate::finding::Finding;
use crate::mlx::{self, ValueCounts};

use super::{Progress, Release, ShardLoader, Visitor, WalkProgress, Walker, Weights};

/// What a value scan found.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueScan {
    /// What the scan found, in walk order.
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

impl ValueScan {
    /// Of the tensors scanned, those that could not be read (each a
    /// `values.unreadable` finding).
    #[must_use]
    pub fn unreadable(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.code == "values.unreadable")
            .count()
    }

    /// ", N could not be read" when some could not, else nothing.
    #[must_use]
    pub fn unreadable_note(&self) -> String {
        match self.unreadable() {
            0 => String::new(),
            n => format!(" ({n} could not be read)"),
        }
    }
}

/// Reads every parameter tensor of `weights` (with its scales) in walk
/// order, releasing each shard as soon as nothing left needs it; `cancel` is
/// checked before each tensor.
pub fn scan_values<N: ShardLoader>(
    weights: &mut Weights<N>,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> ValueScan {
    let names = weights.parameter_names();
    let largest_shard = weights
        .checkpoint()
        .shards()
        .iter()
        .map(|s| s.data_bytes)
        .max()
        .unwrap_or(0);
    let mut findings = ValueScanVisitor(Vec::new());
    let walked = Walker::new(names, Release::Shard, cancel).with_parts().run(
        weights,
        &mut findings,
        progress,
    );
    weights.release_all();
    ValueScan {
        findings: findings.0,
        scanned: walked.done,
        total: walked.total,
        cancelled: walked.cancelled,
        peak_mlx_active_bytes: walked.peak_mlx_active_bytes,
        bound_bytes: largest_shard + super::bands::band_bytes_bound(),
    }
}

/// The scan's visitor: counts each tensor's values band by band; a tensor
/// that cannot be read is a finding, and the scan goes on.
struct ValueScanVisitor(Vec<Finding>);

impl<N: ShardLoader> Visitor<Weights<N>> for ValueScanVisitor {
    fn visit(
        &mut self,
        weights: &mut Weights<N>,
        name: &str,
        _walking: &mut WalkProgress,
    ) -> Result<(), super::WeightsError> {
        if let Err(err) = scan_one(weights, name, &mut self.0) {
            self.0.push(located(
                weights,
                name,
                finding(
                    "values.unreadable",
                    format!("`{name}` could not be read: {err}"),
                ),
            ));
        }
        Ok(())
    }
}

fn located<N: ShardLoader>(weights: &Weights<N>, name: &str, mut f: Finding) -> Finding {
    if let Some(info) = weights.info(name) {
        f.subject.tensor = Some(info.name().to_owned());
        f.subject.file = Some(weights.checkpoint().shard(info.shard()).file.clone());
    }
    f
}

fn scan_one<N: ShardLoader>(
    weights: &mut Weights<N>,
    name: &str,
    out: &mut Vec<Finding>,
) -> Result<(), super::WeightsError> {
    let values = weights.bands(name)?;
    let mut counts = ValueCounts::default();
    let step = super::bands::band_rows(values.cols, values.align, 1);
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
