//! Tensor previews on real MLX: statistics against an f64 reference computed
//! on the host from the same bytes (what numpy computes in float64), the
//! histogram, the heatmap, MLX-quantized weights, and `weightscope tensor`.
// Exact comparisons are intended where MLX must reproduce stored values.
#![allow(
    clippy::float_cmp,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

use crate::common;

use std::process::Command;

use common::{Tensor, write_safetensors};
use half::bf16;
use safetensors::tensor::Dtype as StDtype;
use weightscope::mlx::{self, Array};
use weightscope::weights::{PreviewOptions, Weights};

/// Deterministic values in about [-4, 4] with a few NaN and Inf.
fn values(n: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_u64;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            match i % 997 {
                13 => f32::NAN,
                600 => f32::INFINITY,
                601 => f32::NEG_INFINITY,
                _ => ((state % 80_000) as f32 / 10_000.0) - 4.0,
            }
        })
        .collect()
}

struct Reference {
    min: f64,
    max: f64,
    mean: f64,
    std: f64,
    nan: u64,
    inf: u64,
}

fn reference(values: &[f32]) -> Reference {
    let finite: Vec<f64> = values
        .iter()
        .filter(|v| v.is_finite())
        .map(|&v| f64::from(v))
        .collect();
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    let var = finite.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / finite.len() as f64;
    Reference {
        min: finite.iter().copied().fold(f64::INFINITY, f64::min),
        max: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        mean,
        std: var.sqrt(),
        nan: values.iter().filter(|v| v.is_nan()).count() as u64,
        inf: values.iter().filter(|v| v.is_infinite()).count() as u64,
    }
}

/// How many values `counts` puts in other bins than the host does, with
/// bin = floor((v - min) / width * bins) over the finite values.
fn moved_from_host_bins(counts: &[u64], values: &[f32], want: &Reference) -> u64 {
    let bins = counts.len();
    let width = want.max - want.min;
    let mut host = vec![0u64; bins];
    for v in values.iter().filter(|v| v.is_finite()) {
        let b = (((f64::from(*v) - want.min) / width) * bins as f64).floor() as usize;
        host[b.min(bins - 1)] += 1;
    }
    counts.iter().zip(&host).map(|(a, b)| a.abs_diff(*b)).sum()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-6)
}

#[test]
fn statistics_histogram_and_first_values_match_the_reference() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = values(300 * 500);
    let halves: Vec<bf16> = data.iter().map(|&v| bf16::from_f32(v)).collect();
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[
            Tensor::f32("w", &[300, 500], &data),
            Tensor::new(
                "h",
                StDtype::BF16,
                &[data.len()],
                halves.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        ],
    );
    let mut weights = Weights::open(dir.path()).expect("open");
    let options = PreviewOptions::default();

    for (name, as_f32) in [
        ("w", data.clone()),
        ("h", halves.iter().map(|v| v.to_f32()).collect::<Vec<f32>>()),
    ] {
        let preview = weights.preview(name, &options).expect("preview");
        let want = reference(&as_f32);
        let got = preview.values.stats;
        assert_eq!(got.min, want.min, "{name} min");
        assert_eq!(got.max, want.max, "{name} max");
        assert!(
            close(got.mean, want.mean, 1e-6),
            "{name} mean {} vs {}",
            got.mean,
            want.mean
        );
        assert!(
            close(got.std, want.std, 1e-5),
            "{name} std {} vs {}",
            got.std,
            want.std
        );
        assert_eq!(
            (got.nan, got.inf),
            (want.nan, want.inf),
            "{name} non-finite counts"
        );
        assert_eq!(got.finite, as_f32.len() as u64 - want.nan - want.inf);
        let counts = &preview.values.histogram.counts;
        assert_eq!(counts.len(), options.bins);
        assert_eq!(
            counts.iter().sum::<u64>(),
            got.finite,
            "{name}: every finite value in a bin"
        );
        // Bin counts against the host: bin = floor((v - min) / width * bins).
        let moved = moved_from_host_bins(counts, &as_f32, &want);
        assert!(
            moved <= 4,
            "{name}: histogram differs from the host's by {moved} values (edges in f32)"
        );
        let first_bits: Vec<u32> = preview.values.first.iter().map(|v| v.to_bits()).collect();
        let want_bits: Vec<u32> = as_f32[..64].iter().map(|v| v.to_bits()).collect();
        assert_eq!(first_bits, want_bits, "{name}: first values exactly");
        assert_eq!(preview.device, "cpu:0");
        assert!(preview.decoding.is_none());
    }
    let heatmap = weights
        .preview("w", &options)
        .expect("again")
        .values
        .heatmap
        .expect("2-D");
    assert_eq!(
        (heatmap.rows, heatmap.cols),
        (300, 500),
        "small enough to keep every cell"
    );
}

