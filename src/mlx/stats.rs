//! Value summaries computed with MLX ops on the array's device: only scalars,
//! bin counts, the first values and a small heatmap are copied to the host,
//! so a 2 GB tensor does not need 2 GB more on the host.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::ops::{self, PadWidth};
use mlx_rs::{Array, Device, Dtype, Stream};

use super::{MlxError, evaluate, evaluate_all, kernel, to_f32_vec};

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

/// Elements per chunk on MLX's CPU backend (4 MiB as `f32`). Every pass
/// goes over the tensor chunk by chunk: a chunk's temporaries stay in the
/// CPU cache between the ops that read it, and chunks alternate between two
/// streams so that MLX's CPU backend runs them on two cores (one stream runs
/// one op at a time).
const CPU_CHUNK: i64 = 1 << 20;

/// Elements per chunk on a GPU (256 MiB as `f32`): few enough kernel
/// launches that a 1 GiB tensor is a handful of launches per op, small
/// enough that a chunk's temporaries (and a dequantized chunk) stay a small
/// part of the card.
const GPU_CHUNK: i64 = 1 << 26;

/// Values per partial sum: partials are summed in `f32` on the device and
/// added in `f64` on the host. A single `f32` reduction over millions of
/// values drifts in the fifth digit; this stays within a few ulps of a
/// float64 sum.
const SUM_BLOCK: i32 = 256;

/// Values that pick the centre the sums are taken around (see [`centre`]).
const CENTRE_SAMPLE: i32 = 1 << 16;

/// Values per block when bins are counted on the device: each block counts
/// into its own row of bins, so the device's atomic adds of neighbouring
/// values (often the same bin) do not all wait on one counter; the rows are
/// summed on the device afterwards.
const BIN_BLOCK: i32 = 1 << 12;

/// Chunks evaluated together: bounds the temporaries in flight (two chunks
/// per stream) while keeping both streams busy.
const WINDOW: usize = 4;

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

/// Where histogram bins are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinsOn {
    /// Bin numbers come to the host a byte per value and are counted there
    /// (MLX's CPU backend: its scatter-add runs one value at a time).
    Host,
    /// MLX's scatter-add on the device, in blocks (GPUs without our kernel).
    Scatter,
    /// Our shared-memory histogram kernel (CUDA).
    Kernel,
    /// Not counted (`WEIGHTSCOPE_SUMMARY_BINS=none`: benchmarks that break
    /// a summary's time down).
    Nowhere,
}

/// Set once our histogram kernel failed on this machine: summaries use
/// MLX's scatter-add from then on.
static KERNEL_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether summaries on CUDA may use our histogram kernel (see
/// [`use_summary_kernel`]).
static KERNEL_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets summaries on CUDA count bins with our kernel. Compiling it takes
/// seconds once per process (MLX does not keep custom kernels between
/// processes), and it then halves a summary's time: worth it for the
/// window and for repeated summaries, not for a one-shot command, which
/// uses MLX's scatter-add. Off by default.
pub fn use_summary_kernel(on: bool) {
    KERNEL_WANTED.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// How a summary runs on the default device.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Elements per chunk.
    chunk: i64,
    /// Where bins are counted.
    bins: BinsOn,
    /// The bins were asked for by name (a benchmark): no fallback.
    forced: bool,
    /// GPU-shaped reductions: contiguous blocks (a row reduction, a GPU's
    /// fastest) where the CPU reduces across columns (which its backend
    /// vectorizes), whole-chunk minimum and maximum, and partial sums summed
    /// once more on the device before they are copied (a GPU chunk has 2^18
    /// of them).
    gpu: bool,
}

impl Plan {
    /// The plan for MLX's default device. `WEIGHTSCOPE_SUMMARY_BINS=host`,
    /// `=scatter`, `=kernel` or `=none` overrides where bins are counted
    /// (benchmarks).
    fn for_default_device() -> Self {
        let gpu = super::default_device().is_ok_and(|d| d.kind == super::DeviceKind::Gpu);
        let kernel = gpu
            && cfg!(not(target_os = "macos"))
            && KERNEL_WANTED.load(std::sync::atomic::Ordering::Relaxed)
            && !KERNEL_FAILED.load(std::sync::atomic::Ordering::Relaxed);
        let knob = std::env::var("WEIGHTSCOPE_SUMMARY_BINS").ok();
        let bins = match knob.as_deref() {
            Some("host") => BinsOn::Host,
            Some("scatter") => BinsOn::Scatter,
            Some("kernel") => BinsOn::Kernel,
            Some("none") => BinsOn::Nowhere,
            _ if kernel => BinsOn::Kernel,
            _ if gpu => BinsOn::Scatter,
            _ => BinsOn::Host,
        };
        Self {
            chunk: if gpu { GPU_CHUNK } else { CPU_CHUNK },
            bins,
            forced: knob.is_some(),
            gpu,
        }
    }
}

/// A bound on the MLX memory a summary's temporaries take beside the
/// values it reads: eight `f32` arrays of one chunk on the default device.
#[must_use]
pub fn summary_scratch_bytes() -> u64 {
    8 * 4 * Plan::for_default_device().chunk.unsigned_abs()
}

/// Values to summarize, read as `[rows, cols]` one band of rows at a time
/// and decoded per band: a packed weight is dequantized chunk by chunk, so a
/// summary never holds the whole tensor in `f32`.
pub trait RowBands {
    /// The logical shape (leading axes are folded into rows).
    fn shape(&self) -> &[i32];
    /// Rows: the product of every axis but the last.
    fn rows(&self) -> i32;
    /// Values per row: the last axis.
    fn cols(&self) -> i32;
    /// Bands must start on multiples of this many rows (FP8 block rows).
    fn align(&self) -> i32;
    /// The decoded rows `r0..r1`, `[r1 - r0, cols]`, lazy.
    ///
    /// # Errors
    /// When MLX fails.
    fn band(&self, r0: i32, r1: i32) -> Result<Array, MlxError>;
    /// The stored words, scales and biases when the values are an
    /// affine-packed weight (`[rows, words]` and `[rows, groups]`): on CUDA
    /// a summary then reads them straight, dequantizing in its own kernel.
    fn affine_words(&self) -> Option<kernel::AffineWords<'_>> {
        None
    }
}

