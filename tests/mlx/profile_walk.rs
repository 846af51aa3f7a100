//! The walk on real MLX over a generated 8-shard checkpoint: the peaks of each
//! policy against what the headers predict, the trap's finding, cancelling,
//! trace export, the worker's walk events and the `walk` command's contract.

use crate::common;

use std::path::Path;
use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{Tensor, mlx_memory_lock, write_safetensors};
use weightscope::memory::{MarkKind, Policy};
use weightscope::mlx;
use weightscope::profile::{
    self, FindingKind, Recorded, Trace, TraceEvent, Transform, WalkOutcome, WalkPlan,
};
use weightscope::weights::Weights;
use weightscope::worker::{CancelToken, EventKind, Request, Worker};

const MIB: u64 = 1 << 20;
const SHARDS: usize = 8;

/// 8 shards of different sizes (1..=8 tensors of 1 MiB f32 each, 36 MiB in
/// all), with an index; odd shards written by the `safetensors` crate, even
/// ones by MLX's own writer.
fn write_model(dir: &Path) -> u64 {
    let mut weight_map = serde_json::Map::new();
    let mut total = 0;
    for shard in 0..SHARDS {
        let file = format!("model-{:05}-of-{SHARDS:05}.safetensors", shard + 1);
        let names: Vec<String> = (0..=shard)
            .map(|i| format!("model.layers.{shard}.mlp.w{i}.weight"))
            .collect();
        let values: Vec<f32> = (0..256 * 1024).map(|i| (i % 97) as f32 * 0.01).collect();
        if shard % 2 == 0 {
            let tensors: Vec<Tensor> = names
                .iter()
                .map(|n| Tensor::f32(n, &[256, 1024], &values))
                .collect();
            write_safetensors(&dir.join(&file), &tensors);
        } else {
            let arrays: Vec<mlx::Array> = names
                .iter()
                .map(|_| mlx::array_f32(&values, &[256, 1024]))
                .collect();
            let pairs: Vec<(&str, &mlx::Array)> = names
                .iter()
                .map(String::as_str)
                .zip(arrays.iter())
                .collect();
            mlx::save_safetensors(&dir.join(&file), &pairs).expect("MLX writes the shard");
        }
        for name in names {
            weight_map.insert(name, serde_json::Value::String(file.clone()));
            total += MIB;
        }
    }
    let index =
        serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_string(&index).expect("json"),
    )
    .expect("write index");
    total
}

fn run_walk(dir: &Path, policy: Policy, transform: Transform) -> (WalkOutcome, Trace) {
    let mut weights = Weights::open(dir).expect("open");
    let origin = std::time::Instant::now();
    let mut trace = Trace::new(policy.as_str());
    trace.policy = Some(policy);
    let cancel = AtomicBool::new(false);
    let outcome = profile::walk(
        &mut weights,
        policy,
        transform,
        &cancel,
        &mut |r: Recorded| {
            trace.push_sample(&r.memory.on_clock(origin));
            trace
                .events
                .push(TraceEvent::new(&r.mark, r.memory.at, origin, &r.memory));
        },
    );
    trace.expected = Some(outcome.expected);
    drop(weights);
    mlx::clear_cache().expect("clear");
    assert_eq!(
        mlx::memory().expect("memory").active_bytes,
        0,
        "the walk leaves nothing behind"
    );
    (outcome, trace)
}

fn kinds(trace: &Trace) -> Vec<FindingKind> {
    profile::findings(trace)
        .into_iter()
        .map(|f| f.code)
        .collect()
}

