//! `record --pid`: a Python MLX job started without weightscope, its stacks
//! read from outside its process (py-spy's reader; nothing of ours runs
//! in it), on every Python here (3.11, 3.12, 3.13, each with real MLX).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Says "ready", waits for a line, then holds 64 MiB of MLX memory in
/// `grow()` until the next line.
const JOB: &str = r#"
import sys
import mlx.core as mx

def grow():
    held = mx.ones((16 << 20,))
    mx.eval(held)
    print("grown", flush=True)
    sys.stdin.readline()
    return held

print("ready", flush=True)
sys.stdin.readline()
grow()
"#;

fn pythons() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue");
    let mut found = vec![("3.11".to_owned(), crate::common::venv_python())];
    for minor in ["3.12", "3.13"] {
        let python = root.join(format!("test-venv-{minor}/bin/python"));
        if python.exists() {
            found.push((minor.to_owned(), python));
        }
    }
    found
}

/// Waits until the journal at `path` has a sample of the process tree at
/// `rss` bytes or more (the recorder has seen the job's growth); returns
/// that sample's figure.
fn wait_for_rss(path: &Path, rss: u64) -> u64 {
    let until = Instant::now() + Duration::from_mins(1);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let seen = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["record"] == "sample")
            .find_map(|r| r["rss_bytes"].as_u64().filter(|&b| b >= rss));
        if let Some(seen) = seen {
            return seen;
        }
        assert!(
            Instant::now() < until,
            "no sample of {rss} bytes in a minute"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `weightscope record --interval-ms 10 --pid PID ARGS`, once it has
/// said that it records; what it says after on stderr.
fn attach(
    pid: u32,
    args: &[&std::ffi::OsStr],
) -> (std::process::Child, BufReader<std::process::ChildStderr>) {
    let mut recorder = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["record", "--interval-ms", "10", "--pid"])
        .arg(pid.to_string())
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("weightscope runs");
    let mut its_words = BufReader::new(recorder.stderr.take().expect("stderr"));
    let mut started = String::new();
    its_words.read_line(&mut started).expect("started");
    assert!(started.contains("recording pid"), "{started}");
    (recorder, its_words)
}

#[test]
fn attached_stacks_are_read_from_outside_on_every_python() {
    let versions = pythons();
    for (minor, python) in &versions {
        let dir = tempfile::tempdir().expect("tempdir");
        let (journal, json) = (dir.path().join("job.jsonl"), dir.path().join("job.json"));
        let mut job = Process::new(python)
            .args(["-c", JOB])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python runs");
        let mut said = BufReader::new(job.stdout.take().expect("stdout"));
        let mut line = String::new();
        said.read_line(&mut line).expect("ready");
        assert_eq!(line.trim(), "ready", "{minor}");
        let (mut recorder, mut its_words) = attach(
            job.id(),
            &[
                "--trace".as_ref(),
                journal.as_os_str(),
                "--json".as_ref(),
                json.as_os_str(),
            ],
        );
        // Its first sample is in the journal: the level before the growth.
        let before = wait_for_rss(&journal, 1);
        let mut stdin = job.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("go");
        line.clear();
        said.read_line(&mut line).expect("grown");
        assert_eq!(line.trim(), "grown", "{minor}");
        wait_for_rss(&journal, before + (62 << 20));
        stdin.write_all(b"end\n").expect("end");
        assert!(job.wait().expect("job ends").success(), "{minor}");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut its_words, &mut rest).expect("summary");
        assert!(
            recorder.wait().expect("recorder ends").success(),
            "{minor}: {rest}"
        );
        let summary: Value =
            serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
        // The lines of grow() hold most of what grew (a stack read a few
        // milliseconds before a sample of the memory may still be the
        // caller's), and its function is at the peak.
        let lines = summary["lines"].as_array().expect("lines");
        let in_grow: Vec<&Value> = lines.iter().filter(|l| l["function"] == "grow").collect();
        let held: u64 = in_grow
            .iter()
            .filter_map(|l| l["held_at_peak_bytes"].as_u64())
            .sum();
        assert!(held >= 32 << 20, "{minor}: {lines:?}\n{rest}");
        assert!(in_grow.iter().all(|l| l["file"] == "<string>"), "{minor}");
        let peak = summary["peak_stack"].as_array().expect("peak stack");
        assert!(
            peak.iter().any(|f| f["function"] == "grow"),
            "{minor}: {peak:?}"
        );
        assert!(rest.contains("in grow"), "{minor}: {rest}");
        assert!(!rest.contains("no stacks"), "{minor}: {rest}");
    }
    assert!(!versions.is_empty());
}

/// A process that is not Python: said in one line as the recording
/// begins, and its memory recorded all the same.
#[test]
fn a_process_that_is_not_python_is_said_and_recorded() {
    let mut sleeper = Process::new("sleep").arg("30").spawn().expect("sleep runs");
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("job.json");
    let (mut recorder, mut its_words) =
        attach(sleeper.id(), &["--json".as_ref(), json.as_os_str()]);
    let mut note = String::new();
    its_words.read_line(&mut note).expect("note");
    assert!(
        note.contains("no stacks of pid") && note.contains("not a Python process"),
        "{note}"
    );
    sleeper.kill().expect("kill");
    sleeper.wait().expect("reaped");
    assert!(recorder.wait().expect("recorder ends").success());
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
    assert!(summary["peak_rss_bytes"].as_u64() > Some(0), "{summary}");
}
