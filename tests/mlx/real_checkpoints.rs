//! Checkpoints as today's tools write them: MLX quantization in every mode
//! (packed by MLX itself, `config.json` as mlx-lm writes it, per-layer
//! overrides, stacked experts, layers left unquantized), block-scaled FP8 as
//! DeepSeek-V3 ships it, and the diff of a model against its bf16 and 4-bit
//! conversions. Figures are checked against mlx-lm's counting rules and
//! against values computed on the host or by MLX on the in-memory arrays.

// Decoding is exact: values are compared bit for bit on purpose; shapes and
// counts are small.
#![allow(
    clippy::float_cmp,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

use crate::common;

use std::path::Path;
use std::process::Command as Process;
use std::sync::atomic::AtomicBool;

use common::convert::{
    MODEL, Recipe, Written, convert, float_model, save, write_config, write_fp8,
};
use common::{Tensor, mlx_memory_lock, write_safetensors};
use serde_json::{Value, json};
use weightscope::checkpoint::{Checkpoint, QuantMode};
use weightscope::mlx::{self, Array, ByteFloat, Dtype};
use weightscope::weights::{Decoding, PreviewOptions, Weights, diff};

fn host_stats(values: &[f32]) -> (f64, f64, f64) {
    let finite: Vec<f64> = values
        .iter()
        .map(|v| f64::from(*v))
        .filter(|v| v.is_finite())
        .collect();
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    (min, max, mean)
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-5 * b.abs().max(1e-3),
        "{what}: {a} vs {b}"
    );
}

/// Opens `dir`, checks the totals mlx-lm would print and, for every
/// quantized weight, that the preview's statistics are MLX's dequantization.
fn check_converted(dir: &Path, written: &Written, expect: &dyn Fn(&str) -> Option<Recipe>) {
    let checkpoint = Checkpoint::open(dir).expect("opens");
    assert!(
        checkpoint.problems().is_empty(),
        "{:?}",
        checkpoint.problems()
    );
    let summary = checkpoint.summary();
    assert_eq!(summary.logical_params, written.params, "logical parameters");
    assert_eq!(summary.total_bytes, written.bytes);
    let bpw = (written.bytes * 8) as f64 / written.params as f64;
    assert!(
        (summary.bits_per_weight - bpw).abs() < 1e-12,
        "bits per weight"
    );
    let quant = summary.quantization.as_ref().expect("quantized");
    for q in &quant.tensors {
        let recipe = expect(&q.module).expect("quantized where the recipe says");
        assert_eq!(
            (q.params.mode, q.params.group_size, q.params.bits),
            (recipe.mode, recipe.group, recipe.bits),
            "{}",
            q.module
        );
        assert!(!q.inferred, "{} read from config.json", q.module);
        // Per layer: mlx-lm's weight.size * 32 // bits.
        let stored = &checkpoint.tensors().at(q.weight);
        assert_eq!(q.logical_elements, stored.elements() * 32 / recipe.bits);
    }
    let mut weights = Weights::open(dir).expect("weights");
    let options = PreviewOptions::default();
    for (name, expected) in &written.dequantized {
        let preview = weights.preview(name, &options).expect("preview");
        let Some(Decoding::Quantized { params, shape }) = &preview.decoding else {
            panic!("{name} is shown dequantized");
        };
        let original = MODEL.iter().find(|(n, _)| n == name).expect("in model").1;
        let logical: Vec<u64> = original.iter().map(|d| *d as u64).collect();
        assert_eq!(shape, &logical, "{name}: logical shape");
        assert_eq!(
            expect(name.trim_end_matches(".weight")).map(|r| r.mode),
            Some(params.mode)
        );
        let (min, max, mean) = host_stats(expected);
        let s = &preview.values.stats;
        close(s.min, min, "min");
        close(s.max, max, "max");
        assert!(
            (s.mean - mean).abs() < 1e-6,
            "{name}: mean {} vs {mean}",
            s.mean
        );
        assert_eq!(s.finite as usize, expected.len());
        // The scales heatmap holds decoded scales: positive powers of two
        // (E8M0) or E4M3 values, never bytes such as 121.
        let scales = preview
            .quant_maps
            .as_ref()
            .and_then(|m| m.scales.as_ref())
            .expect("scales heatmap");
        if params.mode != QuantMode::Affine {
            assert!(
                scales.values.iter().all(|v| *v > 0.0 && *v < 1.0),
                "{name}: decoded scales of ±0.1 weights are small positive numbers"
            );
        }
    }
}

