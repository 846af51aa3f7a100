//! Issue #43's reproductions (the second attack), each a test on the
//! release-shaped binary with real processes, real files and loopback
//! servers: the probe and a job that takes its descriptor, outputs that
//! are devices, FIFOs or links, the journal, lying and slow servers, floods
//! of probe lines, hostile GGUF shapes, the Hub cache's trim and trust, a
//! large repo listing, long journals, two recordings on one trace, leftovers
//! of a killed write, a journal cut short, passwords, wrapping sums and a
//! probe folder another user took first.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Tensor, venv_python, write_safetensors};
use serde_json::Value;

pub(crate) fn weightscope() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weightscope"));
    cmd.env_remove("HF_TOKEN")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY");
    cmd
}

fn hostile_jobs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/record/hostile_jobs.py")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Mounts a tmpfs with `options` (`size=16k`, `ro,size=64k`) on a new
/// folder `name` in `dir`; `None`, said, where that cannot be done here (not
/// root, no mount), and the calling test is skipped. Unmount with
/// `umount -l`.
pub(crate) fn tmpfs(dir: &Path, name: &str, options: &str) -> Option<PathBuf> {
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs needs root");
        return None;
    }
    let at = dir.join(name);
    std::fs::create_dir(&at).expect("mkdir");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", options, "tmpfs"])
        .arg(&at)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here");
        return None;
    }
    Some(at)
}

/// Runs `cmd` to its end; a run past `limit` (a hang) is killed and fails
/// the test. The limit is a watchdog, far above what the run takes.
pub(crate) fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    if let Ok(output) = rx.recv_timeout(limit) {
        output.expect("runs")
    } else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("still running after {limit:?}: a hang");
    }
}

/// Records `hostile_jobs.py ARGS` with `--json` (and `extra` record
/// options) under a watchdog of `limit`; the output and the summary.
fn record_hostile(extra: &[&str], args: &[&std::ffi::OsStr], limit: Duration) -> (Output, Value) {
    let dir = tempfile::tempdir().expect("dir");
    let json = dir.path().join("summary.json");
    let mut cmd = weightscope();
    cmd.arg("record")
        .args(extra)
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(venv_python())
        .arg(hostile_jobs())
        .args(args);
    let output = run_bounded(cmd, limit);
    let summary =
        serde_json::from_slice(&std::fs::read(&json).unwrap_or_default()).unwrap_or(Value::Null);
    (output, summary)
}

/// `output` ended with exit status `code` and its stderr says `said`.
fn ends_saying(output: &Output, code: i32, said: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(said), "{stderr}");
}

/// Starts `cmd` (stdout piped, stderr dropped) and waits for its first
/// line, which must be "ready".
fn start_until_ready(cmd: &mut Command) -> std::process::Child {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let mut ready = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("a first line");
    assert_eq!(ready.trim(), "ready");
    child
}

pub(crate) fn file_type(path: &Path) -> std::fs::FileType {
    std::fs::symlink_metadata(path).expect("stat").file_type()
}

/// A one-shard checkpoint of two small f32 tensors.
pub(crate) fn small_model(dir: &Path) -> PathBuf {
    let model = dir.join("model");
    std::fs::create_dir_all(&model).expect("mkdir");
    write_safetensors(
        &model.join("model.safetensors"),
        &[
            Tensor::f32("model.embed_tokens.weight", &[4, 4], &[0.5; 16]),
            Tensor::f32("lm_head.weight", &[4, 4], &[-2.0; 16]),
        ],
    );
    model
}

#[test]
fn the_probe_never_writes_into_a_file_the_job_opened_on_its_descriptor() {
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("job-output.txt");
    let (output, summary) = record_hostile(
        &["--interval-ms", "1"],
        &["closefds".as_ref(), out.as_os_str()],
        Duration::from_mins(5),
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let written = std::fs::read_to_string(&out).expect("the job's file");
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 20, "only the job's lines: {written}");
    assert!(
        lines.iter().all(|l| l.starts_with("job line ")),
        "a probe line in the job's file: {written}"
    );
    // The probe went on through its named pipe.
    let marks: Vec<&str> = summary["marks"]
        .as_array()
        .expect("marks")
        .iter()
        .filter_map(|m| m["target"].as_str())
        .collect();
    assert!(marks.contains(&"before close"), "{marks:?}");
    assert!(
        marks.contains(&"after close 19"),
        "heard after the close: {marks:?}"
    );
}

