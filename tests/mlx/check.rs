//! `weightscope check`: one broken checkpoint per finding code, each made
//! the way real conversions go wrong (packed by MLX, written by MLX's own
//! writer, `config.json` as mlx-lm writes it, then broken), giving that
//! finding with the right severity, tensor and file; clean conversions give
//! no error; `--values` finds planted NaN, Inf, zeros and bad scales within
//! the release-shard memory bound; exit statuses 0, 1 and 2.

use crate::common;

use std::path::Path;
use std::process::Command as Process;
use std::sync::atomic::AtomicBool;

use common::convert::{Recipe, convert, convert_with, float_model, save, write_config, write_fp8};
use common::{Tensor, mlx_memory_lock, write_safetensors};
use serde_json::{Value, json};
use weightscope::checkpoint::check::{CODES, check_headers};
use weightscope::checkpoint::{Checkpoint, QuantMode};
use weightscope::finding::{Finding, Severity};
use weightscope::mlx::{self, Array, Dtype};
use weightscope::weights::{Weights, scan_values};

fn header_findings(dir: &Path) -> Vec<Finding> {
    let checkpoint = Checkpoint::open(dir).expect("opens");
    let summary = checkpoint.summary();
    check_headers(&checkpoint, &summary)
}

fn value_findings(dir: &Path) -> Vec<Finding> {
    let mut weights = Weights::open(dir).expect("weights");
    let scan = scan_values(&mut weights, &AtomicBool::new(false), &mut |_| {});
    assert_eq!(scan.scanned, scan.total);
    assert!(
        scan.peak_mlx_active_bytes <= scan.bound_bytes,
        "peak {} within the release-shard bound {}",
        scan.peak_mlx_active_bytes,
        scan.bound_bytes
    );
    scan.findings
}

/// The one finding of `code`, checked for severity, tensor and file.
fn expect(findings: &[Finding], code: &str, tensor: Option<&str>, file: Option<&str>) {
    let found: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.code == code && (tensor.is_none() || f.subject.tensor.as_deref() == tensor))
        .collect();
    assert!(
        !found.is_empty(),
        "no {code} for {tensor:?} in {findings:#?}"
    );
    let f = found[0];
    let severity = CODES
        .iter()
        .find(|(c, _)| *c == code)
        .expect("a known code")
        .1;
    assert_eq!(f.severity, severity, "{code}");
    assert_eq!(f.subject.tensor.as_deref(), tensor, "{code}: tensor");
    assert_eq!(f.subject.file.as_deref(), file, "{code}: file");
}

fn errors(findings: &[Finding]) -> Vec<&Finding> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect()
}

const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";

/// A conversion with `mutate` applied before writing.
fn broken(
    default: Recipe,
    mutate: impl FnOnce(&mut Vec<(String, Array)>, &mut Value),
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    convert_with(dir.path(), default, |_| Some(default), true, mutate);
    dir
}

fn remove(stored: &mut Vec<(String, Array)>, name: &str) {
    let before = stored.len();
    stored.retain(|(n, _)| n != name);
    assert_eq!(stored.len() + 1, before, "{name} was stored");
}

fn replace(stored: &mut [(String, Array)], name: &str, f: impl FnOnce(&Array) -> Array) {
    let slot = stored.iter_mut().find(|(n, _)| n == name).expect(name);
    slot.1 = f(&slot.1);
}

fn shard_of(dir: &Path, name: &str) -> String {
    let checkpoint = Checkpoint::open(dir).expect("opens");
    let t = checkpoint.tensor(name).expect(name);
    checkpoint.shard_of(t).file.clone()
}

#[test]
fn clean_conversions_in_every_mode_have_no_error() {
    let _lock = mlx_memory_lock();
    for (mode, bits) in [
        (QuantMode::Affine, 4),
        (QuantMode::Affine, 8),
        (QuantMode::Mxfp4, 4),
        (QuantMode::Mxfp8, 8),
        (QuantMode::Nvfp4, 4),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let recipe = Recipe::of(mode, bits);
        convert(dir.path(), recipe, |_| Some(recipe), true);
        let findings = header_findings(dir.path());
        assert!(errors(&findings).is_empty(), "{mode}: {findings:#?}");
        let values = value_findings(dir.path());
        assert!(errors(&values).is_empty(), "{mode}: {values:#?}");
    }
}

