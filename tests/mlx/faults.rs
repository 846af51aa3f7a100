//! Faults during a session, nothing written to the model folder, and long
//! sessions, on real MLX through the worker (as the window drives it).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use common::{Tensor, mlx_memory_lock, write_safetensors};
use weightscope::memory::{Policy, process_rss_bytes};
use weightscope::mlx;
use weightscope::profile::Transform;
use weightscope::weights::{ViewChoice, Weights, diff};
use weightscope::worker::{CancelToken, Event, EventKind, Request, Worker};

const MIB: usize = 1 << 20;

/// `shards` shards of `per_shard` 1 MiB f32 tensors.
fn write_model(dir: &Path, shards: usize, per_shard: usize) -> Vec<String> {
    let values: Vec<f32> = (0..MIB / 4).map(|i| (i % 251) as f32 * 0.01).collect();
    let mut names = Vec::new();
    for shard in 0..shards {
        let tensors: Vec<Tensor> = (0..per_shard)
            .map(|i| {
                let name = format!("layers.{shard}.w{i}");
                names.push(name.clone());
                Tensor::f32(&name, &[256, 1024], &values)
            })
            .collect();
        write_safetensors(&dir.join(format!("model-{shard:05}.safetensors")), &tensors);
    }
    names
}

fn recv(worker: &Worker) -> Event {
    worker.recv().expect("the worker answers")
}

fn materialize(worker: &Worker, name: &str) -> Result<(), String> {
    worker
        .send(Request::Materialize(name.to_owned()))
        .expect("send");
    match recv(worker).kind {
        EventKind::Materialized(_) => Ok(()),
        EventKind::Failed { error, .. } => Err(error.to_string()),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_shard_truncated_rewritten_or_deleted_after_opening_is_an_error_not_a_crash() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path(), 4, 2);
    let worker = Worker::spawn(|| {}).expect("worker");
    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    assert!(matches!(recv(&worker).kind, EventKind::Opened { .. }));

    // Truncated to half.
    let shard0 = dir.path().join("model-00000.safetensors");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard0)
        .expect("open");
    let len = file.metadata().expect("meta").len();
    file.set_len(len / 2).expect("truncate");
    drop(file);
    let err = materialize(&worker, "layers.0.w1").expect_err("truncated");
    assert!(
        err.contains("changed on disk") && err.contains("model-00000"),
        "{err}"
    );

    // Rewritten with other content of the same size.
    let shard1 = dir.path().join("model-00001.safetensors");
    let mut bytes = std::fs::read(&shard1).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&shard1, &bytes).expect("rewrite");
    // Same size; the modification time set apart explicitly (a coarse
    // file-system clock could otherwise keep the old one).
    std::fs::File::options()
        .write(true)
        .open(&shard1)
        .and_then(|f| f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_hours(24)))
        .expect("set mtime");
    let err = materialize(&worker, "layers.1.w0").expect_err("rewritten");
    assert!(err.contains("changed on disk"), "{err}");

    // Deleted.
    std::fs::remove_file(dir.path().join("model-00002.safetensors")).expect("delete");
    let err = materialize(&worker, "layers.2.w0").expect_err("deleted");
    assert!(err.contains("cannot be read any more"), "{err}");

    // The next click on an untouched shard works.
    materialize(&worker, "layers.3.w1").expect("an untouched shard still materializes");
    worker.send(Request::Close).expect("send");
    assert!(matches!(recv(&worker).kind, EventKind::Closed));
}

#[test]
fn materializing_past_the_memory_limit_is_refused_and_the_next_click_works() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path(), 2, 2);
    let worker = Worker::spawn(|| {}).expect("worker");
    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    assert!(matches!(recv(&worker).kind, EventKind::Opened { .. }));
    let before = mlx::memory().expect("memory").limit_bytes;
    let tight = mlx::memory().expect("memory").active_bytes + (MIB as u64) / 2;
    worker.send(Request::SetMemoryLimit(tight)).expect("send");
    assert!(matches!(
        recv(&worker).kind,
        EventKind::MemoryLimitSet { .. }
    ));
    let err = materialize(&worker, "layers.0.w0").expect_err("over the limit");
    assert!(err.contains("memory limit"), "{err}");
    assert_eq!(
        mlx::memory().expect("memory").active_bytes,
        0,
        "nothing was read"
    );
    worker.send(Request::SetMemoryLimit(before)).expect("send");
    assert!(matches!(
        recv(&worker).kind,
        EventKind::MemoryLimitSet { .. }
    ));
    materialize(&worker, "layers.0.w0").expect("works under the old limit");
    // A walk under a tight limit stops with the error and says so.
    worker
        .send(Request::SetMemoryLimit(tight + (MIB as u64)))
        .expect("send");
    let _ = recv(&worker);
    worker
        .send(Request::Walk {
            policy: Policy::Retain,
            transform: Transform::None,
            cancel: CancelToken::new(),
        })
        .expect("send");
    let outcome = loop {
        if let EventKind::WalkFinished(outcome) = recv(&worker).kind {
            break outcome;
        }
    };
    assert!(
        outcome
            .error
            .as_ref()
            .is_some_and(|e| e.to_string().contains("memory limit")),
        "{outcome:?}"
    );
    worker.send(Request::SetMemoryLimit(before)).expect("send");
    let _ = recv(&worker);
    worker.send(Request::Close).expect("send");
    let _ = recv(&worker);
    common::assert_all_freed();
}

