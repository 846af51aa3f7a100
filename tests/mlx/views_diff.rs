//! Checkpoint views (the built-in Qwen3-Next rules, user view files) and the
//! diff of two checkpoints, on real MLX with checkpoints written by MLX.

use crate::common;

use std::path::Path;
use std::process::Command as Process;
use std::sync::atomic::AtomicBool;

use common::mlx_memory_lock;
use weightscope::mlx::{self, Array};
use weightscope::weights::{PreviewOptions, ViewChoice, ViewRules, Weights, WeightsError, diff};
use weightscope::worker::{EventKind, Request, Worker};

fn save(path: &Path, tensors: &[(&str, Array)]) {
    let pairs: Vec<(&str, &Array)> = tensors.iter().map(|(n, a)| (*n, a)).collect();
    mlx::save_safetensors(path, &pairs).expect("MLX writes the file");
}

fn filled(shape: &[i32], f: impl Fn(usize) -> f32) -> Array {
    let n: i32 = shape.iter().product();
    let values: Vec<f32> = (0..usize::try_from(n).expect("size")).map(f).collect();
    mlx::array_f32(&values, shape)
}

/// A Qwen3-Next-shaped source checkpoint, as Hugging Face stores it.
fn write_source(dir: &Path) {
    save(
        &dir.join("model-00001-of-00002.safetensors"),
        &[
            (
                "model.language_model.embed_tokens.weight",
                filled(&[16, 8], |i| i as f32 * 0.01),
            ),
            (
                "model.language_model.layers.0.input_layernorm.weight",
                filled(&[8], |_| 0.25),
            ),
            (
                "model.language_model.layers.0.linear_attn.conv1d.weight",
                filled(&[6, 1, 4], |i| i as f32),
            ),
            (
                "model.language_model.layers.0.linear_attn.norm.weight",
                filled(&[8], |_| 0.5),
            ),
        ],
    );
    save(
        &dir.join("model-00002-of-00002.safetensors"),
        &[
            ("model.language_model.norm.weight", filled(&[8], |_| -0.125)),
            ("mtp.fc.weight", filled(&[4, 4], |_| 1.0)),
            (
                "model.visual.blocks.0.attn.qkv.weight",
                filled(&[4, 4], |_| 2.0),
            ),
            ("lm_head.weight", filled(&[16, 8], |i| i as f32 * -0.01)),
        ],
    );
    std::fs::write(dir.join("config.json"), r#"{"model_type": "qwen3_next"}"#).expect("config");
}

/// What mlx-lm's conversion of that source holds: renamed, norms + 1,
/// conv1d in MLX's layout, mtp and the vision tower gone.
fn write_converted(dir: &Path) {
    save(
        &dir.join("model.safetensors"),
        &[
            (
                "model.embed_tokens.weight",
                filled(&[16, 8], |i| i as f32 * 0.01),
            ),
            (
                "model.layers.0.input_layernorm.weight",
                filled(&[8], |_| 1.25),
            ),
            (
                "model.layers.0.linear_attn.conv1d.weight",
                // [6, 1, 4] moved to [6, 4, 1] keeps the order of the values.
                filled(&[6, 4, 1], |i| i as f32),
            ),
            (
                "model.layers.0.linear_attn.norm.weight",
                filled(&[8], |_| 0.5),
            ),
            ("model.norm.weight", filled(&[8], |_| 0.875)),
            ("lm_head.weight", filled(&[16, 8], |i| i as f32 * -0.01)),
        ],
    );
}

fn open_with(dir: &Path, choice: &ViewChoice) -> Weights {
    let mut weights = Weights::open(dir).expect("open");
    if let Some(rules) = choice.resolve(weights.checkpoint()).expect("view resolves") {
        let compiled = rules.compile(weights.checkpoint()).expect("view compiles");
        weights
            .install(compiled)
            .expect("installed before any tensor");
    }
    weights
}

#[test]
fn the_qwen3_next_view_renames_drops_and_fixes() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_source(dir.path());
    // Auto picks it from config.json and the source layout.
    let mut weights = open_with(dir.path(), &ViewChoice::Auto);
    let info = weights.view_info().expect("a view was picked").clone();
    assert_eq!(info.name, "qwen3-next");
    let mut names = weights.tensor_names();
    names.sort();
    assert_eq!(
        names,
        [
            "lm_head.weight",
            "model.embed_tokens.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.linear_attn.conv1d.weight",
            "model.layers.0.linear_attn.norm.weight",
            "model.norm.weight",
        ]
    );
    let dropped: Vec<String> = info
        .dropped
        .iter()
        .map(|(i, rule)| format!("{} {rule}", weights.checkpoint().tensors().at(*i).name()))
        .collect();
    assert_eq!(dropped.len(), 2);
    assert!(
        dropped
            .iter()
            .any(|d| d.starts_with("mtp.fc.weight multi-token")),
        "{dropped:?}"
    );
    assert!(
        dropped.iter().any(|d| d.contains("vision tower")),
        "{dropped:?}"
    );

    // RMSNorm gamma - 1 gets + 1; the gated norm does not.
    let norm = mlx::to_f32_vec(
        &weights
            .tensor("model.layers.0.input_layernorm.weight")
            .expect("norm"),
    )
    .expect("values");
    assert_eq!(norm, [1.25; 8]);
    let final_norm =
        mlx::to_f32_vec(&weights.tensor("model.norm.weight").expect("norm")).expect("values");
    assert_eq!(final_norm, [0.875; 8]);
    let gated = mlx::to_f32_vec(
        &weights
            .tensor("model.layers.0.linear_attn.norm.weight")
            .expect("norm"),
    )
    .expect("values");
    assert_eq!(gated, [0.5; 8]);
    // conv1d [out, in/groups, k] becomes [out, k, in/groups].
    let conv = weights
        .tensor("model.layers.0.linear_attn.conv1d.weight")
        .expect("conv");
    assert_eq!(conv.shape(), [6, 4, 1]);

    // The preview shows the statistics before and after the fix-up.
    let preview = weights
        .preview(
            "model.layers.0.input_layernorm.weight",
            &PreviewOptions::default(),
        )
        .expect("preview");
    assert_eq!(
        preview.stored_name,
        "model.language_model.layers.0.input_layernorm.weight"
    );
    assert!((preview.values.stats.mean - 1.25).abs() < 1e-9);
    let before = preview
        .before_fixup
        .expect("the stored value is summarized too");
    assert!((before.stats.mean - 0.25).abs() < 1e-9);
    assert_eq!(preview.fixups.len(), 1, "{:?}", preview.fixups);
    assert!(
        preview.fixups[0].contains("gamma - 1"),
        "{:?}",
        preview.fixups
    );
    let plain = weights
        .preview("lm_head.weight", &PreviewOptions::default())
        .expect("preview");
    assert!(plain.before_fixup.is_none() && plain.fixups.is_empty());
}

