//! Every input bounded (issue #56): GGUF strings, the environment, a token,
//! journals' clocks, FIFOs where files are read.

use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::attack::{run_bounded, small_model, text, weightscope};

fn string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// A GGUF file with `keys` string values of `len` bytes each (left as
/// holes: a sparse file) and one F32 tensor named `tensors`.
fn sparse_gguf(path: &Path, keys: usize, len: u64, tensors: &[&str]) {
    let mut file = std::fs::File::create(path).expect("create");
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(keys as u64).to_le_bytes());
    file.write_all(&head).expect("write");
    for i in 0..keys {
        let mut key = Vec::new();
        string(&mut key, &format!("junk.{i}"));
        key.extend_from_slice(&8u32.to_le_bytes());
        key.extend_from_slice(&len.to_le_bytes());
        file.write_all(&key).expect("write");
        file.seek(SeekFrom::Current(i64::try_from(len).expect("len")))
            .expect("seek");
    }
    let mut rest = Vec::new();
    for (i, name) in tensors.iter().enumerate() {
        string(&mut rest, name);
        rest.extend_from_slice(&1u32.to_le_bytes());
        rest.extend_from_slice(&1u64.to_le_bytes());
        rest.extend_from_slice(&0u32.to_le_bytes());
        rest.extend_from_slice(&(i as u64 * 32).to_le_bytes());
    }
    file.write_all(&rest).expect("write");
    let at = file.stream_position().expect("pos");
    file.set_len(at.next_multiple_of(32) + 32 * tensors.len() as u64)
        .expect("len");
}

#[test]
fn a_gguf_of_long_strings_gives_a_bounded_report() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("junk.gguf");
    // 130 strings of 16 MiB: a 2 GB file (mostly holes on disk).
    sparse_gguf(&path, 130, 16 << 20, &["w"]);
    let mut cmd = weightscope();
    cmd.args(["inspect", "--json"]).arg(&path);
    let output = run_bounded(cmd, Duration::from_mins(5));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        output.stdout.len() < 120 << 20,
        "{} bytes of JSON for 2 GB of strings",
        output.stdout.len()
    );
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let said = doc.to_string();
    assert!(
        said.contains("\"bytes\":16777216"),
        "each string says its length"
    );
}

#[test]
fn a_gguf_naming_a_tensor_twice_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("twice.gguf");
    sparse_gguf(&path, 0, 0, &["w", "w"]);
    let output = weightscope()
        .arg("inspect")
        .arg(&path)
        .output()
        .expect("runs");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tensor `w` appears twice"), "{stderr}");
    assert!(stderr.contains("twice.gguf"), "{stderr}");
}

#[test]
fn junk_in_the_environment_is_one_line_naming_the_variable() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    for (name, value) in [
        ("WEIGHTSCOPE_HTTP_TIMEOUT", "4611686018427387904"),
        ("WEIGHTSCOPE_HTTP_TIMEOUT", "0"),
        ("WEIGHTSCOPE_HTTP_TIMEOUT", "fast"),
        ("WEIGHTSCOPE_HTTP_RETRIES", "100000"),
        ("WEIGHTSCOPE_MEMORY_LIMIT", "lots"),
        ("WEIGHTSCOPE_SUMMARY", "maybe"),
    ] {
        let output = weightscope()
            .env(name, value)
            .arg("inspect")
            .arg(&model)
            .output()
            .expect("runs");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}={value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(name), "{stderr}");
        assert!(output.stdout.is_empty());
    }
    let output = weightscope()
        .env("HF_TOKEN", "hf_SECRET\r\nX-Injected: 1")
        .arg("inspect")
        .arg(&model)
        .output()
        .expect("runs");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HF_TOKEN"), "{stderr}");
    assert!(!stderr.contains("SECRET"), "{stderr}");
}

#[test]
fn journals_with_absurd_clocks_or_versions_are_named_not_printed() {
    let dir = tempfile::tempdir().expect("dir");
    let meta = r#"{"record":"meta","version":1,"label":"record: x","checkpoint":"","device":"job","job":{"command":"x","exit_code":null,"probe":false},"origin":{"host":"h","wall_unix_secs":1796538561.25}}"#;
    let event = |t: &str| {
        format!(
            r#"{{"record":"event","t_secs":{t},"kind":"job-start","target":"x","bytes":0,"detail":"","rss_bytes":0,"mlx_active_bytes":0,"mlx_cache_bytes":0}}"#
        )
    };
    for (name, lines, said) in [
        (
            "far.jsonl",
            format!("{meta}\n{}\n", event("1e300")),
            "more than a year",
        ),
        (
            "wall.jsonl",
            meta.replace("1796538561.25", "1e300") + "\n",
            "not a time between 1970 and 2200",
        ),
        (
            "version.jsonl",
            meta.replace("\"version\":1", "\"version\":1e999"),
            "line 1",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, lines).expect("write");
        let output = weightscope()
            .arg("report")
            .arg(&path)
            .output()
            .expect("runs");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(said), "{name}: {stderr}");
        assert!(!stderr.contains("version 0"), "{name}: {stderr}");
        assert!(stderr.len() < 600, "{name}: {stderr}");
    }
}

/// Makes a FIFO at `path` (the `mkfifo` command).
pub(crate) fn mkfifo(path: &Path) {
    assert!(
        Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo")
            .success()
    );
}

#[test]
fn a_fifo_config_or_view_file_is_said_as_a_fifo() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    mkfifo(&model.join("config.json"));
    let mut cmd = weightscope();
    cmd.args(["check", "--json"]).arg(&model);
    let output = run_bounded(cmd, Duration::from_mins(1));
    let said = text(&output.stdout);
    assert!(
        said.contains("config.unusable"),
        "{said}{}",
        text(&output.stderr)
    );
    assert!(said.contains("FIFO"), "{said}");
    let view = dir.path().join("view.json");
    mkfifo(&view);
    let mut cmd = weightscope();
    cmd.args(["diff", "--view-a"])
        .arg(&view)
        .arg(&model)
        .arg(&model);
    let output = run_bounded(cmd, Duration::from_mins(1));
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is a FIFO"), "{stderr}");
    assert!(!stderr.contains("does not exist"), "{stderr}");
}
