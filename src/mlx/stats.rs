//! Value summaries computed with MLX ops on the array's device: only scalars,
//! bin counts, the first values and a small heatmap are copied to the host,
//! so a 2 GB tensor does not need 2 GB more on the host.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::ops::{self, PadWidth};
use mlx_rs::{Array, Device, Dtype, Stream};

use super::{MlxError, evaluate, evaluate_all, to_f32_vec};

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

/// Elements per chunk (4 MiB as `f32`). Every pass goes over the tensor chunk
/// by chunk: a chunk's temporaries stay in the CPU cache between the ops that
/// read it, and chunks alternate between two streams so that MLX's CPU
/// backend runs them on two cores (one stream runs one op at a time).
const CHUNK: i32 = 1 << 20;

/// Values per partial sum: partials are summed in `f32` on the device and
/// added in `f64` on the host. A single `f32` reduction over millions of
/// values drifts in the fifth digit; this stays within a few ulps of a
/// float64 sum.
const SUM_BLOCK: i32 = 256;

/// Values that pick the centre the sums are taken around (see [`centre`]).
const CENTRE_SAMPLE: i32 = 1 << 16;

thread_local! {
    /// A second stream on the default device for the thread that summarizes
    /// (the MLX worker). Made once: MLX keeps a stream, and on the CPU its
    /// thread, for the life of the process.
    static SIDE_STREAM: Option<Stream> =
        Device::try_default().ok().map(|device| Stream::new_with_device(&device));
}

fn op<T, E: std::fmt::Display>(operation: &'static str, r: Result<T, E>) -> Result<T, MlxError> {
    r.map_err(|e| MlxError::op(operation, e))
}

/// Reads a scalar array as `f64` (evaluating it).
fn scalar(a: &Array) -> Result<f64, MlxError> {
    let v = to_f32_vec(&op("cast", a.as_dtype(Dtype::Float32))?)?;
    Ok(v.first().copied().map_or(f64::NAN, f64::from))
}

/// A run of the flattened tensor, reduced in blocks of `rows` values:
/// [`SUM_BLOCK`], except for the tail shorter than one block, which is one
/// block of its own.
#[derive(Debug, Clone, Copy)]
struct Part {
    start: i32,
    len: i32,
}

impl Part {
    /// The tensor `0..n` cut into chunks of [`CHUNK`] and a tail.
    fn all(n: i32) -> Vec<Part> {
        let whole = n - n % SUM_BLOCK;
        let mut parts: Vec<Part> = (0..whole)
            .step_by(usize::try_from(CHUNK).unwrap_or(1))
            .map(|start| Part {
                start,
                len: CHUNK.min(whole - start),
            })
            .collect();
        if whole < n {
            parts.push(Part {
                start: whole,
                len: n - whole,
            });
        }
        parts
    }

    fn rows(self) -> i32 {
        if self.len % SUM_BLOCK == 0 {
            SUM_BLOCK
        } else {
            self.len
        }
    }

    /// This run of `flat` as `f32`.
    fn values(self, flat: &Array) -> Result<Array, MlxError> {
        let x = op("slice", flat.try_index(self.start..self.start + self.len))?;
        op("cast to f32", x.as_dtype(Dtype::Float32))
    }
}

/// Runs `f` with the MLX stream for chunk `i`: even chunks on the default
/// stream, odd ones on the side stream (when there is one).
fn on_stream<T>(i: usize, f: impl FnOnce() -> T) -> T {
    SIDE_STREAM.with(|side| match side {
        Some(stream) if i % 2 == 1 => mlx_rs::with_stream(stream, f),
        _ => f(),
    })
}

/// The lazy reductions of one part for the statistics pass: minimum,
/// maximum, partial sums of `x`, of `d = x - centre` and of `d²`, over the
/// finite values only when `masked` (then also the NaN and Inf counts).
struct PartSums {
    min: Array,
    max: Array,
    sum: Array,
    sum_squares: Array,
    nan: Option<Array>,
    inf: Option<Array>,
}