#[test]
fn auto_leaves_a_converted_checkpoint_alone() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_converted(dir.path());
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "qwen3_next"}"#,
    )
    .expect("config");
    let weights = open_with(dir.path(), &ViewChoice::Auto);
    assert!(
        weights.view_info().is_none(),
        "the norms must not get + 1 twice"
    );
}

#[test]
fn a_view_file_with_an_error_names_the_line_and_the_rule() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_source(dir.path());
    let views = tempfile::tempdir().expect("tempdir");
    let file = views.path().join("bad-view.json");
    std::fs::write(
        &file,
        "{\n  \"rename\": [\n    {\"from\": \"^model\\\\.language_model\\\\.(.*)$\", \"to\": \"model.$1\"}\n  ],\n  \"fixup\": [\n    {\"match\": \"norm\\\\.weight$\", \"add\": 1.0},\n    {\"match\": \"conv1d[\", \"move_axis\": [2, 1]}\n  ]\n}\n",
    )
    .expect("write");
    let err = ViewRules::load(&file).expect_err("a bad regex");
    let message = err.to_string();
    assert!(message.contains("bad-view.json"), "{message}");
    assert!(message.contains("line 7"), "{message}");
    assert!(message.contains("rule fixup[1]"), "{message}");
    // The B side of a diff: refused whole, with the same message.
    let err = Weights::open_viewed(dir.path(), &ViewChoice::File(file.clone()))
        .err()
        .expect("a bad view refuses the B side");
    assert!(matches!(err, WeightsError::View(_)), "{err:?}");
    assert_eq!(err.to_string(), message);

    // Through the worker: the checkpoint opens without a view and says why.
    let worker = Worker::spawn(|| {}).expect("worker");
    worker
        .send(Request::OpenWithView(
            dir.path().to_path_buf(),
            ViewChoice::File(file.clone()),
        ))
        .expect("send");
    let EventKind::Opened {
        view, view_error, ..
    } = worker.recv().expect("event").kind
    else {
        panic!("the checkpoint still opens");
    };
    assert!(view.is_none());
    assert!(view_error.is_some_and(|e| e.to_string().contains("line 7")));

    // A good file applies its rules.
    let good = views.path().join("good-view.json");
    std::fs::write(
        &good,
        r#"{"name": "mine", "rename": [{"from": "^model\\.language_model\\.(.*)$", "to": "model.$1"}],
            "drop": [{"pattern": "^(mtp|model\\.visual)\\.", "reason": "not for text"}],
            "fixup": [{"match": "layernorm\\.weight$", "add": 1.0, "if_ndim": 1},
                      {"match": "embed_tokens\\.weight$", "cast": "F16"},
                      {"match": "lm_head\\.weight$", "swap_axes": [0, 1]}]}"#,
    )
    .expect("write");
    let mut weights = open_with(dir.path(), &ViewChoice::File(good));
    assert_eq!(weights.view_info().map(|v| v.name.as_str()), Some("mine"));
    let norm = weights
        .tensor("model.layers.0.input_layernorm.weight")
        .expect("norm");
    assert_eq!(mlx::to_f32_vec(&norm).expect("values"), [1.25; 8]);
    let embed = weights.tensor("model.embed_tokens.weight").expect("embed");
    assert_eq!(embed.dtype(), mlx::Dtype::Float16);
    let head = weights.tensor("lm_head.weight").expect("head");
    assert_eq!(head.shape(), [8, 16]);
    assert!(!weights.has("mtp.fc.weight"));
}