#[test]
fn heatmaps_are_block_means_at_most_512_a_side() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rows, cols) = (1030usize, 700usize);
    let data: Vec<f32> = (0..rows * cols)
        .map(|i| ((i / cols) * 3 + i % cols) as f32)
        .collect();
    write_safetensors(
        &dir.path().join("m.safetensors"),
        &[Tensor::f32("x", &[rows, cols], &data)],
    );
    let mut weights = Weights::open(dir.path()).expect("open");
    let heatmap = weights
        .preview("x", &PreviewOptions::default())
        .expect("preview")
        .values
        .heatmap
        .expect("2-D");
    assert_eq!((heatmap.row_step, heatmap.col_step), (3, 2));
    assert_eq!((heatmap.rows, heatmap.cols), (344, 350));
    let cell = |r: usize, c: usize| {
        let mut sum = 0.0f64;
        let mut n = 0.0;
        for i in r * 3..((r + 1) * 3).min(rows) {
            for j in c * 2..((c + 1) * 2).min(cols) {
                sum += f64::from(data[i * cols + j]);
                n += 1.0;
            }
        }
        (sum / n) as f32
    };
    for (r, c) in [(0, 0), (10, 20), (343, 349)] {
        assert_eq!(
            heatmap.values[r * heatmap.cols + c],
            cell(r, c),
            "cell ({r}, {c})"
        );
    }
}

#[test]
fn max_abs_cells_show_the_outlier_a_mean_hides() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rows, cols) = (1030usize, 700usize);
    let mut data: Vec<f32> = (0..rows * cols)
        .map(|i| ((i % 97) as f32 - 48.0) * 1e-3)
        .collect();
    data[500 * cols + 301] = -50.0;
    data[10 * cols + 10] = f32::NAN;
    data[11 * cols + 11] = f32::INFINITY;
    write_safetensors(
        &dir.path().join("m.safetensors"),
        &[Tensor::f32("x", &[rows, cols], &data)],
    );
    let mut weights = Weights::open(dir.path()).expect("open");
    let values = weights
        .preview("x", &PreviewOptions::default())
        .expect("preview")
        .values;
    let (mean, largest) = (
        values.heatmap.expect("2-D"),
        values.heatmap_max_abs.expect("2-D"),
    );
    assert_eq!(
        (
            largest.rows,
            largest.cols,
            largest.row_step,
            largest.col_step
        ),
        (344, 350, 3, 2)
    );
    // Every cell against the host: the largest finite |value| of its block.
    for r in 0..largest.rows {
        for c in 0..largest.cols {
            let mut want = 0.0f32;
            for i in r * 3..((r + 1) * 3).min(rows) {
                for j in c * 2..((c + 1) * 2).min(cols) {
                    let v = data[i * cols + j];
                    if v.is_finite() {
                        want = want.max(v.abs());
                    }
                }
            }
            assert_eq!(
                largest.values[r * largest.cols + c],
                want,
                "cell ({r}, {c})"
            );
        }
    }
    // The outlier's cell: 50 by its largest |value|, a sixth of it by the mean.
    let cell = (500 / 3) * largest.cols + 301 / 2;
    assert_eq!(largest.values[cell], 50.0);
    assert!(mean.values[cell].abs() < 9.0, "{}", mean.values[cell]);
}

