//! The fused summaries checked against MLX's own ops on the device.

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
            assert!((fused.stats.mean - reference.stats.mean).abs() <= 1e-6 * reference.stats.std);
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

/// Dense arrays of each dtype and of shapes that split unevenly (a row
/// of cells shorter than the rest, columns not a power of two, a flat
/// array), with NaN and Inf: on CUDA the kernel's summary equals the
/// chunked path's (bins, extremes, counts, first values exactly; sums
/// within float64 rounding; cells within f32 rounding); elsewhere the
/// kernel is refused and the summary goes on as before.
#[test]
fn dense_arrays_are_summarized_by_one_kernel_or_as_before() {
    let host = Plan {
        chunk: 1 << 12,
        bins: BinsOn::Host,
        forced: true,
        gpu: false,
    };
    let kernel = Plan {
        bins: BinsOn::Kernel,
        forced: true,
        gpu: true,
        ..host
    };
    for (shape, dtype) in [
        (vec![97, 300], mlx_rs::Dtype::Float32),
        (vec![3, 40, 33], mlx_rs::Dtype::Float16),
        (vec![513, 64], mlx_rs::Dtype::Bfloat16),
        (vec![20_000], mlx_rs::Dtype::Float32),
    ] {
        let n: i32 = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| match i {
                7 => f32::NAN,
                11 => f32::INFINITY,
                13 => f32::NEG_INFINITY,
                _ => {
                    let t = (i as f32) * 0.618_034;
                    (t - t.floor() - 0.3) * 0.05
                }
            })
            .collect();
        let array = Array::from_slice(&values, &shape).as_dtype(dtype).unwrap();
        let flat = array.reshape(&[-1]).unwrap();
        let input = Input::Flat {
            flat: flat.as_dtype(mlx_rs::Dtype::Float32).unwrap(),
            shape: shape.clone(),
        };
        let reference = summarize_input(&input, 16, 64, 32, host).unwrap();
        assert_eq!((reference.stats.nan, reference.stats.inf), (1, 2));
        match super::fused_dense(&flat, &shape, 16, 64, 32, kernel) {
            Some(Ok(fused)) => {
                assert!(super::summaries_agree(&fused, &reference), "{shape:?}");
                // Mean and std against float64 on the host (the
                // chunked path sums blocks in f32, the kernel in f64).
                let stored: Vec<f64> = flat
                    .as_dtype(mlx_rs::Dtype::Float32)
                    .unwrap()
                    .as_slice::<f32>()
                    .iter()
                    .filter(|v| v.is_finite())
                    .map(|&v| f64::from(v))
                    .collect();
                let mean = stored.iter().sum::<f64>() / stored.len() as f64;
                let std = (stored.iter().map(|v| (v - mean).powi(2)).sum::<f64>()
                    / stored.len() as f64)
                    .sqrt();
                let a = fused.stats;
                assert!((a.mean - mean).abs() <= 1e-12 * std, "{shape:?}");
                assert!((a.std - std).abs() <= 1e-12 * std, "{shape:?}");
            }
            Some(Err(_)) => {
                let unforced = Plan {
                    forced: false,
                    ..kernel
                };
                assert!(super::fused_dense(&flat, &shape, 16, 64, 32, unforced).is_none());
                assert!(super::DENSE_FAILED.load(std::sync::atomic::Ordering::Relaxed));
            }
            None => panic!("a {dtype:?} array suits the fused summary"),
        }
    }
}

