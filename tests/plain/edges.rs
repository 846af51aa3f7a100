//! Safe at the edges (issue #71): the one writer without an exception,
//! for every kind of node an output path can name, mine and another
//! user's, there before the run and appearing during it; the user's
//! descriptors passed to a recorded job; a full disk under the journal
//! said at once. Real nodes, a second user (`nobody`), real child
//! processes.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::attack::{file_type, is_root, run_bounded, small_model, text, tmpfs, weightscope};
use super::bounded::mkfifo;

const NOBODY: u32 = 65534;

/// `weightscope walk --policy retain --csv OUT MODEL`, under a watchdog.
fn walk_csv(out: &Path, model: &Path) -> Output {
    let mut cmd = weightscope();
    cmd.args(["walk", "--policy", "retain", "--csv"])
        .arg(out)
        .arg(model);
    run_bounded(cmd, Duration::from_mins(2))
}

/// `walk --csv /dev/fd/3` with descriptor 3 opened by the shell on `file`
/// (`3>>FILE`).
fn walk_csv_to_fd3(file: &Path, model: &Path) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("exec 3>>\"$1\"; shift; exec \"$@\"")
        .arg("sh")
        .arg(file)
        .arg(env!("CARGO_BIN_EXE_weightscope"))
        .args(["walk", "--policy", "retain", "--csv", "/dev/fd/3"])
        .arg(model);
    run_bounded(cmd, Duration::from_mins(2))
}

/// `output` exited with `code` and said `said` (one of them) on stderr.
fn ended(output: &Output, code: i32, said: &[&str], case: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{case}: {stderr}");
    assert!(
        said.iter().any(|s| stderr.contains(s)),
        "{case}: expected one of {said:?} in: {stderr}"
    );
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), None).expect("chown");
}

fn is_walk_csv(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes).contains("record,t_secs")
}

#[test]
fn files_links_fifos_and_sockets_of_mine_are_written_or_refused_by_one_rule() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());

    // Nothing there, and a regular file of mine: written.
    let new = dir.path().join("new.csv");
    ended(&walk_csv(&new, &model), 0, &[""], "nothing there");
    assert!(is_walk_csv(&std::fs::read(&new).expect("read")));
    ended(&walk_csv(&new, &model), 0, &[""], "a file of mine");

    // A link of mine to a file of mine: the file replaced, the link kept.
    let target = dir.path().join("target.csv");
    std::fs::write(&target, b"old").expect("write");
    let link = dir.path().join("link.csv");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    ended(&walk_csv(&link, &model), 0, &[""], "a link of mine");
    assert!(file_type(&link).is_symlink());
    assert!(is_walk_csv(&std::fs::read(&target).expect("read")));

    // A file with two names: refused, both names unchanged.
    let one = dir.path().join("one.txt");
    std::fs::write(&one, b"mine").expect("write");
    let two = dir.path().join("two.csv");
    std::fs::hard_link(&one, &two).expect("ln");
    ended(&walk_csv(&two, &model), 2, &["hard links"], "a hard link");
    assert_eq!(std::fs::read(&one).expect("read"), b"mine");

    // A FIFO of mine with a reader: written in place. The test holds the
    // FIFO open for reading and writing, so it has a reader from the
    // start and reads what was written after the walk.
    let fifo = dir.path().join("fifo.csv");
    mkfifo(&fifo);
    let mut held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("open the FIFO");
    ended(&walk_csv(&fifo, &model), 0, &[""], "a FIFO of mine");
    let mut got = vec![0_u8; 1 << 16];
    let n = held.read(&mut got).expect("read the FIFO");
    assert!(is_walk_csv(&got[..n]), "{}", text(&got[..n]));

    // A socket: refused before any work.
    let socket = dir.path().join("socket.csv");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    ended(&walk_csv(&socket, &model), 2, &["socket"], "a socket");
}

#[test]
fn devices_are_written_in_place_only_where_someone_reads() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    // The discarding ones written; /dev/ptmx (a new terminal nobody reads)
    // refused; /dev/tty without a controlling terminal said as that, not
    // as a FIFO.
    ended(
        &walk_csv(Path::new("/dev/null"), &model),
        0,
        &[""],
        "/dev/null",
    );
    ended(
        &walk_csv(Path::new("/dev/ptmx"), &model),
        2,
        &["device"],
        "/dev/ptmx",
    );
    let mut cmd = Command::new("setsid");
    cmd.arg(env!("CARGO_BIN_EXE_weightscope"))
        .args(["walk", "--policy", "retain", "--csv", "/dev/tty"])
        .arg(&model);
    let output = run_bounded(cmd, Duration::from_mins(2));
    ended(&output, 1, &["no controlling terminal"], "/dev/tty");
    assert!(!text(&output.stderr).contains("FIFO"));
}

