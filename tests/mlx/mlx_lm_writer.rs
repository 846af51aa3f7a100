//! Checkpoints written by mlx-lm's own writer (`quantize_model`,
//! `save_model`, `save_config`, as `mlx_lm.convert` runs them) in a private
//! venv with the pinned MLX and mlx-lm (made by `mlx-glue/setup test`):
//! every mode, a mixed recipe, mixture-of-experts models with stacked
//! experts and nvfp4 global scales. weightscope's figures must be mlx-lm's
//! own: `total_parameters` from the index mlx-lm wrote (its
//! `get_total_parameters`), `compute_bits_per_weight`, and the statistics of
//! weights that MLX dequantizes from mlx-lm's modules.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use common::{mlx_memory_lock, venv_python};
use serde_json::Value;
use weightscope::checkpoint::Checkpoint;
use weightscope::weights::{Decoding, PreviewOptions, Weights};

/// Runs the writer into `out`; one JSON object per case.
fn write_models(out: &Path) -> Vec<Value> {
    common::run_venv_writer("tests/mlx_lm/write_models.py", out)
}

#[test]
fn figures_and_values_are_mlx_lms_own() {
    let _lock = mlx_memory_lock();
    let out = tempfile::tempdir().expect("tempdir");
    let cases = write_models(out.path());
    assert_eq!(cases.len(), 9, "every case was written");
    for case in &cases {
        let name = case["case"].as_str().expect("case");
        let path = PathBuf::from(case["path"].as_str().expect("path"));
        let checkpoint = Checkpoint::open(&path).expect("opens");
        assert!(
            checkpoint.problems().is_empty(),
            "{name}: {:?}",
            checkpoint.problems()
        );
        let summary = checkpoint.summary();
        assert_eq!(
            Some(summary.logical_params),
            case["total_parameters"].as_u64(),
            "{name}: logical parameters = mlx-lm's get_total_parameters"
        );
        assert_eq!(
            Some(summary.total_bytes),
            case["total_size"].as_u64(),
            "{name}"
        );
        let bpw = case["bits_per_weight"].as_f64().expect("bpw");
        assert!(
            (summary.bits_per_weight - bpw).abs() < 1e-9,
            "{name}: bits per weight {} vs mlx-lm's {bpw}",
            summary.bits_per_weight
        );
        let findings = weightscope::checkpoint::check::check_headers(&checkpoint, &summary);
        assert!(
            findings.is_empty(),
            "{name}: mlx-lm's own conversion is clean: {findings:#?}"
        );
        let quant = summary.quantization.as_ref().expect("quantized");
        assert!(
            quant.tensors.iter().all(|q| !q.inferred),
            "{name}: every layer's parameters come from config.json"
        );

        let mut weights = Weights::open(&path).expect("weights");
        let probes = case["dequantized"].as_object().expect("probes");
        assert!(!probes.is_empty(), "{name}: something to compare");
        for (weight, want) in probes {
            let preview = weights
                .preview(weight, &PreviewOptions::default())
                .expect("preview");
            let Some(Decoding::Quantized { params, shape }) = &preview.decoding else {
                panic!("{name}: {weight} shown dequantized");
            };
            assert_eq!(params.mode.name(), want["mode"], "{name}: {weight}");
            assert_eq!(Some(params.bits), want["bits"].as_u64(), "{name}: {weight}");
            assert_eq!(
                Some(params.group_size),
                want["group_size"].as_u64(),
                "{name}: {weight}"
            );
            let want_shape: Vec<u64> = want["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .filter_map(Value::as_u64)
                .collect();
            assert_eq!(shape, &want_shape, "{name}: {weight}");
            let s = &preview.values.stats;
            for (ours, key) in [(s.min, "min"), (s.max, "max")] {
                let theirs = want[key].as_f64().expect(key);
                assert!(
                    (ours - theirs).abs() <= 1e-6 * theirs.abs().max(1e-3),
                    "{name}: {weight} {key} {ours} vs MLX's {theirs}"
                );
            }
            let mean = want["mean"].as_f64().expect("mean");
            assert!(
                (s.mean - mean).abs() < 1e-6,
                "{name}: {weight} mean {} vs {mean}",
                s.mean
            );
        }
    }
}

/// `weightscope diff` of mlx-lm's bf16 Llama against its own 4-bit
/// conversion: the overall figure is the changed tensors' errors weighted
/// by their parameters (computed here from the rows), not diluted by the
/// norm vectors the conversion left as they were (counted apart).
#[test]
fn the_overall_diff_of_mlx_lms_4bit_conversion_is_its_weights_error() {
    let _lock = mlx_memory_lock();
    let out = tempfile::tempdir().expect("tempdir");
    write_models(out.path());
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("diff")
        .arg(out.path().join("llama-bf16"))
        .arg(out.path().join("affine4"))
        .arg("--json")
        .output()
        .expect("weightscope runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let rows = report["common"].as_array().expect("rows");
    let changed: Vec<&Value> = rows.iter().filter(|r| r["max_abs_diff"] != 0.0).collect();
    let params = |r: &&Value| r["params"].as_u64().expect("params");
    let total: u64 = changed.iter().map(params).sum();
    #[allow(clippy::cast_precision_loss)] // test arithmetic
    let weighted: f64 = changed
        .iter()
        .map(|r| params(r) as f64 * r["rel_error"].as_f64().expect("error"))
        .sum::<f64>()
        / total as f64;
    let overall = report["overall_rel_error"].as_f64().expect("overall");
    assert!(
        (overall - weighted).abs() <= 1e-9 * weighted,
        "{overall} vs {weighted}"
    );
    assert_eq!(report["overall_params"], total);
    let norms = rows
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(|n| n.contains("norm")))
        .count();
    assert!(norms > 0);
    assert_eq!(
        report["unchanged_tensors"].as_u64(),
        Some(norms as u64),
        "the norms, apart"
    );
    // Every quantized weight's error is near the overall figure; the old
    // energy figure, which the norms dilute, is lower than all of them.
    let lowest = changed
        .iter()
        .filter_map(|r| r["rel_error"].as_f64())
        .fold(f64::INFINITY, f64::min);
    assert!(overall >= lowest, "{overall} < {lowest}");
    let energy = report["energy_rel_error"].as_f64().expect("energy");
    assert!(energy < overall, "{energy} vs {overall}");
}

/// `inspect` of mlx-lm's own `mixed_3_6` conversion names the recipe the
/// weights use (counted here from the per-layer entries mlx-lm wrote in
/// config.json), not config.json's default, and prints the per-layer table.
#[test]
fn inspect_names_the_mixed_recipe_mlx_lm_wrote() {
    let _lock = mlx_memory_lock();
    let out = tempfile::tempdir().expect("tempdir");
    write_models(out.path());
    let path = out.path().join("mixed_3_6");
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(path.join("config.json")).expect("config.json"),
    )
    .expect("JSON");
    let q = config["quantization"].as_object().expect("quantization");
    let default_bits = q["bits"].as_u64().expect("default bits");
    let mut by_bits = std::collections::BTreeMap::<u64, usize>::new();
    for value in q.values().filter(|v| v.is_object()) {
        *by_bits
            .entry(value["bits"].as_u64().expect("bits"))
            .or_insert(0) += 1;
    }
    assert!(
        by_bits.len() >= 2,
        "mlx-lm wrote a mixed recipe: {by_bits:?}"
    );
    let inspect = |json: bool| {
        let mut cmd = Process::new(env!("CARGO_BIN_EXE_weightscope"));
        cmd.arg("inspect").arg(&path);
        if json {
            cmd.arg("--json");
        }
        let output = cmd.output().expect("weightscope runs");
        assert!(output.status.success());
        String::from_utf8(output.stdout).expect("utf-8")
    };
    let report: Value = serde_json::from_str(&inspect(true)).expect("JSON");
    let recipe: std::collections::BTreeMap<u64, usize> = report["quantization"]["recipe"]
        .as_array()
        .expect("recipe")
        .iter()
        .map(|r| {
            (
                r["bits"].as_u64().expect("bits"),
                usize::try_from(r["tensors"].as_u64().expect("tensors")).expect("count"),
            )
        })
        .collect();
    assert_eq!(recipe, by_bits, "the weights' recipe is mlx-lm's");
    let text = inspect(false);
    for (bits, n) in &by_bits {
        assert!(
            text.contains(&format!("affine {bits}-bit g64 x{n}")),
            "{text}"
        );
    }
    if !by_bits.contains_key(&default_bits) {
        assert!(text.contains("is used by none"), "{text}");
    }
    assert!(
        text.contains("LAYER") && text.contains("QUANTIZED"),
        "the per-layer table: {text}"
    );
    let layers = report["layers"].as_array().expect("layers");
    assert!(
        layers.iter().all(|l| l["quantized"].is_array()),
        "{layers:?}"
    );
}

