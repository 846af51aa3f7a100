//! Benchmark: `inspect` of a 163-shard, 90k-tensor repo (the DeepSeek-V3
//! layout of the inspect bench) served by the loopback Hub of the tests:
//! requests, bytes and seconds with a cold header cache and a warm one,
//! beside `inspect` of the same folder on the disk, in the same run.
//! Run with `cargo bench --bench remote_inspect`.

mod common;

#[allow(dead_code)]
#[path = "../tests/common/hub.rs"]
mod hub;

use common::ms;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One `inspect --json` of `target`, its time and its output's length.
fn inspect(target: &str, endpoint: &str, cache: &Path) -> (Duration, usize) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["inspect", "--json", target])
        .env("HF_ENDPOINT", endpoint)
        .env("WEIGHTSCOPE_CACHE_DIR", cache)
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
    let local = (0..3)
        .map(|_| inspect(&dir.to_string_lossy(), &hub.endpoint, temp.path()).0)
        .min()
        .expect("runs");
    let address = "hf://org/deepseek-layout";
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for round in 0..3 {
        let cache = temp.path().join(format!("cache-{round}"));
        hub.clear();
        let (took, len) = inspect(address, &hub.endpoint, &cache);
        let log = hub.log();
        let hub_requests = log.iter().filter(|l| l.host == "hub").count();
        let storage_requests = log.len() - hub_requests;
        let bytes: u64 = log.iter().map(|l| l.body_bytes).sum();
        cold.push((took, hub_requests, storage_requests, bytes, len));
        hub.clear();
        let (took, _) = inspect(address, &hub.endpoint, &cache);
        warm.push((took, hub.log().len()));
    }
    let best_cold = cold.iter().min_by_key(|c| c.0).expect("runs");
    let best_warm = warm.iter().min_by_key(|w| w.0).expect("runs");
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
        "per tensor: local {:.2} us, remote cold {:.2} us, warm {:.2} us",
        ms(local) * 1e3 / tensors as f64,
        ms(best_cold.0) * 1e3 / tensors as f64,
        ms(best_warm.0) * 1e3 / tensors as f64
    );
    assert!(
        best_cold.1 <= common::SHARDS + 3,
        "at most N + 3 requests to the Hub"
    );
}
