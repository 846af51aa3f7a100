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

/// Tensor names of a PyTorch file whose pickle names one long key from
/// many places (torch.save's own files: the pickle's memo keeps one copy
/// of the key): the key paths are cut at 1 KiB and said, and what the file
/// lists is bounded by the pickle's size. Before: 240 MB printed for a
/// 1 MB file (427 MB of RSS), 582 MB for a 70 KB one (1.2 GB).
#[test]
fn a_small_pickle_naming_a_long_key_from_many_places_prints_little() {
    let dir = tempfile::tempdir().expect("dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pytorch/write_amplified.py");
    let made = Command::new(crate::common::torch_python())
        .arg(&script)
        .arg(dir.path())
        .output()
        .expect("python");
    assert!(made.status.success(), "{}", text(&made.stderr));
    for name in ["long_key.pth", "deep.pth"] {
        let file = dir.path().join(name);
        let size = std::fs::metadata(&file).expect("stat").len();
        for json in [false, true] {
            // 1 GiB of data segment at most: the old reader asked for more.
            let mut cmd = Command::new("prlimit");
            cmd.arg(format!("--data={}", 1_u64 << 30))
                .arg(env!("CARGO_BIN_EXE_weightscope"))
                .arg("inspect")
                .args(json.then_some("--json"))
                .arg(&file);
            let output = run_bounded(cmd, Duration::from_mins(2));
            assert_eq!(
                output.status.code(),
                Some(0),
                "{name}: {}",
                text(&output.stderr)
            );
            let printed = output.stdout.len() as u64;
            assert!(
                printed < 10 * size.max(1 << 20),
                "{name} (json {json}): {printed} bytes printed for a file of {size}"
            );
            let said = text(&output.stdout);
            assert!(
                said.contains("key paths longer than 1024 bytes are cut"),
                "{name}: not said"
            );
        }
    }
}

/// A journal holding a stack of a million frames (11 MB) reads as one of
/// the bound's depth, and says it was cut. Before: 52-125 s in `report`.
#[test]
fn a_journal_stack_of_a_million_frames_is_cut_to_the_bound() {
    use std::fmt::Write as _;
    let dir = tempfile::tempdir().expect("dir");
    let journal = dir.path().join("deep.jsonl");
    let output = weightscope()
        .args(["record", "--no-probe", "--trace"])
        .arg(&journal)
        .args(["--", "true"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let recorded = std::fs::read_to_string(&journal).expect("read");
    let meta = recorded.lines().next().expect("the meta line");
    let mut forged = String::from(meta);
    forged.push('\n');
    forged.push_str(
        "{\"record\":\"frame\",\"id\":0,\"file\":\"job.py\",\"line\":3,\"function\":\"f\",\"text\":\"f()\"}\n",
    );
    forged.push_str("{\"record\":\"stack\",\"id\":0,\"frames\":[0");
    forged.push_str(&",0".repeat(999_999));
    forged.push_str("]}\n");
    for i in 0..10_u64 {
        let _ = writeln!(
            forged,
            "{{\"record\":\"probe\",\"sample\":[{i}.0,0,7,{}]}}",
            (i + 1) << 20
        );
    }
    std::fs::write(&journal, forged).expect("write");
    let mut cmd = weightscope();
    cmd.arg("report").arg(&journal);
    let output = run_bounded(cmd, Duration::from_mins(2));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let said = text(&output.stdout);
    assert!(
        said.contains("1 frames or stacks past their caps"),
        "{said}"
    );
}

/// A job that writes 200,000 samples with made-up pids into the probe's
/// pipe: the processes a pipe may name are bounded, the rest counted and
/// said. Before: the recorder was busy 35 s after the job ended.
#[test]
fn made_up_pids_on_the_probes_pipe_are_bounded() {
    let dir = tempfile::tempdir().expect("dir");
    let json = dir.path().join("summary.json");
    let script = r#"import os
fd = int(os.environ["WEIGHTSCOPE_PROBE_FD"])
lines = b"".join(
    b'{"kind":"sample","pid":%d,"active":1,"cache":0,"peak":1,"stack":-1}\n' % pid
    for pid in range(1000, 201000)
)
while lines:
    lines = lines[os.write(fd, lines):]
"#;
    let mut cmd = weightscope();
    cmd.args(["record", "--no-probe", "--json"])
        .arg(&json)
        .arg("--")
        .arg(crate::common::venv_python())
        .args(["-c", script]);
    let output = run_bounded(cmd, Duration::from_mins(5));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
    let unknown = summary["probe_info"]["unknown_pids"]
        .as_u64()
        .expect("counted");
    assert!(unknown >= 200_000 - 1024, "{summary}");
    assert!(
        text(&output.stderr).contains("lines naming processes past the first 1024"),
        "{}",
        text(&output.stderr)
    );
}