#[test]
fn outputs_that_are_devices_or_fifos_are_written_in_place_or_refused() {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = tempfile::tempdir().expect("dir");
    // /dev/null stays the device.
    let output = weightscope()
        .args(["record", "--json", "/dev/null", "--", "true"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    if !file_type(Path::new("/dev/null")).is_char_device() {
        // Put the machine right before failing: every later test needs it.
        let _ = std::fs::remove_file("/dev/null");
        let _ = Command::new("mknod")
            .args(["-m", "666", "/dev/null", "c", "1", "3"])
            .status();
        panic!("/dev/null was replaced by a regular file");
    }
    // /dev/full: written in place, the write's error said, still a device.
    let output = weightscope()
        .args(["record", "--json", "/dev/full", "--", "true"])
        .output()
        .expect("runs");
    ends_saying(&output, 1, "/dev/full");
    assert!(file_type(Path::new("/dev/full")).is_char_device());
    // /dev/stdout (a link through /proc to our pipe): the summary arrives
    // on stdout, the link stays.
    let output = weightscope()
        .args(["record", "--json", "/dev/stdout", "--", "true"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let summary: Value = serde_json::from_slice(&output.stdout).expect("the summary on stdout");
    assert_eq!(summary["exit_code"], 0);
    assert!(file_type(Path::new("/dev/stdout")).is_symlink());
    // Another device is refused before the job runs.
    let marker = dir.path().join("ran");
    let output = weightscope()
        .args(["record", "--json", "/dev/random", "--", "touch"])
        .arg(&marker)
        .output()
        .expect("runs");
    ends_saying(&output, 2, "device");
    assert!(!marker.exists(), "the job ran");
    // A FIFO nobody reads: an error, not a wait.
    let fifo = dir.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let mut cmd = weightscope();
    cmd.args(["record", "--json"])
        .arg(&fifo)
        .args(["--", "true"]);
    let output = run_bounded(cmd, Duration::from_mins(2));
    ends_saying(&output, 1, "nobody is reading");
    assert!(file_type(&fifo).is_fifo());
}

#[test]
fn an_output_link_is_followed_only_to_a_file_that_passes_the_checks() {
    let dir = tempfile::tempdir().expect("dir");
    // A link to a regular file: the file is replaced, the link stays.
    let target_dir = dir.path().join("elsewhere");
    std::fs::create_dir(&target_dir).expect("mkdir");
    let target = target_dir.join("summary.json");
    std::fs::write(&target, b"old").expect("write");
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let output = weightscope()
        .args(["record", "--json"])
        .arg(&link)
        .args(["--", "true"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(file_type(&link).is_symlink(), "the link was replaced");
    let written: Value =
        serde_json::from_slice(&std::fs::read(&target).expect("read")).expect("JSON");
    assert_eq!(written["exit_code"], 0);
    // A link to a checkpoint's shard is refused; a link to nothing too.
    let model = small_model(dir.path());
    let shard = model.join("model.safetensors");
    let before = std::fs::read(&shard).expect("read");
    let to_shard = dir.path().join("to-shard.json");
    std::os::unix::fs::symlink(&shard, &to_shard).expect("symlink");
    let dangling = dir.path().join("dangling.json");
    std::os::unix::fs::symlink(dir.path().join("nowhere/x"), &dangling).expect("symlink");
    for (path, said) in [
        (&to_shard, "existing checkpoint file"),
        (&dangling, "does not exist"),
    ] {
        let output = weightscope()
            .args(["record", "--json"])
            .arg(path)
            .args(["--", "true"])
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        assert!(
            text(&output.stderr).contains(said),
            "{}",
            text(&output.stderr)
        );
    }
    assert_eq!(std::fs::read(&shard).expect("read"), before);
    assert!(!dir.path().join("nowhere").exists());
}

#[test]
fn the_journal_is_never_opened_through_a_link_a_fifo_or_another_recording() {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    let shard = model.join("model.safetensors");
    let before = std::fs::read(&shard).expect("read");
    // `--trace T.json` writes `T.json.partial.jsonl`: a link there to the shard.
    let trace = dir.path().join("t.json");
    std::os::unix::fs::symlink(&shard, dir.path().join("t.json.partial.jsonl")).expect("symlink");
    // A `.jsonl` trace that is a link to another file.
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"keep me").expect("write");
    let linked = dir.path().join("linked.jsonl");
    std::os::unix::fs::symlink(&victim, &linked).expect("symlink");
    // A FIFO where the journal goes.
    let fifo_trace = dir.path().join("f.json");
    let fifo = dir.path().join("f.json.partial.jsonl");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    for path in [&trace, &linked, &fifo_trace] {
        let mut cmd = weightscope();
        cmd.args(["record", "--trace"])
            .arg(path)
            .args(["--", "true"]);
        let output = run_bounded(cmd, Duration::from_mins(2));
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: {}",
            path.display(),
            text(&output.stderr)
        );
        assert_eq!(
            text(&output.stderr).trim().lines().count(),
            1,
            "{}",
            text(&output.stderr)
        );
    }
    assert_eq!(
        std::fs::read(&shard).expect("read"),
        before,
        "the shard was written"
    );
    assert_eq!(std::fs::read(&victim).expect("read"), b"keep me");
    assert!(file_type(&fifo).is_fifo());
}

#[test]
fn two_recordings_on_one_trace_the_second_refuses_and_the_first_is_whole() {
    let dir = tempfile::tempdir().expect("dir");
    let trace = dir.path().join("run.jsonl");
    let go = dir.path().join("go");
    assert!(
        Command::new("mkfifo")
            .arg(&go)
            .status()
            .expect("mkfifo")
            .success()
    );
    let script = format!("echo ready; read x < {}", go.display());
    let mut cmd = weightscope();
    cmd.args(["record", "--interval-ms", "5", "--trace"])
        .arg(&trace)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null());
    let mut first = start_until_ready(&mut cmd);
    let second = weightscope()
        .args(["record", "--trace"])
        .arg(&trace)
        .args(["--", "true"])
        .output()
        .expect("runs");
    assert_eq!(second.status.code(), Some(2), "{}", text(&second.stderr));
    assert!(
        text(&second.stderr).contains("another recording is writing it"),
        "{}",
        text(&second.stderr)
    );
    std::fs::write(&go, b"go\n").expect("end the first job");
    assert!(first.wait().expect("ends").success());
    let journal = std::fs::read(&trace).expect("the first journal");
    assert!(!journal.contains(&0), "NUL bytes in the journal");
    let loaded = weightscope::profile::Trace::load(&trace).expect("opens");
    assert!(!loaded.cut_short, "the first recording wrote its end");
}

#[test]
fn leftovers_of_a_killed_write_are_removed_by_the_next_write_there() {
    let dir = tempfile::tempdir().expect("dir");
    // A process that is gone: one we started and waited for.
    let mut gone = Command::new("true").spawn().expect("true");
    let gone_pid = gone.id();
    gone.wait().expect("true ends");
    // Temporary names carry this host's, boot's and PID namespace's tag.
    let tag = weightscope::files::temporary_tag();
    let stale = dir
        .path()
        .join(format!(".weightscope-{tag}-{gone_pid}-AbC123.part"));
    std::fs::write(&stale, vec![0u8; 1 << 20]).expect("write");
    // One of a live process, and a link shaped like a leftover: kept.
    let live = dir.path().join(format!(
        ".weightscope-{tag}-{}-XyZ789.part",
        std::process::id()
    ));
    std::fs::write(&live, b"live").expect("write");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"victim").expect("write");
    let link = dir
        .path()
        .join(format!(".weightscope-{tag}-{gone_pid}-LiNk00.part"));
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let output = weightscope()
        .args(["record", "--json"])
        .arg(dir.path().join("summary.json"))
        .args(["--", "true"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(!stale.exists(), "the leftover is removed");
    assert!(live.exists(), "a live process's file is kept");
    assert!(file_type(&link).is_symlink(), "a link is never removed");
    assert_eq!(std::fs::read(&victim).expect("read"), b"victim");
}

/// A loopback server: each connection's request line and headers handed
/// to `answer`, which writes what it likes. Returns the origin.
fn serve(answer: impl Fn(&str, &[String], &mut TcpStream) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let origin = format!("http://{}", listener.local_addr().expect("addr"));
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = std::sync::Arc::clone(&answer);
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                let mut headers = Vec::new();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    headers.push(header.trim().to_owned());
                }
                answer(&line, &headers, &mut stream);
            });
        }
    });
    origin
}

