//! Value summaries computed with MLX ops on the array's device: only scalars,
//! bin counts, the first values and a small heatmap are copied to the host,
//! so a 2 GB tensor does not need 2 GB more on the host.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::ops::{self, PadWidth};
use mlx_rs::{Array, Dtype};

use super::{MlxError, evaluate, to_f32_vec};

/// Statistics over the finite values (NaN and ±Inf are counted apart).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stats {
    /// Smallest finite value (NaN when there is none).
    pub min: f64,
    /// Largest finite value (NaN when there is none).
    pub max: f64,
    /// Mean of the finite values.
    pub mean: f64,
    /// Population standard deviation of the finite values.
    pub std: f64,
    /// NaN elements.
    pub nan: u64,
    /// ±Inf elements.
    pub inf: u64,
    /// Finite elements.
    pub finite: u64,
}

/// Counts of finite values in equal-width bins over `[min, max]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    /// Left edge of the first bin.
    pub min: f64,
    /// Right edge of the last bin.
    pub max: f64,
    /// Count per bin.
    pub counts: Vec<u64>,
}

/// A 2-D tensor reduced on the device to at most `limit x limit` cells, each
/// the mean of the finite values of its block (non-finite count as 0).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Heatmap {
    /// Cells down.
    pub rows: usize,
    /// Cells across.
    pub cols: usize,
    /// Source rows per cell (the last cell may hold fewer).
    pub row_step: usize,
    /// Source columns per cell.
    pub col_step: usize,
    /// Row-major cell values.
    pub values: Vec<f32>,
}

/// Everything a preview shows about an array's values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ValueSummary {
    /// Statistics.
    pub stats: Stats,
    /// Histogram of finite values.
    pub histogram: Histogram,
    /// The first values, row-major, as `f32`.
    pub first: Vec<f32>,
    /// For 2-D arrays, the downsampled heatmap.
    pub heatmap: Option<Heatmap>,
}

/// Elements per histogram pass: bounds the temporary index array (64 MiB).
const HISTOGRAM_CHUNK: i32 = 1 << 24;

fn op<T, E: std::fmt::Display>(operation: &'static str, r: Result<T, E>) -> Result<T, MlxError> {
    r.map_err(|e| MlxError::op(operation, e))
}

/// Reads a scalar array as `f64` (evaluating it).
fn scalar(a: &Array) -> Result<f64, MlxError> {
    let v = to_f32_vec(&op("cast", a.as_dtype(Dtype::Float32))?)?;
    Ok(v.first().copied().map_or(f64::NAN, f64::from))
}

