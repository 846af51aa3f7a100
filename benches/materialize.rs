//! Benchmark: materializing every tensor of a ~1.5 GB multi-shard checkpoint
//! through MLX, against plain `read()` of the same files and against Python
//! `mx.load` + `mx.eval`, all on a hot page cache, in one run: first with
//! MLX's default buffer cache (32 MB on the CPU backend), then with the cache
//! sized to hold one shard (what `--cache-limit` / `WEIGHTSCOPE_CACHE_LIMIT`
//! set, and what MLX's Metal backend does by default), for both. Then the
//! time to summarize a 1 GiB tensor (statistics, histogram, first values).
//!
//! Run with `cargo bench --bench materialize`. The Python reference needs
//! `mlx` for Python; the command makes a private venv for it under
//! `target/bench-venv` (the same MLX version as the one linked here).

// Fixture values are small by construction; the casts below cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::best_of;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use safetensors::tensor::{Dtype, TensorView};
use weightscope::mlx;
use weightscope::weights::{PreviewOptions, Weights};

const SHARDS: usize = 6;
const TENSORS_PER_SHARD: usize = 8;
const TENSOR_BYTES: usize = 32 << 20;
const MLX_VERSION: &str = "0.32.2";

fn generate(dir: &Path) -> u64 {
    let data: Vec<u8> = (0..TENSOR_BYTES).map(|i| (i % 251) as u8 & 0x3f).collect();
    let mut total = 0;
    for shard in 0..SHARDS {
        let views: Vec<(String, TensorView<'_>)> = (0..TENSORS_PER_SHARD)
            .map(|i| {
                let (dtype, shape) = if i % 2 == 0 {
                    (Dtype::BF16, vec![4096, TENSOR_BYTES / 2 / 4096])
                } else {
                    (Dtype::F32, vec![TENSOR_BYTES / 4])
                };
                let view = TensorView::new(dtype, shape, &data).expect("view");
                (format!("layers.{shard}.w{i}"), view)
            })
            .collect();
        let path = dir.join(format!("model-{shard:05}.safetensors"));
        safetensors::serialize_to_file(views, None, &path).expect("write shard");
        total += std::fs::metadata(&path).expect("meta").len();
    }
    total
}

fn shard_paths(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    paths.sort();
    paths
}

fn read_all(paths: &[PathBuf]) -> u64 {
    let mut buf = vec![0u8; 8 << 20];
    let mut total = 0;
    for path in paths {
        let mut file = std::fs::File::open(path).expect("open");
        loop {
            let n = file.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    total
}

/// `read()` of every tensor into its own new buffer, as any loader that hands
/// out owned tensors must: the same first-touch page faults MLX pays.
fn read_fresh(paths: &[PathBuf]) -> u64 {
    let mut total = 0;
    for path in paths {
        let mut file = std::fs::File::open(path).expect("open");
        let mut header_len = [0u8; 8];
        file.read_exact(&mut header_len).expect("read");
        let mut header = vec![0u8; u64::from_le_bytes(header_len) as usize];
        file.read_exact(&mut header).expect("read");
        let buffers: Vec<Vec<u8>> = (0..TENSORS_PER_SHARD)
            .map(|_| {
                let mut buf = vec![0u8; TENSOR_BYTES];
                file.read_exact(&mut buf).expect("read");
                buf
            })
            .collect();
        total += buffers.iter().map(|b| b.len() as u64).sum::<u64>();
    }
    total
}

fn materialize_all(dir: &Path) {
    let mut weights = Weights::open(dir).expect("open");
    let checkpoint = weights.shared_checkpoint();
    for (i, shard) in checkpoint.shards().iter().enumerate() {
        let arrays: Vec<_> = checkpoint
            .tensors()
            .iter_range(shard.tensors.clone())
            .map(|t| weights.tensor(t.name()).expect("tensor"))
            .collect();
        mlx::evaluate_all(&arrays).expect("eval");
        drop(arrays);
        // Streaming, as a real transform does: free the shard as the walk leaves it.
        weights.release_shard(weightscope::checkpoint::ShardId(i));
    }
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

const PYTHON_MATERIALIZE: &str = r"
import glob, sys, time
import mlx.core as mx
if sys.argv[3] != '-':
    mx.set_cache_limit(int(sys.argv[3]))
files = sorted(glob.glob(sys.argv[1] + '/*.safetensors'))
best = None
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    for f in files:
        arrays = mx.load(f)
        mx.eval(*arrays.values())
        del arrays
    dt = time.perf_counter() - t
    best = dt if best is None else min(best, dt)
print(mx.default_device(), best)
";

fn python_mlx() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-venv");
    let python = venv.join("bin/python");
    let check = format!("import mlx.core as mx; assert mx.__version__ == '{MLX_VERSION}'");
    if Command::new(&python)
        .args(["-c", &check])
        .status()
        .is_ok_and(|s| s.success())
    {
        return Some(python);
    }
    eprintln!(
        "bench: installing mlx {MLX_VERSION} for Python into {}",
        venv.display()
    );
    let made = (venv.join("bin/pip").exists()
        || Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success()))
        && Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("mlx=={MLX_VERSION}"))
            .arg(format!("mlx-cpu=={MLX_VERSION}"))
            .status()
            .is_ok_and(|s| s.success());
    made.then_some(python)
}

/// Python's best time over `runs` passes of `mx.load` + `mx.eval` over the
/// files in `dir`, with MLX's cache limit at `cache` (`None`: MLX's default),
/// and the device it ran on.
fn python_materialize(
    python: &Path,
    dir: &Path,
    runs: usize,
    cache: Option<u64>,
) -> Option<(Duration, String)> {
    let out = Command::new(python)
        .args(["-c", PYTHON_MATERIALIZE])
        .arg(dir)
        .arg(runs.to_string())
        .arg(cache.map_or_else(|| "-".to_owned(), |c| c.to_string()))
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&out.stdout);
    let secs = text
        .split_whitespace()
        .last()
        .and_then(|s| s.parse::<f64>().ok());
    if secs.is_none() {
        println!(
            "python MLX failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let device = text.split_whitespace().next().unwrap_or("?").to_owned();
    secs.map(|s| (Duration::from_secs_f64(s), device))
}

/// The middle value.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path();
    let total = generate(dir);
    let paths = shard_paths(dir);
    println!(
        "checkpoint: {SHARDS} shards, {} tensors, {:.2} GB",
        SHARDS * TENSORS_PER_SHARD,
        total as f64 / 1e9
    );
    let runs = 3;
    // The released shard's buffers kept for the next shard: no fresh pages.
    let shard_bytes = paths
        .iter()
        .map(|p| std::fs::metadata(p).expect("meta").len())
        .max()
        .unwrap_or(0);
    let python = python_mlx();
    if python.is_none() {
        println!("python MLX unavailable: no Python reference measured");
    }

    read_all(&paths); // hot page cache for everyone
    let fresh = best_of(runs, || {
        read_fresh(&paths);
    });
    println!(
        "read() into a new buffer per tensor: {:.2} GB/s",
        gbps(total, fresh)
    );
    // Rounds measure everything in turn, so that a machine whose speed drifts
    // (a VM beside busy neighbours) moves both sides of each ratio alike; the
    // median round's ratios are reported.
    let (mut vs_read, mut vs_python, mut vs_python_cached) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=3 {
        let read = best_of(runs, || {
            read_all(&paths);
        });
        let ours = best_of(runs, || materialize_all(dir));
        mlx::clear_cache().expect("clear");
        let default_cache = mlx::set_cache_limit(shard_bytes).expect("cache limit");
        let ours_cached = best_of(runs, || materialize_all(dir));
        mlx::set_cache_limit(default_cache).expect("cache limit");
        mlx::clear_cache().expect("clear");
        println!(
            "round {round}: read() into one buffer {:.2} GB/s; weightscope (MLX) {:.2} GB/s with the default cache ({} MB), {:.2} GB/s with a cache of one shard ({} MB)",
            gbps(total, read),
            gbps(total, ours),
            default_cache >> 20,
            gbps(total, ours_cached),
            shard_bytes >> 20
        );
        vs_read.push(read.as_secs_f64() / ours_cached.as_secs_f64());
        let Some(python) = &python else { continue };
        for (cache, ours, ratios) in [
            (None, ours, &mut vs_python),
            (Some(shard_bytes), ours_cached, &mut vs_python_cached),
        ] {
            if let Some((py, device)) = python_materialize(python, dir, runs, cache) {
                println!(
                    "round {round}: python mx.load + mx.eval ({device}), {}: {:.2} GB/s",
                    cache.map_or("default cache", |_| "cache of one shard"),
                    gbps(total, py)
                );
                ratios.push(py.as_secs_f64() / ours.as_secs_f64());
            }
        }
    }
    println!(
        "ratio weightscope / read() into one buffer, cache of one shard: {:.2} (median; goal >= 0.9)",
        median(vs_read)
    );
    if python.is_some() {
        println!(
            "ratio weightscope / python MLX, default cache:      {:.2} (median; goal >= 1.0)",
            median(vs_python)
        );
        println!(
            "ratio weightscope / python MLX, cache of one shard: {:.2} (median; goal >= 1.0)",
            median(vs_python_cached)
        );
    }

    // Statistics of a 1 GiB f32 tensor.
    drop(temp);
    let temp = tempfile::tempdir().expect("tempdir");
    let n = (1usize << 30) / 4;
    let data: Vec<u8> = (0..n)
        .flat_map(|i| ((i % 1000) as f32 / 1000.0 - 0.5).to_le_bytes())
        .collect();
    let view = TensorView::new(Dtype::F32, vec![16384, n / 16384], &data).expect("view");
    safetensors::serialize_to_file([("big", view)], None, &temp.path().join("big.safetensors"))
        .expect("write");
    drop(data);
    let mut weights = Weights::open(temp.path()).expect("open");
    let preview = weights
        .preview("big", &PreviewOptions::default())
        .expect("preview");
    println!(
        "1 GiB f32 tensor: materialized in {:.0} ms, statistics + histogram + heatmap in {:.0} ms (aim < 1000 ms)",
        preview.materialize_millis, preview.summary_millis
    );
}