#[test]
fn a_cancelled_diff_leaves_nothing_resident() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path(), 4, 2);
    let mut a = Weights::open(dir.path()).expect("open");
    let mut b = Weights::open(dir.path()).expect("open");
    let cancel = AtomicBool::new(false);
    let report = diff(&mut a, &mut b, &cancel, &mut |p| {
        if p.done == 3 {
            cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(report.cancelled);
    assert_eq!(report.compared, 3);
    assert_eq!(
        mlx::memory().expect("memory").active_bytes,
        0,
        "released on the way out"
    );
    cancel.store(false, std::sync::atomic::Ordering::Relaxed);
    let report = diff(&mut a, &mut b, &cancel, &mut |_| {});
    assert!(!report.cancelled);
    assert_eq!(report.compared, 8);
}

/// Every file under `root` with its bytes' hash and modification time.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    use std::hash::{Hash, Hasher};
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).expect("read");
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut hasher);
            let modified = std::fs::metadata(&path)
                .expect("meta")
                .modified()
                .expect("mtime");
            files.insert(path, (hasher.finish(), modified));
        }
    }
    files
}

#[test]
fn a_full_session_writes_nothing_in_the_model_folder() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let names = write_model(dir.path(), 4, 2);
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "llama"}"#).expect("config");
    let before = snapshot(dir.path());
    let elsewhere = tempfile::tempdir().expect("tempdir");

    let worker = Worker::spawn(|| {}).expect("worker");
    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    let _ = recv(&worker);
    for name in &names {
        materialize(&worker, name).expect("materialize");
    }
    for policy in Policy::ALL {
        worker
            .send(Request::Walk {
                policy,
                transform: Transform::Q4,
                cancel: CancelToken::new(),
            })
            .expect("send");
        while !matches!(recv(&worker).kind, EventKind::WalkFinished(_)) {}
    }
    worker
        .send(Request::Diff {
            other: dir.path().to_path_buf(),
            view: ViewChoice::Identity,
            cancel: CancelToken::new(),
        })
        .expect("send");
    while !matches!(recv(&worker).kind, EventKind::DiffFinished(_)) {}
    worker.send(Request::ReleaseAll).expect("send");
    let _ = recv(&worker);
    worker.send(Request::Close).expect("send");
    let _ = recv(&worker);
    drop(worker);
    // A trace exported elsewhere by the walk command, on the same folder.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("walk")
        .arg(dir.path())
        .args(["--policy", "release-shard", "--csv"])
        .arg(elsewhere.path().join("trace.csv"))
        .output()
        .expect("run")
        .status;
    assert!(status.success());

    assert_eq!(
        snapshot(dir.path()),
        before,
        "no file added, changed or touched"
    );
    assert!(elsewhere.path().join("trace.csv").exists());
}

#[test]
fn long_sessions_return_memory() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let names = write_model(dir.path(), 4, 4);
    let _ = mlx::clear_cache();
    let _ = mlx::trim_host_heap();
    let rss_start = process_rss_bytes();

    // 100 open/close cycles of a 4-shard checkpoint, each materializing one tensor.
    let worker = Worker::spawn(|| {}).expect("worker");
    for cycle in 0..100 {
        worker
            .send(Request::Open(dir.path().to_path_buf()))
            .expect("send");
        assert!(matches!(recv(&worker).kind, EventKind::Opened { .. }));
        materialize(&worker, &names[cycle % names.len()]).expect("materialize");
        worker.send(Request::Close).expect("send");
        assert!(matches!(recv(&worker).kind, EventKind::Closed));
    }
    assert_eq!(
        mlx::memory().expect("memory").active_bytes,
        0,
        "after 100 cycles"
    );

    // 1,000 rapid materialize/release clicks.
    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    let _ = recv(&worker);
    // Ten clicks ahead of the answers, as a fast hand would be (the
    // channels are bounded: a UI drains events every frame).
    let mut pending = 0;
    for click in 0..1000 {
        let name = &names[(click * 7) % names.len()];
        worker
            .send(Request::Materialize(name.clone()))
            .expect("send");
        worker.send(Request::Release(name.clone())).expect("send");
        pending += 2;
        while pending > 20 {
            let event = recv(&worker);
            assert!(
                !matches!(event.kind, EventKind::Failed { .. }),
                "{:?}",
                event.kind
            );
            pending -= 1;
        }
    }
    for _ in 0..pending {
        let event = recv(&worker);
        assert!(
            !matches!(event.kind, EventKind::Failed { .. }),
            "{:?}",
            event.kind
        );
    }
    worker.send(Request::ReleaseAll).expect("send");
    let _ = recv(&worker);
    worker.send(Request::ClearCache).expect("send");
    let cleared = recv(&worker);
    assert_eq!(
        cleared.memory.active_bytes, 0,
        "after 1,000 clicks and release all"
    );
    assert_eq!(cleared.memory.cache_bytes, 0);
    worker.send(Request::Close).expect("send");
    let _ = recv(&worker);
    drop(worker);
    let _ = mlx::trim_host_heap();
    let rss_end = process_rss_bytes();
    let grown = rss_end.saturating_sub(rss_start);
    eprintln!(
        "long session: RSS {:.1} MiB at start, {:.1} MiB at the end (+{:.1} MiB); MLX active 0",
        rss_start as f64 / MIB as f64,
        rss_end as f64 / MIB as f64,
        grown as f64 / MIB as f64
    );
    assert!(grown < 64 * MIB as u64, "RSS grew by {grown} bytes");
}