#[test]
fn a_server_claiming_more_than_was_asked_is_read_only_as_far_as_asked() {
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = std::sync::Arc::clone(&sent);
    let origin = serve(move |_, _, stream| {
        let head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99999999999/100000000000\r\nContent-Length: 100000000000\r\nConnection: close\r\n\r\n";
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        // A header length of 16 bytes, then zeros for as long as it is read.
        let mut chunk = vec![0u8; 1 << 16];
        chunk[..8].copy_from_slice(&16u64.to_le_bytes());
        while stream.write_all(&chunk).is_ok() {
            counted.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
            chunk[..8].fill(0);
            if counted.load(std::sync::atomic::Ordering::Relaxed) > 4 << 30 {
                break;
            }
        }
    });
    let cache = tempfile::tempdir().expect("cache");
    let mut cmd = weightscope();
    cmd.args(["inspect", &format!("{origin}/x.safetensors")])
        .env("WEIGHTSCOPE_CACHE_DIR", cache.path())
        .env("WEIGHTSCOPE_HTTP_RETRIES", "0");
    let output = run_bounded(cmd, Duration::from_mins(5));
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stderr).trim().lines().count(),
        1,
        "{}",
        text(&output.stderr)
    );
    // What the server got out before the client hung up: the 100 KB asked
    // for and what the sockets buffer, never gigabytes.
    let out = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(out < 64 << 20, "{out} bytes were taken from the server");
}

