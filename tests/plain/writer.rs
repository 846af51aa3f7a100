//! One writer (issue #56): every write in `src/` goes through `src/files/`,
//! and what it writes is checked at the moment of writing. Real links, hard
//! links, FIFOs, a second PID namespace, real child processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What opens a file for writing, makes or removes something on disk, or
/// reaches around the one writer; none of it may appear in `src/` outside
/// `src/files/` (tests beside the code may).
const WRITES: &[&str] = &[
    "OpenOptions",
    "File::create",
    "fs::write(",
    "fs::rename",
    "fs::remove_file",
    "fs::remove_dir",
    "create_dir",
    "DirBuilder",
    "fs::copy(",
    "fs::hard_link",
    "unix::fs::symlink",
    "set_permissions",
    "mkfifo",
    "tempfile::",
    "rustix::fs::",
    "libc::open",
    "libc::creat",
    "libc::unlink",
    "libc::rename",
    "libc::link",
    "libc::truncate",
    "libc::ftruncate",
    "persist(",
];

/// The code of a source file without its test module.
fn code_of(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod ")
        .map_or(text, |at| text.get(..at).unwrap_or(text))
}

/// The writes found in `src/` outside `src/files/`, as `file:line: token`.
fn writes_outside_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root).expect("inside").to_path_buf();
        if relative.starts_with("src/files") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read");
        for (n, line) in code_of(&text).lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for token in WRITES {
                if code.contains(token) {
                    found.push(format!("{}:{}: {token}", relative.display(), n + 1));
                }
            }
            // A file's length set (a Vec's is fine: `pages.rs` sets the
            // length of a vector it filled).
            if code.contains(".set_len(") && !code.contains("copy.set_len(values.len())") {
                found.push(format!("{}:{}: set_len", relative.display(), n + 1));
            }
        }
    }
    found
}

#[test]
fn every_write_in_src_goes_through_the_files_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = writes_outside_files(root);
    assert!(
        found.is_empty(),
        "writes outside src/files/ (route them through crate::files):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_one_writer_scan_finds_a_write_where_there_is_one() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir_all(dir.path().join("src/files")).expect("mkdir");
    std::fs::write(
        dir.path().join("src/sneaky.rs"),
        "fn f() { let _ = std::fs::OpenOptions::new().write(true).open(\"x\"); }\n\
         #[cfg(test)]\nmod tests { fn g() { std::fs::write(\"y\", b\"\").ok(); } }\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("src/files/mod.rs"),
        "fn f() { std::fs::write(\"x\", b\"\").ok(); }\n",
    )
    .expect("write");
    let found = writes_outside_files(dir.path());
    assert_eq!(found, ["src/sneaky.rs:1: OpenOptions"], "{found:?}");
}

use super::attack::{
    file_type, hub_inspect, hub_repo, is_root, run_bounded, small_model, text, weightscope,
};
use super::bounded::mkfifo;
use super::layers::rust_files;

/// Every file under `dir` (not following links), with its bytes.
fn cache_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("list") {
        let path = entry.expect("entry").path();
        let kind = file_type(&path);
        if kind.is_dir() {
            cache_files(&path, out);
        } else if kind.is_file() {
            out.push(path);
        }
    }
}

#[test]
fn a_link_put_in_the_hub_cache_is_replaced_never_written_through() {
    let dir = tempfile::tempdir().expect("dir");
    let (hub, _) = hub_repo(dir.path());
    let cache = dir.path().join("cache");
    let first = hub_inspect(&hub, &cache);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let mut entries = Vec::new();
    cache_files(&cache.join("hub"), &mut entries);
    let header = entries
        .iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("header."))
        })
        .expect("a cached header entry")
        .clone();
    // Any file the user can write: as root, any file on the machine.
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"precious").expect("write");
    std::fs::remove_file(&header).expect("rm");
    std::os::unix::fs::symlink(&victim, &header).expect("symlink");
    let second = hub_inspect(&hub, &cache);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(std::fs::read(&victim).expect("read"), b"precious");
    assert!(
        file_type(&header).is_file(),
        "the link is replaced by the cache's own entry"
    );
}

