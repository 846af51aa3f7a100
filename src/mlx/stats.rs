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

impl ValueSummary {
    /// The summary of a tensor with no elements.
    fn empty() -> Self {
        Self {
            stats: Stats {
                min: f64::NAN,
                max: f64::NAN,
                mean: f64::NAN,
                std: f64::NAN,
                nan: 0,
                inf: 0,
                finite: 0,
            },
            histogram: Histogram::default(),
            first: Vec::new(),
            heatmap: None,
        }
    }
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
    // An empty tensor (a zero in its shape) is legal: nothing to reduce.
    if array.size() == 0 {
        return Ok(ValueSummary::empty());
    }
    let x = op("cast to f32", array.as_dtype(Dtype::Float32))?;
    let flat = op("flatten", x.reshape(&[-1]))?;
    evaluate(&flat)?;
    let n = flat.size();

    // Every full-size pass costs (fresh pages dominated the first version), so
    // the common case takes the fewest: when min, max and sum are all finite,
    // there is no NaN or Inf and nothing needs masking.
    let quick_min = scalar(&op("min", flat.min(None))?)?;
    let quick_max = scalar(&op("max", flat.max(None))?)?;
    let quick_sum = block_sum(&flat)?;
    let all_finite = quick_min.is_finite() && quick_max.is_finite() && quick_sum.is_finite();
    let (nan, inf) = if all_finite {
        (0, 0)
    } else {
        (
            count_true(&op("isnan", ops::is_nan(&flat))?)?,
            count_true(&op("isinf", ops::is_inf(&flat))?)?,
        )
    };
    let finite_count = n as u64 - nan - inf;
    let finite = if nan + inf == 0 {
        None
    } else {
        let non_finite = op(
            "or",
            op("isnan", ops::is_nan(&flat))?.logical_or(op("isinf", ops::is_inf(&flat))?),
        )?;
        Some(op("not", non_finite.logical_not())?)
    };
    // `flat` with non-finite values replaced by `fill`.
    let replaced = |fill: f32| -> Result<Array, MlxError> {
        match &finite {
            None => Ok(flat.clone()),
            Some(mask) => op("where", ops::select(mask, &flat, Array::from_f32(fill))),
        }
    };

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
        let (min, max, sum) = if finite.is_none() {
            (quick_min, quick_max, quick_sum)
        } else {
            (
                scalar(&op("min", replaced(f32::INFINITY)?.min(None))?)?,
                scalar(&op("max", replaced(f32::NEG_INFINITY)?.max(None))?)?,
                block_sum(&replaced(0.0)?)?,
            )
        };
        let mean = sum / finite_count as f64;
        // Second pass around the mean: far less cancellation than E[x²] - E[x]².
        #[allow(clippy::cast_possible_truncation)]
        let squares = op(
            "square",
            op("subtract", flat.subtract(Array::from_f32(mean as f32)))?.square(),
        )?;
        let squares = match &finite {
            None => squares,
            Some(mask) => op("where", ops::select(mask, &squares, Array::from_f32(0.0)))?,
        };
        let var_sum = block_sum(&squares)?;
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