/// The dense kernel launched by us (`mlx::cuda`) gives MLX's
/// launch's summary (the same jobs, blocks and parameters): statistics,
/// bins, first values and cell peaks exactly, cell means within `f32`
/// rounding (a block adds into its cells by atomics, in no fixed
/// order), for each dtype, with and without a heatmap; where this
/// process cannot launch it (no CUDA device, no kernel compiled ahead),
/// nothing is launched and the caller goes on through MLX.
#[test]
fn a_dense_summary_launched_by_us_is_mlxs() {
    for (shape, dtype) in [
        (vec![97, 300], mlx_rs::Dtype::Float32),
        (vec![3, 40, 33], mlx_rs::Dtype::Float16),
        (vec![1030, 70], mlx_rs::Dtype::Bfloat16),
        (vec![20_000], mlx_rs::Dtype::Float32),
    ] {
        let n: i32 = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| match i {
                5 => f32::NAN,
                9 => f32::NEG_INFINITY,
                _ => ((i as f32) * 0.377).sin() * 3.0 + 0.25,
            })
            .collect();
        let array = Array::from_slice(&values, &shape).as_dtype(dtype).unwrap();
        let flat = array.reshape(&[-1]).unwrap();
        flat.eval().unwrap();
        let grid = super::Grid::new(&shape, 32);
        let (rows, cols) = grid.map_or((1, n), |g| (g.rows, g.cols));
        let dense = super::kernel::DenseValues {
            flat: &flat,
            rows,
            cols,
            backend: super::Backend::BUILD,
        };
        let layout = super::kernel::DenseLayout::new(
            rows,
            cols,
            grid.map(|g| [g.row_step, g.col_step, g.out_rows, g.out_cols]),
        );
        let mut phases = super::Phases::new();
        match super::direct_dense_summary(&dense, grid, layout, 16, 16, 64, &mut phases) {
            Some(direct) => {
                let direct = direct.expect("the direct launch works where it starts");
                let by_mlx = super::fused_dense_summary(&dense, grid, 16, 64, false)
                    .expect("MLX launches the same kernel");
                assert!(
                    super::summaries_agree(&direct, &by_mlx),
                    "{shape:?} {dtype:?}"
                );
                assert!(direct.stats == by_mlx.stats, "{shape:?} {dtype:?}");
                assert!(
                    direct.heatmap_max_abs == by_mlx.heatmap_max_abs,
                    "{shape:?} {dtype:?}"
                );
                assert_eq!(direct.heatmap.is_some(), shape.len() > 1);
                assert_eq!((direct.stats.nan, direct.stats.inf), (1, 1));
                assert_eq!(direct.first.len(), 16);
            }
            None => assert!(
                !crate::mlx::gpu_available() || super::kernel::dense_image().is_none(),
                "a CUDA device with the kernel compiled ahead launches it"
            ),
        }
    }
}

#[test]
fn summaries_agree_only_when_every_figure_does() {
    let values: Vec<f32> = (0..4000u16)
        .map(|i| f32::from(i % 97) * 0.25 - 3.0)
        .collect();
    let flat = Array::from_slice(&values, &[40 * 100]);
    let input = Input::Flat {
        flat,
        shape: vec![40, 100],
    };
    let plan = Plan {
        chunk: 1 << 12,
        bins: BinsOn::Host,
        forced: true,
        gpu: false,
    };
    let summary = summarize_input(&input, 8, 64, 16, plan).unwrap();
    assert!(super::summaries_agree(&summary, &summary));
    let mut moved = summary.clone();
    moved.histogram.counts[3] += 1;
    assert!(!super::summaries_agree(&moved, &summary));
    let mut moved = summary.clone();
    moved.stats.std *= 1.0 + 1e-4;
    assert!(!super::summaries_agree(&moved, &summary));
    let mut moved = summary.clone();
    if let Some(cells) = moved.heatmap.as_mut() {
        cells.values[5] += 1.0;
    }
    assert!(!super::summaries_agree(&moved, &summary));
}

/// The Metal twin, launched where MLX has no Metal (this machine's
/// CPU backend), is refused cleanly: the check says no and summaries
/// stay with MLX's ops.
#[test]
fn the_metal_twin_is_not_used_where_it_cannot_run() {
    if cfg!(target_os = "macos") {
        return;
    }
    assert!(!super::twin_agrees(super::Backend::Metal));
}