#[test]
fn quantization_findings() {
    let _lock = mlx_memory_lock();
    let affine = Recipe::of(QuantMode::Affine, 4);
    let mxfp4 = Recipe::of(QuantMode::Mxfp4, 4);
    let w = "model.layers.0.mlp.up_proj.weight";

    let dir = broken(affine, |s, _| {
        remove(s, "model.layers.0.mlp.up_proj.scales");
    });
    expect(
        &header_findings(dir.path()),
        "quant.missing-scales",
        Some(w),
        Some(&shard_of(dir.path(), w)),
    );

    let dir = broken(affine, |s, _| {
        remove(s, "model.layers.0.mlp.up_proj.biases");
    });
    expect(
        &header_findings(dir.path()),
        "quant.missing-biases",
        Some(w),
        Some(&shard_of(dir.path(), w)),
    );

    // An fp-mode layer carrying biases (an affine conversion's leftovers).
    let dir = broken(mxfp4, |s, _| {
        let scales = s
            .iter()
            .find(|(n, _)| n == "model.layers.0.mlp.up_proj.scales")
            .expect("scales")
            .1
            .as_dtype(Dtype::Float16)
            .expect("cast");
        s.push(("model.layers.0.mlp.up_proj.biases".into(), scales));
    });
    let b = "model.layers.0.mlp.up_proj.biases";
    expect(
        &header_findings(dir.path()),
        "quant.unexpected-biases",
        Some(b),
        Some(&shard_of(dir.path(), b)),
    );

    // Scales with a row missing.
    let dir = broken(affine, |s, _| {
        for part in ["scales", "biases"] {
            replace(s, &format!("model.layers.0.mlp.up_proj.{part}"), |a| {
                let rows: Vec<i32> = (0..255).collect();
                a.take_axis(Array::from_slice(&rows, &[255]), 0)
                    .expect("take")
            });
        }
    });
    expect(
        &header_findings(dir.path()),
        "quant.scale-shape",
        Some(w),
        Some(&shard_of(dir.path(), w)),
    );

    // mxfp4 scales stored as floats.
    let dir = broken(mxfp4, |s, _| {
        replace(s, "model.layers.0.mlp.up_proj.scales", |a| {
            a.as_dtype(Dtype::Float16).expect("cast")
        });
    });
    let sc = "model.layers.0.mlp.up_proj.scales";
    expect(
        &header_findings(dir.path()),
        "quant.scale-dtype",
        Some(sc),
        Some(&shard_of(dir.path(), sc)),
    );

    // config.json's bits contradict the packed shapes.
    let dir = broken(affine, |_, config| {
        config["quantization"]["bits"] = json!(8);
        config["quantization_config"]["bits"] = json!(8);
    });
    let found = header_findings(dir.path());
    expect(
        &found,
        "quant.config-mismatch",
        Some("model.embed_tokens.weight"),
        Some(SHARD1),
    );
    assert!(
        found
            .iter()
            .filter(|f| f.code == "quant.config-mismatch")
            .count()
            >= 5
    );

    // Packed weights and no quantization in config.json at all.
    let dir = broken(affine, |_, config| {
        config
            .as_object_mut()
            .expect("object")
            .remove("quantization");
        config
            .as_object_mut()
            .expect("object")
            .remove("quantization_config");
    });
    expect(
        &header_findings(dir.path()),
        "quant.no-config",
        Some("model.embed_tokens.weight"),
        Some(SHARD1),
    );
}

#[test]
fn fp8_findings() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_fp8(dir.path());
    assert!(errors(&header_findings(dir.path())).is_empty());

    // The scale is missing while the config says block-scaled.
    let weight = "model.layers.0.mlp.down_proj.weight";
    let codes: Vec<u8> = vec![0x38; 300 * 256];
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[Tensor::new(
            weight,
            safetensors::Dtype::F8_E4M3,
            &[300, 256],
            codes.clone(),
        )],
    );
    expect(
        &header_findings(dir.path()),
        "fp8.missing-scale",
        Some(weight),
        Some("model.safetensors"),
    );

    // A scale that fits no block of the weight.
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[
            Tensor::new(
                weight,
                safetensors::Dtype::F8_E4M3,
                &[300, 256],
                codes.clone(),
            ),
            Tensor::f32(&format!("{weight}_scale_inv"), &[5, 2], &[1.0; 10]),
        ],
    );
    expect(
        &header_findings(dir.path()),
        "fp8.scale-shape",
        Some(weight),
        Some("model.safetensors"),
    );

    // FP8 without any block-scale config: worth knowing, shown unscaled.
    std::fs::remove_file(dir.path().join("config.json")).expect("rm");
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[Tensor::new(
            weight,
            safetensors::Dtype::F8_E4M3,
            &[300, 256],
            codes,
        )],
    );
    expect(
        &header_findings(dir.path()),
        "fp8.unscaled",
        Some(weight),
        Some("model.safetensors"),
    );
}

