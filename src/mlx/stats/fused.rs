//! Summaries on CUDA by our own kernels, one pass for the statistics and
//! heatmap cells and one for the bins: affine-packed weights straight from
//! their words (see `kernel::affine_stats`: nothing dequantized into memory
//! but the first rows), dense `f32`, `f16` and `bf16` arrays in their own
//! dtype (see `kernel::dense_stats`: nothing cast, nothing masked).

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Dtype};

use super::grid::Grid;
use super::kernel::Backend;
use super::moments::{PartStats, centre_of};
use super::{
    BinsOn, CENTRE_SAMPLE, Heatmap, Histogram, MlxError, Plan, RowBands, ValueStats, combine,
    evaluate, evaluate_all, kernel, op,
};

/// Values the device takes the centre from (see `kernel::dense_centre`):
/// fewer than the host's [`CENTRE_SAMPLE`], since one block reads them
/// before the statistics can start (docs/gpu.md has what 65,536 cost).
/// Any centre near the values keeps the sums exact enough; this one is
/// their mean or 0, as on the host.
const DEVICE_CENTRE_SAMPLE: i32 = 4096;

/// Set when the fused kernel for affine-packed weights failed once (it is
/// then not tried again in this process).
pub(super) static FUSED_FAILED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Set when the fused kernel for dense arrays failed once.
pub(super) static DENSE_FAILED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether fused summaries are wanted (`WEIGHTSCOPE_SUMMARY=ops`: MLX's
/// own ops, to compare with).
fn fused_wanted() -> bool {
    !crate::environment::get().summary_ops
}

/// The summary of an affine-packed weight from its words, by our kernel
/// (see `kernel::affine_stats`): the statistics and heatmap cells in one
/// pass, the bins in a second, nothing dequantized into memory but the
/// first values. `None` when the weight or the plan does not suit it.
pub(super) fn fused_affine(
    bands: &dyn RowBands,
    first_count: usize,
    bins: usize,
    heatmap_limit: usize,
    plan: Plan,
) -> Option<Result<ValueStats, MlxError>> {
    let words = bands.affine_words()?;
    let wanted = fused_wanted();
    let grid = Grid::new(bands.shape(), heatmap_limit)?;
    if !(wanted
        && Backend::BUILD == Backend::Cuda
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
) -> Result<ValueStats, MlxError> {
    // The first values and the centre from the first rows, dequantized by
    // MLX (a band of about CENTRE_SAMPLE values).
    let cols = bands.cols().max(1);
    let head_rows = (CENTRE_SAMPLE / cols).clamp(1, bands.rows());
    let head = op("reshape", bands.band(0, head_rows)?.reshape(&[-1]))?;
    let head = op("cast to f32", head.as_dtype(Dtype::Float32))?;
    let (centre_value, first) = head_values(&head, first_count)?;
    hand_back([head]);

    let cells = [grid.row_step, grid.col_step, grid.out_cols];
    let (float_out, count_out) = kernel::affine_stats(words, centre_value, grid.out_rows, cells)?;
    evaluate_all([&float_out, &count_out])?;
    let out_rows = usize::try_from(grid.out_rows).unwrap_or(0);
    let n = i64::from(bands.rows()) * i64::from(bands.cols());
    let floats = host_copy::<f32>(&float_out)?;
    let counts = host_copy::<u32>(&count_out)?;
    let stats = block_stats(&floats, &counts, out_rows, n, centre_value)?;
    let bins = Bins::launch(&stats, bins, |lo, scale, slots| {
        kernel::affine_counts(words, lo, scale, slots)
    })?;
    // The cells are read on the host while the device counts the bins.
    let (heatmap, heatmap_max_abs) =
        grid.heatmaps(&floats[out_rows * 6..], &counts[out_rows * 2..]);
    let histogram = bins.finish(&mut Phases::new())?;
    hand_back([float_out, count_out]);
    Ok(ValueStats {
        histogram,
        stats,
        first,
        heatmap: Some(heatmap),
        heatmap_max_abs: Some(heatmap_max_abs),
    })
}

/// The summary of a dense `f32`, `f16` or `bf16` array by our kernel (see
/// `kernel::dense_stats`): statistics and both heatmaps in one pass over
/// the values in their own dtype, the bins in a second. `flat` is the
/// array flattened (and evaluated), `shape` its own. `None` when the array
/// or the plan does not suit it.
pub(super) fn fused_dense(
    flat: &Array,
    shape: &[i32],
    first_count: usize,
    bins: usize,
    heatmap_limit: usize,
    plan: Plan,
) -> Option<Result<ValueStats, MlxError>> {
    let grid = Grid::new(shape, heatmap_limit);
    let (rows, cols) = match grid {
        Some(g) => (g.rows, g.cols),
        None => (1, i32::try_from(flat.size()).ok()?),
    };
    let values = kernel::DenseValues {
        flat,
        rows,
        cols,
        backend: Backend::BUILD,
    };
    if !(fused_wanted()
        && plan.bins == BinsOn::Kernel
        && (plan.forced || !DENSE_FAILED.load(std::sync::atomic::Ordering::Relaxed))
        && values.supported()
        && grid.is_none_or(|g| usize::try_from(g.out_cols).is_ok_and(|c| c <= kernel::MAX_CELLS))
        && (values.backend == Backend::Cuda || metal_agrees()))
    {
        return None;
    }
    let result = fused_dense_summary(&values, grid, first_count, bins, true);
    // Metal sums in pairs of `f32`: squares of values past 2^60 could
    // overflow them, so such a tensor goes to MLX's ops.
    if values.backend == Backend::Metal
        && result
            .as_ref()
            .is_ok_and(|s| s.stats.min.abs().max(s.stats.max.abs()) > METAL_LARGEST)
    {
        return None;
    }
    if result.is_err() && !plan.forced {
        DENSE_FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
        return None;
    }
    Some(result)
}

/// The summary of a dense array by our kernel: launched by us where
/// `direct` and this process can (`mlx::cuda`), else by MLX.
fn fused_dense_summary(
    values: &kernel::DenseValues<'_>,
    grid: Option<Grid>,
    first_count: usize,
    bins: usize,
    direct: bool,
) -> Result<ValueStats, MlxError> {
    let mut phases = Phases::new();
    // A tensor just loaded is in pages the host wrote: moved over in bulk
    // first, not faulted over by the kernel.
    crate::mlx::cuda::array_to_device_now(values.flat);
    phases.mark("pages to the device");
    let n = i64::from(values.rows) * i64::from(values.cols);
    let wanted = i64::try_from(first_count.max(1)).unwrap_or(i64::MAX);
    let first_len = i32::try_from(n.min(wanted)).unwrap_or(1);
    let layout = kernel::DenseLayout::new(
        values.rows,
        values.cols,
        grid.map(|g| [g.row_step, g.col_step, g.out_rows, g.out_cols]),
    )
    .for_backend(values.backend);
    if direct
        && values.backend == Backend::Cuda
        && let Some(done) = direct_dense_summary(
            values,
            grid,
            layout,
            usize::try_from(first_len).unwrap_or(1),
            first_count,
            bins,
            &mut phases,
        )
    {
        return done;
    }
    // The first values, copied from the tensor by the device's copy engine
    // (its pages stay on the device). Where there is no such copy, an MLX
    // copy of them evaluated with the rest (the cast copies `f16` and
    // `bf16`; an `f32` slice is a view): the host reading a view of `flat`
    // would move its pages off the device, and the kernel fault them back.
    let copied = first_values(values.flat, usize::try_from(first_len).unwrap_or(1));
    let head = if copied.is_some() {
        None
    } else {
        let head = op("slice", values.flat.try_index(0..first_len))?;
        Some(if values.flat.dtype() == Dtype::Float32 {
            op("copy", head.multiply(Array::from_f32(1.0)))?
        } else {
            op("cast to f32", head.as_dtype(Dtype::Float32))?
        })
    };
    // The centre, the statistics and the cells in one evaluation: the
    // centre is worked out on the device from the first values.
    let centre = kernel::dense_centre(values, DEVICE_CENTRE_SAMPLE)?;
    let (float_out, count_out) = kernel::dense_stats(values, &centre, layout)?;
    evaluate_all(head.iter().chain([&centre, &float_out, &count_out]))?;
    let centre_value = host_copy::<f32>(&centre)?
        .first()
        .copied()
        .ok_or_else(|| MlxError::op("summary kernel", "no centre"))?;
    let first: Vec<f32> = match (copied, &head) {
        (Some(first), _) => first,
        (None, Some(head)) => host_copy::<f32>(head)?
            .iter()
            .take(first_count)
            .copied()
            .collect(),
        (None, None) => Vec::new(),
    };
    if let Some(head) = head {
        hand_back([head]);
    }
    hand_back([centre]);
    phases.mark("stats kernel");
    let blocks = usize::try_from(layout.blocks()).unwrap_or(0);
    let (floats, counts) = (host_copy::<f32>(&float_out)?, host_copy::<u32>(&count_out)?);
    let stats = block_stats(&floats, &counts, blocks, n, centre_value)?;
    phases.mark("read back");
    let pending = Bins::launch(&stats, bins, |lo, scale, slots| {
        kernel::dense_counts(values, lo, scale, slots)
    })?;
    // The cells are read on the host while the device counts the bins.
    let (heatmap, heatmap_max_abs) = grid
        .map(|g| g.heatmaps(&floats[blocks * 6..], &counts[blocks * 2..]))
        .unzip();
    phases.mark("cells");
    let histogram = pending.finish(&mut phases)?;
    hand_back([float_out, count_out]);
    phases.say(&format!("{layout:?}"));
    Ok(ValueStats {
        stats,
        histogram,
        first,
        heatmap,
        heatmap_max_abs,
    })
}

/// The largest |value| the Metal twin summarizes (see `fused_dense`).
const METAL_LARGEST: f64 = 1.152_921_504_606_847e18; // 2^60

/// Whether the Metal twin of the dense kernel may be used in this process:
/// it has never run on a device here, so at first use it summarizes a test
/// array (NaN, ±Inf, a spread, several rows of cells) and must agree with
/// MLX's own ops ([`summaries_agree`]); if it does not, or fails, MLX's
/// ops summarize everything (said once on stderr). Never without the
/// `metal-kernel` feature (off by default).
pub(super) fn metal_agrees() -> bool {
    if !cfg!(feature = "metal-kernel") {
        return false;
    }
    thread_local! {
        static CHECKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    static AGREES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // The check's own summaries do not ask again.
    if CHECKING.get() {
        return false;
    }
    *AGREES.get_or_init(|| {
        CHECKING.set(true);
        let agrees = twin_agrees(Backend::Metal);
        CHECKING.set(false);
        if !agrees {
            eprintln!(
                "weightscope: the Metal summary kernel did not reproduce MLX's own summary of a test array; MLX's ops summarize instead"
            );
        }
        agrees
    })
}

/// Whether the dense kernel through `backend` summarizes a test array as
/// the chunked path of MLX's ops does; `false` when it cannot run.
fn twin_agrees(backend: Backend) -> bool {
    let (rows, cols) = (96_i32, 520_i32);
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| match i {
            5 => f32::NAN,
            77 => f32::INFINITY,
            1234 => f32::NEG_INFINITY,
            _ => {
                let t = f32::from(u16::try_from(i % 1000).unwrap_or(0)) / 250.0 - 2.0;
                t * f32::from(u8::try_from(1 + i % 13).unwrap_or(1))
            }
        })
        .collect();
    let shape = [rows, cols];
    let run = || -> Result<bool, MlxError> {
        let flat = Array::from_slice(&values, &[rows * cols]);
        evaluate(&flat)?;
        let dense = kernel::DenseValues {
            flat: &flat,
            rows,
            cols,
            backend,
        };
        let grid = Grid::new(&shape, 64);
        let fused = fused_dense_summary(&dense, grid, 8, 64, false)?;
        let plan = Plan {
            chunk: 1 << 14,
            bins: BinsOn::Scatter,
            forced: true,
            gpu: true,
        };
        let input = super::Input::Flat {
            flat: flat.clone(),
            shape: shape.to_vec(),
        };
        let reference = super::summarize_input(&input, 8, 64, 64, plan)?;
        Ok(summaries_agree(&fused, &reference))
    };
    run().unwrap_or(false)
}

/// Whether a fused summary says what the chunked path says of the same
/// values: the same histogram bin for bin, extremes, counts and first
/// values; mean and std within 1e-6 of the spread (the chunked path sums
/// `f32` blocks); heatmaps of the same grid, cells within 1e-5.
fn summaries_agree(fused: &ValueStats, reference: &ValueStats) -> bool {
    let (a, b) = (&fused.stats, &reference.stats);
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-6 * b.std.max(f64::MIN_POSITIVE);
    let cells_agree = |x: &Option<Heatmap>, y: &Option<Heatmap>| match (x, y) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            (x.rows, x.cols, x.row_step, x.col_step) == (y.rows, y.cols, y.row_step, y.col_step)
                && x.values.len() == y.values.len()
                && x.values
                    .iter()
                    .zip(&y.values)
                    .all(|(p, q)| (p - q).abs() <= 1e-5 * (1.0 + q.abs()))
        }
        _ => false,
    };
    fused.histogram == reference.histogram
        && fused.first.len() == reference.first.len()
        && fused
            .first
            .iter()
            .zip(&reference.first)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        && (a.min, a.max, a.nan, a.inf, a.finite) == (b.min, b.max, b.nan, b.inf, b.finite)
        && close(a.mean, b.mean)
        && (a.std - b.std).abs() <= 1e-6 * b.std.max(f64::MIN_POSITIVE)
        && cells_agree(&fused.heatmap, &reference.heatmap)
        && cells_agree(&fused.heatmap_max_abs, &reference.heatmap_max_abs)
}