#[test]
fn each_policy_peaks_where_the_headers_say() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let total = write_model(dir.path());
    let largest = 8 * MIB;

    let (retain, retain_trace) = run_walk(dir.path(), Policy::Retain, Transform::None);
    assert_eq!(retain.steps_done, 36);
    assert_eq!(retain.expected.retain, total);
    assert_eq!(retain.expected.release_shard, largest);
    assert!(
        retain.peak_mlx_active_bytes >= total && retain.peak_mlx_active_bytes <= total + total / 10,
        "retain peaks at about the total: {} of {total}",
        retain.peak_mlx_active_bytes
    );
    assert!(kinds(&retain_trace).contains(&FindingKind::WholeModelAccumulated));

    // The trap: releasing each tensor with the maps alive frees nothing.
    let (trap, trap_trace) = run_walk(dir.path(), Policy::ReleaseTensor, Transform::None);
    assert!(
        trap.peak_mlx_active_bytes >= total - total / 20,
        "release-tensor accumulates the whole model: {} of {total}",
        trap.peak_mlx_active_bytes
    );
    let releases = trap_trace
        .events
        .iter()
        .filter(|e| e.kind == MarkKind::Release)
        .count();
    assert_eq!(releases, 36);
    let trap_kinds = kinds(&trap_trace);
    assert!(
        trap_kinds.contains(&FindingKind::ReleaseFreedNothing),
        "{trap_kinds:?}"
    );
    assert!(
        trap_kinds.contains(&FindingKind::WholeModelAccumulated),
        "{trap_kinds:?}"
    );
    // The core's bookkeeping agrees: released tensors stay resident in their shard.
    let last_step = trap_trace
        .events
        .iter()
        .rfind(|e| e.kind == MarkKind::Release)
        .expect("a release");
    let resident = trap_trace.resident_at(last_step.t_secs);
    assert_eq!(resident.iter().map(|s| s.bytes).sum::<u64>(), total);
    assert!(resident.iter().flat_map(|s| &s.tensors).all(|t| t.released));

    // The fix: releasing whole shards keeps the peak near one shard.
    let (fix, fix_trace) = run_walk(dir.path(), Policy::ReleaseShard, Transform::None);
    assert!(
        fix.peak_mlx_active_bytes <= largest + largest / 10,
        "release-shard peaks at no more than 1.1 x the largest shard: {} vs {largest}",
        fix.peak_mlx_active_bytes
    );
    // MLX's cache reuses each released shard's pages for the next: RSS
    // stays flat, which is not "RSS did not follow".
    assert!(
        !kinds(&fix_trace).contains(&FindingKind::RssDidNotFollow),
        "{:?}",
        kinds(&fix_trace)
    );
    assert!(
        fix.peak_mlx_active_bytes >= largest,
        "the largest shard was read whole"
    );
    let fix_kinds = kinds(&fix_trace);
    assert!(
        !fix_kinds.contains(&FindingKind::ReleaseFreedNothing),
        "{fix_kinds:?}"
    );
    assert!(
        !fix_kinds.contains(&FindingKind::WholeModelAccumulated),
        "{fix_kinds:?}"
    );
    let shard_releases: Vec<&TraceEvent> = fix_trace
        .events
        .iter()
        .filter(|e| e.kind == MarkKind::ReleaseShard)
        .collect();
    assert_eq!(shard_releases.len(), SHARDS);
    assert_eq!(
        shard_releases[7].bytes, largest,
        "the last shard frees its 8 MiB"
    );
    let residency = fix_trace.residency_steps();
    assert_eq!(residency.shards.len(), SHARDS);
    let rows = residency.sampled(usize::MAX);
    assert_eq!(rows.len(), residency.changes.len());
    assert!(
        rows.iter()
            .all(|(_, bytes)| bytes.iter().filter(|b| **b > 0).count() <= 1),
        "never more than one shard resident"
    );
}

