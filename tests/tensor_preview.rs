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

mod common;

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

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-6)
}

#[test]
fn statistics_histogram_and_first_values_match_the_reference() {
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
        let width = want.max - want.min;
        let mut host = vec![0u64; options.bins];
        for v in as_f32.iter().filter(|v| v.is_finite()) {
            let b = (((f64::from(*v) - want.min) / width) * options.bins as f64).floor() as usize;
            host[b.min(options.bins - 1)] += 1;
        }
        let moved: u64 = counts.iter().zip(&host).map(|(a, b)| a.abs_diff(*b)).sum();
        assert!(
            moved <= 4,
            "{name}: histogram differs from the host's by {moved} values (edges in f32)"
        );
        let first_bits: Vec<u32> = preview.values.first.iter().map(|v| v.to_bits()).collect();
        let want_bits: Vec<u32> = as_f32[..64].iter().map(|v| v.to_bits()).collect();
        assert_eq!(first_bits, want_bits, "{name}: first values exactly");
        assert_eq!(preview.device, "cpu:0");
        assert!(preview.quantized.is_none());
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
fn quantized_weights_preview_as_mlx_dequantizes_them() {
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
    let expected =
        mlx::to_f32_vec(&mlx::dequantize(&wq, &scales, Some(&biases), 64, 4).expect("dequantize"))
            .expect("values");

    let mut weights = Weights::open(dir.path()).expect("open");
    let preview = weights
        .preview("l.weight", &PreviewOptions::default())
        .expect("preview");
    let q = preview.quantized.expect("dequantized for the preview");
    assert_eq!((q.bits, q.group_size), (4, 64));
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