fn count(mask: &Array) -> Result<u64, MlxError> {
    let total = op("count", op("cast", mask.as_dtype(Dtype::Int64))?.sum(None))?;
    evaluate(&total)?;
    let n = op("read count", total.try_item_exact::<i64>())?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Summarizes `array`: statistics, a `bins`-bin histogram, the first
/// `first_count` values and, for 2-D arrays, a heatmap of at most
/// `heatmap_limit` cells a side.
///
/// # Errors
/// When an MLX operation fails (memory limit, unsupported dtype).
pub fn summarize(
    array: &Array,
    first_count: usize,
    bins: usize,
    heatmap_limit: usize,
) -> Result<ValueSummary, MlxError> {
    let x = op("cast to f32", array.as_dtype(Dtype::Float32))?;
    let flat = op("flatten", x.reshape(&[-1]))?;
    evaluate(&flat)?;
    let n = flat.size();

    let nan_mask = op("isnan", ops::is_nan(&flat))?;
    let inf_mask = op("isinf", ops::is_inf(&flat))?;
    let finite = op(
        "isfinite",
        op("or", nan_mask.logical_or(&inf_mask))?.logical_not(),
    )?;
    let nan = count(&nan_mask)?;
    let inf = count(&inf_mask)?;
    let finite_count = count(&finite)?;

    let zero = Array::from_f32(0.0);
    let stats = if finite_count == 0 {
        Stats {
            min: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
            std: f64::NAN,
            nan,
            inf,
            finite: 0,
        }
    } else {
        let masked = op("where", ops::select(&finite, &flat, &zero))?;
        let big = Array::from_f32(f32::INFINITY);
        let small = Array::from_f32(f32::NEG_INFINITY);
        let min = scalar(&op(
            "min",
            op("where", ops::select(&finite, &flat, &big))?.min(None),
        )?)?;
        let max = scalar(&op(
            "max",
            op("where", ops::select(&finite, &flat, &small))?.max(None),
        )?)?;
        let mean = accurate_sum(&masked)? / finite_count as f64;
        // Second pass around the mean: far less cancellation than E[x²] - E[x]².
        #[allow(clippy::cast_possible_truncation)]
        let centered = op("subtract", flat.subtract(Array::from_f32(mean as f32)))?;
        let squares = op("square", centered.square())?;
        let var_sum = accurate_sum(&op("where", ops::select(&finite, &squares, &zero))?)?;
        Stats {
            min,
            max,
            mean,
            std: (var_sum / finite_count as f64).sqrt(),
            nan,
            inf,
            finite: finite_count,
        }
    };

    let histogram = histogram(&flat, &finite, &stats, bins)?;
    let first_n = i32::try_from(first_count.min(n)).unwrap_or(0);
    let first = to_f32_vec(&op("slice", flat.try_index(0..first_n))?)?;
    let heatmap = match array.shape() {
        [rows, cols] if *rows > 0 && *cols > 0 => {
            Some(heatmap(&x, &finite, *rows, *cols, heatmap_limit)?)
        }
        _ => None,
    };
    Ok(ValueSummary {
        stats,
        histogram,
        first,
        heatmap,
    })
}

/// Elements summed in `f32` on the device before the host adds the partial
/// sums in `f64`: a single `f32` reduction over millions of values drifts in
/// the fifth digit, this stays within a few ulps of a float64 sum.
const SUM_BLOCK: i32 = 256;

/// Sum of a 1-D `f32` array with `f64` accuracy (see [`SUM_BLOCK`]).
fn accurate_sum(flat: &Array) -> Result<f64, MlxError> {
    let n = i32::try_from(flat.size()).unwrap_or(i32::MAX);
    let pad = (SUM_BLOCK - n % SUM_BLOCK) % SUM_BLOCK;
    let padded = op("pad", ops::pad(flat, (0, pad), None, None))?;
    let blocks = op("reshape", padded.reshape(&[-1, SUM_BLOCK]))?;
    let partials = to_f32_vec(&op("sum", blocks.sum_axis(1, None))?)?;
    Ok(partials.iter().map(|&p| f64::from(p)).sum())
}

fn histogram(
    flat: &Array,
    finite: &Array,
    stats: &Stats,
    bins: usize,
) -> Result<Histogram, MlxError> {
    let mut counts = vec![0u64; bins];
    if stats.finite == 0 || bins == 0 {
        return Ok(Histogram {
            min: stats.min,
            max: stats.max,
            counts,
        });
    }
    let bins_i = i32::try_from(bins).unwrap_or(i32::MAX);
    let width = stats.max - stats.min;
    #[allow(clippy::cast_possible_truncation)]
    let scale = if width > 0.0 {
        (bins as f64 / width) as f32
    } else {
        0.0
    };
    #[allow(clippy::cast_possible_truncation)]
    let lo = Array::from_f32(stats.min as f32);
    let n = i32::try_from(flat.size()).unwrap_or(i32::MAX);
    let mut start = 0;
    while start < n {
        let end = start.saturating_add(HISTOGRAM_CHUNK).min(n);
        let x = op("slice", flat.try_index(start..end))?;
        let keep = op("slice", finite.try_index(start..end))?;
        // Bin index; non-finite values go to an extra last bin, dropped below.
        let scaled = op(
            "scale",
            op("subtract", x.subtract(&lo))?.multiply(Array::from_f32(scale)),
        )?;
        let idx = op("floor", ops::floor(&scaled))?;
        let idx = op("clip", ops::clip(&idx, (0.0f32, (bins_i - 1) as f32)))?;
        let idx = op("cast", idx.as_dtype(Dtype::Int32))?;
        let idx = op("where", ops::select(&keep, &idx, Array::from_int(bins_i)))?;
        let ones = op(
            "ones",
            ops::broadcast_to(Array::from_int(1), &[end - start, 1]),
        )?;
        let zeros = op("zeros", ops::zeros::<i32>(&[bins_i + 1]))?;
        let chunk = op(
            "scatter_add",
            ops::indexing::scatter_add_single(&zeros, &idx, &ones, 0),
        )?;
        evaluate(&chunk)?;
        let chunk_counts = chunk
            .try_as_slice::<i32>()
            .map_err(|e| MlxError::op("read bin counts", e))?;
        for (total, &c) in counts.iter_mut().zip(chunk_counts) {
            *total += u64::try_from(c).unwrap_or(0);
        }
        start = end;
    }
    Ok(Histogram {
        min: stats.min,
        max: stats.max,
        counts,
    })
}

fn heatmap(
    x: &Array,
    finite: &Array,
    rows: i32,
    cols: i32,
    limit: usize,
) -> Result<Heatmap, MlxError> {
    let limit = i32::try_from(limit.max(1)).unwrap_or(512);
    let row_step = (rows + limit - 1) / limit;
    let col_step = (cols + limit - 1) / limit;
    let out_rows = (rows + row_step - 1) / row_step;
    let out_cols = (cols + col_step - 1) / col_step;
    let finite2d = op("reshape", finite.reshape(&[rows, cols]))?;
    let clean = op("where", ops::select(&finite2d, x, Array::from_f32(0.0)))?;
    let widths = [
        (0, out_rows * row_step - rows),
        (0, out_cols * col_step - cols),
    ];
    let padded = op("pad", ops::pad(&clean, PadWidth::from(&widths), None, None))?;
    let blocks = op(
        "reshape",
        padded.reshape(&[out_rows, row_step, out_cols, col_step]),
    )?;
    let sums = op("sum", blocks.sum_axes(&[1, 3], None))?;
    let sums = to_f32_vec(&sums)?;
    let rows_u = usize::try_from(out_rows).unwrap_or(0);
    let cols_u = usize::try_from(out_cols).unwrap_or(0);
    let (rs, cs) = (
        usize::try_from(row_step).unwrap_or(1),
        usize::try_from(col_step).unwrap_or(1),
    );
    let (total_rows, total_cols) = (
        usize::try_from(rows).unwrap_or(0),
        usize::try_from(cols).unwrap_or(0),
    );
    let mut values = Vec::with_capacity(sums.len());
    for (i, sum) in sums.iter().enumerate() {
        let (r, c) = (i / cols_u.max(1), i % cols_u.max(1));
        let in_rows = rs.min(total_rows - r * rs);
        let in_cols = cs.min(total_cols - c * cs);
        values.push(sum / (in_rows * in_cols) as f32);
    }
    Ok(Heatmap {
        rows: rows_u,
        cols: cols_u,
        row_step: rs,
        col_step: cs,
        values,
    })
}

/// Dequantizes an MLX-quantized weight (`biases` absent for symmetric modes).
///
/// # Errors
/// When MLX rejects the shapes or parameters.
pub fn dequantize(
    weight: &Array,
    scales: &Array,
    biases: Option<&Array>,
    group_size: u64,
    bits: u64,
) -> Result<Array, MlxError> {
    let group = i32::try_from(group_size).unwrap_or(64);
    let bits = i32::try_from(bits).unwrap_or(4);
    op(
        "dequantize",
        ops::dequantize(weight, scales, biases, group, bits),
    )
}