/// A summary's phases and their times, said on stderr when
/// `WEIGHTSCOPE_SUMMARY_PHASES` is set (benchmarks on a device).
struct Phases {
    on: bool,
    last: std::time::Instant,
    said: Vec<(&'static str, f64)>,
}

impl Phases {
    fn new() -> Self {
        Self {
            on: crate::environment::get().summary_phases,
            last: std::time::Instant::now(),
            said: Vec::new(),
        }
    }

    fn mark(&mut self, what: &'static str) {
        if self.on {
            let now = std::time::Instant::now();
            self.said
                .push((what, (now - self.last).as_secs_f64() * 1e3));
            self.last = now;
        }
    }

    fn say(&self, detail: &str) {
        if self.on {
            let parts: Vec<String> = self
                .said
                .iter()
                .map(|(what, ms)| format!("{what} {ms:.3} ms"))
                .collect();
            eprintln!("summary phases: {} ({detail})", parts.join(", "));
        }
    }
}

/// [`fused_dense_summary`] with the kernel launched by us (`mlx::cuda`):
/// the same jobs, blocks and parameters, so the same figures. `None` where
/// this process leaves the launches to MLX.
fn direct_dense_summary(
    values: &kernel::DenseValues<'_>,
    grid: Option<Grid>,
    layout: kernel::DenseLayout,
    first_len: usize,
    first_count: usize,
    bins: usize,
    phases: &mut Phases,
) -> Option<Result<ValueStats, MlxError>> {
    let x = device_address(values.flat)?;
    let item = values.flat.item_size();
    let centre = values.centre_job(DEVICE_CENTRE_SAMPLE).ok()?;
    let stats_job = values.stats_job(layout).ok()?;
    let failed = |why: crate::mlx::CudaError| MlxError::op("summary kernel", why);
    let mut run = crate::mlx::cuda::start(x, first_len * item, &centre, &stats_job)?;
    let summary = (|| {
        let n = i64::from(values.rows) * i64::from(values.cols);
        let blocks = usize::try_from(stats_job.blocks).unwrap_or(0);
        // The heatmaps' memory is made ready while the device works: one
        // buffer during the statistics, the other during the bins.
        let means_buffer = grid.map(Grid::heatmap_buffer);
        phases.mark("heatmap memory");
        let (stats, first) = {
            let figures = run.figures().map_err(failed)?;
            phases.mark("stats kernel");
            let stats = block_stats(figures.floats, figures.counts, blocks, n, figures.centre)?;
            (
                stats,
                first_of_bytes(figures.first, values.flat.dtype(), first_count),
            )
        };
        phases.mark("read back");
        let count = bins.min(kernel::MAX_SLOTS - 2);
        if stats.finite > 0 && count > 0 {
            let (lo, scale) = super::bins::bin_scale(&stats, count);
            let job = values.counts_job(count + 2)?;
            run.count_bins(&job, lo, scale).map_err(failed)?;
        }
        let (heatmap, heatmap_max_abs) = match grid.zip(means_buffer) {
            Some((g, means_buffer)) => {
                let peaks_buffer = g.heatmap_buffer();
                phases.mark("heatmap memory");
                let (sums, peaks) = run.cells().map_err(failed)?;
                let (means, largest) = g.heatmaps_into(sums, peaks, [means_buffer, peaks_buffer]);
                (Some(means), Some(largest))
            }
            None => (None, None),
        };
        phases.mark("cells");
        let histogram = histogram_of(count, (stats.min, stats.max), run.slots().map_err(failed)?);
        phases.mark("bins");
        phases.say(&format!("{layout:?}, launched directly"));
        Ok(ValueStats {
            stats,
            histogram,
            first,
            heatmap,
            heatmap_max_abs,
        })
    })();
    Some(summary)
}

/// The device address of an evaluated `f32`, `f16` or `bf16` array's
/// values (managed memory, which the device reads at the address the host
/// sees).
fn device_address(flat: &Array) -> Option<u64> {
    let address = match flat.dtype() {
        Dtype::Float32 => flat.try_as_slice::<f32>().ok()?.as_ptr() as usize,
        Dtype::Float16 => flat.try_as_slice::<half::f16>().ok()?.as_ptr() as usize,
        Dtype::Bfloat16 => flat.try_as_slice::<half::bf16>().ok()?.as_ptr() as usize,
        _ => return None,
    };
    u64::try_from(address).ok()
}

/// The first `count` values of `bytes` (the start of a tensor of `dtype`)
/// as `f32` (every `f16` and `bf16` is one exactly).
fn first_of_bytes(bytes: &[u8], dtype: Dtype, count: usize) -> Vec<f32> {
    let words = |size: usize| bytes.chunks_exact(size).take(count);
    match dtype {
        Dtype::Float32 => words(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::Float16 => words(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::Bfloat16 => words(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => Vec::new(),
    }
}

/// The histogram of `count` bins over `[min, max]` from a bin kernel's
/// slot counts (`count + 2` of them; none without finite values).
fn histogram_of(count: usize, (min, max): (f64, f64), slots: &[u32]) -> Histogram {
    let mut counts = vec![0u64; count];
    for (count, slot) in counts.iter_mut().zip(slots) {
        *count = u64::from(*slot);
    }
    // The maximum lands exactly on `count`: it belongs to the last bin.
    if let (Some(last), Some(top)) = (counts.last_mut(), slots.get(count)) {
        *last += u64::from(*top);
    }
    Histogram { min, max, counts }
}

/// The centre the sums are taken around and the first `first_count`
/// values, from the first values of a tensor (flat `f32`, copied to the
/// host once).
fn head_values(head: &Array, first_count: usize) -> Result<(f32, Vec<f32>), MlxError> {
    evaluate(head)?;
    let values = host_slice::<f32>(head)?;
    #[allow(clippy::cast_possible_truncation)]
    let centre_value = centre_of(values) as f32;
    Ok((
        centre_value,
        values[..first_count.min(values.len())].to_vec(),
    ))
}

/// Drops arrays whose values the host has read. On CUDA their buffers
/// go to MLX's cache, where the next GPU output of their size takes them:
/// their pages are sent back to the device first (`mlx::cuda`), so that
/// this kernel does not fault them over one by one.
fn hand_back<const N: usize>(arrays: [Array; N]) {
    for array in arrays {
        crate::mlx::cuda::array_to_device(&array);
    }
}

/// The first `count` values of the evaluated `f32`, `f16` or `bf16` array
/// `flat` as `f32` (every `f16` and `bf16` is one exactly), copied by the
/// device's copy engine; `None` where there is no such copy.
fn first_values(flat: &Array, count: usize) -> Option<Vec<f32>> {
    use crate::mlx::cuda::copy_to_host;
    match flat.dtype() {
        Dtype::Float32 => copy_to_host(flat.try_as_slice::<f32>().ok()?.get(..count)?),
        Dtype::Float16 => copy_to_host(flat.try_as_slice::<half::f16>().ok()?.get(..count)?)
            .map(|v| v.into_iter().map(half::f16::to_f32).collect()),
        Dtype::Bfloat16 => copy_to_host(flat.try_as_slice::<half::bf16>().ok()?.get(..count)?)
            .map(|v| v.into_iter().map(half::bf16::to_f32).collect()),
        _ => None,
    }
}

/// The values of an evaluated kernel output, copied by the device (see
/// `pages::copy_to_host`) where there is one, else read in place.
fn host_copy<T: mlx_rs::ArrayElement + crate::mlx::cuda::Plain>(
    array: &Array,
) -> Result<std::borrow::Cow<'_, [T]>, MlxError> {
    let values = host_slice::<T>(array)?;
    Ok(crate::mlx::cuda::copy_to_host(values)
        .map_or(std::borrow::Cow::Borrowed(values), std::borrow::Cow::Owned))
}

/// The values of an evaluated array as the host sees them (on CUDA, MLX
/// first moves its buffer where the host can read it).
fn host_slice<T: mlx_rs::ArrayElement>(array: &Array) -> Result<&[T], MlxError> {
    array
        .try_as_slice::<T>()
        .map_err(|e| MlxError::op("read kernel output", e))
}

/// The statistics of a tensor of `n` values from a fused kernel's outputs:
/// `blocks` rows of `[min, max, sum (2 halves), squares (2 halves)]` at the
/// start of `floats` and of `[nan, inf]` at the start of `counts` (what
/// follows them, the cells, is not touched here).
fn block_stats(
    floats: &[f32],
    counts: &[u32],
    blocks: usize,
    n: i64,
    centre_value: f32,
) -> Result<super::Stats, MlxError> {
    if floats.len() < blocks * 6 || counts.len() < blocks * 2 {
        return Err(MlxError::op("summary kernel", "short output"));
    }
    let parts: Vec<PartStats> = floats[..blocks * 6]
        .chunks_exact(6)
        .zip(counts[..blocks * 2].chunks_exact(2))
        .map(|(f, n)| PartStats {
            min: f64::from(f[0]),
            max: f64::from(f[1]),
            sum: f64::from(f[2]) + f64::from(f[3]),
            sum_squares: f64::from(f[4]) + f64::from(f[5]),
            nan: u64::from(n[0]),
            inf: u64::from(n[1]),
        })
        .collect();
    Ok(combine(&parts, n, f64::from(centre_value)))
}

/// A histogram whose bins a kernel counts: launched by [`Bins::launch`]
/// without waiting, read by [`Bins::finish`].
struct Bins {
    count: usize,
    min: f64,
    max: f64,
    /// The kernel's slot counts (`count(lo, scale, slots)`, as
    /// `kernel::histogram_counts`); `None` without finite values.
    slots: Option<Array>,
}

impl Bins {
    /// Starts counting `bins` bins over the finite values.
    fn launch(
        stats: &super::Stats,
        bins: usize,
        count: impl FnOnce(f32, f32, usize) -> Result<Array, MlxError>,
    ) -> Result<Self, MlxError> {
        let bins = bins.min(kernel::MAX_SLOTS - 2);
        let slots = if stats.finite > 0 && bins > 0 {
            let (lo, scale) = super::bins::bin_scale(stats, bins);
            let slots = count(lo, scale, bins + 2)?;
            mlx_rs::transforms::async_eval([&slots]).map_err(|e| MlxError::op("evaluation", e))?;
            Some(slots)
        } else {
            None
        };
        Ok(Self {
            count: bins,
            min: stats.min,
            max: stats.max,
            slots,
        })
    }

    /// Waits for the counts and reads them.
    fn finish(self, phases: &mut Phases) -> Result<Histogram, MlxError> {
        let range = (self.min, self.max);
        let Some(slots) = self.slots else {
            return Ok(histogram_of(self.count, range, &[]));
        };
        evaluate(&slots)?;
        phases.mark("bins kernel");
        let histogram = histogram_of(self.count, range, &host_copy::<u32>(&slots)?);
        hand_back([slots]);
        phases.mark("bins read");
        Ok(histogram)
    }
}

/// Compiles the dense kernel for each dtype it reads (both jobs), on a
/// small array.
pub(super) fn warm_up_dense(small: &Array) -> Result<(), MlxError> {
    // On Metal, the check compiles it (and may turn it off).
    if Backend::BUILD == Backend::Metal {
        metal_agrees();
        return Ok(());
    }
    for dtype in [Dtype::Float32, Dtype::Float16, Dtype::Bfloat16] {
        let flat = op("cast", small.as_dtype(dtype))?;
        let flat = op("flatten", flat.reshape(&[-1]))?;
        evaluate(&flat)?;
        let rows = small.shape().first().copied().unwrap_or(1);
        let cols = i32::try_from(flat.size()).unwrap_or(1) / rows.max(1);
        let values = kernel::DenseValues {
            flat: &flat,
            rows,
            cols,
            backend: Backend::BUILD,
        };
        // Cells of 32 columns, as a wide tensor's would be.
        let cells = [1, 32, rows, (cols + 31) / 32];
        let layout = kernel::DenseLayout::new(rows, cols, Some(cells));
        let centre = kernel::dense_centre(&values, 64)?;
        let (floats, counts) = kernel::dense_stats(&values, &centre, layout)?;
        let slots = kernel::dense_counts(&values, 0.0, 1.0, 66)?;
        evaluate_all([&floats, &counts, &slots])?;
    }
    // Our own launches' module, streams and buffers, made now too.
    crate::mlx::cuda::warm_up();
    Ok(())
}

pub(super) fn warm_up_affine(small: &Array) -> Result<(), MlxError> {
    if Backend::BUILD != Backend::Cuda {
        return Ok(());
    }
    let half = op("cast", small.as_dtype(Dtype::Float16))?;
    let parts = crate::mlx::quantize_mode(&half, "affine", 64, 4)?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::cast_precision_loss)]
mod tests;
