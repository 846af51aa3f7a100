//! Value summaries computed with MLX ops on the array's device: only scalars,
//! bin counts, the first values and a small heatmap are copied to the host,
//! so a 2 GB tensor does not need 2 GB more on the host.
//!
//! Here the plan (chunk size, where bins are counted), the parts a tensor
//! is cut into and the two passes' driver; `moments` holds the statistics
//! pass, `bins` the histogram's, `grid` the heatmap's cells, `fused` the
//! CUDA path that reads affine-packed weights straight from their words.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Device, Dtype, Stream};

use super::{MlxError, evaluate, evaluate_all, kernel, to_f32_vec};

mod bins;
mod fused;
mod grid;
mod moments;

use bins::second_pass;
use fused::{fused_affine, fused_dense, warm_up_affine, warm_up_dense};
use grid::Grid;
use moments::{PartStats, PartSums, centre};

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
pub struct ValueStats {
    /// Statistics.
    pub stats: Stats,
    /// Histogram of finite values.
    pub histogram: Histogram,
    /// The first values, row-major, as `f32`.
    pub first: Vec<f32>,
    /// For 2-D arrays, the downsampled heatmap: each cell the mean of its
    /// block's finite values.
    pub heatmap: Option<Heatmap>,
    /// The same cells, each the largest |value| of its block (finite
    /// values; where a mean hides an outlier, this shows it).
    pub heatmap_max_abs: Option<Heatmap>,
}

impl ValueStats {
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
            heatmap_max_abs: None,
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
}