#[test]
fn folder_index_and_config_findings() {
    let _lock = mlx_memory_lock();
    let affine = Recipe::of(QuantMode::Affine, 4);
    let edit_index = |dir: &Path, key: &str, value: u64| {
        let path = dir.join("model.safetensors.index.json");
        let mut index: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        index["metadata"][key] = json!(value);
        std::fs::write(&path, serde_json::to_vec(&index).expect("json")).expect("write");
    };
    let index_file = Some("model.safetensors.index.json");

    let dir = broken(affine, |_, _| {});
    edit_index(dir.path(), "total_size", 12345);
    expect(
        &header_findings(dir.path()),
        "index.total-size",
        None,
        index_file,
    );

    let dir = broken(affine, |_, _| {});
    edit_index(dir.path(), "total_parameters", 12345);
    expect(
        &header_findings(dir.path()),
        "index.total-parameters",
        None,
        index_file,
    );

    // A shard left from an earlier conversion.
    let dir = broken(affine, |_, _| {});
    std::fs::copy(
        dir.path().join(SHARD2),
        dir.path().join("model-00003-of-00003.safetensors"),
    )
    .expect("copy");
    expect(
        &header_findings(dir.path()),
        "files.stray-shard",
        None,
        Some("model-00003-of-00003.safetensors"),
    );

    // No head while tie_word_embeddings is false.
    let dir = broken(affine, |s, _| {
        s.retain(|(n, _)| !n.starts_with("lm_head."));
    });
    expect(
        &header_findings(dir.path()),
        "model.missing-lm-head",
        None,
        Some("config.json"),
    );

    // A float model (no quantization) with an unusable config, and one F32
    // tensor among bf16 ones.
    let dir = tempfile::tempdir().expect("tempdir");
    let model: Vec<(String, Array)> = float_model()
        .into_iter()
        .map(|(n, a)| {
            let dtype = if n == "model.norm.weight" {
                Dtype::Float32
            } else {
                Dtype::Bfloat16
            };
            (n, a.as_dtype(dtype).expect("cast"))
        })
        .collect();
    save(&dir.path().join("model.safetensors"), &model);
    std::fs::write(dir.path().join("config.json"), b"{\"quantization\": 4").expect("write");
    let found = header_findings(dir.path());
    expect(&found, "config.unusable", None, Some("config.json"));
    expect(
        &found,
        "dtype.stray",
        Some("model.norm.weight"),
        Some("model.safetensors"),
    );
    assert!(errors(&found).is_empty(), "{found:#?}");
}

#[test]
fn values_findings_within_the_release_shard_bound() {
    let _lock = mlx_memory_lock();
    let affine = Recipe::of(QuantMode::Affine, 4);
    let planted = |name: &str, value: f32, at: usize| {
        let name = name.to_owned();
        move |s: &mut Vec<(String, Array)>, _: &mut Value| {
            replace(s, &name, |a| {
                let mut values = mlx::to_f32_vec(a).expect("values");
                values[at] = value;
                let shape = a.shape().to_vec();
                mlx::array_f32(&values, &shape)
                    .as_dtype(a.dtype())
                    .expect("cast")
            });
        }
    };
    let norm = "model.layers.0.input_layernorm.weight";
    let dir = broken(affine, planted(norm, f32::NAN, 3));
    expect(
        &value_findings(dir.path()),
        "values.nan",
        Some(norm),
        Some(&shard_of(dir.path(), norm)),
    );
    let dir = broken(affine, planted(norm, f32::INFINITY, 3));
    expect(
        &value_findings(dir.path()),
        "values.inf",
        Some(norm),
        Some(&shard_of(dir.path(), norm)),
    );
    let dir = broken(affine, |s, _| {
        replace(s, norm, |a| a.multiply(Array::from_f32(0.0)).expect("zero"));
    });
    expect(
        &value_findings(dir.path()),
        "values.all-zero",
        Some(norm),
        Some(&shard_of(dir.path(), norm)),
    );

    // A zero scale in an affine layer; a NaN (E8M0 0xFF) scale in mxfp4.
    let up = "model.layers.0.mlp.up_proj";
    let dir = broken(affine, planted(&format!("{up}.scales"), 0.0, 0));
    let w = format!("{up}.weight");
    expect(
        &value_findings(dir.path()),
        "values.zero-scale",
        Some(&w),
        Some(&shard_of(dir.path(), &w)),
    );
    let dir = broken(Recipe::of(QuantMode::Mxfp4, 4), |s, _| {
        replace(s, &format!("{up}.scales"), |a| {
            let shape = a.shape().to_vec();
            let n: i32 = shape.iter().product();
            let mut bytes = vec![120u8; usize::try_from(n).expect("size")];
            bytes[5] = 0xFF;
            Array::from_slice(&bytes, &shape)
        });
    });
    let found = value_findings(dir.path());
    expect(
        &found,
        "values.bad-scale",
        Some(&w),
        Some(&shard_of(dir.path(), &w)),
    );
    expect(
        &found,
        "values.nan",
        Some(&w),
        Some(&shard_of(dir.path(), &w)),
    );
}

