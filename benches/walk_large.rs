//! Benchmark: a release-shard walk of a model larger than this machine.
//!
//! Generates the DeepSeek-V3-shaped layout of `benches/common` (163 sparse
//! shards, about 90k tensors, 627 GiB apparent; data are holes, so reading
//! them costs no disk but every byte still goes through the page cache and
//! MLX's loader) and measures, in the same run:
//! - `cat` of every shard to `/dev/null` (the speed the files can be read);
//! - `weightscope walk --policy release-shard --json` (whole process), with
//!   MLX's default buffer cache and with a cache of one shard
//!   (`--cache-limit`), which lets each shard reuse the last one's buffers;
//! - the profiler with that walk's trace: loading it, and frames drawn.
//!
//! Prints GB/s of each and their ratio to `cat`, the walks' peak MLX active
//! against the largest shard, peak RSS, the size of the JSON trace, and the
//! profiler's figures. Run with `cargo bench --bench walk_large` (about ten
//! minutes: 627 GiB read three times).
//! `WALK_BENCH_KEEP=DIR` keeps the layout there.
//!
//! Then the same over real bytes on disk (sparse files only measure the
//! page cache and the CPU): `WALK_BENCH_REAL_SHARDS` shards (3 by default;
//! 0 skips it) copied with their holes written out, when the disk has room,
//! the page cache dropped before every run where this process may (root),
//! three rounds alternating `cat` and both walks; medians and ratios.
//! `WALK_BENCH_PARTS=real` runs only that part; `WALK_BENCH_READ_BPS=N`
//! throttles its reads from the disk to N bytes a second (a block-I/O
//! cgroup, as root), for a disk whose speed holds still.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;
use weightscope::app::AppCommand;

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
    if std::env::var("WALK_BENCH_PARTS").is_ok_and(|p| p == "real") {
        real_bytes(&shards, temp.path());
        return;
    }

    let t = Instant::now();
    let cat = Command::new("cat")
        .args(&shards)
        .stdout(Stdio::null())
        .status()
        .expect("cat runs");
    assert!(cat.success());
    let cat_secs = t.elapsed().as_secs_f64();

    let gb = apparent as f64 / 1e9;
    println!("cat:  {cat_secs:7.1} s, {:6.2} GB/s", gb / cat_secs);
    let trace = temp.path().join("walk-trace.json");
    for cache in [None, Some(largest)] {
        let t = Instant::now();
        let mut command = Command::new(env!("CARGO_BIN_EXE_weightscope"));
        command
            .arg("walk")
            .arg(dir)
            .args(["--policy", "release-shard", "--json"])
            .stderr(Stdio::inherit());
        if let Some(bytes) = cache {
            command.arg("--cache-limit").arg(bytes.to_string());
            command.arg("--trace").arg(&trace);
        }
        let walk = command.output().expect("walk runs");
        let walk_secs = t.elapsed().as_secs_f64();
        assert!(walk.status.success(), "the walk failed");
        let report: serde_json::Value = serde_json::from_slice(&walk.stdout).expect("walk JSON");
        let peak = report["peak_mlx_active_bytes"].as_u64().unwrap_or(0);
        let rss = report["peak_rss_bytes"].as_u64().unwrap_or(0);
        let label = if cache.is_some() {
            "walk, cache of one shard"
        } else {
            "walk, MLX's default cache"
        };
        println!(
            "{label}: {walk_secs:7.1} s, {:6.2} GB/s ({:.2} x cat)",
            gb / walk_secs,
            cat_secs / walk_secs
        );
        println!(
            "  peak MLX active {:.2} GiB = {:.2} x the largest shard; peak RSS {:.2} GiB; JSON {:.1} MB with {} events and {} samples",
            peak as f64 / gib,
            peak as f64 / largest as f64,
            rss as f64 / gib,
            walk.stdout.len() as f64 / 1e6,
            report["events"].as_array().map_or(0, Vec::len),
            report["samples"].as_array().map_or(0, Vec::len)
        );
    }
    profiler_with(&trace, temp.path());
    real_bytes(&shards, temp.path());
}