/// `weightscope record --json JSON -- sh -c SCRIPT` under a watchdog.
pub(crate) fn record_json(
    json: &Path,
    extra: &[&std::ffi::OsStr],
    script: &str,
) -> std::process::Output {
    let mut cmd = weightscope();
    cmd.arg("record")
        .args(extra)
        .arg("--json")
        .arg(json)
        .args(["--", "sh", "-c", script]);
    run_bounded(cmd, Duration::from_mins(2))
}

#[test]
fn an_output_that_changes_during_the_run_is_not_written_through() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    let shard = model.join("model.safetensors");
    let before = std::fs::read(&shard).expect("read");
    let json = dir.path().join("job.json");
    let other = dir.path().join("other.txt");
    std::fs::write(&other, b"mine").expect("write");
    // The job makes --json a link to its checkpoint's shard; to a file of
    // the user's; a FIFO.
    for (script, said) in [
        (
            format!("ln -s '{}' '{}'", shard.display(), json.display()),
            "checkpoint",
        ),
        (
            format!("ln -s '{}' '{}'", other.display(), json.display()),
            "changed while the work ran",
        ),
        (
            format!("mkfifo '{}'", json.display()),
            "changed while the work ran",
        ),
    ] {
        let _ = std::fs::remove_file(&json);
        let output = record_json(
            &json,
            &["--checkpoint".as_ref(), model.as_os_str()],
            &script,
        );
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{script}: {stderr}");
        assert!(stderr.contains(said), "{script}: {stderr}");
        assert!(stderr.contains("job.json"), "names the output: {stderr}");
        assert!(
            !stderr.contains(".weightscope-"),
            "no temporary name: {stderr}"
        );
    }
    assert_eq!(std::fs::read(&shard).expect("read"), before);
    assert_eq!(std::fs::read(&other).expect("read"), b"mine");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&file_type(&json)));
}

#[test]
fn a_link_another_user_plants_in_a_sticky_folder_is_not_followed() {
    if !is_root() {
        eprintln!("skipped: needs root to act as another user");
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(
        &shared,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .expect("chmod");
    let secret = dir.path().join("root-only.conf");
    std::fs::write(&secret, b"root's").expect("write");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let json = shared.join("job.json");
    // The other user plants the link while the job runs.
    let script = format!(
        "ln -s '{}' '{}' && chown -h nobody '{}'",
        secret.display(),
        json.display(),
        json.display()
    );
    let output = record_json(&json, &[], &script);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("another user"), "{stderr}");
    assert_eq!(std::fs::read(&secret).expect("read"), b"root's");
}

#[test]
fn a_file_with_another_name_is_never_emptied_or_replaced() {
    let dir = tempfile::tempdir().expect("dir");
    let model = small_model(dir.path());
    let shard = model.join("model.safetensors");
    let before = std::fs::read(&shard).expect("read");
    // A journal (`--trace`) and an output (`--json`) that are another name
    // of the shard.
    for (option, name) in [("--trace", "journal.jsonl"), ("--json", "summary.json")] {
        let path = dir.path().join(name);
        std::fs::hard_link(&shard, &path).expect("ln");
        let output = weightscope()
            .args(["record", option])
            .arg(&path)
            .args(["--", "true"])
            .output()
            .expect("runs");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option}: {stderr}");
        assert!(stderr.contains("hard links"), "{option}: {stderr}");
    }
    assert_eq!(std::fs::read(&shard).expect("read"), before);
}

/// Prints the temporary-name tag of the namespace it runs in: the other
/// side of the next test, run by it inside a new PID namespace.
#[test]
#[ignore = "run by leftovers_of_another_pid_namespace_are_never_removed"]
fn print_the_temporary_tag_of_this_namespace() {
    println!("tag={}", weightscope::files::temporary_tag());
}

