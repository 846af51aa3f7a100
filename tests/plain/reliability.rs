//! Issue #27's reproductions, each now a test on the release-shaped binary:
//! outputs that would overwrite a model, writes that fail half way, signals
//! to the long commands, the probe attacked by another local user and by
//! jobs that fork, bring their own sitecustomize or write junk on its pipe,
//! NaN in a diff, and hostile config.json files.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Tensor, venv_python, write_safetensors};
use serde_json::Value;

fn weightscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weightscope"))
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn hostile_jobs() -> PathBuf {
    root().join("tests/record/hostile_jobs.py")
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A two-shard checkpoint with an index and a config.json: `tensors` f32
/// tensors of 256 values per shard.
fn model(dir: &Path, per_shard: usize) -> PathBuf {
    let model = dir.join("model");
    std::fs::create_dir_all(&model).expect("mkdir");
    let mut weight_map = serde_json::Map::new();
    for shard in 0..2 {
        let file = format!("model-{:05}-of-00002.safetensors", shard + 1);
        let tensors: Vec<Tensor> = (0..per_shard)
            .map(|i| {
                let name = format!("model.layers.{}.mlp.weight", shard * per_shard + i);
                weight_map.insert(name.clone(), file.clone().into());
                let values: Vec<f32> = (0..256).map(|v| (v + i) as f32 * 0.01).collect();
                Tensor::f32(&name, &[16, 16], &values)
            })
            .collect();
        write_safetensors(&model.join(&file), &tensors);
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(
        model.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .expect("index");
    std::fs::write(model.join("config.json"), r#"{"model_type":"llama"}"#).expect("config");
    model
}

/// Every file of `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| {
            let path = e.expect("entry").path();
            let bytes = std::fs::read(&path).expect("read");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn outputs_over_a_checkpoint_are_refused_before_any_work() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(dir.path(), 2);
    let before = contents(&model);
    let shard = model.join("model-00001-of-00002.safetensors");
    let index = model.join("model.safetensors.index.json");
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec![
            "walk".into(),
            model.clone().into(),
            "--policy".into(),
            "retain".into(),
            "--csv".into(),
            shard.clone().into(),
        ],
        vec![
            "walk".into(),
            model.clone().into(),
            "--policy".into(),
            "retain".into(),
            "--trace".into(),
            index.clone().into(),
        ],
        // A new file inside the checkpoint is refused too.
        vec![
            "walk".into(),
            model.clone().into(),
            "--policy".into(),
            "retain".into(),
            "--csv".into(),
            model.join("new-trace.csv").into(),
        ],
        // The checkpoint of a recording is known only when given.
        vec![
            "record".into(),
            "--checkpoint".into(),
            model.clone().into(),
            "--trace".into(),
            model.join("trace.json").into(),
            "--".into(),
            "true".into(),
        ],
        // An existing checkpoint file anywhere is never overwritten.
        vec![
            "record".into(),
            "--json".into(),
            model.join("config.json").into(),
            "--".into(),
            "true".into(),
        ],
    ];
    for args in cases {
        let output = weightscope().args(&args).output().expect("runs");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("refusing to write"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(output.stdout.is_empty(), "no partial output");
    }
    assert_eq!(contents(&model), before, "the model folder is untouched");
}

#[test]
fn a_failed_write_keeps_the_old_file_and_still_prints_the_report() {
    let dir = tempfile::tempdir().expect("dir");
    let Some(full) = super::attack::tmpfs(dir.path(), "full", "size=64k") else {
        return;
    };
    // Enough tensors that the trace (an event per step) is over 64 KiB.
    let model = model(dir.path(), 300);
    let trace = full.join("walk.json");
    std::fs::write(&trace, b"the previous trace").expect("write");
    let output = weightscope()
        .args(["walk", "--policy", "release-shard", "--json", "--trace"])
        .arg(&trace)
        .arg(&model)
        .output()
        .expect("runs");
    let after = contents(&full);
    let _ = Command::new("umount").arg("-l").arg(&full).status();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("walk.json"), "names the file: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report is printed");
    assert_eq!(report["steps_done"], 600);
    assert_eq!(
        after,
        [(trace.clone(), b"the previous trace".to_vec())],
        "the old trace is whole and no partial file is left"
    );
}

/// Starts `weightscope record --json J --trace T -- bash -c SCRIPT` with the
/// job's stdout and weightscope's stderr piped; returns once the job has
/// printed its first line and weightscope has said it is recording.
fn start_recording(dir: &Path, script: &str) -> (std::process::Child, String) {
    let mut child = weightscope()
        .arg("record")
        .arg("--json")
        .arg(dir.join("summary.json"))
        .arg("--trace")
        .arg(dir.join("trace.json"))
        .args(["--", "bash", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weightscope runs");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("the job's first line");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = String::new();
    while !said.contains("recording pid") {
        said.clear();
        assert!(
            err.read_line(&mut said).expect("stderr") > 0,
            "weightscope ended before recording"
        );
    }
    // Keep reading both in the background so neither pipe fills.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (child, first.trim().to_owned())
}

fn send(child: &std::process::Child, signal: &str) {
    let status = Command::new("kill")
        .args(["-s", signal])
        .arg(child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
}

fn pid_alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn sigterm_to_record_is_passed_on_and_what_was_seen_is_written() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut child, pythonpath) =
        start_recording(dir.path(), r#"echo "$PYTHONPATH"; exec sleep 60"#);
    send(&child, "TERM");
    let status = child.wait().expect("weightscope ends");
    assert_eq!(status.code(), Some(128 + 15), "the conventional status");
    let summary: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("summary.json")).expect("the JSON was written"),
    )
    .expect("JSON");
    assert_eq!(summary["signal"], 15, "the job had SIGTERM: {summary}");
    let pid = summary["pid"].as_u64().expect("pid");
    assert!(!pid_alive(pid), "the job is gone");
    let trace = std::fs::read_to_string(dir.path().join("trace.json")).expect("trace written");
    assert!(trace.contains("\"samples\""));
    let probe = pythonpath.split(':').next().expect("the probe folder");
    assert!(probe.contains("probe-"), "{pythonpath}");
    assert!(!Path::new(probe).exists(), "the probe folder was removed");
}

#[test]
fn a_job_that_ignores_sighup_is_killed_after_the_grace_and_written() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut child, _) = start_recording(
        dir.path(),
        r#"trap "" HUP; echo ready; while :; do sleep 1; done"#,
    );
    send(&child, "HUP");
    let status = child.wait().expect("weightscope ends");
    assert_eq!(status.code(), Some(128 + 1));
    let summary: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("summary.json")).expect("the JSON was written"),
    )
    .expect("JSON");
    assert_eq!(summary["signal"], 9, "killed after the grace: {summary}");
}

