//! The checkpoint layer and `weightscope inspect` on real files written by the
//! `safetensors` crate and by MLX's own writer.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use common::{Tensor, write_safetensors};
use safetensors::tensor::Dtype as StDtype;
use serde_json::Value;
use weightscope::checkpoint::{Checkpoint, CheckpointError, Dtype, Layout};

fn zeros(name: &str, dtype: StDtype, shape: &[usize]) -> Tensor {
    let bytes = shape.iter().product::<usize>() * dtype.bitsize() / 8;
    Tensor::new(name, dtype, shape, vec![0; bytes])
}

/// A three-shard indexed model: embeddings, two layers, norms, a head.
fn write_indexed_model(dir: &Path) {
    write_safetensors(
        &dir.join("model-00001-of-00003.safetensors"),
        &[
            zeros("model.embed_tokens.weight", StDtype::BF16, &[64, 16]),
            zeros(
                "model.layers.0.self_attn.q_proj.weight",
                StDtype::BF16,
                &[16, 16],
            ),
        ],
    );
    write_safetensors(
        &dir.join("model-00002-of-00003.safetensors"),
        &[
            zeros("model.layers.0.input_layernorm.weight", StDtype::F32, &[16]),
            zeros(
                "model.layers.1.self_attn.q_proj.weight",
                StDtype::BF16,
                &[16, 16],
            ),
            zeros("model.layers.1.input_layernorm.weight", StDtype::F32, &[16]),
        ],
    );
    write_safetensors(
        &dir.join("model-00003-of-00003.safetensors"),
        &[zeros("lm_head.weight", StDtype::F16, &[64, 16])],
    );
    let weight_map: BTreeMap<&str, &str> = [
        (
            "model.embed_tokens.weight",
            "model-00001-of-00003.safetensors",
        ),
        (
            "model.layers.0.self_attn.q_proj.weight",
            "model-00001-of-00003.safetensors",
        ),
        (
            "model.layers.0.input_layernorm.weight",
            "model-00002-of-00003.safetensors",
        ),
        (
            "model.layers.1.self_attn.q_proj.weight",
            "model-00002-of-00003.safetensors",
        ),
        (
            "model.layers.1.input_layernorm.weight",
            "model-00002-of-00003.safetensors",
        ),
        ("lm_head.weight", "model-00003-of-00003.safetensors"),
    ]
    .into_iter()
    .collect();
    let index = serde_json::json!({"metadata": {"total_size": 5248}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).expect("index");
    std::fs::write(dir.join("config.json"), r#"{"model_type":"llama"}"#).expect("config");
}

fn inspect(path: &Path, json: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weightscope"));
    cmd.arg("inspect").arg(path);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("run weightscope")
}

/// Every file under `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, std::time::SystemTime)> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            let meta = std::fs::metadata(&path).expect("meta");
            files.insert(
                path.display().to_string(),
                (
                    std::fs::read(&path).expect("read"),
                    meta.modified().expect("mtime"),
                ),
            );
        }
    }
    files
}

#[test]
fn an_indexed_model_opens_with_totals_and_layers() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_indexed_model(dir.path());
    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert!(
        checkpoint.problems().is_empty(),
        "{:?}",
        checkpoint.problems()
    );
    assert!(
        matches!(checkpoint.layout(), Layout::Indexed { index, .. } if index.total_size == Some(5248))
    );
    let files: Vec<&str> = checkpoint
        .shards()
        .iter()
        .map(|s| s.file.as_str())
        .collect();
    assert_eq!(
        files,
        [
            "model-00001-of-00003.safetensors",
            "model-00002-of-00003.safetensors",
            "model-00003-of-00003.safetensors"
        ]
    );
    let summary = checkpoint.summary();
    assert_eq!(summary.tensor_count, 6);
    assert_eq!(summary.total_bytes, 5248);
    assert_eq!(summary.params_by_dtype[&Dtype::BF16], 64 * 16 + 2 * 16 * 16);
    assert_eq!(summary.params_by_dtype[&Dtype::F32], 32);
    assert_eq!(summary.params_by_dtype[&Dtype::F16], 64 * 16);
    assert_eq!(summary.logical_params, 64 * 16 * 2 + 2 * 16 * 16 + 32);
    assert_eq!(
        checkpoint.config().and_then(|c| c.model_type.as_deref()),
        Some("llama")
    );
    let head = checkpoint.tensor("lm_head.weight").expect("head");
    assert_eq!(
        checkpoint.shard_of(head).file,
        "model-00003-of-00003.safetensors"
    );
    assert_eq!(head.shape(), [64, 16]);
    let layers = checkpoint.layers();
    assert_eq!(layers[&Some(0)].len(), 2);
    assert_eq!(layers[&Some(1)].len(), 2);
    assert_eq!(layers[&None].len(), 2);
}