#[test]
fn every_mode_as_mlx_lm_writes_it() {
    let _lock = mlx_memory_lock();
    let cases = [
        Recipe::of(QuantMode::Affine, 2),
        Recipe::of(QuantMode::Affine, 3),
        Recipe::of(QuantMode::Affine, 4),
        Recipe::of(QuantMode::Affine, 5),
        Recipe::of(QuantMode::Affine, 6),
        Recipe::of(QuantMode::Affine, 8),
        Recipe::of(QuantMode::Mxfp4, 4),
        Recipe::of(QuantMode::Mxfp8, 8),
        Recipe::of(QuantMode::Nvfp4, 4),
    ];
    for recipe in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        // Older mlx-lm wrote no `mode` for affine: it must still read as affine.
        let write_modes = !(recipe.mode == QuantMode::Affine && recipe.bits == 4);
        let written = convert(dir.path(), recipe, |_| Some(recipe), write_modes);
        check_converted(dir.path(), &written, &|_| Some(recipe));
        // Dequantized values stay near the float ones: the mode was right.
        let mut weights = Weights::open(dir.path()).expect("weights");
        let preview = weights
            .preview(
                "model.layers.0.mlp.down_proj.weight",
                &PreviewOptions::default(),
            )
            .expect("preview");
        let s = &preview.values.stats;
        assert!(
            s.max > 0.05 && s.max < 0.2 && s.min < -0.05 && s.min > -0.2,
            "{recipe:?}: {s:?}"
        );
    }
}

#[test]
fn mixed_recipe_with_overrides_experts_and_unquantized_layers() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let default = Recipe::of(QuantMode::Mxfp4, 4);
    // An override without `mode` is affine even in an mxfp4 model; an nvfp4
    // override; the head left in float (mlx-lm writes nothing for it).
    let recipe = |module: &str| -> Option<Recipe> {
        if module == "lm_head" {
            None
        } else if module.ends_with("down_proj") {
            Some(Recipe::of(QuantMode::Affine, 8))
        } else if module.ends_with("q_proj") && module.contains("layers.1") {
            Some(Recipe::of(QuantMode::Nvfp4, 4))
        } else {
            Some(default)
        }
    };
    let written = convert(dir.path(), default, recipe, true);
    check_converted(dir.path(), &written, &recipe);
    let checkpoint = Checkpoint::open(dir.path()).expect("opens");
    let summary = checkpoint.summary();
    let modes = &summary.quantization.as_ref().expect("quantized").modes;
    assert_eq!(modes.get(&QuantMode::Affine), Some(&1));
    assert_eq!(modes.get(&QuantMode::Nvfp4), Some(&1));
    assert_eq!(modes.get(&QuantMode::Mxfp4), Some(&4));
    // The stacked experts keep their leading axis.
    let experts = checkpoint
        .quantized_weight("model.layers.1.mlp.switch_mlp.gate_proj.weight")
        .expect("quantized experts");
    assert_eq!(experts.logical_shape, vec![4, 64, 128]);

    // Clicking an mxfp4 weight's scales shows powers of two, not bytes.
    let mut weights = Weights::open(dir.path()).expect("weights");
    let scales = weights
        .preview(
            "model.layers.0.mlp.up_proj.scales",
            &PreviewOptions::default(),
        )
        .expect("preview");
    assert!(matches!(
        scales.decoding,
        Some(Decoding::Scales {
            mode: QuantMode::Mxfp4
        })
    ));
    assert!(
        scales
            .values
            .first
            .iter()
            .all(|v| v.log2().fract() == 0.0 && *v < 1.0),
        "{:?}",
        scales.values.first
    );
    drop(weights);

    mixed_cli_contract(dir.path(), written.params);
}

