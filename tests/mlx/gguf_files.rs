//! GGUF files written by llama.cpp's own gguf-py (`GGUFWriter`, pinned in
//! the private venv): weightscope reads their headers as gguf-py's
//! `GGUFReader` does (names, types, row-major shapes, bytes, offsets), knows
//! every type's block size as gguf-py does, and says of each type what MLX's
//! `mx.load` (the pinned 0.32.2) really did with it: load, affine, expand to
//! float16, leave out, or refuse the whole file.

use crate::common;

use std::path::Path;
use std::process::Command as Process;

use serde_json::Value;
use weightscope::checkpoint::gguf::{GgmlType, GgufHeader};

fn write_files(out: &Path) -> Vec<Value> {
    common::run_venv_writer("tests/gguf/write_gguf.py", out)
}

#[test]
fn headers_types_and_what_mx_load_does_match_gguf_py_and_mlx() {
    let out = tempfile::tempdir().expect("tempdir");
    let lines = write_files(out.path());
    let sizes = lines
        .iter()
        .find_map(|l| l.get("quant_sizes"))
        .and_then(Value::as_object)
        .expect("gguf-py's block sizes");
    // Every type gguf-py knows, with its id and block: ours agree.
    for (name, v) in sizes {
        let id = u32::try_from(v[0].as_u64().expect("id")).expect("small");
        let ours = GgmlType::from_id(id).unwrap_or_else(|| panic!("{name} ({id}) unknown"));
        assert_eq!(ours.name, name);
        assert_eq!(
            (Some(ours.block_values), Some(ours.block_bytes)),
            (v[1].as_u64(), v[2].as_u64()),
            "{name}"
        );
    }
    assert_eq!(
        GgmlType::all().count(),
        sizes.len(),
        "no type of ours gguf-py lacks"
    );
    let mut checked = 0;
    for line in lines.iter().filter(|l| l.get("file").is_some()) {
        let path = Path::new(line["file"].as_str().expect("file"));
        let header = GgufHeader::read(path).expect("our reader");
        let tensors = line["tensors"].as_array().expect("tensors");
        assert_eq!(header.tensors.len(), tensors.len(), "{}", path.display());
        for (ours, theirs) in header.tensors.iter().zip(tensors) {
            assert_eq!(ours.name, theirs["name"].as_str().expect("name"));
            assert_eq!(Some(u64::from(ours.type_id)), theirs["type_id"].as_u64());
            let shape: Vec<u64> = theirs["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dim"))
                .collect();
            assert_eq!(ours.shape[..], shape[..], "{}", ours.name);
            assert_eq!(Some(ours.bytes), theirs["bytes"].as_u64(), "{}", ours.name);
            assert_eq!(
                Some(ours.offset),
                theirs["offset"].as_u64(),
                "{}",
                ours.name
            );
        }
        // What mx.load did, against what we say it does.
        let mlx = &line["mlx"];
        if let Some(t) = header.refused_by() {
            assert!(
                mlx.get("refuses").is_some(),
                "{}: we say {} makes mx.load refuse, it loaded {mlx}",
                path.display(),
                t.name
            );
        } else {
            assert!(mlx.get("refuses").is_none(), "{}: {mlx}", path.display());
            for t in &header.tensors {
                let said = t.ggml_type().expect("known").mlx_load().key();
                assert_eq!(
                    mlx[&t.name].as_str(),
                    Some(said),
                    "{} in {}",
                    t.name,
                    path.display()
                );
            }
        }
        checked += 1;
    }
    assert!(checked > 30, "a file per type and the mixed one: {checked}");
}

