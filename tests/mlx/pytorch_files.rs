//! PyTorch files written by torch.save itself (Debian's torch 1.13 in a
//! venv of its own, `tests/pytorch/write_torch.py`): weightscope lists them
//! without running their pickle, reads every tensor (every dtype, views
//! with strides and offsets, tied names, the legacy format, a training
//! checkpoint's nested keys) with torch.load's values, opens a sharded
//! folder by its index, diffs it against its safetensors twin to exactly
//! zero, walks it shard by shard, and says of a malicious pickle what
//! picklescan says, without ever running its command.

use crate::common;

use std::path::Path;
use std::process::Command as Process;

use serde_json::Value;

/// Writes the files; every line the writer printed.
fn write_files(out: &Path) -> Vec<Value> {
    common::run_writer(&common::torch_python(), "tests/pytorch/write_torch.py", out)
}

fn weightscope(args: &[&str], path: &Path) -> std::process::Output {
    weightscope_with(args, &[path.as_os_str()])
}

/// The CLI with `args`, then `more` (paths, names).
fn weightscope_with(args: &[&str], more: &[&std::ffi::OsStr]) -> std::process::Output {
    Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(args)
        .args(more)
        .output()
        .expect("weightscope runs")
}

fn json_of(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// `diff --json A B`, asserting every common tensor (`common` of them) is
/// exactly equal and nothing is only in A; the report.
fn diff_to_zero(a: &Path, b: &Path, common: usize) -> Value {
    let output = weightscope_with(&["diff", "--json"], &[a.as_os_str(), b.as_os_str()]);
    let diff = json_of(&output);
    let rows = diff["common"].as_array().expect("common");
    assert_eq!(rows.len(), common, "{}", b.display());
    for t in rows {
        assert_eq!(t["max_abs_diff"], 0.0, "{}", t["name"]);
    }
    assert!(diff["only_in_a"].as_array().expect("a").is_empty());
    diff
}

// `first` is f32: values are compared at f32, exactly (torch's values are
// exact in f32 for every dtype written but f64 and large i64).
#[allow(clippy::cast_possible_truncation, clippy::float_cmp)]
#[test]
fn every_tensor_reads_as_torch_load_reads_it() {
    let out = tempfile::tempdir().expect("tempdir");
    let lines = write_files(out.path());
    let mut read = 0;
    for line in lines.iter().filter(|l| l.get("name").is_some()) {
        let path = Path::new(line["file"].as_str().expect("file"));
        let name = line["name"].as_str().expect("name");
        let output = weightscope_with(&["tensor", "--json"], &[path.as_os_str(), name.as_ref()]);
        let ours = json_of(&output);
        assert_eq!(ours["dtype"], line["dtype"], "{name} in {}", path.display());
        assert_eq!(ours["shape"], line["shape"], "{name}");
        let want: Vec<f64> = line["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|v| v.as_f64().expect("number"))
            .collect();
        let first: Vec<f64> = ours["first"]
            .as_array()
            .expect("first")
            .iter()
            .map(|v| v.as_f64().expect("number"))
            .collect();
        assert_eq!(first.len(), want.len().min(64), "{name}");
        for (i, (a, b)) in first.iter().zip(&want).enumerate() {
            // `first` is f32: f64 and i64 values are compared at f32.
            assert_eq!(*a as f32, *b as f32, "{name}[{i}] in {}", path.display());
        }
        let max = want.iter().copied().fold(f64::MIN, f64::max);
        assert_eq!(
            ours["stats"]["max"].as_f64().expect("max") as f32,
            max as f32,
            "{name}"
        );
        read += 1;
    }
    // 10 dtypes x 5 names in two formats, 19 Llama tensors, the checkpoint's.
    assert!(read >= 100 + 19 + 8, "{read}");
}

#[test]
fn inspect_lists_dtypes_views_and_tied_names_from_the_pickle_alone() {
    let out = tempfile::tempdir().expect("tempdir");
    write_files(out.path());
    for file in ["dtypes.bin", "legacy.bin"] {
        let doc = json_of(&weightscope(&["inspect", "--json"], &out.path().join(file)));
        common::assert_inspect_schema(&doc);
        assert_eq!(doc["format"], "pytorch");
        assert_eq!(doc["pytorch"]["pickle"]["verdict"], "innocuous", "{file}");
        assert_eq!(doc["tensor_count"], 50, "{file}");
        let tensors = doc["tensors"].as_array().expect("tensors");
        let by_name = |n: &str| {
            tensors
                .iter()
                .find(|t| t["name"] == n)
                .unwrap_or_else(|| panic!("{n} listed in {file}"))
        };
        let t = by_name("bf16.transposed");
        assert_eq!(t["shape"], serde_json::json!([10, 6]));
        assert_eq!(t["storage"]["stride"], serde_json::json!([1, 10]));
        assert_eq!(t["tied_to"], "bf16.weight");
        let t = by_name("i16.offset");
        assert_eq!(t["storage"]["offset"], 30);
        assert_eq!(by_name("bool.tied")["tied_to"], "bool.weight");
        assert!(by_name("f32.weight").get("tied_to").is_none());
        // Each storage once: ten 6x10 matrices.
        let bytes: u64 = [4, 2, 2, 8, 1, 2, 4, 8, 1, 1].iter().map(|b| b * 60).sum();
        assert_eq!(doc["total_bytes"], bytes, "{file}");
        assert_eq!(doc["logical_params"], 600, "{file}");
        let format = if file == "legacy.bin" {
            "legacy"
        } else {
            "zip"
        };
        assert_eq!(doc["pytorch"]["files"][0]["format"], format);
    }
    let doc = json_of(&weightscope(
        &["inspect", "--json"],
        &out.path().join("checkpoint.pth"),
    ));
    common::assert_inspect_schema(&doc);
    assert_eq!(doc["metadata"]["epoch"], "5");
    assert_eq!(doc["metadata"]["lr"], "0.01");
    let names: Vec<&str> = doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert!(names.contains(&"model.weight"), "{names:?}");
    assert!(names.contains(&"optimizer.state.0.exp_avg"), "{names:?}");
}

#[test]
fn a_sharded_bin_folder_opens_by_its_index_diffs_to_zero_and_walks_by_shard() {
    let out = tempfile::tempdir().expect("tempdir");
    write_files(out.path());
    let sharded = out.path().join("sharded");
    let doc = json_of(&weightscope(&["inspect", "--json"], &sharded));
    common::assert_inspect_schema(&doc);
    assert_eq!(doc["layout"], "indexed");
    assert_eq!(doc["shards"].as_array().expect("shards").len(), 2);
    assert_eq!(doc["tensor_count"], 19);
    let head = doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .find(|t| t["name"] == "lm_head.weight")
        .expect("lm_head");
    assert_eq!(head["tied_to"], "model.embed_tokens.weight");
    // The index's total_size counts the tied storage once, as we do.
    let check = weightscope(&["check", "--json"], &sharded);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    diff_to_zero(&sharded, &out.path().join("sharded.safetensors"), 19);

    let walk = json_of(&weightscope(
        &["walk", "--policy", "release-shard", "--json"],
        &sharded,
    ));
    assert_eq!(walk["policy"], "release-shard");
    assert_eq!(walk["tensors"], 19);
}

#[test]
fn safetensors_beside_a_bin_are_read_and_the_bin_is_said() {
    let out = tempfile::tempdir().expect("tempdir");
    write_files(out.path());
    let both = out.path().join("both");
    let doc = json_of(&weightscope(&["inspect", "--json"], &both));
    assert_eq!(doc["format"], "safetensors");
    assert_eq!(doc["not_read"], serde_json::json!(["pytorch_model.bin"]));
    let check = weightscope(&["check"], &both);
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(text.contains("files.not-read"), "{text}");
    assert_eq!(check.status.code(), Some(0), "{text}");
}

#[test]
fn a_malicious_pickle_is_named_never_run_and_judged_as_picklescan_judges() {
    let out = tempfile::tempdir().expect("tempdir");
    let lines = write_files(out.path());
    let evil = out.path().join("evil.bin");
    let pwned = out.path().join("PWNED");
    let inspect = json_of(&weightscope(&["inspect", "--json"], &evil));
    assert_eq!(inspect["pytorch"]["pickle"]["verdict"], "dangerous");
    assert_eq!(
        inspect["pytorch"]["pickle"]["flagged"][0]["global"],
        "posix.system"
    );
    // What can be listed safely still is.
    assert_eq!(inspect["tensor_count"], 1);
    let check = weightscope(&["check", "--json"], &evil);
    assert_eq!(check.status.code(), Some(1));
    let findings: Value = serde_json::from_slice(&check.stdout).expect("JSON");
    let flagged = findings["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["code"] == "pickle.dangerous")
        .expect("a pickle.dangerous finding");
    assert_eq!(flagged["severity"], "error");
    assert!(
        flagged["message"]
            .as_str()
            .expect("message")
            .contains("posix.system")
    );
    let tensor = weightscope_with(&["tensor"], &[evil.as_os_str(), "w".as_ref()]);
    assert!(tensor.status.success());
    assert!(String::from_utf8_lossy(&tensor.stderr).contains("posix.system"));
    assert!(!pwned.exists(), "the pickle's command ran");

    // File by file, the verdict picklescan gives.
    let mut compared = 0;
    for line in lines.iter().filter(|l| l.get("picklescan").is_some()) {
        let path = Path::new(line["file"].as_str().expect("file"));
        let doc = json_of(&weightscope(&["inspect", "--json"], path));
        assert_eq!(
            doc["pytorch"]["pickle"]["verdict"],
            line["picklescan"],
            "{}",
            path.display()
        );
        compared += 1;
    }
    assert_eq!(compared, 5);
    assert!(!pwned.exists(), "the pickle's command ran");
}

#[test]
fn convert_writes_safetensors_sharded_as_the_source_that_diff_to_zero() {
    let out = tempfile::tempdir().expect("tempdir");
    write_files(out.path());
    let sharded = out.path().join("sharded");
    let converted = out.path().join("converted");
    let run = |from: &Path, to: &Path| {
        weightscope_with(&["convert", "--json"], &[from.as_os_str(), to.as_os_str()])
    };
    let report = json_of(&run(&sharded, &converted));
    assert_eq!(report["tensors"], 18);
    assert_eq!(
        report["tied"],
        serde_json::json!([["lm_head.weight", "model.embed_tokens.weight"]])
    );
    assert_eq!(report["copied"], serde_json::json!(["config.json"]));
    let doc = json_of(&weightscope(&["inspect", "--json"], &converted));
    assert_eq!(doc["format"], "safetensors");
    assert_eq!(doc["layout"], "indexed");
    let shards: Vec<&str> = doc["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| s["file"].as_str().expect("file"))
        .collect();
    assert_eq!(
        shards,
        [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"
        ]
    );
    // The index's total_size agrees with the files (check's index.total-size).
    let check = weightscope(&["check"], &converted);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let diff = diff_to_zero(&sharded, &converted, 18);
    assert_eq!(
        diff["tied"],
        serde_json::json!([["lm_head.weight", "model.embed_tokens.weight"]])
    );

    // Views are written contiguous, with their values.
    let single = out.path().join("single");
    json_of(&run(&out.path().join("dtypes.bin"), &single));
    // Ten tied names are written once and said under `tied`.
    let diff = diff_to_zero(
        &out.path().join("dtypes.bin"),
        &single.join("dtypes.safetensors"),
        40,
    );
    assert_eq!(diff["tied"].as_array().expect("tied").len(), 10);

    // Never inside what it reads; never from what is not PyTorch.
    let inside = run(&sharded, &sharded.join("out"));
    assert_eq!(inside.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&inside.stderr).contains("inside the checkpoint"));
    assert!(!sharded.join("out").exists());
    let again = run(&converted, &out.path().join("again"));
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&again.stderr).lines().count(), 1);
}

/// The CLI with the Hub at `hub`, a private cache and no token.
fn weightscope_hub(hub: &common::hub::Hub, cache: &Path, args: &[&str]) -> std::process::Output {
    Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(args)
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("WEIGHTSCOPE_CACHE_DIR", cache)
        .env("HF_HOME", cache.join("no-hf-home"))
        .env_remove("HF_TOKEN")
        .env_remove("HF_TOKEN_PATH")
        .output()
        .expect("weightscope runs")
}

/// A Hub repo that only has sharded `.bin` files opens as the local folder
/// does, by range requests (the zip's end and central directory, `data.pkl`;
/// never a whole file), and a tensor's values come from its own bytes. The
/// data offsets predicted from the central directory are the local
/// headers' on torch's own files.
#[test]
fn a_hub_repo_of_bin_files_reads_by_ranges_as_the_local_folder() {
    use common::hub::{Behaviour, Hub};
    let out = tempfile::tempdir().expect("tempdir");
    write_files(out.path());
    let sharded = out.path().join("sharded");
    for file in [
        out.path().join("dtypes.bin"),
        sharded.join("pytorch_model-00001-of-00002.bin"),
        out.path().join("checkpoint.pth"),
    ] {
        assert_eq!(
            weightscope::checkpoint::pytorch::predicted_offsets_agree(&file),
            Ok(true),
            "{}",
            file.display()
        );
    }
    let hub = Hub::start();
    hub.add("org/bin", &sharded, Behaviour::Normal);
    let cache = tempfile::tempdir().expect("cache");
    let local = json_of(&weightscope(&["inspect", "--json"], &sharded));
    let remote = json_of(&weightscope_hub(
        &hub,
        cache.path(),
        &["inspect", "--json", "hf://org/bin"],
    ));
    common::assert_inspect_schema(&remote);
    let strip = |mut v: Value| {
        let fields = v.as_object_mut().expect("object");
        fields.remove("path");
        fields.remove("commit");
        v
    };
    assert_eq!(strip(remote), strip(local), "the same report as the folder");
    assert!(
        hub.log()
            .iter()
            .filter(|l| l.host == "storage" && l.path.to_ascii_lowercase().ends_with(".bin"))
            .all(|l| l.range.is_some()),
        "every .bin read by ranges: {:#?}",
        hub.log()
    );
    // A 16 MiB file: its end, its directory and its pickle are fetched,
    // not its tensors' bytes.
    let big = tempfile::tempdir().expect("tempdir");
    let script = format!(
        "import collections, torch\n\
         torch.save(collections.OrderedDict((f'w{{i}}', torch.ones(1024, 1024)) for i in range(4)), '{}')\n",
        big.path().join("pytorch_model.bin").display()
    );
    let made = Process::new(common::torch_python())
        .args(["-c", &script])
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    hub.add("org/big", big.path(), Behaviour::Normal);
    hub.clear();
    let doc = json_of(&weightscope_hub(
        &hub,
        cache.path(),
        &["inspect", "--json", "hf://org/big"],
    ));
    assert_eq!(doc["format"], "pytorch");
    assert_eq!(doc["tensor_count"], 4);
    let fetched: u64 = hub
        .log()
        .iter()
        .filter(|l| l.host == "storage")
        .map(|l| l.body_bytes)
        .sum();
    assert!(
        fetched < 1 << 20,
        "{fetched} bytes of 16 MiB: {:#?}",
        hub.log()
    );
    let name = "model.layers.1.mlp.down_proj.weight";
    let local_t = json_of(&weightscope_with(
        &["tensor", "--json"],
        &[sharded.as_os_str(), name.as_ref()],
    ));
    let remote_t = json_of(&weightscope_hub(
        &hub,
        cache.path(),
        &["tensor", "--json", "hf://org/bin", name],
    ));
    for key in ["stats", "histogram", "first", "shape", "dtype"] {
        assert_eq!(remote_t[key], local_t[key], "{key}");
    }
}

/// Archives torch would not write, made from one it did: big-endian bytes
/// (a `byteorder` record of `big`), a compressed storage, a file cut short,
/// a pickle cut short. Each is one line naming the file (exit status 2),
/// never a panic, a hang or a value read from the wrong bytes.
#[test]
fn archives_torch_would_not_write_are_one_line_errors() {
    let out = tempfile::tempdir().expect("tempdir");
    write_files(out.path());
    let source = out.path().join("dtypes.bin");
    let script = r"
import sys, zipfile
src, out = sys.argv[1], sys.argv[2]
zin = zipfile.ZipFile(src)
prefix = [n for n in zin.namelist() if n.endswith('/data.pkl')][0][:-len('data.pkl')]
def remake(path, change):
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        for info in zin.infolist():
            data = zin.read(info.filename)
            kind = zipfile.ZIP_STORED
            name, data, kind = change(info.filename, data, kind)
            z.writestr(name, data, compress_type=kind)
        if path.endswith('big.bin'):
            z.writestr(prefix + 'byteorder', b'big')
remake(out + '/big.bin', lambda n, d, k: (n, d, k))
remake(out + '/deflated.bin', lambda n, d, k: (n, d, zipfile.ZIP_DEFLATED if n.endswith('data/0') else k))
remake(out + '/short-pickle.bin', lambda n, d, k: (n, d[: len(d) // 2] if n.endswith('data.pkl') else d, k))
raw = open(src, 'rb').read()
open(out + '/cut.bin', 'wb').write(raw[: len(raw) // 2])
";
    let made = Process::new(common::torch_python())
        .args(["-c", script])
        .arg(&source)
        .arg(out.path())
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    for (file, says) in [
        ("big.bin", "big-endian"),
        ("deflated.bin", "compressed"),
        ("short-pickle.bin", "pickle"),
        ("cut.bin", "cut.bin"),
    ] {
        let path = out.path().join(file);
        for command in ["inspect", "check"] {
            let run = weightscope(&[command], &path);
            let err = String::from_utf8_lossy(&run.stderr);
            assert_eq!(run.status.code(), Some(2), "{command} {file}: {err}");
            assert_eq!(err.lines().count(), 1, "{command} {file}: {err}");
            assert!(
                err.contains(says) && err.contains(file),
                "{command} {file}: {err}"
            );
        }
    }
}