#[test]
fn a_server_sending_a_byte_a_second_meets_the_request_deadline() {
    let origin = serve(|_, _, stream| {
        let head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-199/200\r\nContent-Length: 200\r\nConnection: close\r\n\r\n";
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        for _ in 0..600 {
            if stream.write_all(b"\0").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let cache = tempfile::tempdir().expect("cache");
    let mut cmd = weightscope();
    cmd.args(["inspect", &format!("{origin}/slow.safetensors")])
        .env("WEIGHTSCOPE_CACHE_DIR", cache.path())
        .env("WEIGHTSCOPE_HTTP_TIMEOUT", "2")
        .env("WEIGHTSCOPE_HTTP_RETRIES", "0");
    let output = run_bounded(cmd, Duration::from_mins(2));
    ends_saying(&output, 2, "deadline");
}

#[test]
fn a_flood_of_probe_lines_is_bounded_and_counted() {
    let (output, summary) = record_hostile(
        &[],
        &["marks".as_ref(), "3".as_ref()],
        Duration::from_mins(5),
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let marks = summary["marks"].as_array().expect("marks").len();
    // The cap of 20,000 probe events, and the recorder's own start and end.
    assert!(marks <= 20_002, "{marks} marks kept");
    let dropped = summary["probe_info"]["dropped_events"]
        .as_u64()
        .expect("counted");
    assert!(dropped > 0, "the flood's marks past the cap are counted");
    assert!(
        text(&output.stderr).contains("counted, not kept"),
        "{}",
        text(&output.stderr)
    );
    assert!(
        text(&output.stderr).lines().count() < 200,
        "the summary is bounded"
    );
}

#[test]
fn a_job_filling_the_named_pipe_with_the_old_end_line_does_not_hang_record() {
    let (output, summary) = record_hostile(&[], &["fillfifo".as_ref()], Duration::from_mins(2));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        summary["marks"]
            .as_array()
            .expect("marks")
            .iter()
            .any(|m| m["target"] == "filler"),
        "lines after the forged end line are still read: {summary}"
    );
}

#[test]
fn a_hundred_thousand_probe_samples_are_summarized_by_record_and_report() {
    let dir = tempfile::tempdir().expect("dir");
    let json = dir.path().join("summary.json");
    let trace = dir.path().join("run.jsonl");
    let mut cmd = weightscope();
    cmd.args(["record", "--no-probe", "--json"])
        .arg(&json)
        .arg("--trace")
        .arg(&trace)
        .arg("--")
        .arg(venv_python())
        .arg(hostile_jobs())
        .args(["samples", "100000", "500"]);
    // Linear, each takes about a second (debug build); the replay that was
    // quadratic in samples took minutes. The watchdog is 100 times over.
    let output = run_bounded(cmd, Duration::from_mins(2));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
    // Two steps up (2 MiB each), one down (1 MiB): the last high is at
    // sample 99,999 (index 99,998 ends a pair of rises).
    let peak = summary["peak_mlx_active_bytes"].as_u64().expect("peak");
    assert!(peak >= 100_000 / 3 * (3 << 20), "{peak}");
    let held: u64 = summary["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| l["held_at_peak_bytes"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(held, peak, "the lines hold what was active at the peak");
    let mut cmd = weightscope();
    cmd.args(["report", "--json"]).arg(&trace);
    let report = run_bounded(cmd, Duration::from_mins(2));
    assert_eq!(report.status.code(), Some(0), "{}", text(&report.stderr));
    let reported: Value = serde_json::from_slice(&report.stdout).expect("JSON");
    assert_eq!(
        reported["peak_mlx_active_bytes"],
        summary["peak_mlx_active_bytes"]
    );
}

/// A GGUF file of one tensor, written by hand (the fields gguf-py writes):
/// `dims` in GGUF's order, `type_id`, and a data section of `data_bytes`
/// (sparse).
fn hand_gguf(path: &Path, dims: &[u64], type_id: u32, data_bytes: u64) {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'w');
    b.extend_from_slice(&u32::try_from(dims.len()).expect("dims").to_le_bytes());
    for d in dims {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&type_id.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.resize(b.len().next_multiple_of(32), 0);
    let file = std::fs::File::create(path).expect("create");
    (&file).write_all(&b).expect("write");
    file.set_len(b.len() as u64 + data_bytes).expect("set_len");
}

#[test]
fn gguf_shapes_that_wrap_or_that_mlx_cannot_hold_are_one_line_errors() {
    let dir = tempfile::tempdir().expect("dir");
    // F32 (type 0) of 2^62+1 values: 4 bytes when the count wraps.
    let wraps = dir.path().join("wraps.gguf");
    hand_gguf(&wraps, &[(1 << 62) + 1], 0, 4);
    // I8 (type 24) of 2^31+32 values: legal, an axis MLX cannot hold.
    let long = dir.path().join("long.gguf");
    hand_gguf(&long, &[(1 << 31) + 32], 24, (1 << 31) + 32);
    let cases: [(&Path, &[&str], &str); 6] = [
        (&wraps, &["inspect"], "more bytes than a file can hold"),
        (&wraps, &["check"], "more bytes than a file can hold"),
        (&long, &["tensor"], "MLX's axes hold at most"),
        (&long, &["check", "--values"], "MLX's axes hold at most"),
        (
            &long,
            &["check", "--values"],
            "1 of 1 tensors read (1 could not be read)",
        ),
        (
            &long,
            &["walk", "--policy", "release-shard"],
            "MLX's axes hold at most",
        ),
    ];
    for (file, args, said) in cases {
        let mut cmd = weightscope();
        cmd.arg(args[0]).arg(file).args(&args[1..]);
        if args[0] == "tensor" {
            cmd.arg("w");
        }
        let output = run_bounded(cmd, Duration::from_mins(5));
        // `check` says it as a finding on stdout, the others on stderr.
        let stderr = text(&output.stderr) + &text(&output.stdout);
        assert_ne!(
            output.status.code(),
            Some(101),
            "{args:?}: a panic: {stderr}"
        );
        assert!(
            matches!(output.status.code(), Some(1 | 2)),
            "{args:?}: {:?} {stderr}",
            output.status
        );
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

/// A repo served by the loopback Hub of `common::hub`.
pub(crate) fn hub_repo(dir: &Path) -> (common::hub::Hub, PathBuf) {
    let model = small_model(dir);
    let hub = common::hub::Hub::start();
    hub.add("org/repo", &model, common::hub::Behaviour::Normal);
    (hub, model)
}

pub(crate) fn hub_inspect(hub: &common::hub::Hub, cache: &Path) -> Output {
    weightscope()
        .args(["inspect", "hf://org/repo", "--json"])
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("WEIGHTSCOPE_CACHE_DIR", cache)
        .env("HF_HOME", cache.join("no-hf-home"))
        .output()
        .expect("runs")
}

#[test]
fn the_cache_trim_never_follows_a_link_nor_leaves_the_cache() {
    let dir = tempfile::tempdir().expect("dir");
    let (hub, _) = hub_repo(dir.path());
    let cache = dir.path().join("cache");
    let hub_dir = cache.join("hub");
    std::fs::create_dir_all(&hub_dir).expect("mkdir");
    // Someone's folder, shaped like a cache repo with one old commit of
    // 300 MiB (sparse): over the cache's 256 MiB bound.
    let victim = dir.path().join("victim");
    let commit = victim.join("0123456789abcdef0123456789abcdef01234567");
    std::fs::create_dir_all(&commit).expect("mkdir");
    let big = commit.join("header.model.safetensors");
    std::fs::File::create(&big)
        .expect("create")
        .set_len(300 << 20)
        .expect("set_len");
    std::os::unix::fs::symlink(&victim, hub_dir.join("evil")).expect("symlink");
    // And a link to a file outside, inside a real commit folder of ours.
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, b"outside").expect("write");
    let ours = hub_dir
        .join("mine")
        .join("89abcdef0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&ours).expect("mkdir");
    std::os::unix::fs::symlink(&outside, ours.join("header.x.safetensors")).expect("symlink");
    let output = hub_inspect(&hub, &cache);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(big.exists(), "trim deleted through the link");
    assert_eq!(std::fs::read(&outside).expect("read"), b"outside");
    assert!(file_type(&hub_dir.join("evil")).is_symlink());
}

#[test]
fn a_cache_that_is_not_this_users_alone_is_bypassed_and_said_once() {
    if !is_root() {
        eprintln!("skipped: needs root to make files of another user");
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let (hub, _) = hub_repo(dir.path());
    let cache = dir.path().join("cache");
    let first = hub_inspect(&hub, &cache);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let expected: Value = serde_json::from_slice(&first.stdout).expect("JSON");
    // Every header entry swapped for a link to a file of secrets.
    let secret = dir.path().join("secret");
    std::fs::write(&secret, b"SECRET!!and more").expect("write");
    let mut links = 0;
    for entry in walk(&cache.join("hub")) {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        if name.starts_with("header.") {
            std::fs::remove_file(&entry).expect("rm");
            std::os::unix::fs::symlink(&secret, &entry).expect("symlink");
            links += 1;
        }
    }
    assert!(links > 0, "the first open kept headers");
    let number = u64::from_le_bytes(*b"SECRET!!").to_string();
    let second = hub_inspect(&hub, &cache);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert!(
        !text(&second.stderr).contains(&number),
        "{}",
        text(&second.stderr)
    );
    let got: Value = serde_json::from_slice(&second.stdout).expect("JSON");
    assert_eq!(
        got["tensors"], expected["tensors"],
        "the values are the repo's"
    );
    // The whole cache given to another user: bypassed, said once.
    assert!(
        Command::new("chown")
            .args(["-R", "54321:54321"])
            .arg(&cache)
            .status()
            .expect("chown")
            .success()
    );
    let third = hub_inspect(&hub, &cache);
    assert_eq!(third.status.code(), Some(0), "{}", text(&third.stderr));
    assert_eq!(
        text(&third.stderr).matches("not using the cache").count(),
        1,
        "{}",
        text(&third.stderr)
    );
    let got: Value = serde_json::from_slice(&third.stdout).expect("JSON");
    assert_eq!(got["tensors"], expected["tensors"]);
}

#[test]
fn a_cache_entry_that_holds_more_than_its_file_has_is_fetched_again() {
    let dir = tempfile::tempdir().expect("dir");
    let (hub, _) = hub_repo(dir.path());
    let cache = dir.path().join("cache");
    let first = hub_inspect(&hub, &cache);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let expected: Value = serde_json::from_slice(&first.stdout).expect("JSON");
    // Every header entry now claims a file of 1 byte.
    let mut changed = 0;
    for entry in walk(&cache.join("hub")) {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        if name.starts_with("header.") {
            let mut bytes = std::fs::read(&entry).expect("read");
            bytes[..8].copy_from_slice(&1u64.to_le_bytes());
            std::fs::write(&entry, bytes).expect("write");
            changed += 1;
        }
    }
    assert!(changed > 0);
    hub.clear();
    let second = hub_inspect(&hub, &cache);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    let got: Value = serde_json::from_slice(&second.stdout).expect("JSON");
    assert_eq!(got["tensors"], expected["tensors"]);
    assert!(
        hub.log().iter().any(|l| l.host == "storage"),
        "the header was fetched again: {:?}",
        hub.log()
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_repo_listing_a_million_files_against_an_index_of_200k_shards_opens_linearly() {
    use std::fmt::Write as _;
    // The API's answer: a million files, none of them the index's shards.
    let mut api = String::from(
        r#"{"id":"org/big","sha":"0123456789abcdef0123456789abcdef01234567","siblings":[{"rfilename":"model.safetensors.index.json"}"#,
    );
    for i in 0..1_000_000 {
        let _ = write!(api, r#",{{"rfilename":"other/f{i}.bin"}}"#);
    }
    api.push_str("]}");
    let mut index = String::from(r#"{"metadata":{},"weight_map":{"#);
    for i in 0..200_000 {
        if i > 0 {
            index.push(',');
        }
        let _ = write!(index, r#""t{i}":"model-{i:06}-of-200000.safetensors""#);
    }
    index.push_str("}}");
    let api = std::sync::Arc::new(api.into_bytes());
    let index = std::sync::Arc::new(index.into_bytes());
    let origin = serve(move |line, _, stream| {
        let path = line.split_whitespace().nth(1).unwrap_or("/");
        let body: &[u8] = if path.starts_with("/api/") {
            &api
        } else if path.ends_with("model.safetensors.index.json") {
            &index
        } else {
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body);
    });
    let cache = tempfile::tempdir().expect("cache");
    let mut cmd = weightscope();
    cmd.args(["inspect", "hf://org/big"])
        .env("HF_ENDPOINT", &origin)
        .env("WEIGHTSCOPE_CACHE_DIR", cache.path())
        .env("HF_HOME", cache.path().join("no-hf-home"));
    // Quadratic, this took about 6 minutes; linear, seconds.
    let output = run_bounded(cmd, Duration::from_mins(2));
    ends_saying(&output, 2, "model-000000-of-200000.safetensors");
}

#[test]
fn a_journal_cut_short_keeps_the_mlx_peak_its_samples_hold() {
    let dir = tempfile::tempdir().expect("dir");
    let trace = dir.path().join("run.jsonl");
    let script = "import mlx.core as mx, sys, time\nx = mx.zeros((4 << 20,), dtype=mx.float32)\nmx.eval(x)\nprint('ready', flush=True)\nsys.stdin.read()\n";
    let mut cmd = weightscope();
    cmd.args(["record", "--interval-ms", "5", "--trace"])
        .arg(&trace)
        .arg("--")
        .arg(venv_python())
        .args(["-c", script])
        .stdin(Stdio::piped());
    let mut recorder = start_until_ready(&mut cmd);
    // Until the journal holds a sample with the 16 MiB the job made.
    let sixteen = (16u64 << 20).to_string();
    loop {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&trace) {
            let _ = f.read_to_string(&mut text);
        }
        if text
            .lines()
            .any(|l| l.contains("\"sample\"") && l.contains(&sixteen))
        {
            break;
        }
        std::thread::yield_now();
    }
    recorder.kill().expect("SIGKILL to weightscope");
    let _ = recorder.wait();
    drop(recorder.stdin.take()); // the job reads its end and leaves
    let output = weightscope()
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(
        report["peak_mlx_active_bytes"]
            .as_u64()
            .is_some_and(|b| b >= 16 << 20),
        "{report}"
    );
}

#[test]
fn probe_figures_that_would_wrap_saturate() {
    let dir = tempfile::tempdir().expect("dir");
    let json = dir.path().join("summary.json");
    // Two "processes" each claiming 2^63 bytes of MLX active memory.
    let script = r#"import os
fd = int(os.environ["WEIGHTSCOPE_PROBE_FD"])
for pid in (101, 102):
    os.write(fd, b'{"kind":"sample","pid":%d,"active":9223372036854775808,"cache":9223372036854775808,"peak":9223372036854775808,"stack":-1}\n' % pid)
"#;
    let output = weightscope()
        .args(["record", "--no-probe", "--json"])
        .arg(&json)
        .arg("--")
        .arg(venv_python())
        .args(["-c", script])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
    let peak = summary["peak_mlx_active_bytes"].as_u64().expect("peak");
    assert!(peak >= 1 << 63, "wrapped to {peak}");
}

#[test]
fn passwords_in_addresses_are_never_printed() {
    for args in [
        vec!["inspect", "http://user:PASSWORD@127.0.0.1:9/x.safetensors"],
        vec!["inspect", "http://user:PASSWORD@127.0.0.1:9/page.html"],
        vec![
            "tensor",
            "http://user:PASSWORD@127.0.0.1:9/x.safetensors",
            "w",
        ],
    ] {
        let output = weightscope()
            .args(&args)
            .env("WEIGHTSCOPE_HTTP_RETRIES", "0")
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        let said = text(&output.stderr) + &text(&output.stdout);
        assert!(!said.contains("PASSWORD"), "{said}");
        assert!(said.contains("user:***@127.0.0.1:9"), "{said}");
    }
}

#[test]
fn a_probe_folder_another_user_took_first_is_not_a_dead_end() {
    if !is_root() {
        eprintln!("skipped: needs root to make a folder of another user");
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).expect("mkdir");
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .expect("chmod");
    // Another user made weightscope-0 first; there is no usable home.
    let taken = tmp.join("weightscope-0");
    std::fs::create_dir(&taken).expect("mkdir");
    assert!(
        Command::new("chown")
            .args(["54321:54321"])
            .arg(&taken)
            .status()
            .expect("chown")
            .success()
    );
    let json = dir.path().join("summary.json");
    let output = weightscope()
        .args(["record", "--json"])
        .arg(&json)
        .arg("--")
        .arg(venv_python())
        .args([
            "-c",
            "import weightscope_probe; weightscope_probe.mark('heard')",
        ])
        .env("TMPDIR", &tmp)
        .env_remove("XDG_RUNTIME_DIR")
        .env("XDG_CACHE_HOME", "/proc/no-cache-here")
        .env_remove("HOME")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
    assert!(
        summary["marks"]
            .as_array()
            .expect("marks")
            .iter()
            .any(|m| m["target"] == "heard"),
        "the probe ran from a folder of our own: {summary}"
    );
    assert_eq!(
        std::fs::read_dir(&taken).expect("list").count(),
        0,
        "nothing put in theirs"
    );
}

/// An FP8 checkpoint shaped like `DeepSeek-V3`'s (128x128 blocks) without a
/// config.json: a square weight whose shapes divide exactly, and a
/// [576, 7168] weight whose [5, 56] scales do not divide its rows. Every
/// FP8 code is 1.0; a block's scale is its block row + 1.
fn fp8_without_config(dir: &Path) -> PathBuf {
    let model = dir.join("fp8");
    std::fs::create_dir_all(&model).expect("mkdir");
    let one_e4m3 = 0x38u8;
    let scales = |rows: usize, cols: usize| -> Vec<f32> {
        (0..rows * cols).map(|i| (i / cols + 1) as f32).collect()
    };
    let f8 = safetensors::tensor::Dtype::F8_E4M3;
    write_safetensors(
        &model.join("model.safetensors"),
        &[
            Tensor::new("square.weight", f8, &[256, 256], vec![one_e4m3; 256 * 256]),
            Tensor::f32("square.weight_scale_inv", &[2, 2], &scales(2, 2)),
            Tensor::new(
                "ragged.weight",
                f8,
                &[576, 7168],
                vec![one_e4m3; 576 * 7168],
            ),
            Tensor::f32("ragged.weight_scale_inv", &[5, 56], &scales(5, 56)),
        ],
    );
    model
}

#[test]
fn fp8_blocks_without_a_config_are_the_models_own_and_check_says_they_were_inferred() {
    let dir = tempfile::tempdir().expect("dir");
    let model = fp8_without_config(dir.path());
    let output = weightscope()
        .args(["tensor"])
        .arg(&model)
        .args(["ragged.weight", "--json"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let tensor: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    // Rows 0-127 x1, ..., 512-575 x5: (128 * (1+2+3+4) + 64 * 5) / 576.
    let mean = tensor["stats"]["mean"].as_f64().expect("mean");
    assert!(
        (mean - 1600.0 / 576.0).abs() < 1e-4,
        "mean {mean} (116-row blocks give 2.986)"
    );
    assert_eq!(
        tensor["quantized"]["block"],
        serde_json::json!([128, 128]),
        "{tensor}"
    );
    let output = weightscope()
        .args(["check", "--json"])
        .arg(&model)
        .output()
        .expect("runs");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let codes: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"fp8.block-inferred"), "{report}");
    assert!(!codes.contains(&"fp8.block-disagree"), "{report}");
}