/// The walks against `cat` over real bytes: some shards of the layout
/// (after the first, which holds the embeddings) copied into `scratch` with
/// their holes written out, read with an empty page cache each time.
fn real_bytes(shards: &[PathBuf], scratch: &std::path::Path) {
    let count: usize = std::env::var("WALK_BENCH_REAL_SHARDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let picked: Vec<&PathBuf> = shards.iter().skip(9).take(count).collect();
    if picked.is_empty() {
        return;
    }
    let bytes: u64 = picked
        .iter()
        .map(|p| std::fs::metadata(p).expect("size").len())
        .sum();
    let free = free_bytes(scratch);
    if free < bytes + (4 << 30) {
        println!(
            "real bytes: skipped ({:.1} GB needed, {:.1} GB free)",
            bytes as f64 / 1e9,
            free as f64 / 1e9
        );
        return;
    }
    let dir = scratch.join("real");
    let largest = write_real_copies(&picked, &dir);
    let files: Vec<PathBuf> = picked
        .iter()
        .map(|p| dir.join(p.file_name().expect("name")))
        .collect();
    let drop_cache = || std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok();
    let dropped = drop_cache();
    let throttled = std::env::var("WALK_BENCH_READ_BPS")
        .ok()
        .and_then(|bps| bps.parse::<u64>().ok())
        .map(|bps| (bps, throttle_reads(&dir, bps)));
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..3 {
        for (k, cache) in [None, Some(largest), Some(0)].into_iter().enumerate() {
            drop_cache();
            let t = Instant::now();
            let ok = match cache {
                None => Command::new("cat")
                    .args(&files)
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success()),
                Some(limit) => {
                    let mut walk = Command::new(env!("CARGO_BIN_EXE_weightscope"));
                    walk.arg("walk")
                        .arg(&dir)
                        .args(["--policy", "release-shard", "--json"])
                        .stdout(Stdio::null());
                    // 0 here: MLX's default cache (no flag).
                    if limit > 0 {
                        walk.arg("--cache-limit").arg(limit.to_string());
                    }
                    walk.status().is_ok_and(|s| s.success())
                }
            };
            assert!(ok, "a real-bytes run failed");
            times[k].push(t.elapsed().as_secs_f64());
        }
        let [cat, one, default] = times.each_ref().map(|t| t.last().copied().unwrap_or(0.0));
        println!(
            "  round: cat {cat:.1} s, walk (one shard) {one:.1} s, walk (default) {default:.1} s"
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut cat, mut one, mut default] = times;
    let (cat, one, default) = (median(&mut cat), median(&mut one), median(&mut default));
    let gb = bytes as f64 / 1e9;
    println!(
        "real bytes: {} shards, {gb:.1} GB on disk, page cache {} before each run; medians of 3 rounds:",
        files.len(),
        if dropped {
            "dropped"
        } else {
            "NOT dropped (not root)"
        }
    );
    match throttled {
        Some((bps, Ok(()))) => {
            println!("  reads throttled to {:.2} GB/s (blkio)", bps as f64 / 1e9);
        }
        Some((_, Err(why))) => println!("  reads NOT throttled: {why}"),
        None => {}
    }
    println!("  cat:  {cat:6.1} s, {:5.2} GB/s", gb / cat);
    println!(
        "  walk, cache of one shard: {one:6.1} s, {:5.2} GB/s ({:.2} x cat)",
        gb / one,
        cat / one
    );
    println!(
        "  walk, MLX's default cache: {default:6.1} s, {:5.2} GB/s ({:.2} x cat)",
        gb / default,
        cat / default
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Copies `picked` into `dir` with every block written (read and written,
/// not copied by the file system, so holes become real bytes); returns the
/// largest copy's size.
fn write_real_copies(picked: &[&PathBuf], dir: &std::path::Path) -> u64 {
    std::fs::create_dir_all(dir).expect("real folder");
    let mut largest = 0;
    for path in picked {
        // Read and written, not copied by the file system: every block real.
        let target = dir.join(path.file_name().expect("name"));
        let mut from = std::fs::File::open(path).expect("shard");
        let mut to = std::fs::File::create(&target).expect("copy");
        let mut buf = vec![0u8; 8 << 20];
        loop {
            let n = std::io::Read::read(&mut from, &mut buf).expect("read");
            if n == 0 {
                break;
            }
            std::io::Write::write_all(&mut to, &buf[..n]).expect("write");
        }
        to.sync_all().expect("sync");
        largest = largest.max(std::fs::metadata(&target).expect("size").len());
    }
    largest
}

/// Puts this process (and so every command it starts from now on) in a
/// block-I/O cgroup that reads from the disk holding `dir` at most `bps`
/// bytes a second: this VM's disk changes speed by half from minute to
/// minute, a throttled one holds still, so the ratios mean something.
/// cgroup v1 (`blkio`) or v2 (`io`); needs root.
fn throttle_reads(dir: &std::path::Path, bps: u64) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(dir).map_err(|e| e.to_string())?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    // A partition's reads are throttled on its disk.
    let disk = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}"))
        .map_err(|e| e.to_string())?;
    let disk = if disk.join("partition").exists() {
        disk.parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or(disk)
    } else {
        disk
    };
    let numbers = std::fs::read_to_string(disk.join("dev")).map_err(|e| e.to_string())?;
    let numbers = numbers.trim();
    let pid = std::process::id().to_string();
    let v1 = std::path::Path::new("/sys/fs/cgroup/blkio");
    let group = if v1.is_dir() {
        let group = v1.join("weightscope-bench");
        std::fs::create_dir_all(&group).map_err(|e| e.to_string())?;
        std::fs::write(
            group.join("blkio.throttle.read_bps_device"),
            format!("{numbers} {bps}"),
        )
        .map_err(|e| format!("blkio: {e}"))?;
        group
    } else {
        let root = std::path::Path::new("/sys/fs/cgroup");
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+io");
        let group = root.join("weightscope-bench");
        std::fs::create_dir_all(&group).map_err(|e| e.to_string())?;
        std::fs::write(group.join("io.max"), format!("{numbers} rbps={bps}"))
            .map_err(|e| format!("io.max: {e}"))?;
        group
    };
    std::fs::write(group.join("cgroup.procs"), pid).map_err(|e| e.to_string())
}

/// Bytes free on the file system holding `dir` (0 when `df` cannot say).
fn free_bytes(dir: &std::path::Path) -> u64 {
    Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .nth(1)
                .and_then(|l| l.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Loads the walk's trace into the profiler and draws frames as the window
/// does ([`common::draw_frame`]), printing the times.
fn profiler_with(trace: &std::path::Path, scratch: &std::path::Path) {
    let demo = weightscope::weights::demo::ensure_demo(&scratch.join("demo")).expect("demo");
    let device = weightscope::mlx::default_device();
    let mut app = weightscope::app::WeightscopeApp::new(Some(demo), device, || {}).expect("app");
    app.hooks().wait_for_worker().expect("opened");
    let t = Instant::now();
    app.execute(AppCommand::LoadTrace(trace.to_path_buf()));
    app.hooks().wait_for_trace(); // on a `trace-load` thread: frames go on meanwhile
    let load = t.elapsed();
    app.execute(AppCommand::ShowTab(weightscope::app::Tab::Profiler));
    let ctx = egui::Context::default();
    let mut frames: Vec<std::time::Duration> = (0..30)
        .map(|_| {
            let t = Instant::now();
            common::draw_frame(&ctx, &mut app);
            t.elapsed()
        })
        .collect();
    let first = frames[0];
    frames.sort();
    println!(
        "profiler with that trace: loaded in {:.0} ms (off the UI thread); first frame {:.1} ms, then median {:.2} ms, worst {:.2} ms",
        load.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
        frames[frames.len() / 2].as_secs_f64() * 1e3,
        frames[frames.len() - 1].as_secs_f64() * 1e3
    );
}