/// `inspect --json` and `tensor --json` on the mixed model.
fn mixed_cli_contract(dir: &Path, params: u64) {
    // `inspect --json` gives each packed weight its `quantized` object and
    // marks scales as part of their weight.
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["inspect", "--json"])
        .arg(dir)
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(doc["logical_params"], json!(params));
    let tensors = doc["tensors"].as_array().expect("tensors");
    let find = |name: &str| {
        tensors
            .iter()
            .find(|t| t["name"] == name)
            .expect(name)
            .clone()
    };
    let down = find("model.layers.0.mlp.down_proj.weight");
    assert_eq!(down["quantized"]["mode"], "affine");
    assert_eq!(down["quantized"]["bits"], 8);
    assert_eq!(down["quantized"]["group_size"], 64);
    assert_eq!(down["quantized"]["shape"], json!([128, 256]));
    let up = find("model.layers.0.mlp.up_proj.weight");
    assert_eq!(up["quantized"]["mode"], "mxfp4");
    assert_eq!(up["dtype"], "U32");
    assert_eq!(
        find("model.layers.0.mlp.up_proj.scales")["part_of"],
        "model.layers.0.mlp.up_proj.weight"
    );
    assert!(find("lm_head.weight").get("quantized").is_none());

    // `tensor --json` keeps the stored dtype and shape and says how it decoded.
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["tensor", "--json"])
        .arg(dir)
        .arg("model.layers.1.self_attn.q_proj.weight")
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(doc["dtype"], "U32");
    assert_eq!(doc["shape"], json!([128, 16]));
    assert_eq!(
        doc["quantized"],
        json!({"mode": "nvfp4", "bits": 4, "group_size": 16, "shape": [128, 128]})
    );
    assert!(doc["stats"]["max"].as_f64().expect("max") < 0.2);
}

#[test]
fn quantization_config_alone_and_under_text_config() {
    let _lock = mlx_memory_lock();
    let recipe = Recipe::of(QuantMode::Mxfp8, 8);
    for nested in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = convert(dir.path(), recipe, |_| Some(recipe), true);
        let block = json!({"group_size": 32, "bits": 8, "mode": "mxfp8"});
        let config = if nested {
            json!({"model_type": "llava", "text_config": {"quantization_config": block}})
        } else {
            json!({"model_type": "llama", "quantization_config": block})
        };
        write_config(dir.path(), &config);
        check_converted(dir.path(), &written, &|_| Some(recipe));
    }
}

/// E4M3 codes of known values, and every code against the host decoder.
#[test]
fn fp8_and_scale_bytes_decode_to_their_values() {
    let _lock = mlx_memory_lock();
    let e4m3 = ByteFloat::E4M3;
    for (code, value) in [
        (0x38, 1.0),
        (0x40, 2.0),
        (0xC0, -2.0),
        (0x7E, 448.0),
        (0x01, 2f32.powi(-9)),
        (0x00, 0.0),
    ] {
        assert_eq!(e4m3.value(code), value, "E4M3 {code:#04x}");
    }
    for (code, value) in [
        (0x3C, 1.0),
        (0x7B, 57344.0),
        (0xBC, -1.0),
        (0x7C, f32::INFINITY),
    ] {
        assert_eq!(ByteFloat::E5M2.value(code), value, "E5M2 {code:#04x}");
    }
    assert_eq!(ByteFloat::E8M0.value(127), 1.0);
    assert_eq!(ByteFloat::E8M0.value(121), 1.0 / 64.0);
    assert!(e4m3.value(0x7F).is_nan() && e4m3.value(0xFF).is_nan());
    let codes: Vec<u8> = (0..=255).collect();
    let bytes = Array::from_slice(&codes, &[256]);
    // MLX's from_fp8 agrees on every code but the two NaNs (it says ±480):
    // that is why the table decodes, so a NaN in a checkpoint stays a NaN.
    let from_mlx = mlx::to_f32_vec(&mlx::mlx_from_fp8(&bytes).expect("decode")).expect("values");
    for (code, got) in codes.iter().zip(from_mlx) {
        match code {
            0x7F => assert_eq!(got, 480.0),
            0xFF => assert_eq!(got, -480.0),
            _ => assert_eq!(got, e4m3.value(*code), "from_fp8 {code:#04x}"),
        }
    }
    for format in [ByteFloat::E4M3, ByteFloat::E5M2, ByteFloat::E8M0] {
        let decoded =
            mlx::to_f32_vec(&mlx::decode_bytes(&bytes, format).expect("decode")).expect("values");
        for (code, got) in codes.iter().zip(decoded) {
            let want = format.value(*code);
            assert!(
                got == want || (got.is_nan() && want.is_nan()),
                "{format:?} {code:#04x}: MLX {got} vs host {want}"
            );
        }
    }
}

