//! The MLX worker thread on real MLX: typed commands in, summaries out, every
//! array owned by the worker, the listener woken after each event.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Tensor, mlx_memory_lock, write_safetensors};
use weightscope::mlx;
use weightscope::weights::OpenStep;
use weightscope::worker::{EventKind, Request, Worker};

const MIB: u64 = 1024 * 1024;

/// The next event that is not open progress, and how many of those came first.
fn recv_after_progress(worker: &Worker) -> (weightscope::worker::Event, usize) {
    let mut progress = 0;
    loop {
        let event = worker.recv_any().expect("event");
        if !matches!(event.kind, EventKind::OpenProgress { .. }) {
            return (event, progress);
        }
        progress += 1;
    }
}

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
        .send(Request::Materialize("s0.t0".into()))
        .expect("send");
    assert!(
        matches!(worker.recv().expect("event").kind, EventKind::Failed { error, .. } if error.to_string().contains("no checkpoint"))
    );

    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    // Open progress first (headers and maps of two shards), then the answer.
    let (opened, progress) = recv_after_progress(&worker);
    assert!(progress >= 2, "{progress} progress events");
    let EventKind::Opened { checkpoint, .. } = opened.kind else {
        panic!("expected Opened, got {:?}", opened.kind);
    };
    assert_eq!(checkpoint.tensors().len(), 4);
    assert_eq!(opened.memory.active_bytes, base, "opening is lazy");

    worker
        .send(Request::Materialize("s1.t1".into()))
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
        .send(Request::Materialize("missing".into()))
        .expect("send");
    assert!(
        matches!(worker.recv().expect("event").kind, EventKind::Failed { target, .. } if target == "missing")
    );

    // The trap and the fix, seen from the UI's side.
    worker.send(Request::Release("s1.t1".into())).expect("send");
    let released = worker.recv().expect("event");
    assert!(matches!(released.kind, EventKind::Released(_)));
    assert!(
        released.memory.active_bytes >= base + MIB,
        "release alone frees nothing"
    );
    worker
        .send(Request::ReleaseShard(weightscope::checkpoint::ShardId(1)))
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

    worker.send(Request::ClearCache).expect("send");
    let cleared = worker.recv().expect("event");
    assert!(matches!(cleared.kind, EventKind::CacheCleared { .. }));
    assert_eq!(cleared.memory.cache_bytes, 0);

    worker
        .send(Request::Open(dir.path().join("nope")))
        .expect("send");
    assert!(
        matches!(worker.recv().expect("event").kind, EventKind::OpenFailed { error, .. } if error.to_string().contains("nope"))
    );

    worker.send(Request::Close).expect("send");
    assert!(matches!(
        worker.recv().expect("event").kind,
        EventKind::Closed
    ));
    // Dropping joins the thread, so every wake has run by now.
    drop(worker);
    assert_eq!(wakes.load(Ordering::SeqCst), 9 + progress, "one wake each");
}

#[test]
fn opening_reports_headers_then_maps_then_opens() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    for shard in 0..120 {
        write_safetensors(
            &dir.path().join(format!("model-{shard:05}.safetensors")),
            &[Tensor::f32(&format!("t{shard}"), &[2, 2], &[1.0; 4])],
        );
    }
    let worker = Worker::spawn(|| {}).expect("spawn");
    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    let mut steps = Vec::new();
    loop {
        let event = worker.recv_any().expect("event");
        match event.kind {
            EventKind::OpenProgress { path, step } => {
                assert_eq!(path, dir.path());
                steps.push(step);
            }
            EventKind::Opened { checkpoint, .. } => {
                assert_eq!(checkpoint.shards().len(), 120);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // Throttled (about 50 a phase), in order: every header before any map.
    assert!(steps.len() <= 102, "{} progress events", steps.len());
    let first_map = steps
        .iter()
        .position(|s| matches!(s, OpenStep::Maps { .. }))
        .expect("map progress");
    assert!(
        steps[..first_map]
            .iter()
            .all(|s| matches!(s, OpenStep::Headers { total: 120, .. }))
    );
    assert!(steps[..first_map].contains(&OpenStep::Headers {
        parsed: 120,
        total: 120
    }));
    assert_eq!(
        steps.last(),
        Some(&OpenStep::Maps {
            opened: 120,
            total: 120
        })
    );
    let opened: Vec<usize> = steps[first_map..]
        .iter()
        .map(|s| match s {
            OpenStep::Maps { opened, .. } => *opened,
            OpenStep::Headers { .. } => usize::MAX,
        })
        .collect();
    assert!(opened.windows(2).all(|w| w[0] < w[1]), "{opened:?}");
}
