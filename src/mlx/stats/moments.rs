//! The statistics pass: per part, the minimum, the maximum and partial sums
//! of `x` and of `(x - c)²`, packed for one copy to the host; the centre
//! `c` those sums are taken around.

use mlx_rs::ops;
use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Dtype};

use super::{MlxError, Plan, SUM_BLOCK, evaluate, op, to_f32_vec};

/// Partial sums of the flat `a` of `len` values, in blocks of
/// [`SUM_BLOCK`] values and the tail in one block. On the CPU a block is a
/// column of a `[SUM_BLOCK, -1]` view (reduced along the first axis, which
/// MLX's CPU backend vectorizes across columns); on a GPU a row of a
/// `[-1, SUM_BLOCK]` view, and the partials are summed once more on the
/// device before they are copied.
fn partial_sums(a: &Array, len: i32, gpu: bool) -> Result<Vec<Array>, MlxError> {
    let main = len - len % SUM_BLOCK;
    let mut out = Vec::with_capacity(2);
    let blocks = |v: &Array| {
        if gpu {
            v.reshape(&[-1, SUM_BLOCK])
                .and_then(|v| v.sum_axis(1, None))
        } else {
            v.reshape(&[SUM_BLOCK, -1])
                .and_then(|v| v.sum_axis(0, None))
        }
    };
    if main > 0 {
        let body = if main == len {
            a.clone()
        } else {
            op("slice", a.try_index(0..main))?
        };
        let mut sums = op("sum", blocks(&body))?;
        let count = main / SUM_BLOCK;
        if gpu && count >= 4 * SUM_BLOCK && count % SUM_BLOCK == 0 {
            sums = op("sum", blocks(&sums))?;
        }
        out.push(sums);
    }
    if main < len {
        let tail = op("slice", a.try_index(main..len))?;
        out.push(op("sum", tail.sum(None).and_then(|t| t.reshape(&[1])))?);
    }
    Ok(out)
}

/// The minimum (`max == false`) or maximum of the flat `a` of `len` values,
/// as a one-element array.
fn extreme(a: &Array, len: i32, max: bool, gpu: bool) -> Result<Array, MlxError> {
    let reduce = |v: &Array| {
        if max { v.max(None) } else { v.min(None) }
    };
    let whole = if !gpu && len % SUM_BLOCK == 0 {
        let columns = op("reshape", a.reshape(&[SUM_BLOCK, -1]))?;
        let per_column = op(
            "reduce",
            if max {
                columns.max_axis(0, None)
            } else {
                columns.min_axis(0, None)
            },
        )?;
        op("reduce", reduce(&per_column))?
    } else {
        op("reduce", reduce(a))?
    };
    op("reshape", whole.reshape(&[1]))
}

/// The lazy reductions of one part for the statistics pass, packed in one
/// `f32` array (one copy to the host per part): minimum, maximum, partial
/// sums of `x`, then of `d²` with `d = x - centre`; over the finite values
/// only when `masked`, which also counts NaN and Inf.
pub(super) struct PartSums {
    packed: Array,
    sums: usize,
    nan: Option<Array>,
    inf: Option<Array>,
}

impl PartSums {
    pub(super) fn new(
        x: &Array,
        len: i32,
        centre: Option<&Array>,
        masked: bool,
        plan: Plan,
    ) -> Result<Self, MlxError> {
        let d = match centre {
            Some(centre) => op("subtract", x.subtract(centre))?,
            None => x.clone(),
        };
        let pack = |min: Array, max: Array, sums: Vec<Array>, squares: Vec<Array>| {
            let count = sums.iter().map(Array::size).sum();
            let mut parts = vec![min, max];
            parts.extend(sums);
            parts.extend(squares);
            Ok::<_, MlxError>((op("pack", ops::concatenate(&parts, 0))?, count))
        };
        if !masked {
            let (packed, sums) = pack(
                extreme(x, len, false, plan.gpu)?,
                extreme(x, len, true, plan.gpu)?,
                partial_sums(x, len, plan.gpu)?,
                partial_sums(&op("square", d.square())?, len, plan.gpu)?,
            )?;
            return Ok(Self {
                packed,
                sums,
                nan: None,
                inf: None,
            });
        }
        let finite = op("isfinite", x.is_finite())?;
        let count = |mask: Array| {
            op(
                "count",
                mask.as_dtype(Dtype::Int32).and_then(|m| m.sum(None)),
            )
        };
        let zero = Array::from_f32(0.0);
        let d = op("where", ops::select(&finite, &d, &zero))?;
        let low = op(
            "where",
            ops::select(&finite, x, Array::from_f32(f32::INFINITY)),
        )?;
        let high = op(
            "where",
            ops::select(&finite, x, Array::from_f32(f32::NEG_INFINITY)),
        )?;
        let clean = op("where", ops::select(&finite, x, &zero))?;
        let (packed, sums) = pack(
            extreme(&low, len, false, plan.gpu)?,
            extreme(&high, len, true, plan.gpu)?,
            partial_sums(&clean, len, plan.gpu)?,
            partial_sums(&op("square", d.square())?, len, plan.gpu)?,
        )?;
        Ok(Self {
            packed,
            sums,
            nan: Some(count(op("isnan", ops::is_nan(x))?)?),
            inf: Some(count(op("isinf", ops::is_inf(x))?)?),
        })
    }