/// Where a summary reads its values.
enum Input<'a> {
    /// A flattened array (at most `i32::MAX` elements).
    Flat { flat: Array, shape: Vec<i32> },
    /// Decoded row bands.
    Bands(&'a dyn RowBands),
}

impl Input<'_> {
    fn shape(&self) -> &[i32] {
        match self {
            Input::Flat { shape, .. } => shape,
            Input::Bands(b) => b.shape(),
        }
    }

    /// Elements in all.
    fn len(&self) -> i64 {
        match self {
            Input::Flat { flat, .. } => i64::try_from(flat.size()).unwrap_or(i64::MAX),
            Input::Bands(b) => i64::from(b.rows()) * i64::from(b.cols()),
        }
    }

    /// Parts must start on multiples of this many elements.
    fn granule(&self) -> i64 {
        match self {
            Input::Flat { .. } => 1,
            Input::Bands(b) => i64::from(b.cols().max(1)) * i64::from(b.align().max(1)),
        }
    }

    /// The values of `part`, flat, as `f32`, lazy.
    fn values(&self, part: Part) -> Result<Array, MlxError> {
        let x = match self {
            Input::Flat { flat, .. } => {
                let start = i32::try_from(part.start)
                    .map_err(|_| MlxError::op("summarize", "more than 2^31 elements"))?;
                op("slice", flat.try_index(start..start + part.len))?
            }
            Input::Bands(b) => {
                let cols = i64::from(b.cols().max(1));
                let r0 = i32::try_from(part.start / cols)
                    .map_err(|_| MlxError::op("summarize", "more than 2^31 rows"))?;
                let r1 = r0 + i32::try_from(i64::from(part.len) / cols).unwrap_or(0);
                op("reshape", b.band(r0, r1)?.reshape(&[-1]))?
            }
        };
        op("cast to f32", x.as_dtype(Dtype::Float32))
    }
}

/// A run of the flattened tensor.
#[derive(Debug, Clone, Copy)]
struct Part {
    start: i64,
    len: i32,
}

/// `0..n` cut into parts of about `chunk` elements, each starting on a
/// multiple of `granule`.
fn parts(n: i64, granule: i64, chunk: i64) -> Result<Vec<Part>, MlxError> {
    let granule = granule.max(1);
    let len = (chunk / granule).max(1) * granule;
    let len = i32::try_from(len)
        .map_err(|_| MlxError::op("summarize", "one row band exceeds 2^31 values"))?;
    let mut parts = Vec::new();
    let mut start = 0i64;
    while start < n {
        let this = i64::from(len).min(n - start);
        parts.push(Part {
            start,
            len: i32::try_from(this).unwrap_or(len),
        });
        start += this;
    }
    Ok(parts)
}

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

fn lcm(a: i64, b: i64) -> i64 {
    a / gcd(a, b) * b
}

/// Runs `f` with the MLX stream for chunk `i`: even chunks on the default
/// stream, odd ones on the side stream (when there is one).
fn on_stream<T>(i: usize, f: impl FnOnce() -> T) -> T {
    SIDE_STREAM.with(|side| match side {
        Some(stream) if i % 2 == 1 => mlx_rs::with_stream(stream, f),
        _ => f(),
    })
}

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
struct PartSums {
    packed: Array,
    sums: usize,
    nan: Option<Array>,
    inf: Option<Array>,
}