#[test]
fn block_scaled_fp8_is_decoded_and_scaled() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let (expected, params) = write_fp8(dir.path());
    let checkpoint = Checkpoint::open(dir.path()).expect("opens");
    let summary = checkpoint.summary();
    assert_eq!(
        summary.logical_params, params,
        "block scales are not parameters"
    );
    let fp8 = summary.fp8.as_ref().expect("fp8");
    assert_eq!(fp8.block, Some([128, 128]));
    assert_eq!(fp8.scale_bytes, 6 * 4);
    let mut weights = Weights::open(dir.path()).expect("weights");
    let preview = weights
        .preview(
            "model.layers.0.mlp.down_proj.weight",
            &PreviewOptions::default(),
        )
        .expect("preview");
    assert_eq!(
        preview.decoding,
        Some(Decoding::Fp8 {
            format: weightscope::checkpoint::Fp8Format::E4M3,
            block: Some([128, 128]),
            block_inferred: false,
            shape: vec![300, 256]
        })
    );
    let (min, max, mean) = host_stats(&expected);
    let s = &preview.values.stats;
    close(s.min, min, "min");
    close(s.max, max, "max");
    assert!((s.mean - mean).abs() < 1e-6, "mean {} vs {mean}", s.mean);
    assert!(s.max < 1.0, "no byte codes: {s:?}");
    for (got, want) in preview.values.first.iter().zip(&expected) {
        assert_eq!(got, want);
    }
    // The block scale is overhead of its weight, and so listed.
    assert!(checkpoint.is_auxiliary("model.layers.0.mlp.down_proj.weight_scale_inv"));
    // The CLI says so in JSON.
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["tensor", "--json"])
        .arg(dir.path())
        .arg("model.layers.0.mlp.down_proj.weight")
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(doc["dtype"], "F8_E4M3");
    assert_eq!(
        doc["quantized"],
        json!({"mode": "fp8", "format": "e4m3", "block": [128, 128], "block_inferred": false, "shape": [300, 256]})
    );
}

/// Without config.json, a ragged FP8 weight (300 rows, 3 row scales: both
/// 100 and 128 rows a block give that grid) decodes with the power-of-two
/// block FP8 checkpoints use, and `tensor`, `diff` and the window say the
/// block was inferred.
#[test]
fn a_ragged_fp8_weight_without_config_takes_the_power_of_two_block_and_says_inferred() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let (expected, _) = write_fp8(dir.path());
    std::fs::remove_file(dir.path().join("config.json")).expect("no config");
    let mut weights = Weights::open(dir.path()).expect("weights");
    let preview = weights
        .preview(
            "model.layers.0.mlp.down_proj.weight",
            &PreviewOptions::default(),
        )
        .expect("preview");
    let decoding = preview.decoding.clone().expect("decoded");
    assert!(
        matches!(
            decoding,
            Decoding::Fp8 {
                block: Some([128, 128]),
                block_inferred: true,
                ..
            }
        ),
        "{decoding:?}"
    );
    assert!(decoding.describe().contains("inferred"));
    for (got, want) in preview.values.first.iter().zip(&expected) {
        assert_eq!(got, want);
    }
    let (min, max, _) = host_stats(&expected);
    close(preview.values.stats.min, min, "min");
    close(preview.values.stats.max, max, "max");
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["tensor", "--json"])
        .arg(dir.path())
        .arg("model.layers.0.mlp.down_proj.weight")
        .output()
        .expect("runs");
    let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(doc["quantized"]["block"], json!([128, 128]));
    assert_eq!(doc["quantized"]["block_inferred"], true);
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["diff", "--json"])
        .arg(dir.path())
        .arg(dir.path())
        .output()
        .expect("runs");
    let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
    let row = doc["common"]
        .as_array()
        .expect("common")
        .iter()
        .find(|c| c["name"] == "model.layers.0.mlp.down_proj.weight")
        .expect("compared");
    assert_eq!(row["a_dtype"], "F8_E4M3 block 128x128 (inferred)");
}