    let histogram = histogram(&flat, finite.as_ref(), &stats, bins)?;
    let first_n = i32::try_from(first_count.min(n)).unwrap_or(0);
    let first = to_f32_vec(&op("slice", flat.try_index(0..first_n))?)?;
    let heatmap = match array.shape() {
        [rows, cols] if *rows > 0 && *cols > 0 => {
            let clean = op("reshape", replaced(0.0)?.reshape(&[*rows, *cols]))?;
            Some(heatmap(&clean, *rows, *cols, heatmap_limit)?)
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

/// Sum of a 1-D array with `f64` accuracy (see [`SUM_BLOCK`]), without
/// copying it: the whole blocks are a view reshaped, the tail is summed apart.
fn block_sum(flat: &Array) -> Result<f64, MlxError> {
    let n = i32::try_from(flat.size()).unwrap_or(i32::MAX);
    let whole = n - n % SUM_BLOCK;
    let mut total = 0.0;
    if whole > 0 {
        let blocks = op(
            "reshape",
            op("slice", flat.try_index(0..whole))?.reshape(&[-1, SUM_BLOCK]),
        )?;
        let partials = to_f32_vec(&op("sum", blocks.sum_axis(1, None))?)?;
        total += partials.iter().map(|&p| f64::from(p)).sum::<f64>();
    }
    if whole < n {
        total += scalar(&op(
            "sum",
            op("slice", flat.try_index(whole..n))?.sum(None),
        )?)?;
    }
    Ok(total)
}

/// How many elements of a boolean array are true (exact: per-block integer
/// sums, each below 2^24, added on the host).
fn count_true(mask: &Array) -> Result<u64, MlxError> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let count = block_sum(mask)?.round() as u64;
    Ok(count)
}

fn histogram(
    flat: &Array,
    finite: Option<&Array>,
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
    // Bin numbers are computed on the device as one byte per value; the host
    // counts them chunk by chunk (a scatter-add on MLX's CPU backend took tens
    // of seconds for 2^28 values). Host memory stays at one chunk.
    let bins = bins.min(usize::from(u8::MAX) - 1); // 255 marks non-finite values
    counts.truncate(bins);
    let top = u8::try_from(bins - 1).unwrap_or(u8::MAX);
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
        // (x - min) * scale lies in [0, bins] for finite x; the cast to u8
        // truncates, which is floor for these non-negative values.
        let scaled = op(
            "scale",
            op("subtract", x.subtract(&lo))?.multiply(Array::from_f32(scale)),
        )?;
        // Non-finite values get a bin number past the last one and are skipped.
        let scaled = match finite {
            None => scaled,
            Some(mask) => {
                let keep = op("slice", mask.try_index(start..end))?;
                op(
                    "where",
                    ops::select(&keep, &scaled, Array::from_f32(f32::from(u8::MAX))),
                )?
            }
        };
        let idx = op("cast", scaled.as_dtype(Dtype::Uint8))?;
        evaluate(&idx)?;
        let chunk = idx
            .try_as_slice::<u8>()
            .map_err(|e| MlxError::op("read bin numbers", e))?;
        let mut local = [0u64; 256];
        for &b in chunk {
            local[usize::from(b)] += 1;
        }
        // The maximum lands exactly on `bins`: it belongs to the last bin.
        local[usize::from(top)] += local[bins];
        for (total, add) in counts.iter_mut().zip(local) {
            *total += add;
        }
        start = end;
    }
    Ok(Histogram {
        min: stats.min,
        max: stats.max,
        counts,
    })
}

/// `clean`: the 2-D values with non-finite ones already replaced by 0.
fn heatmap(clean: &Array, rows: i32, cols: i32, limit: usize) -> Result<Heatmap, MlxError> {
    let limit = i32::try_from(limit.max(1)).unwrap_or(512);
    let row_step = (rows + limit - 1) / limit;
    let col_step = (cols + limit - 1) / limit;
    let out_rows = (rows + row_step - 1) / row_step;
    let out_cols = (cols + col_step - 1) / col_step;
    let (pad_rows, pad_cols) = (out_rows * row_step - rows, out_cols * col_step - cols);
    let padded = if pad_rows == 0 && pad_cols == 0 {
        clean.clone()
    } else {
        let widths = [(0, pad_rows), (0, pad_cols)];
        op("pad", ops::pad(clean, PadWidth::from(&widths), None, None))?
    };
    // Two single-axis reductions, innermost first: MLX's CPU backend is much
    // faster at these than at one reduction over two strided axes.
    let blocks = op(
        "reshape",
        padded.reshape(&[out_rows, row_step, out_cols, col_step]),
    )?;
    let sums = op(
        "sum",
        op("sum", blocks.sum_axis(3, None))?.sum_axis(1, None),
    )?;
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