#[test]
fn inspect_reads_a_gguf_file_and_says_what_mx_load_will_do() {
    let out = tempfile::tempdir().expect("tempdir");
    let lines = write_files(out.path());
    let run = |file: &str| {
        let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
            .arg("inspect")
            .arg(out.path().join(file))
            .arg("--json")
            .output()
            .expect("weightscope runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
    };
    let mixed = run("mixed.gguf");
    // The schema every format's `inspect --json` shares.
    common::assert_inspect_schema(&mixed);
    assert_eq!(mixed["format"], "gguf");
    // 64x256 + 64x256 + 64x512 + 256 + 4096x512.
    let parameters = 64 * 256 * 2 + 64 * 512 + 256 + 4096 * 512;
    assert_eq!(mixed["logical_params"], parameters);
    let stored: u64 = mixed["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["bytes"].as_u64().expect("bytes"))
        .sum();
    assert_eq!(mixed["total_bytes"], stored);
    let q4k_tensor = mixed["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .find(|t| t["dtype"] == "Q4_K")
        .expect("a Q4_K tensor");
    assert_eq!(q4k_tensor["shard"], "mixed.gguf");
    assert_eq!(q4k_tensor["gguf"]["mlx_load"], "expand_f16");
    let gguf = &mixed["gguf"];
    assert_eq!(gguf["metadata"]["tokenizer.ggml.tokens"]["len"], 1000);
    assert_eq!(gguf["metadata"]["general.name"], "tiny");
    assert!(gguf["mlx_refused_by"].is_null());
    let q4k = gguf["by_type"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["type"] == "Q4_K")
        .expect("Q4_K");
    assert_eq!(q4k["mlx_load"], "expand_f16");
    assert_eq!(q4k["bits_per_weight"], 4.5);
    // One Q5_0 tensor: mx.load refuses the file, and says which tensor.
    assert_eq!(run("type_Q5_0.gguf")["gguf"]["mlx_refused_by"], "w");
    // Text: the verdict in words.
    let text = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("inspect")
        .arg(out.path().join("type_TQ1_0.gguf"))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("leaves out, without a word, 1 tensors: 1 TQ1_0"),
        "{text}"
    );
    // A truncated file: one line naming it, exit 2.
    let cut = out.path().join("cut.gguf");
    let bytes = std::fs::read(out.path().join("mixed.gguf")).expect("read");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).expect("write");
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("inspect")
        .arg(&cut)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cut.gguf") && err.contains("past the end of the file"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // The checkpoint layer reads GGUF as it reads safetensors: a diff of
    // the file with itself decodes every tensor and finds nothing changed.
    let mixed = out.path().join("mixed.gguf");
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["diff", "--json"])
        .args([&mixed, &mixed])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(doc["failed"].as_array().map(Vec::len), Some(0), "{doc}");
    assert_eq!(
        doc["compared"].as_u64(),
        lines
            .iter()
            .find(|l| l["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("mixed.gguf")))
            .and_then(|l| l["tensors"].as_array())
            .map(|t| t.len() as u64),
        "{doc}"
    );
}

/// `weightscope tensor FILE.gguf NAME` decodes on the MLX device what
/// gguf-py's `dequantize` decodes, for every type weightscope reads so far
/// (the mixed file's 2M-value tensor in more than one band): the same first
/// values and extremes; a type not decoded yet is one line.
#[test]
fn gguf_values_equal_gguf_pys_dequantization() {
    let out = tempfile::tempdir().expect("tempdir");
    let lines = write_files(out.path());
    let tensor = |path: &Path, name: &str| {
        Process::new(env!("CARGO_BIN_EXE_weightscope"))
            .args(["tensor", "--json"])
            .arg(path)
            .arg(name)
            .output()
            .expect("weightscope runs")
    };
    let mut decoded = 0;
    for line in lines.iter().filter(|l| l.get("file").is_some()) {
        let path = Path::new(line["file"].as_str().expect("file"));
        for t in line["tensors"].as_array().expect("tensors") {
            let (name, kind) = (
                t["name"].as_str().expect("name"),
                t["type"].as_str().expect("type"),
            );
            let output = tensor(path, name);
            // Plain integer and F64 tensors are read as their dtype; block
            // types through the decoders.
            let plain = ["I8", "I16", "I32", "I64", "F64"].contains(&kind);
            if !plain && !weightscope::mlx::ggml::DECODED.contains(&kind) {
                let err = String::from_utf8_lossy(&output.stderr);
                assert_eq!(output.status.code(), Some(1), "{kind}: {err}");
                assert!(err.contains("not decoded yet"), "{kind}: {err}");
                assert_eq!(err.lines().count(), 1, "{err}");
                continue;
            }
            assert!(
                output.status.success(),
                "{kind}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let ours: Value = serde_json::from_slice(&output.stdout).expect("JSON");
            let theirs = &line["values"][name];
            assert!(theirs.is_object(), "{kind}: gguf-py decodes it too");
            common::assert_decoded_as_gguf_py(&ours, theirs, &format!("{kind} {name}"));
            decoded += 1;
        }
    }
    // F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the mixed file's.
    assert!(decoded >= 11, "{decoded}");
}

/// `weightscope check FILE.gguf`: what mx.load will do, as findings (a
/// warning when it refuses the file or leaves tensors out, an info when it
/// expands them), exit status 0 (the file itself is sound).
#[test]
fn check_says_what_mx_load_will_do_with_a_gguf_file() {
    let out = tempfile::tempdir().expect("tempdir");
    write_files(out.path());
    let check = |file: &str| {
        let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
            .args(["check", "--json"])
            .arg(out.path().join(file))
            .output()
            .expect("weightscope runs");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
    };
    let codes = |report: &Value| -> Vec<(String, String)> {
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| {
                (
                    f["code"].as_str().expect("code").to_owned(),
                    f["severity"].as_str().expect("severity").to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(
        codes(&check("type_Q5_0.gguf")),
        [("gguf.mlx-refuses".to_owned(), "warning".to_owned())]
    );
    assert_eq!(check("type_Q5_0.gguf")["findings"][0]["tensor"], "w");
    assert_eq!(
        codes(&check("type_MXFP4.gguf")),
        [("gguf.mlx-drops".to_owned(), "warning".to_owned())]
    );
    let mixed = check("mixed.gguf");
    assert_eq!(
        codes(&mixed),
        [("gguf.mlx-expands".to_owned(), "info".to_owned())]
    );
    assert!(
        mixed["findings"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("1 Q4_K tensor(s), 18.00 KiB, to 64.00 KiB of float16")),
        "{mixed}"
    );
    assert!(
        codes(&check("type_Q8_0.gguf")).is_empty(),
        "loaded as affine: nothing to say"
    );
}

/// A GGUF file made from a Hugging Face checkpoint the way llama.cpp's
/// converter makes it (gguf-py's own name map; Llama's Q and K rows
/// reordered, Qwen3's not) diffs against its source with every name met:
/// the F32 tensors equal to the bit (the reordering undone), the `Q8_0` ones
/// with the relative error numpy computes from gguf-py's own round trip.
/// Without the view no name meets.
#[test]
fn a_gguf_file_diffs_against_its_hugging_face_source() {
    let out = tempfile::tempdir().expect("tempdir");
    for pair in common::run_venv_writer("tests/gguf/write_pair.py", out.path()) {
        let (hf, gguf) = (
            pair["hf"].as_str().expect("hf"),
            pair["gguf"].as_str().expect("gguf"),
        );
        let names = pair["names"].as_object().expect("names");
        let diff = |extra: &[&str]| {
            let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
                .args(["diff", "--json"])
                .args(extra)
                .args([hf, gguf])
                .output()
                .expect("runs");
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
        };
        let doc = diff(&[]);
        let arch = pair["arch"].as_str().expect("arch");
        for key in ["only_in_a", "only_in_b", "failed"] {
            assert_eq!(
                doc[key].as_array().map(Vec::len),
                Some(0),
                "{arch} {key}: {doc}"
            );
        }
        let common = doc["common"].as_array().expect("common");
        assert_eq!(common.len(), names.len(), "{arch}");
        let rel = pair["q8_0_rel_error"].as_object().expect("rel");
        for t in common {
            let name = t["name"].as_str().expect("name");
            match rel.get(name).and_then(Value::as_f64) {
                Some(want) => {
                    assert_eq!(t["b_dtype"], "Q8_0", "{arch} {name}");
                    let got = t["rel_error"].as_f64().expect("rel");
                    assert!(
                        (got - want).abs() <= 1e-5 * want,
                        "{arch} {name}: {got} vs {want}"
                    );
                }
                None => assert_eq!(t["max_abs_diff"].as_f64(), Some(0.0), "{arch} {name}: {t}"),
            }
        }
        let plain = diff(&["--view-b", "identity"]);
        assert_eq!(
            plain["only_in_a"].as_array().map(Vec::len),
            Some(names.len()),
            "{arch}: without the view llama.cpp's names meet none"
        );
    }
}

/// Issue #58: under a view that fixes a GGUF tensor up, "before the
/// fix-ups" is never its block bytes shown as values (it read min 0, max
/// 255): a block-typed tensor has no stored values to show; a plain one
/// does.
#[test]
fn before_the_fixups_a_block_typed_tensor_shows_no_byte_codes() {
    use weightscope::weights::{PreviewOptions, ViewChoice, Weights};
    let _lock = common::mlx_memory_lock();
    let out = tempfile::tempdir().expect("tempdir");
    let lines = write_files(out.path());
    let mut checked = (0, 0);
    for line in lines.iter().filter(|l| l.get("file").is_some()) {
        let path = Path::new(line["file"].as_str().expect("file"));
        let view = out.path().join("add-zero.json");
        std::fs::write(&view, r#"{"fixup": [{"match": ".", "add": 0.0}]}"#).expect("view");
        let mut weights = Weights::open(path).expect("opens");
        let rules = ViewChoice::File(view)
            .resolve(weights.checkpoint())
            .expect("resolves")
            .expect("a view");
        weights
            .install(rules.compile(weights.checkpoint()).expect("compiles"))
            .expect("installed");
        for t in line["tensors"].as_array().expect("tensors") {
            let (name, kind) = (
                t["name"].as_str().expect("name"),
                t["type"].as_str().expect("type"),
            );
            let Ok(preview) = weights.preview(name, &PreviewOptions::default()) else {
                continue;
            };
            if preview.fixups.is_empty() {
                continue;
            }
            match kind {
                "F32" | "F16" => {
                    assert!(preview.before_fixup.is_some(), "{kind} {name}");
                    checked.0 += 1;
                }
                _ if preview.decoding.is_some() => {
                    assert!(
                        preview.before_fixup.is_none(),
                        "{kind} {name}: byte codes shown as values"
                    );
                    checked.1 += 1;
                }
                _ => {}
            }
        }
    }
    assert!(checked.0 > 0 && checked.1 > 0, "{checked:?}");
}
