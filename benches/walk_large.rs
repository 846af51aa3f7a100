//! Benchmark: a release-shard walk of a model larger than this machine.
//!
//! Generates the DeepSeek-V3-shaped layout of `benches/common` (163 sparse
//! shards, about 90k tensors, 627 GiB apparent; data are holes, so reading
//! them costs no disk but every byte still goes through the page cache and
//! MLX's loader) and measures, in the same run:
//! - `cat` of every shard to `/dev/null` (the speed the files can be read);
//! - `weightscope walk --policy release-shard --json` (whole process).
//!
//! Prints GB/s of both and their ratio, the walk's peak MLX active against
//! the largest shard, its peak RSS, and the size of its JSON trace. Run with
//! `cargo bench --bench walk_large` (several minutes: 627 GiB read twice).
//! `WALK_BENCH_KEEP=DIR` keeps the layout there.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

fn main() {
    let temp = tempfile::tempdir().expect("tempdir");
    let kept = std::env::var_os("WALK_BENCH_KEEP").map(PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temp.path());
    std::fs::create_dir_all(dir).expect("bench folder");
    let tensors = common::generate(dir);
    let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    shards.sort();
    let sizes: Vec<u64> = shards
        .iter()
        .map(|p| std::fs::metadata(p).expect("size").len())
        .collect();
    let apparent: u64 = sizes.iter().sum();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let gib = f64::from(1u32 << 30);
    println!(
        "{} shards, {tensors} tensors, {:.1} GiB apparent, largest shard {:.2} GiB",
        shards.len(),
        apparent as f64 / gib,
        largest as f64 / gib
    );

    let t = Instant::now();
    let cat = Command::new("cat")
        .args(&shards)
        .stdout(Stdio::null())
        .status()
        .expect("cat runs");
    assert!(cat.success());
    let cat_secs = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let walk = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("walk")
        .arg(dir)
        .args(["--policy", "release-shard", "--json"])
        .stderr(Stdio::inherit())
        .output()
        .expect("walk runs");
    let walk_secs = t.elapsed().as_secs_f64();
    assert!(walk.status.success(), "the walk failed");
    let report: serde_json::Value = serde_json::from_slice(&walk.stdout).expect("walk JSON");
    let peak = report["peak_mlx_active_bytes"].as_u64().unwrap_or(0);
    let rss = report["peak_rss_bytes"].as_u64().unwrap_or(0);
    let gb = apparent as f64 / 1e9;
    println!("cat:  {cat_secs:7.1} s, {:6.2} GB/s", gb / cat_secs);
    println!(
        "walk: {walk_secs:7.1} s, {:6.2} GB/s ({:.2} x cat)",
        gb / walk_secs,
        cat_secs / walk_secs
    );
    println!(
        "walk peak MLX active {:.2} GiB = {:.2} x the largest shard; peak RSS {:.2} GiB; JSON {:.1} MB with {} events and {} samples",
        peak as f64 / gib,
        peak as f64 / largest as f64,
        rss as f64 / gib,
        walk.stdout.len() as f64 / 1e6,
        report["events"].as_array().map_or(0, Vec::len),
        report["samples"].as_array().map_or(0, Vec::len)
    );
}