#[test]
fn transforms_add_their_outputs_to_the_expectation() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let total = write_model(dir.path());
    let weights = Weights::open(dir.path()).expect("open");
    let f16 = WalkPlan::new(&weights, Transform::F16).expected();
    assert_eq!(
        f16.retain,
        total + total / 2,
        "every f32 tensor gets an f16 copy"
    );
    assert_eq!(f16.release_shard, 8 * MIB + 4 * MIB);
    let q4 = WalkPlan::new(&weights, Transform::Q4).expected();
    // 4 bits a weight (1/8 of the f32 bytes), plus an f32 scale and bias per
    // 64 weights (8 bytes per 64 weights: 1/32 of the f32 bytes).
    assert_eq!(q4.release_shard, 8 * MIB + 8 * MIB / 8 + 8 * MIB / 32);
    drop(weights);

    for transform in [Transform::F16, Transform::Q4] {
        let (outcome, _) = run_walk(dir.path(), Policy::ReleaseShard, transform);
        let expected = outcome.expected_peak_bytes();
        assert_eq!(outcome.steps_done, 36);
        assert!(
            outcome.peak_mlx_active_bytes >= expected
                && outcome.peak_mlx_active_bytes <= expected + expected / 4,
            "{transform:?}: peak {} vs expected {expected}",
            outcome.peak_mlx_active_bytes
        );
    }
}

#[test]
fn a_cancelled_walk_stops_and_the_next_starts_clean() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    let mut weights = Weights::open(dir.path()).expect("open");
    let cancel = AtomicBool::new(false);
    let mut steps = 0;
    // Cancel from inside the walk after its fifth tensor.
    let outcome = profile::walk(
        &mut weights,
        Policy::Retain,
        Transform::None,
        &cancel,
        &mut |r| {
            if r.mark.kind == MarkKind::WalkStep {
                steps += 1;
                if steps == 5 {
                    cancel.store(true, Ordering::Relaxed);
                }
            }
        },
    );
    assert!(outcome.cancelled);
    assert_eq!(outcome.steps_done, 5);
    assert_eq!(mlx::memory().expect("memory").active_bytes, 5 * MIB);
    // The next walk starts from nothing, whatever the last one left.
    cancel.store(false, Ordering::Relaxed);
    let mut first_active = None;
    let outcome = profile::walk(
        &mut weights,
        Policy::ReleaseShard,
        Transform::None,
        &cancel,
        &mut |r| {
            if r.mark.kind == MarkKind::WalkStart {
                first_active = Some(r.memory.mlx_or_zero().active_bytes);
            }
        },
    );
    assert_eq!(first_active, Some(0));
    assert!(!outcome.cancelled);
    drop(weights);
    common::assert_all_freed();
}

#[test]
fn traces_round_trip_through_files() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    let (_, trace) = run_walk(dir.path(), Policy::ReleaseTensor, Transform::None);
    let out = tempfile::tempdir().expect("tempdir");
    for file in ["trace.json", "trace.csv"] {
        let path = out.path().join(file);
        trace
            .save(&weightscope::files::check_output(&path, &[]).expect("checked"))
            .expect("save");
        let loaded = Trace::load(&path).expect("load");
        assert_eq!(loaded, trace, "{file} round-trips");
        assert_eq!(
            profile::findings(&loaded),
            profile::findings(&trace),
            "{file}: the same findings"
        );
    }
    let bad = out.path().join("bad.json");
    std::fs::write(&bad, "{\"version\": 1}").expect("write");
    let err = Trace::load(&bad).expect_err("not a trace");
    assert!(err.to_string().contains("bad.json"), "{err}");
}