#[test]
fn diff_measures_how_far_conversions_moved_the_weights() {
    let _lock = mlx_memory_lock();
    let root = tempfile::tempdir().expect("tempdir");
    let (source, bf16, q4) = (
        root.path().join("f32"),
        root.path().join("bf16"),
        root.path().join("q4"),
    );
    for d in [&source, &bf16, &q4] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let model = float_model();
    save(&source.join("model.safetensors"), &model);
    let halved: Vec<(String, Array)> = model
        .iter()
        .map(|(n, a)| (n.clone(), a.as_dtype(Dtype::Bfloat16).expect("cast")))
        .collect();
    save(&bf16.join("model.safetensors"), &halved);
    let recipe = Recipe::of(QuantMode::Affine, 4);
    convert(&q4, recipe, |_| Some(recipe), true);

    let cancel = AtomicBool::new(false);
    let run = |a: &Path, b: &Path| {
        let mut wa = Weights::open(a).expect("A");
        let mut wb = Weights::open(b).expect("B");
        diff(&mut wa, &mut wb, &cancel, &mut |_| {})
    };
    let same = run(&source, &source);
    assert_eq!(same.common.len(), MODEL.len());
    assert!(
        same.common
            .iter()
            .all(|c| c.rel_error == 0.0 && c.snr_db.is_infinite() && c.cosine == 1.0)
    );

    let to_bf16 = run(&source, &bf16);
    assert!(
        to_bf16.changed.is_empty() && to_bf16.only_in_a.is_empty() && to_bf16.only_in_b.is_empty()
    );
    assert_eq!(to_bf16.common.len(), MODEL.len());
    for c in &to_bf16.common {
        // bf16 keeps 8 bits of mantissa: a relative error of about 2^-9.
        assert!(
            c.rel_error > 1e-4 && c.rel_error < 5e-3,
            "{}: {}",
            c.name,
            c.rel_error
        );
        assert!(c.snr_db > 40.0 && c.cosine > 0.9999, "{c:?}");
        assert_eq!((c.a_dtype.as_str(), c.b_dtype.as_str()), ("F32", "BF16"));
    }

    let to_q4 = run(&source, &q4);
    assert!(to_q4.changed.is_empty(), "{:?}", to_q4.changed);
    assert!(
        to_q4.only_in_b.is_empty(),
        "scales and biases belong to their weights: {:?}",
        to_q4.only_in_b
    );
    assert_eq!(to_q4.common.len(), MODEL.len());
    let worst = to_q4.by_error()[0];
    assert!(worst.b_dtype.starts_with("U32 affine 4-bit"), "{worst:?}");
    assert!(worst.rel_error > 0.02 && worst.rel_error < 0.3, "{worst:?}");
    assert!(to_q4.overall_rel_error > 0.01 && to_q4.overall_rel_error < worst.rel_error);
    // The norm vectors, kept as they were, are counted apart.
    assert!(to_q4.unchanged_tensors >= 1 && to_q4.energy_rel_error < to_q4.overall_rel_error);
    let norm = to_q4
        .common
        .iter()
        .find(|c| c.name == "model.norm.weight")
        .expect("norm");
    assert_eq!(norm.rel_error, 0.0, "unquantized layers are unchanged");

    // The CLI text gives the overall figure and the worst tensors.
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("diff")
        .args([&source, &q4])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("overall: relative error"), "{text}");
    assert!(text.contains("worst by relative error"), "{text}");
    assert!(text.contains(&worst.name), "{text}");
}

#[test]
fn a_fifo_named_like_a_shard_is_refused_without_opening_it() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("model.safetensors");
    let status = Process::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let checkpoint = Checkpoint::open(dir.path()).expect("the folder opens");
    let problem = checkpoint
        .problems()
        .first()
        .expect("a problem")
        .to_string();
    assert!(
        problem.contains("FIFO") && problem.contains("model.safetensors"),
        "{problem}"
    );
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("inspect")
        .arg(&fifo)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is a FIFO, not a regular file"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// MLX 0.32.2's loader refuses `F8_E5M2`: such a shard is read through