impl PartSums {
    fn new(
        part: Part,
        flat: &Array,
        centre: Option<&Array>,
        masked: bool,
    ) -> Result<Self, MlxError> {
        let x = part.values(flat)?;
        let d = match centre {
            Some(centre) => op("subtract", x.subtract(centre))?,
            None => x.clone(),
        };
        let rows = part.rows();
        // Every reduction over a `[rows, -1]` view along its first axis:
        // MLX's CPU backend vectorizes these across columns (along the last
        // axis a sum takes twice as long). Each partial sum adds `rows`
        // values in f32; the host adds the partials in f64.
        let reduce_min = |a: &Array| {
            op(
                "min",
                a.reshape(&[rows, -1])
                    .and_then(|v| v.min_axis(0, None))
                    .and_then(|m| m.min(None)),
            )
        };
        let reduce_max = |a: &Array| {
            op(
                "max",
                a.reshape(&[rows, -1])
                    .and_then(|v| v.max_axis(0, None))
                    .and_then(|m| m.max(None)),
            )
        };
        let partial_sums = |a: &Array| {
            op(
                "sum",
                a.reshape(&[rows, -1]).and_then(|v| v.sum_axis(0, None)),
            )
        };
        if !masked {
            return Ok(Self {
                min: reduce_min(&x)?,
                max: reduce_max(&x)?,
                sum: partial_sums(&x)?,
                sum_squares: partial_sums(&op("square", d.square())?)?,
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
        Ok(Self {
            min: reduce_min(&op(
                "where",
                ops::select(&finite, &x, Array::from_f32(f32::INFINITY)),
            )?)?,
            max: reduce_max(&op(
                "where",
                ops::select(&finite, &x, Array::from_f32(f32::NEG_INFINITY)),
            )?)?,
            sum: partial_sums(&op("where", ops::select(&finite, &x, &zero))?)?,
            sum_squares: partial_sums(&op("square", d.square())?)?,
            nan: Some(count(op("isnan", ops::is_nan(&x))?)?),
            inf: Some(count(op("isinf", ops::is_inf(&x))?)?),
        })
    }

    fn outputs(&self) -> impl Iterator<Item = &Array> {
        [&self.min, &self.max, &self.sum, &self.sum_squares]
            .into_iter()
            .chain(self.nan.iter())
            .chain(self.inf.iter())
    }
}

/// What the host keeps of one part's statistics.
#[derive(Debug, Clone, Copy)]
struct PartStats {
    min: f64,
    max: f64,
    sum: f64,
    sum_squares: f64,
    nan: u64,
    inf: u64,
}

impl PartStats {
    /// Reads the evaluated reductions.
    fn read(sums: &PartSums) -> Result<Self, MlxError> {
        let total = |a: &Array| -> Result<f64, MlxError> {
            Ok(to_f32_vec(a)?.iter().map(|&v| f64::from(v)).sum())
        };
        let count = |a: Option<&Array>| -> Result<u64, MlxError> {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok(a.map(scalar).transpose()?.unwrap_or(0.0).round() as u64)
        };
        Ok(Self {
            min: scalar(&sums.min)?,
            max: scalar(&sums.max)?,
            sum: total(&sums.sum)?,
            sum_squares: total(&sums.sum_squares)?,
            nan: count(sums.nan.as_ref())?,
            inf: count(sums.inf.as_ref())?,
        })
    }

    /// Whether every value was finite: NaN and Inf reach the minimum, the
    /// maximum or the sums (a sum of finite values that overflows also
    /// lands here, and is then recomputed masked: slower, still right).
    fn all_finite(&self) -> bool {
        self.min.is_finite()
            && self.max.is_finite()
            && self.sum.is_finite()
            && self.sum_squares.is_finite()
    }
}

/// The value the variance's sums are taken around, from the finite values
/// among the first [`CENTRE_SAMPLE`]: 0 when their mean lies within two of
/// their standard deviations of 0 (most weights: nothing to subtract), else
/// their mean. The variance is `E[d²] - E[d]²` with `d = x - centre`, which
/// loses precision in proportion to `(mean - centre)² / variance`: at most
/// a factor of 5 with the centre at 0, and for data whose first values are
/// not hundreds of standard deviations from the rest, a few ulps of `f32`
/// otherwise. (The mean itself comes from sums of `x`: rounding `x - centre`
/// to `f32` can be biased, which a mean would feel and the variance does not.)
fn centre(flat: &Array, n: i32) -> Result<f64, MlxError> {
    let sample = op("slice", flat.try_index(0..n.min(CENTRE_SAMPLE)))?;
    let sample = op("cast to f32", sample.as_dtype(Dtype::Float32))?;
    let finite = op("isfinite", sample.is_finite())?;
    let count = scalar(&op(
        "count",
        finite.as_dtype(Dtype::Int32).and_then(|m| m.sum(None)),
    )?)?;
    if count == 0.0 {
        return Ok(0.0);
    }
    let clean = op("where", ops::select(&finite, &sample, Array::from_f32(0.0)))?;
    let mean = scalar(&op("sum", clean.sum(None))?)? / count;
    let mean_square = scalar(&op("sum", clean.square().and_then(|s| s.sum(None)))?)? / count;
    let variance = (mean_square - mean * mean).max(0.0);
    Ok(if mean * mean <= 4.0 * variance {
        0.0
    } else {
        mean
    })
}

/// Summarizes `array`: statistics, a `bins`-bin histogram, the first
/// `first_count` values and, for 2-D arrays, a heatmap of at most
/// `heatmap_limit` cells a side.
///
/// Two passes over the values, chunk by chunk on two streams: statistics
/// (minimum, maximum and shifted sums at once), then histogram bins; the
/// heatmap reduces row bands the same way. Only per-chunk scalars, partial
/// sums, one chunk of bin numbers at a time and the heatmap cells reach the
/// host.
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
    let flat = op("flatten", array.reshape(&[-1]))?;
    evaluate(&flat)?;
    let n = i32::try_from(flat.size())
        .map_err(|_| MlxError::op("summarize", "more than 2^31 elements"))?;
    let parts = Part::all(n);
    // The centre as the device subtracts it, in f32.
    #[allow(clippy::cast_possible_truncation)]
    let centre_value = f64::from(centre(&flat, n)? as f32);
    #[allow(clippy::cast_possible_truncation)]
    let centre = (centre_value != 0.0).then(|| Array::from_f32(centre_value as f32));

    // Pass 1: statistics, every part at once; parts that met NaN or Inf are
    // done again with masks (rare).
    let sums: Vec<PartSums> = parts
        .iter()
        .enumerate()
        .map(|(i, part)| on_stream(i, || PartSums::new(*part, &flat, centre.as_ref(), false)))
        .collect::<Result<_, _>>()?;
    evaluate_all(sums.iter().flat_map(PartSums::outputs))?;
    let mut part_stats: Vec<PartStats> =
        sums.iter().map(PartStats::read).collect::<Result<_, _>>()?;
    drop(sums);
    let dirty: Vec<usize> = (0..parts.len())
        .filter(|&i| !part_stats[i].all_finite())
        .collect();
    if !dirty.is_empty() {
        let masked: Vec<PartSums> = dirty
            .iter()
            .enumerate()
            .map(|(k, &i)| on_stream(k, || PartSums::new(parts[i], &flat, centre.as_ref(), true)))
            .collect::<Result<_, _>>()?;
        evaluate_all(masked.iter().flat_map(PartSums::outputs))?;
        for (&i, sums) in dirty.iter().zip(&masked) {
            part_stats[i] = PartStats::read(sums)?;
        }
    }
    let stats = combine(&part_stats, n, centre_value);
    let clean: Vec<bool> = part_stats.iter().map(|p| p.nan + p.inf == 0).collect();

    // Pass 2: histogram bins.
    let histogram = histogram(&flat, &parts, &clean, &stats, bins)?;
    let first_n = i32::try_from(first_count).unwrap_or(i32::MAX).min(n);
    let first = to_f32_vec(&op("slice", flat.try_index(0..first_n))?)?;
    // Stacked tensors (experts `[E, out, in]`) are drawn with their leading
    // axes stacked vertically: `[E * out, in]`.
    let heatmap = match array.shape() {
        [lead @ .., cols] if !lead.is_empty() && *cols > 0 && lead.iter().all(|d| *d > 0) => {
            Some(heatmap(
                &flat,
                lead.iter().product(),
                *cols,
                heatmap_limit,
                stats.nan + stats.inf > 0,
            )?)
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

/// The statistics of the whole tensor from those of its parts.
fn combine(parts: &[PartStats], n: i32, centre: f64) -> Stats {
    let nan: u64 = parts.iter().map(|p| p.nan).sum();
    let inf: u64 = parts.iter().map(|p| p.inf).sum();
    let finite = u64::try_from(n).unwrap_or(0).saturating_sub(nan + inf);
    if finite == 0 {
        return Stats {
            min: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
            std: f64::NAN,
            nan,
            inf,
            finite: 0,
        };
    }
    let count = finite as f64;
    let mean = parts.iter().map(|p| p.sum).sum::<f64>() / count;
    // E[d²] - E[d]² with E[d] = mean - centre: rounding `x - centre` may be
    // biased by an ulp, which moves E[d²] by a negligible fraction only.
    let shift = mean - centre;
    let mean_square = parts.iter().map(|p| p.sum_squares).sum::<f64>() / count;
    Stats {
        min: parts.iter().map(|p| p.min).fold(f64::INFINITY, f64::min),
        max: parts
            .iter()
            .map(|p| p.max)
            .fold(f64::NEG_INFINITY, f64::max),
        mean,
        std: (mean_square - shift * shift).max(0.0).sqrt(),
        nan,
        inf,
        finite,
    }
}

/// Bin numbers are computed on the device as one byte per value, chunk by
/// chunk on both streams; the host counts each chunk while the next ones
/// are computed (a scatter-add on MLX's CPU backend took tens of seconds
/// for 2^28 values). `clean[i]`: part `i` holds no NaN or Inf.
fn histogram(
    flat: &Array,
    parts: &[Part],
    clean: &[bool],
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
    let bins = bins.min(usize::from(u8::MAX) - 1); // 255 marks non-finite values
    counts.truncate(bins);
    let top = u8::try_from(bins - 1).unwrap_or(u8::MAX);
    let width = stats.max - stats.min;
    #[allow(clippy::cast_possible_truncation)]
    let scale = Array::from_f32(if width > 0.0 {
        (bins as f64 / width) as f32
    } else {
        0.0
    });
    #[allow(clippy::cast_possible_truncation)]
    let lo = Array::from_f32(stats.min as f32);
    let bin_numbers = |part: Part, clean: bool| -> Result<Array, MlxError> {
        let x = op("slice", flat.try_index(part.start..part.start + part.len))?;
        let x = op("cast to f32", x.as_dtype(Dtype::Float32))?;
        // (x - min) * scale lies in [0, bins] for finite x; the cast to u8
        // truncates, which is floor for these non-negative values.
        let scaled = op("scale", op("subtract", x.subtract(&lo))?.multiply(&scale))?;
        // Non-finite values get a bin number past the last one and are skipped.
        let scaled = if clean {
            scaled
        } else {
            let keep = op("isfinite", x.is_finite())?;
            op(
                "where",
                ops::select(&keep, &scaled, Array::from_f32(f32::from(u8::MAX))),
            )?
        };
        let idx = op("cast", scaled.as_dtype(Dtype::Uint8))?;
        op("evaluate", mlx_rs::transforms::async_eval([&idx]))?;
        Ok(idx)
    };
    let mut local = [0u64; 256];
    let mut pending = std::collections::VecDeque::new();
    for (i, part) in parts.iter().enumerate() {
        pending.push_back(on_stream(i, || bin_numbers(*part, clean[i]))?);
        // Two chunks in flight, one per stream, while the host counts.
        while pending.len() > 2 || (i + 1 == parts.len() && !pending.is_empty()) {
            let Some(idx) = pending.pop_front() else {
                break;
            };
            evaluate(&idx)?;
            let chunk = idx
                .try_as_slice::<u8>()
                .map_err(|e| MlxError::op("read bin numbers", e))?;
            count_bytes(chunk, &mut local);
        }
    }
    // The maximum lands exactly on `bins`: it belongs to the last bin.
    local[usize::from(top)] += local[bins];
    for (total, add) in counts.iter_mut().zip(local) {
        *total += add;
    }
    Ok(Histogram {
        min: stats.min,
        max: stats.max,
        counts,
    })
}

/// Adds the number of times each byte value occurs in `bytes` to `counts`.
/// Four tables in turn: runs of one value (common: neighbouring weights
/// fall in the same bin) would otherwise make each increment wait for the
/// previous one to the same counter, four times slower.
fn count_bytes(bytes: &[u8], counts: &mut [u64; 256]) {
    let mut tables = [[0u32; 256]; 4];
    // u32 counters cannot overflow within 2^32 bytes; chunks are far smaller.
    for chunk in bytes.chunks(u32::MAX as usize) {
        let mut quads = chunk.chunks_exact(4);
        for quad in &mut quads {
            tables[0][usize::from(quad[0])] += 1;
            tables[1][usize::from(quad[1])] += 1;
            tables[2][usize::from(quad[2])] += 1;
            tables[3][usize::from(quad[3])] += 1;
        }
        for &b in quads.remainder() {
            tables[0][usize::from(b)] += 1;
        }
        for table in &mut tables {
            for (count, add) in counts.iter_mut().zip(table.iter_mut()) {
                *count += u64::from(std::mem::take(add));
            }
        }
    }
}

/// The heatmap of the 2-D tensor `flat` (`rows x cols`, flattened): cell
/// means over blocks, non-finite values counting as 0 (`masked`: there are
/// some). Reduced in bands of block rows, alternating between the streams.
fn heatmap(
    flat: &Array,
    rows: i32,
    cols: i32,
    limit: usize,
    masked: bool,
) -> Result<Heatmap, MlxError> {
    let limit = i32::try_from(limit.max(1)).unwrap_or(512);
    let row_step = (rows + limit - 1) / limit;
    let col_step = (cols + limit - 1) / limit;
    let out_rows = (rows + row_step - 1) / row_step;
    let out_cols = (cols + col_step - 1) / col_step;
    // Cell rows per band: about one chunk of values each.
    let band = (CHUNK / row_step.saturating_mul(cols).max(1)).max(1);
    let band_sums = |first_cell_row: i32| -> Result<Array, MlxError> {
        let cell_rows = band.min(out_rows - first_cell_row);
        let r0 = first_cell_row * row_step;
        let r1 = (r0 + cell_rows * row_step).min(rows);
        let x = op("slice", flat.try_index(r0 * cols..r1 * cols))?;
        let x = op("cast to f32", x.as_dtype(Dtype::Float32))?;
        let x = if masked {
            let finite = op("isfinite", x.is_finite())?;
            op("where", ops::select(&finite, &x, Array::from_f32(0.0)))?
        } else {
            x
        };
        let x = op("reshape", x.reshape(&[r1 - r0, cols]))?;
        let (pad_rows, pad_cols) = (cell_rows * row_step - (r1 - r0), out_cols * col_step - cols);
        let padded = if pad_rows == 0 && pad_cols == 0 {
            x
        } else {
            let widths = [(0, pad_rows), (0, pad_cols)];
            op("pad", ops::pad(&x, PadWidth::from(&widths), None, None))?
        };
        // Two single-axis reductions, innermost first: MLX's CPU backend is
        // much faster at these than at one reduction over two strided axes.
        let blocks = op(
            "reshape",
            padded.reshape(&[cell_rows, row_step, out_cols, col_step]),
        )?;
        op(
            "sum",
            op("sum", blocks.sum_axis(3, None))?.sum_axis(1, None),
        )
    };
    let bands: Vec<Array> = (0..out_rows)
        .step_by(usize::try_from(band).unwrap_or(1))
        .enumerate()
        .map(|(i, first)| on_stream(i, || band_sums(first)))
        .collect::<Result<_, _>>()?;
    evaluate_all(&bands)?;
    let mut sums = Vec::with_capacity(usize::try_from(out_rows * out_cols).unwrap_or(0));
    for band in &bands {
        sums.extend(to_f32_vec(band)?);
    }
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