#[test]
fn the_worker_streams_a_walk_and_cancels_it() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    let worker = Worker::spawn(|| {}).expect("worker");
    worker
        .send(Request::Open(dir.path().to_path_buf()))
        .expect("send");
    assert!(matches!(
        worker.recv().expect("event").kind,
        EventKind::Opened { .. }
    ));
    worker
        .send(Request::Walk {
            policy: Policy::ReleaseShard,
            transform: Transform::None,
            cancel: CancelToken::new(),
        })
        .expect("send");
    let mut marks = Vec::new();
    let outcome = loop {
        let event = worker.recv().expect("event");
        match event.kind {
            EventKind::WalkEnd(recorded) => marks.push(recorded.mark.kind),
            EventKind::WalkFinished(outcome) => break outcome,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(!outcome.cancelled);
    assert_eq!(outcome.steps_done, 36);
    assert_eq!(marks.first(), Some(&MarkKind::WalkStart));
    assert_eq!(marks.last(), Some(&MarkKind::WalkEnd));
    assert_eq!(
        marks.iter().filter(|k| **k == MarkKind::WalkStep).count(),
        36
    );
    assert_eq!(
        marks
            .iter()
            .filter(|k| **k == MarkKind::ReleaseShard)
            .count(),
        SHARDS
    );

    // A token cancelled before its walk starts stops it before its first
    // tensor (cancelling at a chosen tensor is tested on `profile::walk`).
    let early = CancelToken::new();
    early.cancel();
    worker
        .send(Request::Walk {
            policy: Policy::Retain,
            transform: Transform::None,
            cancel: early,
        })
        .expect("send");
    let outcome = loop {
        if let EventKind::WalkFinished(outcome) = worker.recv().expect("event").kind {
            break outcome;
        }
    };
    assert!(outcome.cancelled, "cancelled before it started");
    assert_eq!(outcome.steps_done, 0);

    worker.send(Request::Close).expect("send");
    assert!(matches!(
        worker.recv().expect("event").kind,
        EventKind::Closed
    ));
}

#[test]
fn the_walk_command_prints_the_contract_and_writes_the_trace() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let total = write_model(dir.path());
    let out = tempfile::tempdir().expect("tempdir");
    let csv = out.path().join("walk.csv");
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["walk"])
        .arg(dir.path())
        .args(["--policy", "release-tensor", "--json", "--csv"])
        .arg(&csv)
        .output()
        .expect("run weightscope");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["policy"], "release-tensor");
    assert_eq!(report["expected_peak_bytes"], total);
    assert!(report["peak_mlx_active_bytes"].as_u64().expect("peak") >= total - total / 20);
    assert!(report["peak_rss_bytes"].as_u64().expect("rss") > 0);
    // Time spent waiting for the reader thread: part of the walk's time.
    let waited = report["read_wait_secs"].as_f64().expect("read wait");
    let elapsed = report["elapsed_secs"].as_f64().expect("elapsed");
    assert!((0.0..=elapsed).contains(&waited), "{waited} of {elapsed}");
    assert!(!report["samples"].as_array().expect("samples").is_empty());
    assert!(report["events"].as_array().expect("events").len() >= 72);
    assert!(
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["code"] == "release-freed-nothing" && f["severity"] == "warning")
    );
    let trace = Trace::load(&csv).expect("the CSV trace loads");
    assert_eq!(trace.policy, Some(Policy::ReleaseTensor));
    assert_eq!(
        trace.events.len(),
        report["events"].as_array().map_or(0, Vec::len)
    );

    let bad = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["walk"])
        .arg(out.path().join("missing"))
        .args(["--policy", "retain"])
        .output()
        .expect("run weightscope");
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
}

#[test]
fn the_cache_limit_decides_whether_released_shards_stay_in_mlx_cache() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    // Each run in its own process: the limit is process-wide.
    let most_cached = |limit: Option<&str>| -> u64 {
        let mut command = Process::new(env!("CARGO_BIN_EXE_weightscope"));
        command
            .args(["walk"])
            .arg(dir.path())
            .args(["--policy", "release-shard", "--json"]);
        if let Some(limit) = limit {
            command.args(["--cache-limit", limit]);
        }
        let output = command.output().expect("run weightscope");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        // The same finding rule as the window's: a healthy release-shard
        // walk has no "RSS did not follow", with the cache or without.
        assert!(
            report["findings"]
                .as_array()
                .expect("findings")
                .iter()
                .all(|f| f["code"] != "rss-did-not-follow"),
            "{}",
            report["findings"]
        );
        report["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter_map(|e| e["mlx_cache_bytes"].as_u64())
            .max()
            .unwrap_or(0)
    };
    // A released 8 MiB shard fits MLX's default 32 MB cache; with no cache
    // its buffers go straight back to the C allocator.
    assert!(most_cached(None) >= 8 << 20);
    assert_eq!(most_cached(Some("0")), 0);
    assert!(most_cached(Some("64M")) >= 8 << 20);
}