#[test]
fn tensors_larger_than_one_chunk_are_summarized_like_the_host() {
    let _lock = common::mlx_memory_lock();
    // 2.31 M values: three chunks of the summary's passes and a tail shorter
    // than one 256-value block, alternating between two MLX streams; NaN
    // and Inf only in the second chunk and the tail, so one chunk is redone
    // with masks while the others are not; the heatmap takes three bands.
    let (rows, cols) = (2100usize, 1100usize);
    let n = rows * cols;
    let mut wide = values(n);
    for v in &mut wide {
        if !v.is_finite() {
            *v = 0.25;
        }
    }
    wide[1_500_000] = f32::NAN;
    wide[1_500_001] = f32::INFINITY;
    wide[n - 1] = f32::NEG_INFINITY;
    // Norm-like values far from 0 relative to their spread.
    let norm: Vec<f32> = values(n)
        .iter()
        .map(|v| if v.is_finite() { 1.0 + v / 100.0 } else { 1.0 })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[
            Tensor::f32("wide", &[rows, cols], &wide),
            Tensor::f32("norm", &[rows, cols], &norm),
        ],
    );
    let mut weights = Weights::open(dir.path()).expect("open");
    let options = PreviewOptions::default();
    for (name, data) in [("wide", &wide), ("norm", &norm)] {
        let preview = weights.preview(name, &options).expect("preview");
        let got = preview.values.stats;
        let want = reference(data);
        assert_eq!((got.min, got.max), (want.min, want.max), "{name} min, max");
        assert!(
            (got.mean - want.mean).abs() <= 1e-6 * want.std,
            "{name} mean {} vs {}",
            got.mean,
            want.mean
        );
        assert!(
            close(got.std, want.std, 1e-5),
            "{name} std {} vs {}",
            got.std,
            want.std
        );
        assert_eq!(
            (got.nan, got.inf),
            (want.nan, want.inf),
            "{name} non-finite"
        );
        let counts = &preview.values.histogram.counts;
        assert_eq!(counts.iter().sum::<u64>(), got.finite, "{name} histogram");
        let moved = moved_from_host_bins(counts, data, &want);
        assert!(
            moved <= 16,
            "{name}: {moved} values in other bins than the host's"
        );
        let heatmap = preview.values.heatmap.expect("2-D");
        assert_eq!((heatmap.row_step, heatmap.col_step), (5, 3));
        assert_eq!((heatmap.rows, heatmap.cols), (420, 367));
        // Cells in each band, the padded last column, and the cell holding
        // NaN and Inf (counted as 0 there).
        let cell = |r: usize, c: usize| {
            let (mut sum, mut count) = (0.0f64, 0.0);
            for i in r * 5..((r + 1) * 5).min(rows) {
                for j in c * 3..((c + 1) * 3).min(cols) {
                    let v = data[i * cols + j];
                    sum += if v.is_finite() { f64::from(v) } else { 0.0 };
                    count += 1.0;
                }
            }
            sum / count
        };
        let nan_cell = (1_500_000 / cols / 5, 1_500_000 % cols / 3);
        for (r, c) in [(0, 0), (200, 100), (419, 366), nan_cell] {
            let got = f64::from(heatmap.values[r * heatmap.cols + c]);
            assert!(
                (got - cell(r, c)).abs() <= 1e-5 * (1.0 + cell(r, c).abs()),
                "{name} cell ({r}, {c}): {got} vs {}",
                cell(r, c)
            );
        }
        assert_eq!(preview.values.first, data[..64], "{name} first values");
    }
}

#[test]
fn quantized_weights_preview_as_mlx_dequantizes_them() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let w = Array::from_slice(
        &values(64 * 128)
            .iter()
            .map(|v| if v.is_finite() { *v } else { 0.5 })
            .collect::<Vec<f32>>(),
        &[64, 128],
    );
    let (wq, scales, biases) = mlx_rs::ops::quantize(&w, 64, 4).expect("quantize");
    Array::save_safetensors(
        [
            ("l.weight", &wq),
            ("l.scales", &scales),
            ("l.biases", &biases),
        ],
        None,
        dir.path().join("model.safetensors"),
    )
    .expect("save");
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"quantization":{"group_size":64,"bits":4}}"#,
    )
    .expect("config");
    let expected = mlx::to_f32_vec(
        &mlx::dequantize(&wq, &scales, Some(&biases), "affine", 64, 4, None).expect("dequantize"),
    )
    .expect("values");

    let mut weights = Weights::open(dir.path()).expect("open");
    let preview = weights
        .preview("l.weight", &PreviewOptions::default())
        .expect("preview");
    let Some(weightscope::weights::Decoding::Quantized { params: q, .. }) = preview.decoding else {
        panic!("dequantized for the preview");
    };
    assert_eq!((q.mode.name(), q.bits, q.group_size), ("affine", 4, 64));
    assert_eq!(preview.value_shape, [64, 128]);
    assert_eq!(preview.shape, [64, 16], "stored shape: packed words");
    assert_eq!(preview.values.first, expected[..64]);
    let want = reference(&expected);
    assert_eq!(preview.values.stats.min, want.min);
    assert_eq!(preview.values.stats.max, want.max);
    assert!(close(preview.values.stats.mean, want.mean, 1e-5));
    // Heatmaps of the per-group scales and biases: 64 rows x 2 groups each.
    let maps = preview
        .quant_maps
        .expect("quantized weights map their groups");
    let scales_map = maps.scales.expect("a scales heatmap");
    assert_eq!((scales_map.rows, scales_map.cols), (64, 2));
    let scales_values = mlx::to_f32_vec(&scales).expect("scales");
    assert_eq!(
        scales_map.values, scales_values,
        "one cell per group at this size"
    );
    assert!(maps.biases.is_some());
}

