//! `weightscope export`: real recordings (a Python MLX job under the real
//! recorder and probe) and a real walk, exported in each viewer's format;
//! each output read back by Python's `json` (a reader other than ours) and
//! checked against what the format documents and what the job did.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const MIB: u64 = 1 << 20;

pub(crate) fn weightscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weightscope"))
}

pub(crate) fn jobs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/record/jobs.py")
}

/// `record --trace DIR/NAME -- python jobs.py phases`: `phases` marks
/// "embed", holds 32 MiB in `embed()`, marks "layers", holds 64 MiB more
/// in `layers()`.
pub(crate) fn record_phases(dir: &Path, name: &str) -> PathBuf {
    let trace = dir.join(name);
    let output = weightscope()
        .arg("record")
        .arg("--trace")
        .arg(&trace)
        .arg("--")
        .arg(common::venv_python())
        .arg(jobs())
        .arg("phases")
        .output()
        .expect("record");
    assert!(output.status.success(), "{}", stderr(&output));
    trace
}

/// `walk --policy release-shard --trace DIR/walk.json` over a checkpoint
/// that `jobs.py make` writes: two shards of two 1024x2048 float32
/// tensors (8 MiB each).
pub(crate) fn walk_two_shards(dir: &Path) -> PathBuf {
    let checkpoint = dir.join("model");
    let made = Command::new(common::venv_python())
        .arg(jobs())
        .arg("make")
        .arg(&checkpoint)
        .arg("2")
        .output()
        .expect("make");
    assert!(made.status.success(), "{}", stderr(&made));
    let trace = dir.join("walk.json");
    let walked = weightscope()
        .args(["walk", "--policy", "release-shard", "--trace"])
        .arg(&trace)
        .arg(&checkpoint)
        .output()
        .expect("walk");
    assert!(walked.status.success(), "{}", stderr(&walked));
    trace
}

pub(crate) fn export(args: &[&std::ffi::OsStr]) -> Output {
    weightscope()
        .arg("export")
        .args(args)
        .output()
        .expect("export")
}