impl PartSums {
    fn new(
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

    fn outputs(&self) -> impl Iterator<Item = &Array> {
        std::iter::once(&self.packed)
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
    fn all_finite(&self) -> bool {
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
fn centre(sample: &Array) -> Result<f64, MlxError> {
    let finite = op("isfinite", sample.is_finite())?;
    let count = scalar(&op(
        "count",
        finite.as_dtype(Dtype::Int32).and_then(|m| m.sum(None)),
    )?)?;
    if count == 0.0 {
        return Ok(0.0);
    }
    let clean = op("where", ops::select(&finite, sample, Array::from_f32(0.0)))?;
    let mean = scalar(&op("sum", clean.sum(None))?)? / count;
    let mean_square = scalar(&op("sum", clean.square().and_then(|s| s.sum(None)))?)? / count;
    let variance = (mean_square - mean * mean).max(0.0);
    Ok(if mean * mean <= 4.0 * variance {
        0.0
    } else {
        mean
    })
}

/// Set when the fused kernel for affine-packed weights failed once (it is
/// then not tried again in this process).
static FUSED_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The summary of an affine-packed weight from its words, by our kernel
/// (see `kernel::affine_stats`): the statistics and heatmap cells in one
/// pass, the bins in a second, nothing dequantized into memory but the
/// first values. `None` when the weight or the plan does not suit it.
fn fused_affine(
    bands: &dyn RowBands,
    first_count: usize,
    bins: usize,
    heatmap_limit: usize,
    plan: Plan,
) -> Option<Result<ValueSummary, MlxError>> {
    let words = bands.affine_words()?;
    let wanted = std::env::var("WEIGHTSCOPE_SUMMARY_FUSED").map_or(true, |v| v != "0");
    let grid = Grid::new(bands.shape(), heatmap_limit)?;
    if !(wanted
        && plan.bins == BinsOn::Kernel
        && !FUSED_FAILED.load(std::sync::atomic::Ordering::Relaxed)
        && words.supported()
        && bands.rows() == words.weight.shape()[0]
        && usize::try_from(grid.out_cols).is_ok_and(|c| c <= kernel::MAX_CELLS))
    {
        return None;
    }
    let result = fused_affine_summary(bands, &words, grid, first_count, bins);
    if result.is_err() && !plan.forced {
        FUSED_FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
        return None;
    }
    Some(result)
}

fn fused_affine_summary(
    bands: &dyn RowBands,
    words: &kernel::AffineWords<'_>,
    grid: Grid,
    first_count: usize,
    bins: usize,
) -> Result<ValueSummary, MlxError> {
    // The first values and the centre from the first rows, dequantized by
    // MLX (a band of about CENTRE_SAMPLE values).
    let cols = bands.cols().max(1);
    let head_rows = (CENTRE_SAMPLE / cols).clamp(1, bands.rows());
    let head = op("reshape", bands.band(0, head_rows)?.reshape(&[-1]))?;
    let head = op("cast to f32", head.as_dtype(Dtype::Float32))?;
    #[allow(clippy::cast_possible_truncation)]
    let centre_value = centre(&head)? as f32;
    let first_n = i32::try_from(first_count)
        .unwrap_or(i32::MAX)
        .min(i32::try_from(head.size()).unwrap_or(i32::MAX));
    let first = to_f32_vec(&op("slice", head.try_index(0..first_n))?)?;
    drop(head);

    let cells = [grid.row_step, grid.col_step, grid.out_cols];
    let (floats, counts) = kernel::affine_stats(words, centre_value, grid.out_rows, cells)?;
    evaluate_all([&floats, &counts])?;
    let floats = to_f32_vec(&floats)?;
    let counts = counts
        .try_as_slice::<u32>()
        .map_err(|e| MlxError::op("read value counts", e))?;
    let out_rows = usize::try_from(grid.out_rows).unwrap_or(0);
    let (per_row, cell_sums) = floats.split_at(out_rows * 6);
    let parts: Vec<PartStats> = per_row
        .chunks_exact(6)
        .zip(counts.chunks_exact(2))
        .map(|(f, n)| PartStats {
            min: f64::from(f[0]),
            max: f64::from(f[1]),
            sum: f64::from(f[2]) + f64::from(f[3]),
            sum_squares: f64::from(f[4]) + f64::from(f[5]),
            nan: u64::from(n[0]),
            inf: u64::from(n[1]),
        })
        .collect();
    let n = i64::from(bands.rows()) * i64::from(bands.cols());
    let stats = combine(&parts, n, f64::from(centre_value));

    let bins = bins.min(kernel::MAX_SLOTS - 2);
    let mut counts = vec![0u64; bins];
    if stats.finite > 0 && bins > 0 {
        let width = stats.max - stats.min;
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let (lo, scale) = (
            stats.min as f32,
            if width > 0.0 {
                (bins as f64 / width) as f32
            } else {
                0.0
            },
        );
        let slots = kernel::affine_counts(words, lo, scale, bins + 2)?;
        evaluate(&slots)?;
        let slots = slots
            .try_as_slice::<u32>()
            .map_err(|e| MlxError::op("read bin counts", e))?;
        for (count, slot) in counts.iter_mut().zip(slots) {
            *count = u64::from(*slot);
        }
        // The maximum lands exactly on `bins`: it belongs to the last bin.
        if let (Some(last), Some(top)) = (counts.last_mut(), slots.get(bins)) {
            *last += u64::from(*top);
        }
    }
    Ok(ValueSummary {
        histogram: Histogram {
            min: stats.min,
            max: stats.max,
            counts,
        },
        stats,
        first,
        heatmap: Some(grid.finish(cell_sums)),
    })
}

/// Summarizes `array`: statistics, a `bins`-bin histogram, the first
/// `first_count` values and, for arrays of two or more axes, a heatmap of
/// at most `heatmap_limit` cells a side (leading axes stacked as rows).
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
    if i32::try_from(flat.size()).is_err() {
        return Err(MlxError::op("summarize", "more than 2^31 elements"));
    }
    let input = Input::Flat {
        flat,
        shape: array.shape().to_vec(),
    };
    summarize_input(
        &input,
        first_count,
        bins,
        heatmap_limit,
        Plan::for_default_device(),
    )
}

/// Summarizes a small array once, so that a GPU compiles the summary's
/// kernels (MLX's and, when [`use_summary_kernel`] allows it, our histogram
/// kernel: about 2.5 s on CUDA the first time in a process) before the
/// first tensor is clicked. Nothing to do on the CPU.
pub fn warm_up_summaries() {
    let plan = Plan::for_default_device();
    if plan.gpu {
        let values: Vec<f32> = (0u16..512).map(|i| f32::from(i) / 512.0).collect();
        let small = Array::from_slice(&values, &[2, 256]);
        let _ = summarize(&small, 1, 64, 8);
        if plan.bins == BinsOn::Kernel {
            // The kernel that summarizes affine-packed weights (one for
            // every bit width, group size and shape).
            let _ = warm_up_affine(&small);
        }
    }
}

fn warm_up_affine(small: &Array) -> Result<(), MlxError> {
    let half = op("cast", small.as_dtype(Dtype::Float16))?;
    let parts = super::quantize_mode(&half, "affine", 64, 4)?;
    let [weight, scales, biases] = parts.as_slice() else {
        return Ok(());
    };
    let words = kernel::AffineWords {
        weight,
        scales,
        biases,
        group_size: 64,
        bits: 4,
    };
    let (floats, counts) = kernel::affine_stats(&words, 0.0, 1, [2, 1, 256])?;
    evaluate_all([&floats, &counts])
}

/// Summarizes values read band by band (see [`RowBands`]), as [`summarize`]
/// does an array: each chunk is decoded (a packed weight dequantized) once
/// per pass and never the whole tensor at once.
///
/// # Errors
/// When an MLX operation fails.
pub fn summarize_bands(
    bands: &dyn RowBands,
    first_count: usize,
    bins: usize,
    heatmap_limit: usize,
) -> Result<ValueSummary, MlxError> {
    if bands.rows() <= 0 || bands.cols() <= 0 {
        return Ok(ValueSummary::empty());
    }
    let plan = Plan::for_default_device();
    if let Some(done) = fused_affine(bands, first_count, bins, heatmap_limit, plan) {
        return done;
    }
    summarize_input(&Input::Bands(bands), first_count, bins, heatmap_limit, plan)
}

/// The heatmap's grid for `shape`, when it has one: `[lead.., cols]` with
/// the leading axes stacked into rows.
#[derive(Debug, Clone, Copy)]
struct Grid {
    rows: i32,
    cols: i32,
    row_step: i32,
    col_step: i32,
    out_rows: i32,
    out_cols: i32,
}

impl Grid {
    fn new(shape: &[i32], limit: usize) -> Option<Self> {
        let [lead @ .., cols] = shape else {
            return None;
        };
        if lead.is_empty() || *cols <= 0 || lead.iter().any(|d| *d <= 0) {
            return None;
        }
        let rows = lead.iter().product::<i32>();
        let cols = *cols;
        let limit = i32::try_from(limit.max(1)).unwrap_or(512);
        let row_step = (rows + limit - 1) / limit;
        let col_step = (cols + limit - 1) / limit;
        Some(Self {
            rows,
            cols,
            row_step,
            col_step,
            out_rows: (rows + row_step - 1) / row_step,
            out_cols: (cols + col_step - 1) / col_step,
        })
    }

    /// Elements per row of cells: parts start on multiples of it.
    fn granule(self) -> i64 {
        i64::from(self.cols) * i64::from(self.row_step)
    }

    /// The cell sums of `x`, the flat values of `part` (whole rows starting
    /// on a cell row), `[cell rows, out_cols]`, non-finite values counting
    /// as 0 when `masked`. Two single-axis reductions, innermost first:
    /// MLX's CPU backend is much faster at these than at one reduction over
    /// two strided axes.
    fn band_sums(self, x: &Array, part: Part, masked: bool) -> Result<Array, MlxError> {
        let cols = i64::from(self.cols);
        let r0 = i32::try_from(part.start / cols).unwrap_or(0);
        let r1 = r0 + i32::try_from(i64::from(part.len) / cols).unwrap_or(0);
        let cell_rows = (r1 - r0 + self.row_step - 1) / self.row_step;
        let x = if masked {
            let finite = op("isfinite", x.is_finite())?;
            op("where", ops::select(&finite, x, Array::from_f32(0.0)))?
        } else {
            x.clone()
        };
        let x = op("reshape", x.reshape(&[r1 - r0, self.cols]))?;
        let (pad_rows, pad_cols) = (
            cell_rows * self.row_step - (r1 - r0),
            self.out_cols * self.col_step - self.cols,
        );
        let padded = if pad_rows == 0 && pad_cols == 0 {
            x
        } else {
            let widths = [(0, pad_rows), (0, pad_cols)];
            op("pad", ops::pad(&x, PadWidth::from(&widths), None, None))?
        };
        let blocks = op(
            "reshape",
            padded.reshape(&[cell_rows, self.row_step, self.out_cols, self.col_step]),
        )?;
        op(
            "sum",
            op("sum", blocks.sum_axis(3, None))?.sum_axis(1, None),
        )
    }

    /// The heatmap from the cell sums of every part, in order.
    fn finish(self, sums: &[f32]) -> Heatmap {
        let to = |v: i32| usize::try_from(v).unwrap_or(0);
        let (rows, cols, rs, cs) = (
            to(self.out_rows),
            to(self.out_cols).max(1),
            to(self.row_step).max(1),
            to(self.col_step).max(1),
        );
        let (total_rows, total_cols) = (to(self.rows), to(self.cols));
        let values = sums
            .iter()
            .enumerate()
            .map(|(i, sum)| {
                let (r, c) = (i / cols, i % cols);
                let in_rows = rs.min(total_rows.saturating_sub(r * rs)).max(1);
                let in_cols = cs.min(total_cols.saturating_sub(c * cs)).max(1);
                sum / (in_rows * in_cols) as f32
            })
            .collect();
        Heatmap {
            rows,
            cols,
            row_step: rs,
            col_step: cs,
            values,
        }
    }
}

/// Two passes over the values, chunk by chunk on two streams: statistics
/// (minimum, maximum and shifted sums at once), then histogram bins and
/// heatmap cells from the same chunk. Only per-chunk scalars, partial sums,
/// bin counts (or, on the CPU, one chunk of bin numbers at a time) and the
/// heatmap cells reach the host.
fn summarize_input(
    input: &Input<'_>,
    first_count: usize,
    bins: usize,
    heatmap_limit: usize,
    plan: Plan,
) -> Result<ValueSummary, MlxError> {
    let n = input.len();
    let grid = Grid::new(input.shape(), heatmap_limit);
    let mut granule = lcm(input.granule(), grid.map_or(1, Grid::granule));
    let aligned = lcm(granule, i64::from(SUM_BLOCK));
    if aligned <= plan.chunk {
        granule = aligned;
    }
    let parts = parts(n, granule, plan.chunk)?;
    let Some(&first_part) = parts.first() else {
        return Ok(ValueSummary::empty());
    };
    let head = input.values(first_part)?;
    // The centre as the device subtracts it, in f32.
    let sample = op(
        "slice",
        head.try_index(0..first_part.len.min(CENTRE_SAMPLE)),
    )?;
    #[allow(clippy::cast_possible_truncation)]
    let centre_value = f64::from(centre(&sample)? as f32);
    #[allow(clippy::cast_possible_truncation)]
    let centre = (centre_value != 0.0).then(|| Array::from_f32(centre_value as f32));
    let first_n = i32::try_from(first_count)
        .unwrap_or(i32::MAX)
        .min(first_part.len);
    let first = to_f32_vec(&op("slice", head.try_index(0..first_n))?)?;
    drop((head, sample));

    // Pass 1: statistics; parts that met NaN or Inf are done again with
    // masks (rare).
    let mut part_stats = Vec::with_capacity(parts.len());
    for window in parts.chunks(WINDOW) {
        let sums: Vec<PartSums> = window
            .iter()
            .enumerate()
            .map(|(i, part)| {
                on_stream(i, || {
                    PartSums::new(
                        &input.values(*part)?,
                        part.len,
                        centre.as_ref(),
                        false,
                        plan,
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        evaluate_all(sums.iter().flat_map(PartSums::outputs))?;
        for s in &sums {
            part_stats.push(PartStats::read(s)?);
        }
    }
    for (i, part) in parts.iter().enumerate() {
        if !part_stats[i].all_finite() {
            let masked =
                PartSums::new(&input.values(*part)?, part.len, centre.as_ref(), true, plan)?;
            evaluate_all(masked.outputs())?;
            part_stats[i] = PartStats::read(&masked)?;
        }
    }
    let stats = combine(&part_stats, n, centre_value);
    let clean: Vec<bool> = part_stats.iter().map(|p| p.nan + p.inf == 0).collect();

    // Pass 2: histogram bins and heatmap cells.
    let (histogram, heat_sums) = match second_pass(input, &parts, &clean, &stats, bins, grid, plan)
    {
        Err(_) if plan.bins == BinsOn::Kernel && !plan.forced => {
            // Our kernel did not compile or run here: MLX's scatter-add
            // from now on.
            KERNEL_FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
            let plan = Plan {
                bins: BinsOn::Scatter,
                ..plan
            };
            second_pass(input, &parts, &clean, &stats, bins, grid, plan)?
        }
        result => result?,
    };
    Ok(ValueSummary {
        stats,
        histogram,
        first,
        heatmap: grid.map(|g| g.finish(&heat_sums)),
    })
}

/// The statistics of the whole tensor from those of its parts.
fn combine(parts: &[PartStats], n: i64, centre: f64) -> Stats {
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

/// How values become bin numbers: `(x - min) * scale` lies in `[0, bins]`
/// for finite `x` (the maximum lands on `bins` and belongs to the last
/// bin); non-finite values get `bins + 1` and are not counted.
struct Binning {
    bins: usize,
    lo: Array,
    scale: Array,
    /// `[lo, scale]` for the kernel.
    params: Array,
    /// Values may be large enough for `x - min` to overflow `f32`: clip
    /// before the cast (otherwise `x - min` lies in `[0, max - min]` and
    /// the scaled value in `[0, bins]` within a rounding, no clip needed).
    clip: bool,
}

impl Binning {
    /// `(x - min) * scale` for the flat `x` of one part, in `[0, bins]`
    /// (clipped when [`Binning::clip`] says so, so that no value overflows
    /// the cast that follows), with non-finite values at `bins + 1` unless
    /// the part is `clean`.
    fn scaled(&self, x: &Array, clean: bool) -> Result<Array, MlxError> {
        let scaled = op(
            "scale",
            op("subtract", x.subtract(&self.lo))?.multiply(&self.scale),
        )?;
        let scaled = if self.clip {
            #[allow(clippy::cast_precision_loss)]
            let top = Array::from_f32(self.bins as f32);
            op("clip", ops::minimum(&scaled, &top))?
        } else {
            scaled
        };
        if clean {
            return Ok(scaled);
        }
        let keep = op("isfinite", x.is_finite())?;
        #[allow(clippy::cast_precision_loss)]
        let skip = Array::from_f32((self.bins + 1) as f32);
        op("where", ops::select(&keep, &scaled, &skip))
    }

    /// One byte per value (the CPU path; `bins` < 255).
    fn bytes(&self, x: &Array, clean: bool) -> Result<Array, MlxError> {
        // The cast truncates, which is floor for these non-negative values.
        op("cast", self.scaled(x, clean)?.as_dtype(Dtype::Uint8))
    }

    /// The counts of `bins + 2` bin numbers of the flat `x` of `len`
    /// values, counted on the device in blocks of [`BIN_BLOCK`] values (see
    /// there), `[bins + 2]` as `u32`, lazy.
    fn device_counts(&self, x: &Array, len: i32, clean: bool) -> Result<Array, MlxError> {
        let idx = op("cast", self.scaled(x, clean)?.as_dtype(Dtype::Int32))?;
        let width = i32::try_from(self.bins + 2).unwrap_or(i32::MAX);
        let main = len - len % BIN_BLOCK;
        let mut counts: Option<Array> = None;
        let mut add = |rows: i32, block: i32, idx: Array| -> Result<(), MlxError> {
            let idx = op("reshape", idx.reshape(&[rows, block]))?;
            let zeros = op("zeros", Array::zeros::<u32>(&[rows, width]))?;
            let ones = op(
                "ones",
                ops::broadcast_to(Array::from_slice(&[1u32], &[1]), &[rows, block]),
            )?;
            let per_row = scatter_add_axis(&zeros, &idx, &ones, 1)?;
            let total = op("sum", per_row.sum_axis(0, None))?;
            counts = Some(match counts.take() {
                Some(c) => op("add", c.add(&total))?,
                None => total,
            });
            Ok(())
        };
        if main > 0 {
            let body = if main == len {
                idx.clone()
            } else {
                op("slice", idx.try_index(0..main))?
            };
            add(main / BIN_BLOCK, BIN_BLOCK, body)?;
        }
        if main < len {
            add(1, len - main, op("slice", idx.try_index(main..len))?)?;
        }
        counts.ok_or_else(|| MlxError::op("histogram", "an empty part"))
    }
}

/// Pass 2: the histogram (bins over `[stats.min, stats.max]`) and the
/// heatmap's cell sums of every part, in order. `clean[i]`: part `i` holds
/// no NaN or Inf.
fn second_pass(
    input: &Input<'_>,
    parts: &[Part],
    clean: &[bool],
    stats: &Stats,
    bins: usize,
    grid: Option<Grid>,
    plan: Plan,
) -> Result<(Histogram, Vec<f32>), MlxError> {
    let counting = stats.finite > 0 && bins > 0 && plan.bins != BinsOn::Nowhere;
    let bins = match plan.bins {
        // Bytes: 255 and 254 are taken.
        BinsOn::Host | BinsOn::Nowhere => bins.min(usize::from(u8::MAX) - 1),
        BinsOn::Scatter => bins.min(1 << 16),
        BinsOn::Kernel => bins.min(kernel::MAX_SLOTS - 2),
    };
    let width = stats.max - stats.min;
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let (lo, scale) = (
        stats.min as f32,
        if width > 0.0 {
            (bins as f64 / width) as f32
        } else {
            0.0
        },
    );
    let binning = Binning {
        bins,
        lo: Array::from_f32(lo),
        scale: Array::from_f32(scale),
        params: Array::from_slice(&[lo, scale], &[2]),
        clip: stats.min.abs().max(stats.max.abs()) >= f64::from(f32::MAX) / 4.0,
    };
    let mut local = vec![0u64; bins + 2];
    let mut heat_sums = Vec::new();
    if plan.bins != BinsOn::Host || !counting {
        // Nothing to do on the host per chunk: counts add up on the device
        // and the cells are read once at the end.
        let mut total: Option<Array> = None;
        let mut cells = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            on_stream(i, || -> Result<(), MlxError> {
                let x = input.values(*part)?;
                if counting {
                    let counts = if plan.bins == BinsOn::Kernel {
                        kernel::histogram_counts(&x, &binning.params, bins + 2)?
                    } else {
                        binning.device_counts(&x, part.len, clean[i])?
                    };
                    total = Some(match total.take() {
                        Some(t) => op("add", t.add(&counts))?,
                        None => counts,
                    });
                }
                if let Some(g) = grid {
                    cells.push(g.band_sums(&x, *part, !clean[i])?);
                }
                op(
                    "evaluate",
                    mlx_rs::transforms::async_eval(total.iter().chain(cells.last())),
                )
            })?;
        }
        if let Some(total) = &total {
            evaluate(total)?;
            let counts = total
                .try_as_slice::<u32>()
                .map_err(|e| MlxError::op("read bin counts", e))?;
            for (sum, add) in local.iter_mut().zip(counts) {
                *sum += u64::from(*add);
            }
        }
        if !cells.is_empty() {
            heat_sums = to_f32_vec(&op("concatenate", ops::concatenate(&cells, 0))?)?;
        }
    } else {
        host_pass(
            input,
            parts,
            clean,
            &binning,
            grid,
            &mut local,
            &mut heat_sums,
        )?;
    }
    let mut counts = vec![0u64; bins];
    if counting {
        counts.copy_from_slice(&local[..bins]);
        // The maximum lands exactly on `bins`: it belongs to the last bin.
        if let Some(last) = counts.last_mut() {
            *last += local[bins];
        }
    }
    Ok((
        Histogram {
            min: stats.min,
            max: stats.max,
            counts,
        },
        heat_sums,
    ))
}

/// Pass 2 on the CPU: bin numbers come to the host a byte per value, chunk
/// by chunk on both streams, and are counted there while the next chunks
/// are computed (MLX's CPU scatter-add is slower); the heatmap's cells of
/// each chunk come with them.
fn host_pass(
    input: &Input<'_>,
    parts: &[Part],
    clean: &[bool],
    binning: &Binning,
    grid: Option<Grid>,
    local: &mut [u64],
    heat_sums: &mut Vec<f32>,
) -> Result<(), MlxError> {
    type Pending = std::collections::VecDeque<(Array, Option<Array>)>;
    let mut byte_counts = [0u64; 256];
    let mut drain = |pending: &mut Pending, keep: usize| -> Result<(), MlxError> {
        while pending.len() > keep {
            let Some((bytes, cells)) = pending.pop_front() else {
                break;
            };
            evaluate_all(std::iter::once(&bytes).chain(cells.iter()))?;
            let chunk = bytes
                .try_as_slice::<u8>()
                .map_err(|e| MlxError::op("read bin numbers", e))?;
            count_bytes(chunk, &mut byte_counts);
            if let Some(c) = &cells {
                heat_sums.extend(to_f32_vec(c)?);
            }
        }
        Ok(())
    };
    let mut pending = Pending::new();
    for (i, part) in parts.iter().enumerate() {
        let out = on_stream(i, || -> Result<_, MlxError> {
            let x = input.values(*part)?;
            let bytes = binning.bytes(&x, clean[i])?;
            let cells = grid
                .map(|g| g.band_sums(&x, *part, !clean[i]))
                .transpose()?;
            op(
                "evaluate",
                mlx_rs::transforms::async_eval(std::iter::once(&bytes).chain(cells.iter())),
            )?;
            Ok((bytes, cells))
        })?;
        pending.push_back(out);
        // Two chunks in flight, one per stream, while the host counts.
        drain(&mut pending, 2)?;
    }
    drain(&mut pending, 0)?;
    for (total, add) in local.iter_mut().zip(byte_counts) {
        *total += add;
    }
    Ok(())
}

/// `a` with `values` added at `indices` along `axis` (MLX's
/// `scatter_add_axis`, which mlx-rs does not wrap), lazy.
fn scatter_add_axis(
    a: &Array,
    indices: &Array,
    values: &Array,
    axis: i32,
) -> Result<Array, MlxError> {
    let stream = Stream::thread_local_or_default();
    let mut result = None;
    #[allow(unsafe_code)]
    // SAFETY: `a`, `indices`, `values` and `stream` are live mlx-rs handles;
    // `out` receives a new array that `Array::from_ptr` owns only when the
    // call succeeded, and is freed here otherwise.
    let status = unsafe {
        let mut out = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_scatter_add_axis(
            &raw mut out,
            a.as_ptr(),
            indices.as_ptr(),
            values.as_ptr(),
            axis,
            stream.as_ptr(),
        );
        if status == 0 {
            result = Some(Array::from_ptr(out));
        } else {
            mlx_sys::mlx_array_free(out);
        }
        status
    };
    match result {
        Some(array) if status == 0 => Ok(array),
        _ => Err(MlxError::op("scatter-add", "MLX refused the bin counts")),
    }
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::cast_precision_loss)]
mod tests {
    use super::{BinsOn, Input, Plan, summarize_input};
    use mlx_rs::Array;
    use mlx_rs::ops::indexing::TryIndexOp;

    /// Values with a spread, a run of equal values, NaN and ±Inf.
    fn data(n: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n)
            .map(|i| {
                let t = (i as f32) * 0.618_034;
                (t - t.floor() - 0.5) * 0.04 + 0.001
            })
            .collect();
        for x in &mut v[1000..3000] {
            *x = 0.0125;
        }
        v[70_000] = f32::NAN;
        v[n - 3] = f32::INFINITY;
        v[n - 2] = f32::NEG_INFINITY;
        v
    }

    #[test]
    fn bins_counted_on_the_device_match_those_counted_on_the_host() {
        // 3 x 2^18 + 1234 values as [rows, 1001]: parts of 2^18 values (the
        // GPU plan's shape at a small scale: row-block and two-level partial
        // sums, bins counted in blocks and added up on the device, a tail
        // shorter than a block), run here on the CPU backend.
        let cols = 1001usize;
        let rows = (3 * (1usize << 18) + 1234) / cols;
        let n = rows * cols;
        let values = data(n);
        let shape = [i32::try_from(rows).unwrap(), i32::try_from(cols).unwrap()];
        let array = Array::from_slice(&values, &shape);
        let flat = array.reshape(&[-1]).unwrap();
        flat.eval().unwrap();
        let input = Input::Flat {
            flat,
            shape: shape.to_vec(),
        };
        let host = Plan {
            chunk: 1 << 18,
            bins: BinsOn::Host,
            forced: true,
            gpu: false,
        };
        let device = Plan {
            bins: BinsOn::Scatter,
            gpu: true,
            ..host
        };
        let a = summarize_input(&input, 16, 64, 128, host).unwrap();
        let b = summarize_input(&input, 16, 64, 128, device).unwrap();
        assert_eq!(a.histogram, b.histogram);
        // Our CUDA kernel is refused on this backend: the summary falls back
        // to the scatter-add and still counts every value.
        let kernel = Plan {
            bins: BinsOn::Kernel,
            forced: false,
            ..device
        };
        let c = summarize_input(&input, 16, 64, 128, kernel).unwrap();
        assert_eq!(a.histogram, c.histogram);
        assert!(super::KERNEL_FAILED.load(std::sync::atomic::Ordering::Relaxed));
        let forced = Plan {
            forced: true,
            ..kernel
        };
        assert!(summarize_input(&input, 16, 64, 128, forced).is_err());
        assert_eq!(a.histogram.counts.iter().sum::<u64>(), a.stats.finite);
        assert_eq!(a.histogram.counts.len(), 64);
        assert_eq!((a.stats.nan, a.stats.inf), (1, 2));
        assert_eq!((b.stats.nan, b.stats.inf), (1, 2));
        assert_eq!((a.stats.min, a.stats.max), (b.stats.min, b.stats.max));
        assert!((a.stats.mean - b.stats.mean).abs() <= 1e-6 * a.stats.std);
        assert!((a.stats.std - b.stats.std).abs() <= 1e-6 * a.stats.std);
        assert_eq!(a.first, b.first);
        assert_eq!(a.heatmap, b.heatmap);
        // Against float64 on the host.
        let finite: Vec<f64> = values
            .iter()
            .filter(|v| v.is_finite())
            .map(|&v| f64::from(v))
            .collect();
        let mean = finite.iter().sum::<f64>() / finite.len() as f64;
        let std =
            (finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / finite.len() as f64).sqrt();
        assert!(
            (b.stats.mean - mean).abs() <= 1e-6 * std,
            "{} vs {mean}",
            b.stats.mean
        );
        assert!(
            (b.stats.std - std).abs() <= 1e-5 * std,
            "{} vs {std}",
            b.stats.std
        );
        // The run of equal values lands in one bin, whole.
        let width = (a.stats.max - a.stats.min) / 64.0;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let bin = ((0.0125 - a.stats.min) / width) as usize;
        assert!(b.histogram.counts[bin] >= 2000);
    }

    /// An affine-packed weight as the weights layer hands it over.
    struct Packed {
        shape: Vec<i32>,
        weight: Array,
        scales: Array,
        biases: Array,
    }

    impl super::RowBands for Packed {
        fn shape(&self) -> &[i32] {
            &self.shape
        }
        fn rows(&self) -> i32 {
            self.shape[0]
        }
        fn cols(&self) -> i32 {
            self.shape[1]
        }
        fn align(&self) -> i32 {
            1
        }
        fn band(&self, r0: i32, r1: i32) -> Result<Array, super::MlxError> {
            let rows = |a: &Array| a.try_index(r0..r1).unwrap();
            crate::mlx::dequantize(
                &rows(&self.weight),
                &rows(&self.scales),
                Some(&rows(&self.biases)),
                "affine",
                64,
                4,
                None,
            )
        }
        fn affine_words(&self) -> Option<super::kernel::AffineWords<'_>> {
            Some(super::kernel::AffineWords {
                weight: &self.weight,
                scales: &self.scales,
                biases: &self.biases,
                group_size: 64,
                bits: 4,
            })
        }
    }

    #[test]
    fn affine_weights_are_summarized_from_their_words_or_as_before() {
        use super::RowBands;
        let (rows, cols) = (96usize, 512usize);
        let values: Vec<f32> = data(rows * cols + 70_001)[..rows * cols]
            .iter()
            .map(|v| if v.is_finite() { *v } else { 0.0 })
            .collect();
        let w = Array::from_slice(&values, &[96, 512])
            .as_dtype(mlx_rs::Dtype::Float16)
            .unwrap();
        let parts = crate::mlx::quantize_mode(&w, "affine", 64, 4).unwrap();
        let packed = Packed {
            shape: vec![96, 512],
            weight: parts[0].clone(),
            scales: parts[1].clone(),
            biases: parts[2].clone(),
        };
        let words = packed.affine_words().unwrap();
        assert!(words.supported());
        assert!(!super::kernel::AffineWords { bits: 3, ..words }.supported());
        let host = Plan {
            chunk: 1 << 12,
            bins: BinsOn::Host,
            forced: true,
            gpu: false,
        };
        let reference = summarize_input(&Input::Bands(&packed), 16, 64, 32, host).unwrap();
        assert_eq!(reference.histogram.counts.iter().sum::<u64>(), 96 * 512);
        let kernel = Plan {
            bins: BinsOn::Kernel,
            forced: true,
            gpu: true,
            ..host
        };
        match super::fused_affine(&packed, 16, 64, 32, kernel) {
            // A CUDA device: the same summary, from the words.
            Some(Ok(fused)) => {
                assert_eq!(fused.histogram, reference.histogram);
                assert_eq!(fused.first, reference.first);
                assert_eq!(
                    (fused.stats.min, fused.stats.max),
                    (reference.stats.min, reference.stats.max)
                );
                assert!(
                    (fused.stats.mean - reference.stats.mean).abs() <= 1e-6 * reference.stats.std
                );
                let (a, b) = (fused.heatmap.unwrap(), reference.heatmap.unwrap());
                assert_eq!((a.rows, a.cols), (b.rows, b.cols));
                for (x, y) in a.values.iter().zip(&b.values) {
                    assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} vs {y}");
                }
            }
            // Here, the CPU: the kernel is refused; asked for it, that is
            // the error; otherwise the summary goes on as before.
            Some(Err(_)) => {
                let unforced = Plan {
                    forced: false,
                    ..kernel
                };
                assert!(super::fused_affine(&packed, 16, 64, 32, unforced).is_none());
                assert!(super::FUSED_FAILED.load(std::sync::atomic::Ordering::Relaxed));
                assert!(super::fused_affine(&packed, 16, 64, 32, kernel).is_none());
            }
            None => panic!("an affine 4-bit weight suits the fused summary"),
        }
    }

    #[test]
    fn values_near_the_f32_limits_land_in_the_end_bins() {
        let values = [f32::MAX, -f32::MAX, 0.0, 1.0, f32::NAN];
        let flat = Array::from_slice(&values, &[5]);
        flat.eval().unwrap();
        let input = Input::Flat {
            flat,
            shape: vec![5],
        };
        let mut results = Vec::new();
        for device_bins in [false, true] {
            let plan = Plan {
                chunk: 1 << 20,
                bins: if device_bins {
                    BinsOn::Scatter
                } else {
                    BinsOn::Host
                },
                forced: true,
                gpu: device_bins,
            };
            let s = summarize_input(&input, 5, 4, 16, plan).unwrap();
            // No bin number overflows (the scale is subnormal here, so the
            // middle values may round into the bin below the middle).
            let counts = &s.histogram.counts;
            assert_eq!(counts.iter().sum::<u64>(), 4, "device bins: {device_bins}");
            assert_eq!((counts[0], counts[3]), (1, 1), "device bins: {device_bins}");
            assert_eq!(s.stats.nan, 1);
            results.push(s.histogram);
        }
        assert_eq!(results[0], results[1]);
    }
}