#[test]
fn another_user_cannot_put_code_where_the_probe_was() {
    if !is_root() {
        eprintln!("skipped: needs root to act as a second, unprivileged user");
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    // A world-writable place for the marker, as /tmp is.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .expect("chmod");
    let go = dir.path().join("go");
    let done = dir.path().join("done");
    for fifo in [&go, &done] {
        assert!(
            Command::new("mkfifo")
                .arg(fifo)
                .status()
                .expect("mkfifo")
                .success()
        );
    }
    let python = venv_python();
    // The job leaves a descendant that outlives the recording, then starts
    // Python with the PYTHONPATH the recording gave it.
    let script = format!(
        r#"echo "$PYTHONPATH"; setsid bash -c 'read x < {go}; {python} -c "import sys" > {done} 2>&1' < /dev/null > /dev/null 2>&1 &"#,
        go = go.display(),
        done = done.display(),
        python = python.display(),
    );
    let (mut child, pythonpath) = start_recording(dir.path(), &script);
    assert!(child.wait().expect("weightscope ends").success());
    let probe = PathBuf::from(pythonpath.split(':').next().expect("the probe folder"));
    assert!(!probe.exists(), "removed at the end");
    // Another user tries to recreate it with a sitecustomize of theirs.
    let marker = dir.path().join("hijacked");
    let attack = format!(
        "mkdir -p {probe} && printf 'open(\"{marker}\", \"w\").close()\\n' > {probe}/sitecustomize.py",
        probe = probe.display(),
        marker = marker.display()
    );
    let attacked = Command::new("setpriv")
        .args([
            "--reuid=54321",
            "--regid=54321",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(&attack)
        .stderr(Stdio::piped())
        .output()
        .expect("setpriv runs");
    assert!(
        !attacked.status.success(),
        "the second user could create {}",
        probe.display()
    );
    assert!(!probe.exists());
    // The descendant now starts Python: nothing of the other user's runs.
    std::fs::write(&go, b"go\n").expect("release the descendant");
    let mut finished = String::new();
    std::fs::File::open(&done)
        .expect("open done")
        .read_to_string(&mut finished)
        .expect("the descendant's Python ran");
    assert!(!marker.exists(), "another user's code ran as root");
}

#[test]
fn a_fork_mode_pool_calling_mx_load_never_hangs_under_record() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(dir.path(), 2);
    let json = dir.path().join("summary.json");
    // `timeout` only guards the test run against a hang (the bug made 1 in
    // 10 runs hang forever); a pass never comes near it.
    let output = Command::new("timeout")
        .args(["-s", "KILL", "600"])
        .arg(env!("CARGO_BIN_EXE_weightscope"))
        .args(["record", "--interval-ms", "1", "--json"])
        .arg(&json)
        .arg("--")
        .arg(venv_python())
        .arg(hostile_jobs())
        .arg("forkpool")
        .arg(&model)
        .arg("50")
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    assert!(text(&output.stdout).contains("forkpool done 50"));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary")).expect("JSON");
    let loads = summary["marks"]
        .as_array()
        .expect("marks")
        .iter()
        .filter(|m| m["kind"] == "load")
        .count();
    assert_eq!(loads, 100, "every worker's mx.load was marked");
}

#[test]
fn the_job_sees_its_own_sitecustomize_and_mx_load_as_itself() {
    let dir = tempfile::tempdir().expect("dir");
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    std::fs::write(theirs.join("sitecustomize.py"), "MARK = 42\n").expect("write");
    let output = weightscope()
        .args(["record", "--"])
        .arg(venv_python())
        .arg(hostile_jobs())
        .arg("identity")
        .env("PYTHONPATH", &theirs)
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = serde_json::from_str(
        text(&output.stdout)
            .lines()
            .last()
            .expect("the job's report"),
    )
    .expect("JSON");
    assert_eq!(report["sitecustomize_mark"], 42, "{report}");
    assert_eq!(report["load_name"], "load");
    assert_eq!(report["load_wrapped"], true);
    assert_eq!(report["load_doc"], true);
    assert_eq!(report["probe_on_path"], false, "the probe left sys.path");
    assert!(
        text(&output.stderr).contains("peak MLX active"),
        "the probe still reported: {}",
        text(&output.stderr)
    );
}

#[test]
fn junk_on_the_probe_pipe_is_counted_and_the_probe_stays_heard() {
    let dir = tempfile::tempdir().expect("dir");
    let json = dir.path().join("summary.json");
    let output = weightscope()
        .args(["record", "--json"])
        .arg(&json)
        .arg("--")
        .arg(venv_python())
        .arg(hostile_jobs())
        .arg("junk")
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary")).expect("JSON");
    assert_eq!(summary["probe_info"]["bad_lines"], 2, "{summary}");
    assert!(
        summary["marks"]
            .as_array()
            .expect("marks")
            .iter()
            .any(|m| m["target"] == "after the junk"),
        "a mark after the junk was heard: {summary}"
    );
    let long = summary["marks"]
        .as_array()
        .expect("marks")
        .iter()
        .filter_map(|m| m["target"].as_str())
        .find(|t| t.starts_with("yyyy"))
        .expect("the long mark was heard, shortened");
    assert!(long.len() < 4000 && long.len() > 1000, "{}", long.len());
}

#[test]
fn a_directory_as_the_command_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    let output = weightscope()
        .args(["record", "--"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("is a directory"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn check_on_a_closed_pipe_exits_quietly() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(dir.path(), 400);
    let mut child = weightscope()
        .args(["check", "--json"])
        .arg(&model)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    drop(child.stdout.take()); // the reader is gone, as with `| true`
    let output = child.wait_with_output().expect("ends");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
}

/// Two checkpoints of the same two tensors; in B, `t1` (or both) all NaN.
fn nan_pair(dir: &Path, both: bool) -> (PathBuf, PathBuf) {
    let values: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 3.0).collect();
    let a = dir.join("a.safetensors");
    let b = dir.join(if both {
        "b-all.safetensors"
    } else {
        "b.safetensors"
    });
    write_safetensors(
        &a,
        &[
            Tensor::f32("t0", &[8, 8], &values),
            Tensor::f32("t1", &[8, 8], &values),
        ],
    );
    let nan = vec![f32::NAN; 64];
    let b0 = if both { nan.clone() } else { moved(&values) };
    write_safetensors(
        &b,
        &[
            Tensor::f32("t0", &[8, 8], &b0),
            Tensor::f32("t1", &[8, 8], &nan),
        ],
    );
    (a, b)
}

/// B's `t0`: A's values moved by 1 % and a little.
fn moved(values: &[f32]) -> Vec<f32> {
    values.iter().map(|v| v * 1.01 + 0.003).collect()
}

#[test]
fn diff_counts_nan_tensors_apart_and_never_calls_them_equal() {
    let dir = tempfile::tempdir().expect("dir");
    let (a, b) = nan_pair(dir.path(), false);
    let output = weightscope()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .arg("--json")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["overall_tensors"], 1);
    assert_eq!(report["non_finite"], serde_json::json!(["t1"]));
    // The overall figure is t0's alone, computed here another way (f64 on
    // the values as written) against MLX's.
    let written: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 3.0).collect();
    let a0: Vec<f64> = written.iter().copied().map(f64::from).collect();
    let b0: Vec<f64> = moved(&written).into_iter().map(f64::from).collect();
    let diff_sq: f64 = a0.iter().zip(&b0).map(|(x, y)| (x - y).powi(2)).sum();
    let a_sq: f64 = a0.iter().map(|x| x * x).sum();
    let expected = (diff_sq / a_sq).sqrt();
    let overall = report["overall_rel_error"].as_f64().expect("a figure");
    assert!(
        (overall - expected).abs() <= 1e-5 * expected,
        "{overall} against {expected}"
    );
    // t1's own row: no figure made up for it (a cosine of 0 would read as
    // "orthogonal"); NaN is null in JSON.
    let t1 = report["common"]
        .as_array()
        .expect("common")
        .iter()
        .find(|c| c["name"] == "t1")
        .expect("t1 compared");
    assert_eq!(t1["nan"], true);
    assert!(t1["cosine"].is_null() && t1["rel_error"].is_null(), "{t1}");
    let text_report = weightscope()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .output()
        .expect("runs");
    let printed = text(&text_report.stdout);
    assert!(
        printed.contains("over 1 changed tensor (64 parameters)")
            && printed.contains("1 with NaN or Inf on a side left out: t1"),
        "{printed}"
    );

    let (a, b) = nan_pair(dir.path(), true);
    let output = weightscope()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .output()
        .expect("runs");
    let printed = text(&output.stdout);
    assert!(
        printed.contains("no overall figure: all 2 compared tensors have NaN or Inf"),
        "{printed}"
    );
    assert!(!printed.contains("(equal)"), "{printed}");
}

/// A 4-bit affine layer packed as MLX packs it (8 rows of 64 inputs: 8
/// words and one group of 64 per row), with `config` as config.json.
fn quantized(dir: &Path, config: &str) -> PathBuf {
    let model = dir.join("q");
    std::fs::create_dir_all(&model).expect("mkdir");
    let words: Vec<u8> = (0..64u32)
        .flat_map(|w| w.wrapping_mul(0x1111_1111).to_le_bytes())
        .collect();
    write_safetensors(
        &model.join("model.safetensors"),
        &[
            Tensor::new(
                "model.layers.0.mlp.up_proj.weight",
                safetensors::Dtype::U32,
                &[8, 8],
                words,
            ),
            Tensor::f32("model.layers.0.mlp.up_proj.scales", &[8, 1], &[0.5; 8]),
            Tensor::f32("model.layers.0.mlp.up_proj.biases", &[8, 1], &[-1.0; 8]),
        ],
    );
    std::fs::write(model.join("config.json"), config).expect("config");
    model
}

#[test]
fn overflowing_quantization_sizes_are_findings_never_a_wrap_or_a_panic() {
    let dir = tempfile::tempdir().expect("dir");
    let good = quantized(dir.path(), r#"{"quantization":{"group_size":64,"bits":4}}"#);
    let output = weightscope()
        .args(["check", "--json"])
        .arg(&good)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    for group_size in [
        "9223372036854775808",
        "18446744073709551615",
        "4611686018427387968",
    ] {
        let model = quantized(
            dir.path(),
            &format!(r#"{{"quantization":{{"group_size":{group_size},"bits":4}}}}"#),
        );
        let output = weightscope()
            .args(["check", "--json"])
            .arg(&model)
            .output()
            .expect("runs");
        let stdout = text(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{group_size}: {stdout}{}",
            text(&output.stderr)
        );
        assert!(!text(&output.stderr).contains("panicked"));
        assert!(stdout.contains("error"), "{group_size}: {stdout}");
    }
}

#[test]
fn oversized_config_and_index_files_are_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(dir.path(), 1);
    // A config.json of 17 MiB: whitespace around an object.
    let mut config = vec![b' '; 17 << 20];
    config.extend_from_slice(b"{}");
    std::fs::write(model.join("config.json"), &config).expect("write");
    let output = weightscope()
        .arg("check")
        .arg(&model)
        .output()
        .expect("runs");
    let stderr = text(&output.stderr);
    assert!(
        text(&output.stdout).contains("larger than") || stderr.contains("larger than"),
        "{}{stderr}",
        text(&output.stdout)
    );
    // An index of 200 MB (sparse: it costs no disk).
    std::fs::write(model.join("config.json"), b"{}").expect("write");
    let index = std::fs::OpenOptions::new()
        .write(true)
        .open(model.join("model.safetensors.index.json"))
        .expect("open");
    index.set_len(200 << 20).expect("grow");
    let output = weightscope()
        .arg("inspect")
        .arg(&model)
        .output()
        .expect("runs");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("larger than the 134217728-byte limit"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn pages_forked_children_share_are_counted_once() {
    const MIB: u64 = 1 << 20;
    let mut job = Command::new(venv_python())
        .arg(hostile_jobs())
        .args(["forkshare", "8"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the job runs");
    let mut ready = String::new();
    BufReader::new(job.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready");
    assert_eq!(ready.trim(), "ready");
    let dir = tempfile::tempdir().expect("dir");
    let json = dir.path().join("summary.json");
    let mut recorder = weightscope()
        .args(["record", "--pid", &job.id().to_string(), "--json"])
        .arg(&json)
        .stderr(Stdio::piped())
        .spawn()
        .expect("weightscope runs");
    // Said after the first sample: the tree (parent and 8 children) was seen.
    let mut err = BufReader::new(recorder.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("recording pid") {
        line.clear();
        assert!(err.read_line(&mut line).expect("stderr") > 0, "ended early");
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    drop(job.stdin.take()); // the job and its children end
    assert!(job.wait().expect("job ends").success());
    assert!(recorder.wait().expect("weightscope ends").success());
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary")).expect("JSON");
    assert_eq!(summary["rss_figure"], "pss", "{summary}");
    let first = &summary["samples"][0];
    assert_eq!(first["processes"], 9, "{first}");
    // The kernel's RSS of the 9 processes sums to 9 x 64 MiB and more; the
    // pages exist once: PSS over the tree is the parent's 64 MiB plus a
    // little per process.
    let rss = first["rss"].as_u64().expect("rss");
    assert!(
        (64 * MIB..2 * 64 * MIB).contains(&rss),
        "tree {} MiB",
        rss / MIB
    );
    let peak = summary["peak_rss_bytes"].as_u64().expect("peak");
    assert!(peak < 2 * 64 * MIB, "peak {} MiB", peak / MIB);
}

/// Waits (spinning on /proc, no sleep) until `pid` catches `signal`: its
/// handlers are installed, so a signal sent now is handled, not fatal.
fn wait_until_catching(pid: u32, signal: u32) {
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("alive");
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0);
        if caught & (1 << (signal - 1)) != 0 {
            return;
        }
        std::thread::yield_now();
    }
}

#[test]
fn sigterm_cuts_a_walk_short_and_its_trace_is_written() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(dir.path(), 300);
    let trace = dir.path().join("walk.csv");
    let child = weightscope()
        .args(["walk", "--policy", "release-tensor", "--json", "--csv"])
        .arg(&trace)
        .arg(&model)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    wait_until_catching(child.id(), 15);
    send(&child, "TERM");
    let output = child.wait_with_output().expect("ends");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(128 + 15), "{stderr}");
    assert!(stderr.contains("cut short by SIGTERM"), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report is printed");
    let done = report["steps_done"].as_u64().expect("steps");
    assert!(done <= 600);
    let csv = std::fs::read_to_string(&trace).expect("the trace was written");
    let steps = csv.lines().filter(|l| l.contains(",walk-step,")).count();
    assert_eq!(
        steps as u64, done,
        "the trace holds every step the walk took"
    );
}

#[test]
fn sigterm_cuts_a_diff_short_and_its_report_is_printed() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(dir.path(), 300);
    let child = weightscope()
        .arg("diff")
        .arg(&model)
        .arg(&model)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    wait_until_catching(child.id(), 15);
    send(&child, "TERM");
    let output = child.wait_with_output().expect("ends");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(128 + 15), "{stderr}");
    assert!(stderr.contains("cut short by SIGTERM"), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report is printed");
    assert!(report["compared"].as_u64().expect("compared") <= 600);
}

#[test]
fn a_walk_refuses_a_tensor_over_the_memory_limit_before_reading_it() {
    let dir = tempfile::tempdir().expect("dir");
    // One 4 GiB tensor, sparse on disk: reading it would take a while.
    let path = dir.path().join("big.safetensors");
    let header = r#"{"big":{"dtype":"F32","shape":[32768,32768],"data_offsets":[0,4294967296]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    std::fs::write(&path, &bytes).expect("write");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(bytes.len() as u64 + (4 << 30))
        .expect("grow");
    let output = weightscope()
        .args(["walk", "--policy", "retain", "--json"])
        .arg(&path)
        .env("WEIGHTSCOPE_MEMORY_LIMIT", "1G")
        .output()
        .expect("runs");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("memory limit"), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report");
    assert_eq!(report["steps_done"], 0);
    // Refused before the walk waited for a single byte of it from disk
    // (it used to stream all 4 GiB first).
    assert_eq!(report["read_wait_secs"], 0.0, "{report}");
}

/// MLX keeps compiled CUDA kernels between processes in a folder it reads
/// back without question; by default a shared one under /tmp. weightscope
/// points it at a folder of this user's alone (0700, owned, not a link),
/// leaves that choice out of a recorded job's environment, and keeps a
/// user's own choice. A folder someone else could write is not used.
#[test]
fn compiled_kernels_are_kept_where_only_this_user_can_write() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let home = tempfile::tempdir().expect("dir");
    let cache = home.path().join("cache");
    let seen = |cache_env: Option<&str>| -> String {
        let mut command = weightscope();
        command
            .env("WEIGHTSCOPE_CACHE_DIR", &cache)
            .env_remove("MLX_PTX_CACHE_DIR")
            .args(["record", "--no-probe", "--", "sh", "-c"])
            .arg("printf '%s' \"${MLX_PTX_CACHE_DIR-unset}\" >&2");
        if let Some(value) = cache_env {
            command.env("MLX_PTX_CACHE_DIR", value);
        }
        let output = command.stdin(Stdio::null()).output().expect("runs");
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stderr)
    };
    // The job sees the environment it was given.
    assert!(seen(None).contains("unset"));
    assert!(seen(Some("/elsewhere/ptx")).contains("/elsewhere/ptx"));
    // weightscope's own folder: made, this user's, mode 0700.
    let kernels = std::fs::read_dir(cache.join("kernels"))
        .expect("the kernels folder was made")
        .map(|e| e.expect("entry").path())
        .collect::<Vec<_>>();
    assert_eq!(kernels.len(), 1, "{kernels:?}");
    assert!(
        kernels[0]
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("mlx-0."))
    );
    let meta = std::fs::symlink_metadata(&kernels[0]).expect("meta");
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o777, 0o700);
    assert_eq!(
        meta.uid(),
        std::fs::metadata("/proc/self").expect("self").uid()
    );
    // One that others can write, or a link, is refused.
    std::fs::set_permissions(&kernels[0], std::fs::Permissions::from_mode(0o777)).expect("chmod");
    assert!(weightscope::files::private_dir(&kernels[0]).is_err());
    let link = home.path().join("link");
    std::os::unix::fs::symlink(home.path(), &link).expect("symlink");
    assert!(weightscope::files::private_dir(&link).is_err());
    let mine = home.path().join("mine/kernels");
    weightscope::files::private_dir(&mine).expect("a new folder is private");
    assert_eq!(
        std::fs::metadata(&mine).expect("meta").mode() & 0o777,
        0o700
    );
}
