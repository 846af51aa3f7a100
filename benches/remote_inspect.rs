//! Benchmark: `inspect` of a 163-shard, 90k-tensor repo (the DeepSeek-V3
//! layout of the inspect bench) served by the loopback Hub of the tests:
//! requests, bytes and seconds with a cold header cache and a warm one,
//! beside `inspect` of the same folder on the disk, in the same run; then
//! cold again with every answer 40 ms late (a real link's round trip).
//! Run with `cargo bench --bench remote_inspect`.

mod common;

#[allow(dead_code)]
#[path = "../tests/common/hub.rs"]
mod hub;

use common::ms;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One `inspect --json` of `target`, its time and its output's length
/// (`offline`: with `HF_HUB_OFFLINE=1`).
fn inspect(target: &str, endpoint: &str, cache: &Path, offline: bool) -> (Duration, usize) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["inspect", "--json", target])
        .env("HF_ENDPOINT", endpoint)
        .env("WEIGHTSCOPE_CACHE_DIR", cache)
        .env("HF_HUB_OFFLINE", if offline { "1" } else { "0" })
        .env_remove("HF_TOKEN")
        .stderr(Stdio::inherit())
        .output()
        .expect("run");
    let took = t.elapsed();
    assert!(out.status.success(), "inspect {target}");
    (took, out.stdout.len())
}

fn main() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path().join("repo");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let tensors = common::generate(&dir);
    let hub = hub::Hub::start();
    hub.add("org/deepseek-layout", &dir, hub::Behaviour::Normal);
    println!(
        "{} shards, {tensors} tensors, served on {}",
        common::SHARDS,
        hub.endpoint
    );
    let address = "hf://org/deepseek-layout";
    let mut local = Duration::MAX;
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let mut offline = Vec::new();
    // Rounds of all four, so that a drifting machine moves each alike.
    for round in 0..3 {
        local = local.min(inspect(&dir.to_string_lossy(), &hub.endpoint, temp.path(), false).0);
        let cache = temp.path().join(format!("cache-{round}"));
        hub.clear();
        let (took, len) = inspect(address, &hub.endpoint, &cache, false);
        let log = hub.log();
        let hub_requests = log.iter().filter(|l| l.host == "hub").count();
        let storage_requests = log.len() - hub_requests;
        let bytes: u64 = log.iter().map(|l| l.body_bytes).sum();
        cold.push((took, hub_requests, storage_requests, bytes, len));
        hub.clear();
        let (took, _) = inspect(address, &hub.endpoint, &cache, false);
        warm.push((took, hub.log().len()));
        hub.clear();
        let (took, _) = inspect(address, &hub.endpoint, &cache, true);
        offline.push((took, hub.log().len()));
    }
    let best_cold = cold.iter().min_by_key(|c| c.0).expect("runs");
    let best_warm = warm.iter().min_by_key(|w| w.0).expect("runs");
    let best_offline = offline.iter().min_by_key(|w| w.0).expect("runs");
    println!(
        "local inspect --json (whole process):        {:8.1} ms",
        ms(local)
    );
    println!(
        "remote, cold cache: {:8.1} ms  ({:.2}x local), {} Hub requests + {} storage ranges, {:.1} MB fetched",
        ms(best_cold.0),
        ms(best_cold.0) / ms(local),
        best_cold.1,
        best_cold.2,
        best_cold.3 as f64 / 1e6
    );
    println!(
        "remote, warm cache: {:8.1} ms  ({:.2}x local), {} request(s)",
        ms(best_warm.0),
        ms(best_warm.0) / ms(local),
        best_warm.1
    );
    println!(
        "remote, warm cache, HF_HUB_OFFLINE=1: {:8.1} ms  ({:.2}x local), {} request(s)",
        ms(best_offline.0),
        ms(best_offline.0) / ms(local),
        best_offline.1
    );
    let per = |d: Duration| ms(d) * 1e3 / tensors as f64;
    println!(
        "per tensor: local {:.2} us, remote cold {:.2} us, warm {:.2} us, offline {:.2} us",
        per(local),
        per(best_cold.0),
        per(best_warm.0),
        per(best_offline.0)
    );
    // Over a real link: every answer 40 ms late (the Hub's redirect and
    // the storage's range, two round trips a header), cold cache.
    hub.set_delay(Duration::from_millis(40));
    let mut slow = Vec::new();
    for round in 0..2 {
        hub.clear();
        let cache = temp.path().join(format!("cache-slow-{round}"));
        let (took, _) = inspect(address, &hub.endpoint, &cache, false);
        slow.push((took, hub.peak_in_flight(), hub.log().len()));
    }
    hub.set_delay(Duration::ZERO);
    let best_slow = slow.iter().min_by_key(|s| s.0).expect("runs");
    println!(
        "remote, cold cache, 40 ms round trip: {:8.1} ms (goal <= 1000), {} requests, at most {} at once",
        ms(best_slow.0),
        best_slow.2,
        best_slow.1
    );
    assert_eq!(best_offline.1, 0, "offline: no request");
    assert!(
        best_cold.1 <= common::SHARDS + 3,
        "at most N + 3 requests to the Hub"
    );
}