#[test]
fn a_folder_without_index_and_a_single_file_open_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_safetensors(
        &dir.path().join("b.safetensors"),
        &[zeros("y", StDtype::U8, &[3])],
    );
    write_safetensors(
        &dir.path().join("a.safetensors"),
        &[zeros("x", StDtype::I64, &[2])],
    );
    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert_eq!(*checkpoint.layout(), Layout::Folder);
    let files: Vec<&str> = checkpoint
        .shards()
        .iter()
        .map(|s| s.file.as_str())
        .collect();
    assert_eq!(files, ["a.safetensors", "b.safetensors"], "sorted by name");
    let single = Checkpoint::open(&dir.path().join("b.safetensors")).expect("open file");
    assert_eq!(*single.layout(), Layout::SingleFile);
    assert_eq!(single.summary().tensor_count, 1);
}

#[test]
fn one_bad_shard_leaves_the_others_open_and_inspect_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_indexed_model(dir.path());
    let bad = dir.path().join("model-00002-of-00003.safetensors");
    let bytes = std::fs::read(&bad).expect("read");
    std::fs::write(&bad, &bytes[..bytes.len() - 3]).expect("truncate");

    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert_eq!(checkpoint.shards().len(), 2);
    assert_eq!(checkpoint.problems().len(), 1);
    assert!(
        matches!(&checkpoint.problems()[0], CheckpointError::OffsetsPastEnd { path, .. } if *path == bad)
    );
    assert!(checkpoint.tensor("lm_head.weight").is_some());

    let out = inspect(dir.path(), true);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "no partial output on stdout");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("model-00002-of-00003.safetensors") && stderr.contains("past its end"),
        "{stderr}"
    );
}

#[test]
fn index_problems_are_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_indexed_model(dir.path());
    std::fs::remove_file(dir.path().join("model-00003-of-00003.safetensors")).expect("rm");
    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert!(
        matches!(checkpoint.problems(), [CheckpointError::IndexMissingShard { shard, .. }] if shard == "model-00003-of-00003.safetensors")
    );

    // The index places a tensor in a shard that does not hold it.
    let dir = tempfile::tempdir().expect("tempdir");
    write_indexed_model(dir.path());
    let index_path = dir.path().join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index_path).expect("index");
    let moved = text.replacen(
        r#""lm_head.weight":"model-00003-of-00003.safetensors""#,
        r#""lm_head.weight":"model-00001-of-00003.safetensors""#,
        1,
    );
    assert_ne!(text, moved);
    std::fs::write(&index_path, moved).expect("write");
    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert!(
        matches!(checkpoint.problems(), [CheckpointError::IndexTensorNotInShard { tensor, .. }] if tensor == "lm_head.weight"),
        "{:?}",
        checkpoint.problems()
    );

    // An index that leaves a tensor out places nothing wrongly: the shard's
    // names differ from the index's, the entries are looked up, none is wrong.
    let omitted = text.replacen(
        r#""model.layers.1.input_layernorm.weight":"model-00002-of-00003.safetensors","#,
        "",
        1,
    );
    assert_ne!(text, omitted);
    std::fs::write(&index_path, omitted).expect("write");
    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert!(
        checkpoint.problems().is_empty(),
        "{:?}",
        checkpoint.problems()
    );

    std::fs::write(&index_path, "not json").expect("write");
    let err = Checkpoint::open(dir.path()).expect_err("index not JSON");
    assert!(matches!(err, CheckpointError::IndexNotJson { .. }));
    let out = inspect(dir.path(), false);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model.safetensors.index.json"));
}

#[test]
fn duplicate_names_across_shards_and_empty_folders() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_safetensors(
        &dir.path().join("a.safetensors"),
        &[zeros("x", StDtype::U8, &[1])],
    );
    write_safetensors(
        &dir.path().join("b.safetensors"),
        &[zeros("x", StDtype::U8, &[1])],
    );
    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert!(
        matches!(checkpoint.problems(), [CheckpointError::DuplicateTensor { tensor, .. }] if tensor == "x")
    );

    let empty = tempfile::tempdir().expect("tempdir");
    std::fs::write(empty.path().join("README.md"), "no weights here").expect("write");
    let err = Checkpoint::open(empty.path()).expect_err("empty");
    assert!(matches!(err, CheckpointError::EmptyFolder { .. }));
    let out = inspect(empty.path(), true);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no .safetensors files"));

    let out = inspect(&empty.path().join("missing"), false);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));
}