#[test]
fn a_checkpoint_against_itself_is_all_zeros() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_source(dir.path());
    let mut a = open_with(dir.path(), &ViewChoice::Identity);
    let mut b = open_with(dir.path(), &ViewChoice::Identity);
    let report = diff(&mut a, &mut b, &AtomicBool::new(false), &mut |_| {});
    assert_eq!(report.common.len(), 8);
    assert!(report.only_in_a.is_empty() && report.only_in_b.is_empty());
    assert!(report.changed.is_empty() && report.failed.is_empty());
    assert!(
        report
            .common
            .iter()
            .all(|c| c.max_abs_diff == 0.0 && c.rel_error == 0.0)
    );
    assert_eq!(report.differing().count(), 0);
}

#[test]
fn a_converted_checkpoint_matches_its_source_through_the_view() {
    let _lock = mlx_memory_lock();
    let source = tempfile::tempdir().expect("tempdir");
    write_source(source.path());
    let converted = tempfile::tempdir().expect("tempdir");
    write_converted(converted.path());
    let mut a = open_with(converted.path(), &ViewChoice::Identity);
    let mut b = open_with(source.path(), &ViewChoice::Builtin("qwen3-next".into()));
    let report = diff(&mut a, &mut b, &AtomicBool::new(false), &mut |_| {});
    assert!(report.only_in_a.is_empty(), "{:?}", report.only_in_a);
    assert!(report.only_in_b.is_empty(), "{:?}", report.only_in_b);
    assert!(report.changed.is_empty(), "{:?}", report.changed);
    assert_eq!(report.common.len(), 6);
    assert_eq!(report.differing().count(), 0, "{:?}", report.common);

    // Without the view, the names do not even meet.
    let mut b = open_with(source.path(), &ViewChoice::Identity);
    let report = diff(&mut a, &mut b, &AtomicBool::new(false), &mut |_| {});
    assert_eq!(report.common.len(), 1, "only lm_head.weight is named alike");
    assert_eq!(report.only_in_b.len(), 7);
}