#[test]
fn the_tensor_command_prints_the_contract_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_safetensors(
        &dir.path().join("m.safetensors"),
        &[Tensor::f32("x", &[2, 2], &[1.0, 2.0, 3.0, f32::NAN])],
    );
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weightscope"))
            .arg("tensor")
            .arg(dir.path())
            .args(args)
            .output()
            .expect("run")
    };
    let out = run(&["x", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["name"], "x");
    assert_eq!(doc["dtype"], "F32");
    assert_eq!(doc["shape"], serde_json::json!([2, 2]));
    assert_eq!(doc["device"], "cpu:0");
    assert_eq!(doc["stats"]["min"], 1.0);
    assert_eq!(doc["stats"]["max"], 3.0);
    assert_eq!(doc["stats"]["mean"], 2.0);
    assert_eq!(doc["stats"]["nan"], 1);
    assert_eq!(doc["stats"]["inf"], 0);
    assert_eq!(doc["first"], serde_json::json!([1.0, 2.0, 3.0, null]));
    assert!(doc["millis"].as_f64().is_some_and(|m| m >= 0.0));
    assert!(doc.get("stats_millis_runs").is_none(), "one run: no list");

    // The text has the histogram its help promises: its rows count every
    // finite value (3 here; the NaN is not binned).
    let text = String::from_utf8(run(&["x"]).stdout).expect("utf-8");
    let rows: u64 = text
        .lines()
        .skip_while(|l| !l.starts_with("histogram"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(3))
        .map(|n| n.replace(',', "").parse::<u64>().expect("a count"))
        .sum();
    assert_eq!(rows, 3, "{text}");

    // --repeat: every summary's time, the fastest reported, same values.
    let out = run(&["x", "--json", "--repeat", "3"]);
    assert_eq!(out.status.code(), Some(0));
    let repeated: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let runs = repeated["stats_millis_runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    let fastest = runs
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(repeated["stats_millis"].as_f64(), Some(fastest));
    assert_eq!(repeated["stats"], doc["stats"]);
    assert_eq!(run(&["x", "--repeat", "0"]).status.code(), Some(2));

    // --cells: the heatmap's cell means (one value per cell here; the NaN
    // counts as 0), only when asked for.
    assert!(doc["heatmap"].get("values").is_none());
    let out = run(&["x", "--json", "--cells"]);
    assert_eq!(out.status.code(), Some(0));
    let cells: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        cells["heatmap"]["values"],
        serde_json::json!([1.0, 2.0, 3.0, 0.0])
    );
    assert_eq!(run(&["x", "--cells"]).status.code(), Some(2));

    let missing = run(&["nope"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(missing.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("no tensor named `nope`")
            && stderr.contains(&dir.path().display().to_string()),
        "{stderr}"
    );
}

#[test]
fn quantized_weights_larger_than_one_chunk_are_dequantized_chunk_by_chunk() {
    let _lock = common::mlx_memory_lock();
    // 2.1 M logical values (three of the CPU summary's chunks) in two MLX
    // modes: decoded band by band inside the summary (what a preview does on
    // a GPU, or for a weight over 1 GiB in f32), the summary must agree with
    // that of the whole dequantized array.
    let (rows, cols) = (2052i32, 1024i32);
    let w = Array::from_slice(
        &values(2052 * 1024)
            .iter()
            .map(|v| if v.is_finite() { *v } else { 0.5 })
            .collect::<Vec<f32>>(),
        &[rows, cols],
    );
    for (mode, group, bits) in [("affine", 64u64, 4u64), ("mxfp4", 32, 4)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let parts = mlx::quantize_mode(&w, mode, group, bits).expect("quantize");
        let (wq, scales, biases) = (parts[0].clone(), parts[1].clone(), parts.get(2).cloned());
        let mut arrays = vec![("l.weight", &wq), ("l.scales", &scales)];
        if let Some(b) = &biases {
            arrays.push(("l.biases", b));
        }
        mlx::save_safetensors(&dir.path().join("model.safetensors"), &arrays).expect("save");
        std::fs::write(
            dir.path().join("config.json"),
            format!(r#"{{"quantization":{{"group_size":{group},"bits":{bits},"mode":"{mode}"}}}}"#),
        )
        .expect("config");
        let whole = mlx::dequantize(&wq, &scales, biases.as_ref(), mode, group, bits, None)
            .expect("dequantize");
        let options = PreviewOptions::default();
        let want = mlx::summarize(&whole, options.first, options.bins, options.heatmap)
            .expect("summary of the whole array");

        let mut weights = Weights::open(dir.path()).expect("open");
        // What a preview on a GPU (or of a large weight) does.
        let bands = weights.bands("l.weight").expect("bands");
        assert!(bands.decodes_per_band(), "{mode}");
        let got = mlx::summarize_bands(&bands, options.first, options.bins, options.heatmap)
            .expect("summary band by band");
        assert_eq!(got.first, want.first, "{mode} first values");
        assert_eq!(got.histogram, want.histogram, "{mode} histogram");
        assert_eq!(
            (got.stats.min, got.stats.max, got.stats.finite),
            (want.stats.min, want.stats.max, want.stats.finite),
            "{mode}"
        );
        assert!(close(got.stats.mean, want.stats.mean, 1e-6), "{mode} mean");
        assert!(close(got.stats.std, want.stats.std, 1e-6), "{mode} std");
        let (a, b) = (
            got.heatmap.expect("heatmap"),
            want.heatmap.expect("heatmap"),
        );
        assert_eq!((a.rows, a.cols, a.row_step), (b.rows, b.cols, b.row_step));
        for (x, y) in a.values.iter().zip(&b.values) {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{mode} cell {x} vs {y}"
            );
        }
        let preview = weights.preview("l.weight", &options).expect("preview");
        assert_eq!(preview.value_shape, [rows, cols], "{mode}");
        assert_eq!(preview.values.histogram, want.histogram, "{mode} preview");
        assert!(preview.quant_maps.is_some(), "{mode} maps its scales");
    }
}

/// `device`: human units in text, byte counts in `--json`, the same limit
/// as MLX's own.
#[test]
fn the_device_command_says_units_and_json_says_bytes() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
            .arg("device")
            .args(args)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let doc: serde_json::Value = serde_json::from_str(&run(&["--json"])).expect("JSON");
    let limit = doc["mlx_memory_limit_bytes"].as_u64().expect("bytes");
    assert!(limit > 0);
    assert!(doc["gpu_available"].is_boolean());
    let text = run(&[]);
    let line = text
        .lines()
        .find(|l| l.starts_with("MLX limit"))
        .expect("the limit line");
    assert!(
        line.ends_with(&weightscope::units::human_bytes(limit)),
        "{line} vs {limit}"
    );
}

/// A tensor of more values than an MLX axis holds (an I8 `[46341, 46341]`,
/// 2^31 + 4,634 values, written sparse with a few known bytes) is summarized
/// in bands read from its file: the statistics are the values', the whole
/// tensor is never in MLX's memory (MLX's loader would read all 2 GiB, and
/// flattening it failed), and `tensor` agrees.
#[test]
fn a_tensor_of_more_values_than_an_axis_holds_is_read_a_band_at_a_time() {
    use std::io::{Seek, SeekFrom, Write};
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.safetensors");
    let side: u64 = 46_341;
    let n = side * side;
    assert!(n > i32::MAX as u64);
    let header =
        format!(r#"{{"big":{{"dtype":"I8","shape":[{side},{side}],"data_offsets":[0,{n}]}}}}"#);
    let mut header = header.into_bytes();
    header.resize(header.len().div_ceil(8) * 8, b' ');
    let mut file = std::fs::File::create(&path).expect("create");
    file.write_all(&(header.len() as u64).to_le_bytes())
        .expect("write");
    file.write_all(&header).expect("write");
    let data = 8 + header.len() as u64;
    // -100 at the first value, 100 in the middle, 7 at the last.
    for (at, v) in [(0, -100_i8), (n / 2, 100), (n - 1, 7)] {
        file.seek(SeekFrom::Start(data + at)).expect("seek");
        file.write_all(&v.to_le_bytes()).expect("write");
    }
    drop(file);
    mlx::clear_cache().expect("clear");
    mlx::reset_peak().expect("reset");
    let mut weights = Weights::open(dir.path()).expect("weights");
    let preview = weights
        .preview("big", &PreviewOptions::default())
        .expect("previewed");
    let s = &preview.values.stats;
    assert_eq!((s.min, s.max), (-100.0, 100.0));
    let mean = 7.0 / n as f64;
    assert!((s.mean - mean).abs() < 1e-12, "{} vs {mean}", s.mean);
    assert_eq!(preview.values.first[0], -100.0);
    let peak = mlx::memory().expect("memory").peak_bytes;
    assert!(
        peak < 256 << 20,
        "peak MLX memory {peak} bytes: the tensor was read whole"
    );
    drop(weights);
    common::assert_all_freed();
    let output = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["tensor", "--json"])
        .arg(&path)
        .arg("big")
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(doc["stats"]["max"], 100.0);
    assert_eq!(doc["stats"]["min"], -100.0);
}
