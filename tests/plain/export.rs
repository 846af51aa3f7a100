//! `weightscope export`: real recordings (a Python MLX job under the real
//! recorder and probe) and a real walk, exported in each viewer's format;
//! each output read back by Python's `json` (a reader other than ours) and
//! checked against what the format documents and what the job did.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const MIB: u64 = 1 << 20;

fn weightscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weightscope"))
}

fn jobs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/record/jobs.py")
}

/// `record --trace DIR/NAME -- python jobs.py phases`: `phases` marks
/// "embed", holds 32 MiB in `embed()`, marks "layers", holds 64 MiB more
/// in `layers()`.
fn record_phases(dir: &Path, name: &str) -> PathBuf {
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

fn export(args: &[&std::ffi::OsStr]) -> Output {
    weightscope()
        .arg("export")
        .args(args)
        .output()
        .expect("export")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `file` as Python's `json` module reads it, printed back by Python.
fn python_json(file: &Path) -> Value {
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
    let output = export(&[
        trace.as_os_str(),
        "--format".as_ref(),
        "speedscope".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
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
    let output = export(&[
        trace.as_os_str(),
        "--format".as_ref(),
        "perfetto".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
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
    let checkpoint = dir.path().join("model");
    let made = Command::new(common::venv_python())
        .arg(jobs())
        .arg("make")
        .arg(&checkpoint)
        .arg("2")
        .output()
        .expect("make");
    assert!(made.status.success(), "{}", stderr(&made));
    let trace = dir.path().join("walk.json");
    let walked = weightscope()
        .args(["walk", "--policy", "release-shard", "--trace"])
        .arg(&trace)
        .arg(&checkpoint)
        .output()
        .expect("walk");
    assert!(walked.status.success(), "{}", stderr(&walked));
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
    let output = export(&[
        a.as_os_str(),
        b.as_os_str(),
        "--format".as_ref(),
        "perfetto".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
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
    let output = export(&[
        trace.as_os_str(),
        "--format".as_ref(),
        "perfetto".as_ref(),
        "-o".as_ref(),
        trace.as_os_str(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert_eq!(std::fs::read(&trace).expect("trace"), before);
    // Not a trace.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, b"{\"not\": \"a trace\"}").expect("write");
    let output = export(&[junk.as_os_str(), "--format".as_ref(), "folded".as_ref()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("junk.json"), "{}", stderr(&output));
}

/// Serves the files of `root` on 127.0.0.1 (a port of its own) until the
/// test ends: GET only, one request a connection.
fn serve(root: PathBuf) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            // A thread each: a browser opens connections it never sends on.
            let root = root.clone();
            std::thread::spawn(move || answer(&stream, &root));
        }
    });
    port
}

/// One request on `stream`: the file of `root` it names, or 404.
fn answer(stream: &std::net::TcpStream, root: &Path) {
    use std::io::{BufRead, BufReader, Write};
    let mut reader = BufReader::new(stream);
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // The headers, read to their end before the answer.
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        header.clear();
    }
    let path = request.split(' ').nth(1).unwrap_or("/");
    let name = path
        .split(['?', '#'])
        .next()
        .unwrap_or("/")
        .trim_start_matches('/');
    let file = root.join(if name.is_empty() { "index.html" } else { name });
    let mut stream = stream;
    match std::fs::read(&file) {
        Ok(body) if !name.contains("..") => {
            let kind = match file.extension().and_then(|e| e.to_str()) {
                Some("html") => "text/html",
                Some("js") => "text/javascript",
                Some("css") => "text/css",
                Some("json") => "application/json",
                Some("wasm") => "application/wasm",
                Some("png") => "image/png",
                _ => "application/octet-stream",
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
        _ => {
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
}

/// The speedscope app (its npm package, fetched by the set-up) opens the
/// export in headless Chromium: the page's own import must succeed (no
/// "Something went wrong", which it shows for a file it cannot read) and
/// show the profile's name and its views; a screenshot of the flame graph
/// is taken.
#[test]
fn the_speedscope_app_opens_the_export_in_chromium() {
    let viewer = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/viewers/speedscope-1.25.0");
    assert!(
        viewer.join("index.html").exists(),
        "{} is missing: run `mlx-glue/setup test`",
        viewer.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = record_phases(dir.path(), "job.json");
    let site = dir.path().join("site");
    std::fs::create_dir(&site).expect("site");
    for entry in std::fs::read_dir(&viewer).expect("viewer") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), site.join(entry.file_name())).expect("copy");
    }
    let out = site.join("job.speedscope.json");
    let output = export(&[
        trace.as_os_str(),
        "--format".as_ref(),
        "speedscope".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let port = serve(site.clone());
    let page = |file: &str| {
        format!("http://127.0.0.1:{port}/index.html#profileURL=http://127.0.0.1:{port}/{file}")
    };
    let chromium = |extra: &[&str], url: &str| {
        let profile = tempfile::tempdir().expect("profile");
        // Bounded: a page that never settles fails the test, never hangs it.
        Command::new("timeout")
            .args(["120", "chromium", "--headless=new", "--no-sandbox"])
            .args(["--disable-gpu", "--no-first-run"])
            .args(["--virtual-time-budget=8000", "--window-size=1280,800"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(url)
            .output()
            .expect("chromium (the set-up installs it)")
    };
    let text = |output: &Output| {
        // The page's text, tags dropped.
        let dom = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut out = String::new();
        let mut in_tag = false;
        for c in dom.chars() {
            match c {
                '<' => in_tag = true,
                '>' => {
                    in_tag = false;
                    out.push(' ');
                }
                _ if !in_tag => out.push(c),
                _ => {}
            }
        }
        out
    };
    let dumped = chromium(&["--dump-dom"], &page("job.speedscope.json"));
    assert!(dumped.status.success(), "{}", stderr(&dumped));
    let shown = text(&dumped);
    // What speedscope shows when it cannot import a file (seen with one
    // that is not JSON).
    assert!(!shown.contains("Something went wrong"), "{shown}");
    assert!(
        shown.contains("jobs.py phases: bytes held at the peak"),
        "{shown}"
    );
    assert!(shown.contains("Left Heavy"), "the profile's views: {shown}");
    let shot = dir.path().join("speedscope.png");
    let taken = chromium(
        &[&format!("--screenshot={}", shot.display())],
        &page("job.speedscope.json"),
    );
    assert!(taken.status.success(), "{}", stderr(&taken));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 4096,
        "{} bytes",
        png.len()
    );
}