#[test]
fn paths_through_proc_and_dev_fd_are_checked_as_the_file_they_are() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    let shard = model.join("model.safetensors");
    let shard_bytes = std::fs::read(&shard).expect("read");
    let one = dir.path().join("one.txt");
    std::fs::write(&one, b"mine").expect("write");
    let two = dir.path().join("two.csv");
    std::fs::hard_link(&one, &two).expect("ln");
    // Resolved to the file it is and checked as that file.
    let through_root = PathBuf::from("/proc/self/root").join(
        dir.path()
            .join("via-root.csv")
            .strip_prefix("/")
            .expect("absolute"),
    );
    ended(
        &walk_csv(&through_root, &model),
        0,
        &[""],
        "/proc/self/root/...",
    );
    assert!(is_walk_csv(
        &std::fs::read(dir.path().join("via-root.csv")).expect("read")
    ));
    for (name, to, said) in [
        (
            "to-shard.csv",
            PathBuf::from("/proc/self/root").join(shard.strip_prefix("/").expect("abs")),
            &["checkpoint"][..],
        ),
        (
            "to-hard-link.csv",
            PathBuf::from("/proc/self/root").join(two.strip_prefix("/").expect("abs")),
            &["hard links"][..],
        ),
        (
            "to-comm.csv",
            PathBuf::from("/proc/self/comm"),
            &["kernel's"][..],
        ),
    ] {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(&to, &link).expect("symlink");
        ended(&walk_csv(&link, &model), 2, said, name);
    }
    ended(
        &walk_csv(Path::new("/proc/self/comm"), &model),
        2,
        &["kernel's"],
        "/proc/self/comm",
    );
    // /dev/fd/3, a file of mine given by the shell: replaced as a file.
    let given = dir.path().join("given.csv");
    std::fs::write(&given, b"old").expect("write");
    ended(&walk_csv_to_fd3(&given, &model), 0, &[""], "/dev/fd/3");
    assert!(is_walk_csv(&std::fs::read(&given).expect("read")));
    // /dev/fd/3 on another name of a hard-linked file: refused.
    ended(
        &walk_csv_to_fd3(&two, &model),
        2,
        &["hard links"],
        "/dev/fd/3 hard link",
    );
    assert_eq!(std::fs::read(&one).expect("read"), b"mine");
    // /dev/stdout when stdout is a file: this process's own, appended.
    let stdout_file = dir.path().join("stdout.txt");
    let mut cmd = weightscope();
    cmd.args(["walk", "--policy", "retain", "--csv", "/dev/stdout"])
        .arg(&model)
        .stdout(std::fs::File::create(&stdout_file).expect("create"))
        .stderr(Stdio::piped());
    let output = cmd.output().expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(is_walk_csv(&std::fs::read(&stdout_file).expect("read")));

    assert_eq!(std::fs::read(&shard).expect("read"), shard_bytes);
}

#[test]
fn another_users_files_links_fifos_and_terminals_are_refused() {
    if !is_root() {
        eprintln!("skipped: another user's nodes need root");
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    let target = dir.path().join("target.csv");
    std::fs::write(&target, b"old").expect("write");
    // Another user's file, link, FIFO and terminal: refused in one line.
    let theirs = dir.path().join("theirs.csv");
    std::fs::write(&theirs, b"theirs").expect("write");
    chown(&theirs, NOBODY);
    ended(
        &walk_csv(&theirs, &model),
        2,
        &["another user"],
        "their file",
    );
    assert_eq!(std::fs::read(&theirs).expect("read"), b"theirs");
    let their_link = dir.path().join("their-link.csv");
    std::os::unix::fs::symlink(&target, &their_link).expect("symlink");
    chown(&their_link, NOBODY);
    ended(
        &walk_csv(&their_link, &model),
        2,
        &["link made by another user"],
        "their link",
    );
    let their_fifo = dir.path().join("their-fifo.csv");
    mkfifo(&their_fifo);
    chown(&their_fifo, NOBODY);
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&their_fifo)
        .expect("open");
    ended(
        &walk_csv(&their_fifo, &model),
        2,
        &["FIFO of another user"],
        "their FIFO",
    );
    // A pseudo-terminal of another user (made by the test venv's Python,
    // which keeps it open until its stdin closes).
    let mut pty = Command::new(crate::common::venv_python())
        .args([
            "-c",
            "import os, sys\nm, s = os.openpty()\nn = os.ttyname(s)\nos.chown(n, 65534, -1)\nprint(n, flush=True)\nsys.stdin.read()",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut name = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(pty.stdout.take().expect("stdout")),
        &mut name,
    )
    .expect("the terminal's name");
    let output = walk_csv(Path::new(name.trim()), &model);
    drop(pty.stdin.take());
    let _ = pty.wait();
    ended(&output, 2, &["terminal of another user"], "their terminal");
}

#[test]
fn nodes_that_appear_at_an_output_during_the_run_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    let shard = model.join("model.safetensors");
    let before = std::fs::read(&shard).expect("read");
    let json = dir.path().join("job.json");
    let root = is_root();
    let mut cases = vec![
        (
            format!(
                "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('{}')\"",
                json.display()
            ),
            vec!["socket", "changed while the work ran"],
        ),
        (
            format!("ln '{}' '{}'", shard.display(), json.display()),
            vec!["hard links", "checkpoint"],
        ),
        (
            format!(
                "ln -s '/proc/self/root{}' '{}'",
                shard.display(),
                json.display()
            ),
            vec!["checkpoint", "changed while the work ran"],
        ),
    ];
    if root {
        cases.push((
            format!("mkfifo '{0}' && chown nobody '{0}'", json.display()),
            vec!["FIFO of another user", "changed while the work ran"],
        ));
        // A device node (a twin of /dev/null) where there was nothing.
        cases.push((
            format!("mknod '{}' c 1 3", json.display()),
            vec!["changed while the work ran"],
        ));
    }
    for (script, said) in cases {
        let _ = std::fs::remove_file(&json);
        let output = super::writer::record_json(
            &json,
            &["--checkpoint".as_ref(), model.as_os_str()],
            &script,
        );
        ended(&output, 1, &said, &script);
    }
    assert_eq!(std::fs::read(&shard).expect("read"), before);
}