/// 8 shards of four 1 MiB f32 tensors; `changed` gets a different value.
fn write_eight(dir: &Path, changed: Option<&str>) {
    for shard in 0..8 {
        let tensors: Vec<(String, Array)> = (0..4)
            .map(|i| {
                let name = format!("model.layers.{shard}.w{i}.weight");
                let bump = if changed == Some(name.as_str()) {
                    0.5
                } else {
                    0.0
                };
                let array = filled(&[256, 1024], |j| {
                    (j % 101) as f32 * 0.01 + bump * f32::from(u8::from(j == 7))
                });
                (name, array)
            })
            .collect();
        let pairs: Vec<(&str, Array)> = tensors
            .iter()
            .map(|(n, a)| (n.as_str(), a.clone()))
            .collect();
        save(&dir.join(format!("model-{shard:05}.safetensors")), &pairs);
    }
}

#[test]
fn a_diff_finds_the_one_changed_tensor_within_two_shards_of_memory() {
    let _lock = mlx_memory_lock();
    let a_dir = tempfile::tempdir().expect("tempdir");
    let b_dir = tempfile::tempdir().expect("tempdir");
    write_eight(a_dir.path(), None);
    write_eight(b_dir.path(), Some("model.layers.5.w2.weight"));
    let mut a = open_with(a_dir.path(), &ViewChoice::Identity);
    let mut b = open_with(b_dir.path(), &ViewChoice::Identity);
    let mut seen = 0;
    let report = diff(&mut a, &mut b, &AtomicBool::new(false), &mut |p| {
        seen = p.done;
    });
    assert_eq!(seen, 32);
    let differing: Vec<&str> = report.differing().map(|c| c.name.as_str()).collect();
    assert_eq!(differing, ["model.layers.5.w2.weight"]);
    let changed = report.differing().next().expect("one");
    assert!(
        (changed.max_abs_diff - 0.5).abs() < 1e-6,
        "{}",
        changed.max_abs_diff
    );
    assert!(changed.rel_error > 0.0 && changed.rel_error < 1e-2);
    // Two 4 MiB shards plus one band's temporaries on each side (a band is
    // one whole 1 MiB tensor here): far below the 64 MiB that keeping every
    // shard would take, and within the bound the report states.
    let mib = 1u64 << 20;
    assert_eq!(report.two_shards_bytes, 8 * mib);
    assert!(
        report.peak_mlx_active_bytes <= report.two_shards_bytes + 8 * mib,
        "peak {} within two shards and one band's temporaries",
        report.peak_mlx_active_bytes
    );
    assert!(report.peak_mlx_active_bytes <= report.bound_bytes);
    drop((a, b));
    common::assert_all_freed();
}

#[test]
fn the_diff_command_prints_the_contract() {
    let _lock = mlx_memory_lock();
    let a_dir = tempfile::tempdir().expect("tempdir");
    let b_dir = tempfile::tempdir().expect("tempdir");
    write_source(a_dir.path());
    write_converted(b_dir.path());
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("diff")
        .arg(b_dir.path())
        .arg(a_dir.path())
        .args(["--view-b", "qwen3-next", "--json"])
        .output()
        .expect("run weightscope");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    for key in ["only_in_a", "only_in_b", "changed", "common"] {
        assert!(report[key].is_array(), "{key} is a list");
    }
    let common = report["common"].as_array().expect("common");
    assert_eq!(common.len(), 6);
    for entry in common {
        for key in ["name", "max_abs_diff", "rel_error", "nan", "inf"] {
            assert!(!entry[key].is_null(), "{key} in {entry}");
        }
        assert_eq!(entry["max_abs_diff"], 0.0);
    }
    let bad = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("diff")
        .arg(a_dir.path())
        .arg(a_dir.path().join("missing"))
        .output()
        .expect("run weightscope");
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing"));
}

#[test]
fn a_b_side_without_tensors_is_refused_by_name() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    common::write_safetensors(&dir.path().join("model.safetensors"), &[]);
    let err = Weights::open_viewed(dir.path(), &ViewChoice::Auto)
        .err()
        .expect("nothing to compare");
    assert!(
        matches!(err, WeightsError::NothingToCompare { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("no tensors to compare: {}", dir.path().display())
    );
}