/// `weightscope export TRACES... --format FORMAT -o OUT`.
pub(crate) fn export_to(traces: &[&Path], format: &str, out: &Path) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = traces.iter().map(|t| t.as_os_str()).collect();
    args.extend([
        "--format".as_ref(),
        format.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    export(&args)
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `file` as Python's `json` module reads it, printed back by Python.
pub(crate) fn python_json(file: &Path) -> Value {
    let output = Command::new(common::venv_python())
        .arg("-c")
        .arg("import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))")
        .arg(file)
        .output()
        .expect("python");
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("python's json")
}

#[test]
fn a_recording_exports_as_folded_stacks_of_what_each_line_held_at_the_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = record_phases(dir.path(), "job.json");
    for (weight, embed, layers) in [
        ("held-at-peak", 32 * MIB, 64 * MIB),
        ("grew", 32 * MIB, 64 * MIB),
    ] {
        let output = export(&[
            trace.as_os_str(),
            "--format".as_ref(),
            "folded".as_ref(),
            "--weight".as_ref(),
            weight.as_ref(),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = String::from_utf8(output.stdout).expect("utf-8");
        let mut found = (0, 0);
        for line in text.lines() {
            let (stack, count) = line.rsplit_once(' ').expect("`stack count`");
            let bytes: u64 = count.parse().expect("a count");
            let frames: Vec<&str> = stack.split(';').collect();
            assert!(
                frames[0].starts_with("<module> (jobs.py:"),
                "outermost first: {line}"
            );
            match frames.last() {
                Some(f) if f.starts_with("embed (jobs.py:") => found.0 += bytes,
                Some(f) if f.starts_with("layers (jobs.py:") => found.1 += bytes,
                _ => {}
            }
        }
        // MLX's own few bytes (a scalar) may ride along with a line.
        let near = |got: u64, want: u64| (want..want + 64 * 1024).contains(&got);
        assert!(
            near(found.0, embed) && near(found.1, layers),
            "{weight}:\n{text}"
        );
    }
}

#[test]
fn a_recording_exports_as_a_speedscope_memory_flame_graph() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = record_phases(dir.path(), "job.json");
    let out = dir.path().join("job.speedscope.json");
    let output = export_to(&[&trace], "speedscope", &out);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(output.stdout.is_empty(), "the file, not stdout");
    let doc = python_json(&out);
    assert_eq!(
        doc["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = doc["shared"]["frames"].as_array().expect("frames");
    let profile = &doc["profiles"][0];
    assert_eq!(profile["type"], "sampled");
    assert_eq!(profile["unit"], "bytes");
    let samples = profile["samples"].as_array().expect("samples");
    let weights = profile["weights"].as_array().expect("weights");
    assert_eq!(samples.len(), weights.len());
    let total: u64 = weights.iter().map(|w| w.as_u64().expect("bytes")).sum();
    assert_eq!(profile["endValue"].as_u64(), Some(total));
    // MLX's own few bytes (a scalar) may ride along with a line.
    assert!(
        (96 * MIB..96 * MIB + 64 * 1024).contains(&total),
        "embed's 32 MiB and layers' 64 MiB at the peak: {total}"
    );
    // Every sample names frames that exist, outermost first, with their
    // file and line.
    let mut innermost = Vec::new();
    for sample in samples {
        let stack: Vec<usize> = sample
            .as_array()
            .expect("a stack")
            .iter()
            .map(|i| usize::try_from(i.as_u64().expect("index")).expect("index"))
            .collect();
        assert!(stack.iter().all(|&i| i < frames.len()));
        assert_eq!(frames[stack[0]]["name"], "<module>");
        let last = &frames[*stack.last().expect("a frame")];
        assert!(
            last["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("jobs.py"))
        );
        assert!(last["line"].as_u64().is_some_and(|l| l > 0));
        innermost.push(last["name"].as_str().expect("name").to_owned());
    }
    innermost.sort();
    assert_eq!(innermost, ["embed", "layers"]);
}

#[test]
fn a_recording_exports_as_trace_events_with_counters_marks_and_the_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = record_phases(dir.path(), "job.jsonl");
    let out = dir.path().join("job.perfetto.json");
    let output = export_to(&[&trace], "perfetto", &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = python_json(&out);
    assert_eq!(doc["displayTimeUnit"], "ms");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    // The documented fields: every event has a name, a phase, a pid and a
    // tid; all but metadata a time in microseconds.
    for e in events {
        assert!(e["name"].is_string() && e["ph"].is_string(), "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        if e["ph"] != "M" {
            assert!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "{e}");
        }
    }
    let named = |ph: &str, name: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"].as_str().is_some_and(|n| n.starts_with(name)))
            .collect()
    };
    assert_eq!(named("M", "process_name").len(), 1);
    let active = named("C", "MLX active");
    assert!(active.len() > 2, "one counter value per sample");
    let highest = active
        .iter()
        .filter_map(|e| e["args"]["bytes"].as_u64())
        .max()
        .expect("values");
    assert!(highest >= 96 * MIB, "{highest}");
    assert!(!named("C", "RSS").is_empty());
    let ts: Vec<f64> = named("C", "RSS")
        .iter()
        .map(|e| e["ts"].as_f64().expect("ts"))
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "samples in time order");
    // The job's marks and the peak, as instants on the process's track.
    for mark in ["job-mark embed", "job-mark layers", "peak: MLX active"] {
        let found = named("i", mark);
        assert_eq!(found.len(), 1, "{mark}");
        assert_eq!(found[0]["s"], "p");
    }
}

#[test]
fn a_walk_exports_its_materializations_by_shard_and_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = walk_two_shards(dir.path());
    let output = export(&[trace.as_os_str(), "--format".as_ref(), "folded".as_ref()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<(Vec<&str>, u64)> = text
        .lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("`stack count`");
            (stack.split(';').collect(), count.parse().expect("count"))
        })
        .collect();
    // Two shards of two 1024x2048 float32 tensors: four tensors of 8 MiB.
    assert_eq!(lines.len(), 4, "{text}");
    for (frames, bytes) in &lines {
        assert_eq!(frames.len(), 3, "policy, shard, tensor");
        assert_eq!(frames[0], "release-shard");
        assert!(frames[1].ends_with(".safetensors"), "{frames:?}");
        assert_eq!(*bytes, 8 * MIB);
    }
}

#[test]
fn several_journals_are_one_process_each_and_a_cut_journal_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = record_phases(dir.path(), "a.jsonl");
    let b = record_phases(dir.path(), "b.jsonl");
    // b's recorder "killed": its journal lacks its last line.
    let text = std::fs::read_to_string(&b).expect("journal");
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&b, kept[..kept.len() - 1].join("\n") + "\n").expect("cut");
    let out = dir.path().join("both.json");
    let output = export_to(&[&a, &b], "perfetto", &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = python_json(&out);
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let mut processes: Vec<u64> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().expect("pid"))
        .collect();
    processes.sort_unstable();
    assert_eq!(processes, [1, 2]);
    let cut: Vec<u64> = events
        .iter()
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("journal cut short"))
        })
        .map(|e| e["pid"].as_u64().expect("pid"))
        .collect();
    assert_eq!(cut, [2], "only b was cut");
    // Folded: each stack under its lane's name.
    let folded = export(&[
        a.as_os_str(),
        b.as_os_str(),
        "--format".as_ref(),
        "folded".as_ref(),
    ]);
    assert!(folded.status.success(), "{}", stderr(&folded));
    let text = String::from_utf8(folded.stdout).expect("utf-8");
    let lanes: std::collections::BTreeSet<&str> = text
        .lines()
        .map(|l| l.split(';').next().expect("a lane"))
        .collect();
    assert_eq!(lanes.len(), 2, "{text}");
}

#[test]
fn what_cannot_be_exported_is_one_line_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = record_phases(dir.path(), "job.json");
    // A flame graph needs stacks: a recording without the probe has none.
    let bare = dir.path().join("bare.json");
    let recorded = weightscope()
        .args(["record", "--no-probe", "--trace"])
        .arg(&bare)
        .args(["--", "true"])
        .output()
        .expect("record");
    assert!(recorded.status.success(), "{}", stderr(&recorded));
    let output = export(&[bare.as_os_str(), "--format".as_ref(), "folded".as_ref()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no Python stacks"), "{err}");
    // The same recording's memory over time exports.
    let output = export(&[bare.as_os_str(), "--format".as_ref(), "perfetto".as_ref()]);
    assert!(output.status.success(), "{}", stderr(&output));
    // Never over a trace it reads.
    let before = std::fs::read(&trace).expect("trace");
    let output = export_to(&[&trace], "perfetto", &trace);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert_eq!(std::fs::read(&trace).expect("trace"), before);
    // Not a trace.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, b"{\"not\": \"a trace\"}").expect("write");
    let output = export(&[junk.as_os_str(), "--format".as_ref(), "folded".as_ref()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("junk.json"), "{}", stderr(&output));
}