#[test]
fn leftovers_of_another_pid_namespace_are_never_removed() {
    let exe = std::env::current_exe().expect("the test binary");
    let output = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(exe)
        .args([
            "--exact",
            "writer::print_the_temporary_tag_of_this_namespace",
            "--ignored",
            "--nocapture",
        ])
        .output();
    let Some(other) = output.ok().filter(|o| o.status.success()).and_then(|o| {
        text(&o.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("tag=").map(str::to_owned))
    }) else {
        eprintln!("skipped: cannot make a PID namespace here (unshare --pid)");
        return;
    };
    let mine = weightscope::files::temporary_tag();
    assert_ne!(other, mine, "another PID namespace has another tag");
    // A PID that is not running here: in the other namespace it may be a
    // live writer.
    let mut gone = Command::new("true").spawn().expect("true");
    let pid = gone.id();
    gone.wait().expect("wait");
    let dir = tempfile::tempdir().expect("dir");
    let theirs = dir
        .path()
        .join(format!(".weightscope-{other}-{pid}-abcdefghij.part"));
    let ours = dir
        .path()
        .join(format!(".weightscope-{mine}-{pid}-abcdefghij.part"));
    std::fs::write(&theirs, b"a trace being written").expect("write");
    std::fs::write(&ours, b"left by a killed write").expect("write");
    let output = weightscope()
        .args(["record", "--json"])
        .arg(dir.path().join("summary.json"))
        .args(["--", "true"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        theirs.exists(),
        "another namespace's live write was removed"
    );
    assert!(!ours.exists(), "our own leftover stays");
}

#[test]
fn record_blocked_on_a_stalled_fifo_gives_up_at_a_signal() {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = tempfile::tempdir().expect("dir");
    let fifo = dir.path().join("summary.fifo");
    mkfifo(&fifo);
    // A reader that reads the first bytes and then stops reading.
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .expect("reader");
    {
        use std::os::fd::AsRawFd as _;
        #[allow(unsafe_code)]
        // SAFETY: fcntl on a descriptor this test owns; F_SETPIPE_SZ sets
        // the pipe's buffer, touching no memory of ours.
        let set = unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
        assert!(set >= 4096, "pipe size");
    }
    // Sampled every 5 ms: a summary of about 24 KiB, never one that fits
    // the pipe (at 50 ms, 4-5 KiB: a loaded machine's few samples came
    // close).
    let mut child = weightscope()
        .args(["record", "--interval-ms", "5", "--json"])
        .arg(&fifo)
        .args(["--", "sleep", "0.3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    // Wait (bounded) until the summary starts to arrive: the pipe holds
    // 4 KiB, the summary far more, so the write is now waiting for room.
    let mut first = [0u8; 1];
    let mut waited = 0;
    loop {
        let mut fds = [libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&reader),
            events: libc::POLLIN,
            revents: 0,
        }];
        #[allow(unsafe_code)]
        // SAFETY: poll on one descriptor this test owns, for 1 s.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 1000) };
        if ready > 0 && fds[0].revents & libc::POLLIN != 0 {
            break;
        }
        waited += 1;
        assert!(waited < 120, "no summary arrived in two minutes");
    }
    assert_eq!(reader.read(&mut first).expect("a byte"), 1);
    let _ = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        let mut said = String::new();
        let _ = stderr.read_to_string(&mut said);
        let _ = tx.send((child.wait(), said));
    });
    let (status, said) = rx
        .recv_timeout(Duration::from_mins(1))
        .expect("record ended after SIGTERM (it waited on the FIFO before)");
    let status = status.expect("wait");
    assert_eq!(status.code(), Some(143), "{said}");
    assert!(said.contains("stopped by a signal"), "{said}");
    drop(reader);
}

#[test]
fn a_fifo_as_mlx_hostfile_does_not_hang_record() {
    let dir = tempfile::tempdir().expect("dir");
    let fifo = dir.path().join("hosts.json");
    mkfifo(&fifo);
    let mut cmd = weightscope();
    cmd.args(["record", "--json"])
        .arg(dir.path().join("summary.json"))
        .env("MLX_HOSTFILE", &fifo)
        .args(["--", "true"]);
    let output = run_bounded(cmd, Duration::from_mins(1));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}

#[test]
fn an_output_folder_that_cannot_be_written_is_said_before_the_job_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let Some(ro) = super::attack::tmpfs(dir.path(), "ro", "ro,size=64k") else {
        return;
    };
    let ran = dir.path().join("ran");
    let output = weightscope()
        .args(["record", "--json"])
        .arg(ro.join("summary.json"))
        .args(["--", "touch"])
        .arg(&ran)
        .output()
        .expect("runs");
    let _ = Command::new("umount").arg("-l").arg(&ro).status();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("summary.json"), "{stderr}");
    assert!(stderr.contains("read-only"), "{stderr}");
    assert!(
        !ran.exists(),
        "the job ran before the output was found unwritable"
    );
}