#[test]
fn inspect_json_has_the_contract_keys_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_indexed_model(dir.path());
    let before = snapshot(dir.path());
    let out = inspect(dir.path(), true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    common::assert_inspect_schema(&doc);
    // The schema holds what it says: a document without a common fact, or
    // with GGUF's facts on a safetensors checkpoint, is not one.
    for broken in [
        {
            let mut d = doc.clone();
            d.as_object_mut().expect("object").remove("tensor_count");
            d
        },
        {
            let mut d = doc.clone();
            d["gguf"] = serde_json::json!({});
            d
        },
        {
            let mut d = doc.clone();
            d["tensors"][0]["dtype"] = Value::Null;
            d
        },
    ] {
        assert!(!common::inspect_schema_errors(&broken).is_empty());
    }
    assert_eq!(doc["format"], "safetensors");
    assert_eq!(doc["layout"], "indexed");
    assert_eq!(doc["tensor_count"], 6);
    assert_eq!(doc["total_bytes"], 5248);
    assert_eq!(doc["params_by_dtype"]["BF16"], 64 * 16 + 2 * 16 * 16);
    assert_eq!(doc["model_type"], "llama");
    assert!(doc["metadata"].is_object());
    assert_eq!(doc["shards"].as_array().map(Vec::len), Some(3));
    assert_eq!(doc["shards"][2]["file"], "model-00003-of-00003.safetensors");
    assert_eq!(doc["shards"][2]["tensors"], 1);
    let head = doc["tensors"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "lm_head.weight"))
        .expect("head listed");
    assert_eq!(head["dtype"], "F16");
    assert_eq!(head["shape"], serde_json::json!([64, 16]));
    assert_eq!(head["bytes"], 2048);
    assert_eq!(head["shard"], "model-00003-of-00003.safetensors");
    assert!(doc.get("quantization").is_none());
    // One file of it alone: the same schema.
    let single = inspect(&dir.path().join("model-00003-of-00003.safetensors"), true);
    let single: Value = serde_json::from_slice(&single.stdout).expect("JSON");
    common::assert_inspect_schema(&single);
    assert_eq!(single["layout"], "file");
    assert_eq!(single["tensor_count"], 1);

    let text = inspect(dir.path(), false);
    assert_eq!(text.status.code(), Some(0));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("lm_head.weight") && text.contains("model type   llama"),
        "{text}"
    );
    assert_eq!(
        snapshot(dir.path()),
        before,
        "nothing under PATH is written"
    );
}

/// A 4-bit layer quantized by MLX itself and saved by MLX's own writer.
#[test]
fn mlx_quantized_weights_count_their_logical_parameters() {
    use mlx_rs::Array;
    let dir = tempfile::tempdir().expect("tempdir");
    let out_features = 32;
    let in_features = 256;
    let values: Vec<f32> = (0..out_features * in_features)
        .map(|i| (i % 17) as f32 / 17.0)
        .collect();
    let w = Array::from_slice(&values, &[out_features, in_features]);
    let (wq, scales, biases) = mlx_rs::ops::quantize(&w, 64, 4).expect("quantize");
    let norm = Array::from_slice(&[1.0f32; 256], &[256]);
    let arrays = [
        ("model.layers.0.mlp.up_proj.weight", &wq),
        ("model.layers.0.mlp.up_proj.scales", &scales),
        ("model.layers.0.mlp.up_proj.biases", &biases),
        ("model.norm.weight", &norm),
    ];
    Array::save_safetensors(arrays, None, dir.path().join("model.safetensors")).expect("save");

    // Without config.json the parameters are inferred from the shapes.
    let checkpoint = Checkpoint::open(dir.path()).expect("open");
    assert!(
        checkpoint.problems().is_empty(),
        "{:?}",
        checkpoint.problems()
    );
    let summary = checkpoint.summary();
    let q = summary.quantization.as_ref().expect("quantized");
    assert_eq!(q.tensors.len(), 1);
    assert!(q.tensors[0].inferred);
    assert_eq!((q.default.bits, q.default.group_size), (4, 64));
    let logical = u64::try_from(out_features * in_features).expect("positive");
    assert_eq!(q.logical_elements, logical);
    assert_eq!(
        summary.logical_params,
        logical + 256,
        "packed words are not parameters"
    );
    assert_eq!(
        summary.params_by_dtype[&Dtype::U32],
        logical / 8,
        "stored words stay counted as words"
    );
    // 4 bits per weight plus a scale and a bias (f32 here) per group of 64.
    assert!(
        (q.bits_per_weight - (4.0 + 64.0 / 64.0)).abs() < 1e-9,
        "{}",
        q.bits_per_weight
    );

    std::fs::write(
        dir.path().join("config.json"),
        r#"{"quantization":{"group_size":64,"bits":4}}"#,
    )
    .expect("config");
    let out = inspect(dir.path(), true);
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    common::assert_inspect_schema(&doc);
    assert_eq!(doc["logical_params"], logical + 256);
    assert_eq!(doc["quantization"]["bits"], 4);
    assert_eq!(doc["quantization"]["group_size"], 64);
    assert_eq!(doc["quantization"]["inferred"], false);
}