/// Set once our histogram kernel failed on this machine: summaries use
/// MLX's scatter-add from then on.
static KERNEL_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether summaries on CUDA may use our kernels (see
/// [`use_summary_kernel`]).
static KERNEL_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets summaries on CUDA use our kernels (the fused dense and affine
/// summaries, the histogram). Preparing them costs tens of milliseconds
/// (compiled or read from their cache, `mlx::cuda`; docs/gpu.md), and they
/// then make a summary several times faster. Worth it for the window
/// (which prepares them at start-up, off the UI thread) and for `tensor
/// --repeat` or `--warm-up`; a one-shot command uses MLX's own ops. Off by
/// default.
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
    /// The plan for MLX's default device: one of two paths, chosen here.
    /// Our kernels where they are wanted, ready and have not failed (on
    /// CUDA compiled ahead, see `mlx::cuda`; on Metal the twin, with the
    /// `metal-kernel` feature, where it checked out); else MLX's own ops
    /// (`WEIGHTSCOPE_SUMMARY=ops` always takes these).
    fn for_default_device() -> Self {
        let gpu = default_is_gpu();
        let kernel = gpu
            && !crate::environment::get().summary_ops
            && KERNEL_WANTED.load(std::sync::atomic::Ordering::Relaxed)
            && !KERNEL_FAILED.load(std::sync::atomic::Ordering::Relaxed)
            && kernel::kernels_settled()
            && match kernel::Backend::BUILD {
                kernel::Backend::Cuda => kernel::kernels_ready(),
                kernel::Backend::Metal => fused::metal_agrees(),
            };
        let bins = if kernel {
            BinsOn::Kernel
        } else if gpu {
            BinsOn::Scatter
        } else {
            BinsOn::Host
        };
        Self {
            chunk: chunk_for(gpu),
            bins,
            forced: false,
            gpu,
        }
    }
}

/// A bound on the MLX memory a summary's temporaries take beside the
/// values it reads: eight `f32` arrays of one chunk on the default device.
#[must_use]
pub fn summary_scratch_bytes() -> u64 {
    // Not through `Plan`: on Metal that would run the kernel's check.
    8 * 4 * chunk_for(default_is_gpu()).unsigned_abs()
}

/// Whether MLX's default device is a GPU.
fn default_is_gpu() -> bool {
    super::default_device().is_ok_and(|d| d.kind == super::DeviceKind::Gpu)
}

/// Elements per chunk of the chunked path on a GPU or a CPU.
fn chunk_for(gpu: bool) -> i64 {
    if gpu { GPU_CHUNK } else { CPU_CHUNK }
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
) -> Result<ValueStats, MlxError> {
    // An empty tensor (a zero in its shape) is legal: nothing to reduce.
    if array.size() == 0 {
        return Ok(ValueStats::empty());
    }
    let flat = op("flatten", array.reshape(&[-1]))?;
    evaluate(&flat)?;
    if i32::try_from(flat.size()).is_err() {
        return Err(MlxError::op("summarize", "more than 2^31 elements"));
    }
    let plan = Plan::for_default_device();
    if let Some(done) = fused_dense(&flat, array.shape(), first_count, bins, heatmap_limit, plan) {
        return done;
    }
    let input = Input::Flat {
        flat,
        shape: array.shape().to_vec(),
    };
    summarize_input(&input, first_count, bins, heatmap_limit, plan)
}

/// Summarizes a small array once, so that a GPU compiles the summary's
/// kernels (MLX's and, when [`use_summary_kernel`] allows it, ours, see
/// `mlx::cuda`) before the first tensor is clicked.
/// Nothing to do on the CPU.
pub fn warm_up_summaries() {
    warm_up(false);
}

/// [`warm_up_summaries`] for the window: MLX's own kernels here, ours
/// compiled ahead (or read from their cache) on a thread of their own, so
/// that a click in the meantime is summarized at once by MLX's ops instead
/// of waiting. Where they cannot be compiled ahead, as
/// [`warm_up_summaries`].
pub fn warm_up_summaries_in_background() {
    warm_up(true);
}

fn warm_up(background: bool) {
    if !default_is_gpu() {
        return;
    }
    let values: Vec<f32> = (0u16..512).map(|i| f32::from(i) / 512.0).collect();
    let small = Array::from_slice(&values, &[2, 256]);
    // In the background first: the plan below must not compile ours on
    // this thread meanwhile (while they are being compiled, it is MLX's
    // ops, which this summary warms up).
    let ours_wanted = KERNEL_WANTED.load(std::sync::atomic::Ordering::Relaxed)
        && !crate::environment::get().summary_ops;
    if background
        && ours_wanted
        && kernel::Backend::BUILD == kernel::Backend::Cuda
        && kernel::prepare_kernels_in_background()
    {
        let _ = summarize(&small, 1, 64, 8);
        return;
    }
    let plan = Plan::for_default_device();
    let _ = summarize(&small, 1, 64, 8);
    if plan.bins == BinsOn::Kernel {
        // The kernels that summarize dense arrays (one per dtype) and
        // affine-packed weights (one for every bit width, group size and
        // shape).
        let _ = warm_up_dense(&small);
        let _ = warm_up_affine(&small);
    }
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
) -> Result<ValueStats, MlxError> {
    if bands.rows() <= 0 || bands.cols() <= 0 {
        return Ok(ValueStats::empty());
    }
    let plan = Plan::for_default_device();
    if let Some(done) = fused_affine(bands, first_count, bins, heatmap_limit, plan) {
        return done;
    }
    summarize_input(&Input::Bands(bands), first_count, bins, heatmap_limit, plan)
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
) -> Result<ValueStats, MlxError> {
    let n = input.len();
    let grid = Grid::new(input.shape(), heatmap_limit);
    let mut granule = lcm(input.granule(), grid.map_or(1, Grid::granule));
    let aligned = lcm(granule, i64::from(SUM_BLOCK));
    if aligned <= plan.chunk {
        granule = aligned;
    }
    let parts = parts(n, granule, plan.chunk)?;
    let Some(&first_part) = parts.first() else {
        return Ok(ValueStats::empty());
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
    let (heatmap, heatmap_max_abs) = grid.map(|g| g.finish(&heat_sums)).unzip();
    Ok(ValueStats {
        stats,
        histogram,
        first,
        heatmap,
        heatmap_max_abs,
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::cast_precision_loss)]
mod tests {
    use super::{BinsOn, Input, Plan, summarize_input};
    use mlx_rs::Array;

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
