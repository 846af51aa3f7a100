//! The MLX worker thread on real MLX: typed commands in, summaries out, every
//! array owned by the worker, the listener woken after each event.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Tensor, mlx_memory_lock, write_safetensors};
use weightscope::mlx;
use weightscope::worker::{Command, EventKind, Worker};

const MIB: u64 = 1024 * 1024;

#[test]
fn commands_in_summaries_out() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    for shard in 0..2 {
        let tensors: Vec<Tensor> = (0..2)
            .map(|i| {
                Tensor::f32(
                    &format!("s{shard}.t{i}"),
                    &[512, 512],
                    &vec![(shard * 2 + i) as f32; 512 * 512],
                )
            })
            .collect();
        write_safetensors(
            &dir.path().join(format!("shard-{shard}.safetensors")),
            &tensors,
        );
    }
    mlx::clear_cache().expect("clear");
    let base = mlx::memory().expect("memory").active_bytes;

    let wakes = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&wakes);
    let worker = Worker::spawn(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .expect("spawn");

    worker
        .send(Command::Materialize("s0.t0".into()))
        .expect("send");
    assert!(
        matches!(worker.recv().expect("event").kind, EventKind::Failed { error, .. } if error.contains("no checkpoint"))
    );

    worker
        .send(Command::Open(dir.path().to_path_buf()))
        .expect("send");
    let opened = worker.recv().expect("event");
    let EventKind::Opened { checkpoint, .. } = opened.kind else {
        panic!("expected Opened, got {:?}", opened.kind);
    };
    assert_eq!(checkpoint.tensors().len(), 4);
    assert_eq!(opened.memory.active_bytes, base, "opening is lazy");

    worker
        .send(Command::Materialize("s1.t1".into()))
        .expect("send");
    let event = worker.recv().expect("event");
    let EventKind::Materialized(preview) = event.kind else {
        panic!("expected Materialized, got {:?}", event.kind);
    };
    assert!((preview.values.stats.mean - 3.0).abs() < 1e-12);
    assert_eq!(preview.shard, "shard-1.safetensors");
    assert!(
        event.memory.active_bytes >= base + MIB,
        "the tensor stays resident"
    );

    worker
        .send(Command::Materialize("missing".into()))
        .expect("send");
    assert!(
        matches!(worker.recv().expect("event").kind, EventKind::Failed { target, .. } if target == "missing")
    );

    // The trap and the fix, seen from the UI's side.
    worker.send(Command::Release("s1.t1".into())).expect("send");
    let released = worker.recv().expect("event");
    assert!(matches!(released.kind, EventKind::Released(_)));
    assert!(
        released.memory.active_bytes >= base + MIB,
        "release alone frees nothing"
    );
    worker
        .send(Command::ReleaseShard("shard-1.safetensors".into()))
        .expect("send");
    let freed = worker.recv().expect("event");
    assert!(
        matches!(freed.kind, EventKind::ShardReleased { freed_bytes, .. } if freed_bytes == MIB),
        "the core's bookkeeping knows what the map held"
    );
    let mark = freed.mark.expect("a shard release is marked");
    assert_eq!(mark.resident, Some(("shard-1.safetensors".into(), 0)));
    assert_eq!(
        freed.memory.active_bytes, base,
        "releasing the shard frees it"
    );

    worker.send(Command::ClearCache).expect("send");
    let cleared = worker.recv().expect("event");
    assert!(matches!(cleared.kind, EventKind::CacheCleared { .. }));
    assert_eq!(cleared.memory.cache_bytes, 0);

    worker
        .send(Command::Open(dir.path().join("nope")))
        .expect("send");
    assert!(
        matches!(worker.recv().expect("event").kind, EventKind::OpenFailed { error, .. } if error.contains("nope"))
    );

    worker.send(Command::Close).expect("send");
    assert!(matches!(
        worker.recv().expect("event").kind,
        EventKind::Closed
    ));
    // Dropping joins the thread, so every wake has run by now.
    drop(worker);
    assert_eq!(wakes.load(Ordering::SeqCst), 9, "one wake per event");
}
