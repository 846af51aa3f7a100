//! Affine-packed weights summarized on CUDA straight from their words (see
//! `kernel::affine_stats`): nothing dequantized into memory but the first
//! rows.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Dtype};

use super::grid::Grid;
use super::moments::{PartStats, centre};
use super::{
    BinsOn, CENTRE_SAMPLE, Heatmap, Histogram, MlxError, Plan, RowBands, ValueSummary, combine,
    evaluate, evaluate_all, kernel, op, to_f32_vec,
};

/// Set when the fused kernel for affine-packed weights failed once (it is
/// then not tried again in this process).
pub(super) static FUSED_FAILED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

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
        let (lo, scale) = super::bins::bin_scale(&stats, bins);
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
        heatmap: Some(grid.means(cell_sums)),
        heatmap_max_abs: Some(max_abs_cells(bands, grid)?),
    })
}

/// The largest |value| of each heatmap cell, from the weight dequantized
/// by MLX a band of cell rows at a time (the kernel sums cells, it does not
/// take their maxima).
fn max_abs_cells(bands: &dyn RowBands, grid: Grid) -> Result<Heatmap, MlxError> {
    let cols = i64::from(bands.cols());
    // About 16M values (64 MiB as f32) a band, in whole rows of cells.
    let per_band = ((1_i64 << 24) / cols.max(1)).max(1);
    let step = i64::from(grid.row_step);
    let band_rows = i32::try_from((per_band / step).max(1) * step).unwrap_or(grid.row_step);
    let mut cells = Vec::new();
    let mut r0 = 0;
    while r0 < bands.rows() {
        let r1 = (r0 + band_rows).min(bands.rows());
        let x = op("reshape", bands.band(r0, r1)?.reshape(&[-1]))?;
        let x = op("cast to f32", x.as_dtype(Dtype::Float32))?;
        let part = super::Part {
            start: i64::from(r0) * cols,
            len: (r1 - r0) * bands.cols(),
        };
        let band = grid.band_max_abs(&x, part)?;
        evaluate(&band)?;
        cells.extend(to_f32_vec(&band)?);
        r0 = r1;
    }
    Ok(grid.heatmap(cells))
}

pub(super) fn warm_up_affine(small: &Array) -> Result<(), MlxError> {
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
mod tests {
    use mlx_rs::Array;
    use mlx_rs::ops::indexing::TryIndexOp;

    use super::super::{BinsOn, Input, Plan, RowBands, summarize_input};

    /// An affine-packed weight as the weights layer hands it over.
    struct Packed {
        shape: Vec<i32>,
        weight: Array,
        scales: Array,
        biases: Array,
    }

    impl RowBands for Packed {
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
        fn band(&self, r0: i32, r1: i32) -> Result<Array, crate::mlx::MlxError> {
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
        fn affine_words(&self) -> Option<crate::mlx::kernel::AffineWords<'_>> {
            Some(crate::mlx::kernel::AffineWords {
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
        let (rows, cols) = (96usize, 512usize);
        // A spread with a run of equal values.
        let values: Vec<f32> = (0..rows * cols)
            .map(|i| {
                let t = (i as f32) * 0.618_034;
                if (1000..3000).contains(&i) {
                    0.0125
                } else {
                    (t - t.floor() - 0.5) * 0.04 + 0.001
                }
            })
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
        assert!(!crate::mlx::kernel::AffineWords { bits: 3, ..words }.supported());
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
                // The largest |value| per cell: MLX's dequantization on
                // both paths, so exactly equal.
                assert_eq!(fused.heatmap_max_abs, reference.heatmap_max_abs);
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
}