/// `weightscope diff --tensor` on mlx-lm's bf16 Llama and its 4-bit
/// conversion: each group's error matches MLX's own dequantization compared
/// in numpy (`tests/mlx_lm/group_errors.py`): the same count, median, p99
/// and worst figures and the same worst groups.
#[test]
fn a_diffed_tensors_groups_match_mlxs_dequantization() {
    let _lock = mlx_memory_lock();
    let out = tempfile::tempdir().expect("tempdir");
    write_models(out.path());
    let (a, b) = (out.path().join("llama-bf16"), out.path().join("affine4"));
    let name = "model.layers.2.mlp.down_proj.weight";
    let reference = Process::new(venv_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mlx_lm/group_errors.py"))
        .args([a.as_os_str(), b.as_os_str()])
        .arg(name)
        .output()
        .expect("python runs");
    assert!(
        reference.status.success(),
        "{}",
        String::from_utf8_lossy(&reference.stderr)
    );
    let reference: Value = serde_json::from_slice(&reference.stdout).expect("JSON");
    let ours = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("diff")
        .args([a.as_os_str(), b.as_os_str()])
        .args(["--tensor", name, "--json"])
        .output()
        .expect("weightscope runs");
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let ours: Value = serde_json::from_slice(&ours.stdout).expect("JSON");
    let groups = &ours["groups"];
    assert_eq!(groups["side"], "B");
    assert_eq!(groups["groups"], reference["groups"]);
    assert_eq!(groups["group_size"], reference["group_size"]);
    for (key, want) in [
        ("median_rel_error", "median"),
        ("p99_rel_error", "p99"),
        ("max_rel_error", "max"),
    ] {
        let (x, y) = (
            groups[key].as_f64().expect("present"),
            reference[want].as_f64().expect("present"),
        );
        assert!((x - y).abs() <= 1e-5 * y, "{key}: {x} vs {y}");
    }
    let worst: Vec<(u64, u64)> = groups["worst"]
        .as_array()
        .expect("worst")
        .iter()
        .map(|w| {
            (
                w["row"].as_u64().expect("present"),
                w["group"].as_u64().expect("present"),
            )
        })
        .collect();
    let want: Vec<(u64, u64)> = reference["worst"]
        .as_array()
        .expect("worst")
        .iter()
        .map(|w| {
            (
                w[0].as_u64().expect("present"),
                w[1].as_u64().expect("present"),
            )
        })
        .collect();
    assert_eq!(worst[..3], want[..3], "the worst groups");
    // Both sides' statistics are there; the error is |a - b| >= 0.
    assert!(ours["error"]["min"].as_f64().expect("present") >= 0.0);
    assert!(ours["a"]["std"].as_f64().expect("present") > 0.0);
}

/// The full diff's summary by module kind on mlx-lm's `mixed_3_6`
/// conversion: each (kind, B's storage) median is that of its rows,
/// counted here; the two storage modes each have their typical error.
#[test]
fn the_diff_by_module_kind_is_the_median_of_its_rows() {
    let _lock = mlx_memory_lock();
    let out = tempfile::tempdir().expect("tempdir");
    write_models(out.path());
    let a = out.path().join("llama-bf16");
    // The summary by module kind: each (kind, B's storage) median, from the rows.
    let full = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("diff")
        .arg(&a)
        .arg(out.path().join("mixed_3_6"))
        .arg("--json")
        .output()
        .expect("weightscope runs");
    let full: Value = serde_json::from_slice(&full.stdout).expect("JSON");
    let mut by_kind = std::collections::BTreeMap::<(String, String), Vec<f64>>::new();
    for row in full["common"].as_array().expect("rows") {
        if row["max_abs_diff"] == 0.0 {
            continue;
        }
        let name = row["name"].as_str().expect("present");
        let kind = name
            .trim_end_matches(".weight")
            .rsplit('.')
            .next()
            .expect("present");
        by_kind
            .entry((
                kind.to_owned(),
                row["b_dtype"].as_str().expect("present").to_owned(),
            ))
            .or_default()
            .push(row["rel_error"].as_f64().expect("present"));
    }
    let kinds = full["by_kind"].as_array().expect("by_kind");
    assert_eq!(kinds.len(), by_kind.len());
    for k in kinds {
        let key = (
            k["kind"].as_str().expect("present").to_owned(),
            k["b_dtype"].as_str().expect("present").to_owned(),
        );
        let mut errors = by_kind[&key].clone();
        errors.sort_by(f64::total_cmp);
        let n = errors.len();
        let median = if n % 2 == 1 {
            errors[n / 2]
        } else {
            f64::midpoint(errors[n / 2 - 1], errors[n / 2])
        };
        assert_eq!(k["tensors"].as_u64(), Some(n as u64));
        assert!(
            (k["median_rel_error"].as_f64().expect("present") - median).abs() <= 1e-12,
            "{key:?}"
        );
    }
    // mixed_3_6: two storage modes, the 6-bit one's typical error lower.
    let modes = full["typical_by_mode"].as_array().expect("modes");
    assert_eq!(modes.len(), 2, "{modes:?}");
}

/// `inspect --filter` (issue #58): the window's filter language on what
/// mlx-lm wrote: words, `mode:`, `shape:` (the logical shape of a packed
/// weight), `dtype:` and `size`, the same tensors whichever way they are
/// named.
#[test]
fn inspect_filter_keeps_what_the_query_names() {
    let _lock = mlx_memory_lock();
    let out = tempfile::tempdir().expect("tempdir");
    write_models(out.path());
    let path = out.path().join("nvfp4");
    let inspect = |filter: &str| {
        let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
            .arg("inspect")
            .arg(&path)
            .args(["--json", "--filter", filter])
            .output()
            .expect("weightscope runs");
        assert!(
            output.status.success(),
            "{filter}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let doc: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        let names: Vec<String> = doc["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect();
        assert_eq!(doc["filter"]["matched"].as_u64(), Some(names.len() as u64));
        assert_eq!(doc["filter"]["query"], filter);
        (doc, names)
    };
    let (doc, q_proj) = inspect("mode:nvfp4 q_proj");
    assert!(!q_proj.is_empty());
    for t in doc["tensors"].as_array().expect("tensors") {
        let name = t["name"].as_str().expect("name");
        assert!(
            name.contains("q_proj") && name.ends_with(".weight"),
            "{name}"
        );
        assert_eq!(t["quantized"]["mode"], "nvfp4", "{t}");
    }
    // The same weights by their logical shape and stored dtype.
    let logical = &doc["tensors"][0]["quantized"]["shape"];
    let shape = logical
        .as_array()
        .expect("logical shape")
        .iter()
        .map(|d| d.as_u64().expect("size").to_string())
        .collect::<Vec<_>>()
        .join("x");
    let (_, by_shape) = inspect(&format!("shape:{shape} dtype:u32 q_proj"));
    assert_eq!(by_shape, q_proj);
    // Scales are not nvfp4 weights; every tensor is at most its size.
    let (_, scales) = inspect("mode:nvfp4 .scales");
    assert!(scales.is_empty(), "{scales:?}");
    let (all, _) = inspect("size>=0");
    assert_eq!(all["filter"]["matched"], all["tensor_count"]);
    let (_, none) = inspect("size>1T");
    assert!(none.is_empty());
    // A term that cannot be read: one line, exit 2, nothing on stdout.
    let bad = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("inspect")
        .arg(&path)
        .args(["--filter", "shape:2048by64"])
        .output()
        .expect("weightscope runs");
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("shape:2048by64"), "{stderr}");
    // The text table lists the same tensors, after a line saying so.
    let text = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("inspect")
        .arg(&path)
        .args(["--filter", "mode:nvfp4 q_proj"])
        .output()
        .expect("weightscope runs");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "filter       mode:nvfp4 q_proj: {} of",
            q_proj.len()
        )),
        "{text}"
    );
    for name in &q_proj {
        assert!(text.contains(name.as_str()), "{name}");
    }
    assert!(!text.contains("k_proj.weight "), "{text}");
}
