//! One tensor of a diff opened ([`PairDetail`]): each side's values, the
//! error's statistics and heatmap, and a quantized side's error group by
//! group.

use crate::mlx;

use super::bands::band_rows;
use super::diff::described_dtype;
use super::{Decoding, ShardLoader, Weights, WeightsError};

/// One tensor of a diff opened: each side's values and the error's (|a - b|:
/// its statistics, histogram and heatmap, mean and largest per cell), and
/// for a quantized side, the error group by group.
#[derive(Debug, Clone)]
pub struct PairDetail {
    /// The name both sides share.
    pub name: String,
    /// A's stored dtype with how it is decoded.
    pub a_dtype: String,
    /// B's.
    pub b_dtype: String,
    /// A's values.
    pub a: mlx::ValueStats,
    /// B's values.
    pub b: mlx::ValueStats,
    /// `|a - b|`.
    pub error: mlx::ValueStats,
    /// The error of each quantization group (B's groups, else A's), when a
    /// side is quantized along its rows.
    pub groups: Option<GroupErrors>,
}

/// The error of a quantized weight's groups: which lost most.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupErrors {
    /// Values per group (along each row).
    pub group_size: i32,
    /// Which side's quantization the groups are ("A" or "B").
    pub side: &'static str,
    /// Groups compared.
    pub groups: u64,
    /// Relative error `sqrt(Σ (a - b)² / Σ a²)` of the median group.
    pub median: f64,
    /// Of the 99th-percentile group.
    pub p99: f64,
    /// Of the worst group.
    pub max: f64,
    /// The worst groups, worst first (at most [`WORST_GROUPS`]).
    pub worst: Vec<GroupError>,
}

/// How many of the worst groups a detail lists.
pub const WORST_GROUPS: usize = 12;

/// One group's error.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupError {
    /// Its row (leading axes folded in).
    pub row: i64,
    /// Its group along the row (columns `group * size ..`).
    pub group: i64,
    /// `sqrt(Σ (a - b)² / Σ a²)` (infinite when A is all zeros there and B
    /// is not).
    pub rel_error: f64,
    /// Its largest `|a - b|`.
    pub max_abs: f64,
}

/// Most groups a detail compares (128M: a 671B model's largest weight has
/// about 15M groups of 64).
const GROUPS_LIMIT: i64 = 1 << 27;

/// `|a - b|` of two sides' bands, band by band, for a summary.
struct AbsDiffBands<'a> {
    a: &'a super::bands::Bands,
    b: &'a super::bands::Bands,
}

impl mlx::RowBands for AbsDiffBands<'_> {
    fn shape(&self) -> &[i32] {
        &self.a.shape
    }
    fn rows(&self) -> i32 {
        self.a.rows
    }
    fn cols(&self) -> i32 {
        self.a.cols
    }
    fn align(&self) -> i32 {
        lcm_rows(self.a.align, self.b.align)
    }
    fn band(&self, r0: i32, r1: i32) -> Result<mlx::Array, mlx::MlxError> {
        mlx::abs_difference(&self.a.band(r0, r1)?, &self.b.band(r0, r1)?)
    }
}

fn lcm_rows(a: i32, b: i32) -> i32 {
    let (a, b) = (a.max(1), b.max(1));
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// Opens `name` on both sides: summaries of A, B and `|a - b|` (the
/// heatmaps at most `cells` a side), and the per-group error when a side is
/// quantized. Only band-sized temporaries beside the two tensors' shards.
///
/// # Errors
/// When a side cannot read the tensor, the shapes differ, or MLX fails.
pub fn detail<N: ShardLoader, M: ShardLoader>(
    a: &mut Weights<N>,
    b: &mut Weights<M>,
    name: &str,
    cells: usize,
) -> Result<PairDetail, WeightsError> {
    let ba = a.bands(name)?;
    let bb = b.bands(name)?;
    if ba.shape != bb.shape {
        return Err(WeightsError::ShapesDiffer {
            name: name.to_owned(),
            a: ba.shape.clone(),
            b: bb.shape.clone(),
        });
    }
    let bins = 64;
    let a_summary = mlx::summarize_bands(&ba, 8, bins, cells)?;
    let b_summary = mlx::summarize_bands(&bb, 8, bins, cells)?;
    let error = mlx::summarize_bands(&AbsDiffBands { a: &ba, b: &bb }, 8, bins, cells)?;
    let group_of = |bands: &super::bands::Bands| match &bands.decoding {
        Some(Decoding::Quantized { params, .. }) => i32::try_from(params.group_size).ok(),
        _ => None,
    };
    let groups = match (group_of(&bb), group_of(&ba)) {
        (Some(size), _) => Some((size, "B")),
        (None, Some(size)) => Some((size, "A")),
        (None, None) => None,
    }
    .filter(|(size, _)| {
        *size > 0
            && ba.cols % size == 0
            && i64::from(ba.rows) * i64::from(ba.cols / size) <= GROUPS_LIMIT
    })
    .map(|(size, side)| group_errors(&ba, &bb, size, side))
    .transpose()?;
    Ok(PairDetail {
        name: name.to_owned(),
        a_dtype: described_dtype(a, name, ba.decoding.as_ref()),
        b_dtype: described_dtype(b, name, bb.decoding.as_ref()),
        a: a_summary,
        b: b_summary,
        error,
        groups,
    })
}

/// Every group's relative error, band by band; the quantiles and the worst.
fn group_errors(
    ba: &super::bands::Bands,
    bb: &super::bands::Bands,
    size: i32,
    quantized: &'static str,
) -> Result<GroupErrors, WeightsError> {
    let per_row = i64::from(ba.cols / size);
    let step = band_rows(ba.cols, ba.align, bb.align);
    let mut rel: Vec<f32> = Vec::new();
    let mut largest: Vec<f32> = Vec::new();
    let mut r0 = 0;
    while r0 < ba.rows {
        let r1 = ba.rows.min(r0.saturating_add(step));
        let sums = mlx::group_sums(&ba.band(r0, r1)?, &bb.band(r0, r1)?, size)?;
        rel.extend(
            sums.delta_sq
                .iter()
                .zip(&sums.a_sq)
                .map(|(&delta, &energy)| {
                    if delta == 0.0 {
                        0.0
                    } else if energy == 0.0 {
                        f32::INFINITY.copysign(delta)
                    } else {
                        (delta / energy).sqrt()
                    }
                }),
        );
        largest.extend(sums.max_abs);
        r0 = r1;
    }
    let groups = rel.len();
    let mut order: Vec<usize> = (0..groups).collect();
    // NaN (a side had one) sorts as the worst.
    let key = |i: usize| {
        let r = rel[i];
        if r.is_nan() { f32::INFINITY } else { r }
    };
    order.sort_unstable_by(|&x, &y| key(y).total_cmp(&key(x)));
    let at = |q: f64| {
        if groups == 0 {
            return 0.0;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let rank = ((1.0 - q) * (groups - 1) as f64).round() as usize;
        f64::from(rel[order[rank.min(groups - 1)]])
    };
    let worst = order
        .iter()
        .take(WORST_GROUPS)
        .map(|&i| GroupError {
            row: i64::try_from(i).unwrap_or(0) / per_row,
            group: i64::try_from(i).unwrap_or(0) % per_row,
            rel_error: f64::from(rel[i]),
            max_abs: f64::from(largest[i]),
        })
        .collect();
    Ok(GroupErrors {
        group_size: size,
        side: quantized,
        groups: u64::try_from(groups).unwrap_or(0),
        median: at(0.5),
        p99: at(0.99),
        max: at(1.0),
        worst,
    })
}