/// (its bytes into an MLX array) and decoded; every one of the 256 codes
/// equals the top byte of an IEEE half (the format's definition), read
/// here through the `half` crate.
#[test]
fn an_e5m2_shard_is_read_through_and_decoded() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let codes: Vec<u8> = (0..=255).collect();
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[Tensor::new(
            "w",
            safetensors::Dtype::F8_E5M2,
            &[16, 16],
            codes.clone(),
        )],
    );
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["tensor", "--json"])
        .arg(dir.path())
        .arg("w")
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let values: Vec<f64> = codes
        .iter()
        .map(|&c| f64::from(half::f16::from_bits(u16::from(c) << 8)))
        .collect();
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let nan = values.iter().filter(|v| v.is_nan()).count();
    let inf = values.iter().filter(|v| v.is_infinite()).count();
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    let stats = &doc["stats"];
    assert_eq!(stats["nan"].as_u64(), Some(nan as u64), "{doc}");
    assert_eq!(stats["inf"].as_u64(), Some(inf as u64), "{doc}");
    assert_eq!(
        stats["max"].as_f64(),
        finite.iter().copied().reduce(f64::max)
    );
    assert_eq!(
        stats["min"].as_f64(),
        finite.iter().copied().reduce(f64::min)
    );
    let got_mean = stats["mean"].as_f64().expect("mean");
    // Partial sums of f32 values: a float32 rounding of the largest value.
    assert!(
        (got_mean - mean).abs() <= 1e-6 * 57344.0,
        "{got_mean} vs {mean}"
    );
    let first: Vec<f64> = doc["first"]
        .as_array()
        .expect("first")
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect();
    assert!(!first.is_empty());
    // `first` holds f32 values (written in their shortest form).
    #[allow(clippy::cast_possible_truncation)]
    for (got, want) in first.iter().zip(&values) {
        let (got, want) = (*got as f32, *want as f32);
        assert!(
            got == want || (got.is_nan() && !want.is_finite()),
            "{got} vs {want}"
        );
    }
    let summary = Checkpoint::open(dir.path()).expect("headers").summary();
    assert_eq!(summary.logical_params, 256);
    assert!(summary.fp8.is_some());
}

/// Large tensors are compared band by band (about 256 Ki values a band):
/// an mxfp4 weight of four bands against MLX's whole-tensor dequantization
/// of it, and a block-scaled FP8 weight of three bands (the last with partial
/// blocks) against its values decoded and scaled on the host, are equal to
/// the bit.
#[test]
fn banded_decoding_equals_whole_tensor_decoding() {
    let _lock = mlx_memory_lock();
    let root = tempfile::tempdir().expect("tempdir");
    let (packed, dense) = (root.path().join("packed"), root.path().join("dense"));
    for d in [&packed, &dense] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let w = common::convert::weights(&[1024, 1024], 9);
    let parts = mlx::quantize_mode(&w, "mxfp4", 32, 4).expect("quantize");
    let whole = mlx::dequantize(&parts[0], &parts[1], None, "mxfp4", 32, 4, None).expect("deq");
    save(
        &packed.join("model.safetensors"),
        &[
            ("big.weight".into(), parts[0].clone()),
            ("big.scales".into(), parts[1].clone()),
        ],
    );
    write_config(
        &packed,
        &json!({"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}),
    );
    save(
        &dense.join("model.safetensors"),
        &[("big.weight".into(), whole)],
    );

    let (rows, cols) = (1100usize, 512usize);
    let scales: Vec<f32> = (0..9 * 4).map(|i| 0.001 * (1 + i % 7) as f32).collect();
    let mut codes = Vec::with_capacity(rows * cols);
    let mut values = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        for j in 0..cols {
            // Every code but the two NaNs (0x7F, 0xFF).
            let c = ((i * 7 + j * 3) % 254) as u8;
            let code = if c >= 0x7F { c + 1 } else { c };
            codes.push(code);
            values.push(ByteFloat::E4M3.value(code) * scales[(i / 128) * 4 + j / 128]);
        }
    }
    let fp8 = root.path().join("fp8");
    std::fs::create_dir(&fp8).expect("mkdir");
    write_safetensors(
        &fp8.join("model.safetensors"),
        &[
            Tensor::new(
                "big.weight",
                safetensors::Dtype::F8_E4M3,
                &[rows, cols],
                codes,
            ),
            Tensor::f32("big.weight_scale_inv", &[9, 4], &scales),
        ],
    );
    write_config(
        &fp8,
        &json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}),
    );
    let host = root.path().join("host");
    std::fs::create_dir(&host).expect("mkdir");
    write_safetensors(
        &host.join("model.safetensors"),
        &[Tensor::f32("big.weight", &[rows, cols], &values)],
    );

    let cancel = AtomicBool::new(false);
    for (a, b) in [(&dense, &packed), (&host, &fp8)] {
        let mut wa = Weights::open(a).expect("A");
        let mut wb = Weights::open(b).expect("B");
        let report = diff(&mut wa, &mut wb, &cancel, &mut |_| {});
        assert_eq!(report.common.len(), 1, "{report:?}");
        let c = &report.common[0];
        assert_eq!((c.max_abs_diff, c.rel_error), (0.0, 0.0), "{c:?}");
        assert!(report.peak_mlx_active_bytes <= report.bound_bytes);
    }
}