#[test]
fn the_users_descriptors_reach_the_job_and_the_recorders_never_do() {
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("log");
    let trace = dir.path().join("trace.jsonl");
    // `3>log`: the job writes into the user's descriptor; it sees no
    // other descriptor above 2 (the recorder's journal, its pipes).
    let before = dir.path().join("before");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("exec 3>\"$1\"; ls /proc/self/fd >\"$2\"; shift 2; exec \"$@\"")
        .arg("sh")
        .arg(&log)
        .arg(&before)
        .arg(env!("CARGO_BIN_EXE_weightscope"))
        .args(["record", "--no-probe", "--trace"])
        .arg(&trace)
        .args([
            "--",
            "sh",
            "-c",
            "echo from-the-job >&3; ls /proc/self/fd; echo probe=$WEIGHTSCOPE_PROBE_FD",
        ]);
    let output = run_bounded(cmd, Duration::from_mins(2));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        std::fs::read_to_string(&log).expect("read"),
        "from-the-job\n"
    );
    // `ls` lists its descriptors, in the job as where weightscope was
    // started (with those the test harness gave that shell): the same.
    let fds = |listing: &str| -> std::collections::BTreeSet<u32> {
        listing
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let given = fds(&std::fs::read_to_string(&before).expect("read"));
    // Besides them, the probe's pipe, named in the job's environment.
    let said = text(&output.stdout);
    let probe: u32 = said
        .split("probe=")
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .expect("the probe's descriptor");
    let mut job = fds(&said);
    assert!(job.remove(&probe), "{job:?} {probe}");
    assert!(job.contains(&3), "{job:?}");
    assert_eq!(job, given, "the job's descriptors are not the ones given");
    // A process substitution (`<(...)`, bash's /dev/fd/63).
    let output = Command::new("bash")
        .arg("-c")
        .arg("\"$1\" record --no-probe -- cat <(echo substituted)")
        .arg("bash")
        .arg(env!("CARGO_BIN_EXE_weightscope"))
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "substituted\n");
}

#[test]
fn a_full_disk_under_the_journal_is_said_at_once_and_fails_the_run() {
    let dir = tempfile::tempdir().expect("dir");
    let Some(small) = tmpfs(dir.path(), "small", "size=16k") else {
        return;
    };
    let journal = small.join("job.jsonl");
    // A job that lives until the journal has filled the 16 KiB: it waits
    // for the recorder's line saying so (read from its stderr here), so
    // no timing decides the test.
    let mut cmd = weightscope();
    cmd.args(["record", "--no-probe", "--interval-ms", "1", "--trace"])
        .arg(&journal)
        .args(["--", "sh", "-c", "read line"]);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stderr, &mut line).expect("read") == 0 {
            break;
        }
        said.push_str(&line);
        if line.contains("cannot write the journal") {
            break;
        }
    }
    drop(child.stdin.take()); // the job's `read` returns: it ends
    let mut rest = String::new();
    let _ = stderr.read_to_string(&mut rest);
    said.push_str(&rest);
    let status = child.wait().expect("wait");
    let kept = std::fs::read_to_string(&journal).unwrap_or_default();
    let _ = Command::new("umount").arg("-l").arg(&small).status();
    assert!(said.contains("cannot write the journal"), "{said}");
    assert!(said.contains("no space left"), "{said}");
    let at = said.find("cannot write the journal").expect("said");
    let summary = said.find("recorded `").expect("the summary");
    assert!(at < summary, "said at once, before the summary: {said}");
    assert_eq!(status.code(), Some(1), "{said}");
    // What was written before stays and reads back (cut short).
    let copy = dir.path().join("copy.jsonl");
    std::fs::write(&copy, &kept).expect("write");
    let output = weightscope()
        .arg("report")
        .arg(&copy)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("cut short"),
        "{}",
        text(&output.stdout)
    );
}