    pub(super) fn outputs(&self) -> impl Iterator<Item = &Array> {
        std::iter::once(&self.packed)
            .chain(self.nan.iter())
            .chain(self.inf.iter())
    }
}

/// What the host keeps of one part's statistics.
#[derive(Debug, Clone, Copy)]
pub(super) struct PartStats {
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) sum: f64,
    pub(super) sum_squares: f64,
    pub(super) nan: u64,
    pub(super) inf: u64,
}

impl PartStats {
    /// Reads the evaluated reductions.
    pub(super) fn read(sums: &PartSums) -> Result<Self, MlxError> {
        let packed = to_f32_vec(&sums.packed)?;
        let value = |i: usize| packed.get(i).copied().map_or(f64::NAN, f64::from);
        let total = |range: std::ops::Range<usize>| -> f64 {
            packed
                .get(range)
                .map_or(f64::NAN, |v| v.iter().map(|&x| f64::from(x)).sum())
        };
        // Counts as integers: a GPU chunk can hold more than 2^24 of them.
        let count = |a: Option<&Array>| -> Result<u64, MlxError> {
            let Some(a) = a else { return Ok(0) };
            evaluate(a)?;
            let n = a
                .try_as_slice::<i32>()
                .map_err(|e| MlxError::op("read a count", e))?;
            Ok(n.first().map_or(0, |&n| u64::try_from(n).unwrap_or(0)))
        };
        Ok(Self {
            min: value(0),
            max: value(1),
            sum: total(2..2 + sums.sums),
            sum_squares: total(2 + sums.sums..packed.len()),
            nan: count(sums.nan.as_ref())?,
            inf: count(sums.inf.as_ref())?,
        })
    }

    /// Whether every value was finite: NaN and Inf reach the minimum, the
    /// maximum or the sums (a sum of finite values that overflows also
    /// lands here, and is then recomputed masked: slower, still right).
    pub(super) fn all_finite(&self) -> bool {
        self.min.is_finite()
            && self.max.is_finite()
            && self.sum.is_finite()
            && self.sum_squares.is_finite()
    }
}

/// The value the variance's sums are taken around, from the finite values
/// among `sample` (the first [`CENTRE_SAMPLE`]): 0 when their mean lies
/// within two of their standard deviations of 0 (most weights: nothing to
/// subtract), else their mean. The variance is `E[d²] - E[d]²` with
/// `d = x - centre`, which loses precision in proportion to
/// `(mean - centre)² / variance`: at most a factor of 5 with the centre at
/// 0, and for data whose first values are not hundreds of standard
/// deviations from the rest, a few ulps of `f32` otherwise. (The mean
/// itself comes from sums of `x`: rounding `x - centre` to `f32` can be
/// biased, which a mean would feel and the variance does not.)
pub(super) fn centre(sample: &Array) -> Result<f64, MlxError> {
    Ok(centre_of(&to_f32_vec(&op(
        "cast",
        sample.as_dtype(Dtype::Float32),
    )?)?))
}

/// [`centre`] of values on the host (one copy of the sample, no device
/// reductions to wait for), in `f64`.
pub(super) fn centre_of(sample: &[f32]) -> f64 {
    let (mut count, mut sum, mut squares) = (0u64, 0.0f64, 0.0f64);
    for &v in sample.iter().filter(|v| v.is_finite()) {
        count += 1;
        sum += f64::from(v);
        squares += f64::from(v) * f64::from(v);
    }
    if count == 0 {
        return 0.0;
    }
    let mean = sum / count as f64;
    let variance = (squares / count as f64 - mean * mean).max(0.0);
    if mean * mean <= 4.0 * variance {
        0.0
    } else {
        mean
    }
}