#[test]
fn an_unloadable_shard_is_a_values_finding() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_safetensors(
        &dir.path().join("model.safetensors"),
        // MLX's loader refuses F4 and nothing here decodes it yet.
        &[Tensor::new(
            "w",
            safetensors::Dtype::F4,
            &[4, 4],
            vec![0x3C; 8],
        )],
    );
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["check", "--values", "--json"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
    let codes: Vec<&str> = doc["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"values.unreadable"), "{doc}");
}

#[test]
fn the_command_exit_status_and_contract() {
    let _lock = mlx_memory_lock();
    let affine = Recipe::of(QuantMode::Affine, 4);
    let run = |dir: &Path, extra: &[&str]| {
        Process::new(env!("CARGO_BIN_EXE_weightscope"))
            .arg("check")
            .args(extra)
            .arg(dir)
            .output()
            .expect("runs")
    };
    // Clean: 0, with the counts.
    let dir = broken(affine, |_, _| {});
    let output = run(dir.path(), &[]);
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("0 errors, 0 warnings"));

    // An error: 1, and JSON with {path, findings, errors, warnings}.
    let dir = broken(affine, |s, _| {
        remove(s, "model.layers.0.mlp.up_proj.scales");
    });
    std::fs::copy(
        dir.path().join(SHARD2),
        dir.path().join("model-00003-of-00003.safetensors"),
    )
    .expect("copy");
    let output = run(dir.path(), &["--json"]);
    assert_eq!(output.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(doc["errors"], 1, "{doc:#}");
    // The stray shard, and the index's total_parameters (written for the
    // model before its scales went missing).
    assert_eq!(doc["warnings"], 2, "{doc:#}");
    let first = &doc["findings"][0];
    for key in ["severity", "code", "message", "tensor", "file"] {
        assert!(first.get(key).is_some(), "{key} in {first}");
    }
    assert_eq!(first["severity"], "error");
    let text = String::from_utf8_lossy(&run(dir.path(), &[]).stdout).into_owned();
    assert!(
        text.contains("quant.missing-scales") && text.contains("files.stray-shard"),
        "{text}"
    );

    // Warnings alone: 0.
    let dir = broken(affine, |_, _| {});
    std::fs::copy(
        dir.path().join(SHARD2),
        dir.path().join("model-00003-of-00003.safetensors"),
    )
    .expect("copy");
    assert_eq!(run(dir.path(), &[]).status.code(), Some(0));

    // Cannot be opened at all: 2, one line, nothing on stdout.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("model.safetensors"),
        b"\x10\0\0\0\0\0\0\0{not json",
    )
    .expect("write");
    let output = run(dir.path(), &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1);
    write_config(dir.path(), &json!({}));
}

#[test]
fn a_value_scan_cancelled_between_tensors_stops_and_says_so() {
    let _lock = mlx_memory_lock();
    let dir = broken(Recipe::of(QuantMode::Affine, 4), |_, _| {});
    let mut weights = Weights::open(dir.path()).expect("weights");
    let cancel = AtomicBool::new(false);
    let scan = scan_values(&mut weights, &cancel, &mut |p| {
        if p.done == 3 {
            cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(scan.cancelled);
    assert_eq!(scan.scanned, 3);
    assert!(scan.total > 3);
    drop(weights);
    common::assert_all_freed();
}

#[test]
fn the_worker_honours_a_scan_cancelled_before_it_starts_and_one_jobs_cancel_spares_another() {
    use weightscope::worker::{CancelToken, EventKind, Request, Worker};
    let _lock = mlx_memory_lock();
    let dir = broken(Recipe::of(QuantMode::Affine, 4), |_, _| {});
    let worker = Worker::spawn(|| {}).expect("worker");
    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    assert!(matches!(
        worker.recv().expect("event").kind,
        EventKind::Opened { .. }
    ));
    let early = CancelToken::new();
    early.cancel();
    let other = CancelToken::new();
    worker
        .send(Request::ScanValues { cancel: early })
        .expect("send");
    worker
        .send(Request::ScanValues {
            cancel: other.clone(),
        })
        .expect("send");
    let mut finished = Vec::new();
    while finished.len() < 2 {
        let event = worker.recv().expect("event");
        if let EventKind::ScanFinished(result) = event.kind {
            // A scan ends with its own mark kind, not a walk's.
            assert_eq!(
                event.mark.map(|m| m.kind),
                Some(weightscope::memory::MarkKind::CheckEnd)
            );
            finished.push(result.expect("a scan"));
        }
    }
    assert!(finished[0].cancelled && finished[0].scanned == 0);
    assert!(!finished[1].cancelled && finished[1].scanned == finished[1].total);
    assert!(!other.is_cancelled());
}
