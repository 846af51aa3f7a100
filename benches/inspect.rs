//! Benchmark: open and list a DeepSeek-V3-shaped checkpoint from headers alone.
//!
//! Generates 163 sparse shards (about 90k tensors: `F8_E4M3` weights with F32
//! `weight_scale_inv`, BF16 norms; real headers, data left as holes) and times,
//! in the same run:
//! - Python `safetensors.safe_open` listing every key and shape (in-process time);
//! - `weightscope inspect --json` as a whole process (start, parse, print);
//! - weightscope's in-process open + summary.
//!
//! Prints the ratios. Needs `python3` with `safetensors` and `numpy`; the
//! command makes a private venv for them under `target/bench-venv`.
//! Run with `cargo bench --bench inspect`.

mod common;

use common::{best_of, ms};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weightscope::checkpoint::Checkpoint;

const PYTHON_LISTING: &str = r"
import glob, sys, time
from safetensors import safe_open
best = None
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    n = 0
    for f in sorted(glob.glob(sys.argv[1] + '/*.safetensors')):
        with safe_open(f, framework='np') as s:
            for k in s.keys():
                s.get_slice(k).get_shape()
                n += 1
    dt = time.perf_counter() - t
    best = dt if best is None else min(best, dt)
print(n, best)
";

fn python_venv() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-venv");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import safetensors, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if ready {
        return Some(python);
    }
    eprintln!(
        "bench: making {} with safetensors and numpy",
        venv.display()
    );
    let made = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "safetensors",
                "numpy",
            ])
            .status()
            .is_ok_and(|s| s.success());
    made.then_some(python)
}

fn main() {
    // INSPECT_BENCH_KEEP=DIR keeps the generated layout there (for profiling).
    let temp = tempfile::tempdir().expect("tempdir");
    let kept = std::env::var_os("INSPECT_BENCH_KEEP").map(PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temp.path());
    std::fs::create_dir_all(dir).expect("bench folder");
    let t = Instant::now();
    let tensors = common::generate(dir);
    println!(
        "generated {} sparse shards, {tensors} tensors in {:.0} ms",
        common::SHARDS,
        ms(t.elapsed())
    );
    let runs = 7;

    // Warm the page cache for everyone.
    let _ = Checkpoint::open(dir).expect("open");

    let in_process = best_of(runs, || {
        let checkpoint = Checkpoint::open(dir).expect("open");
        assert_eq!(checkpoint.tensors().len(), tensors);
        let _ = checkpoint.summary();
    });

    let exe = env!("CARGO_BIN_EXE_weightscope");
    let start_only = best_of(runs, || run_quietly(&["--version"], None));
    // Our process alone: its output goes to /dev/null, so no reader's time counts.
    let whole_process = best_of(runs, || run_quietly(&["inspect", "--json"], Some(dir)));
    // As a script would use it: through a pipe, read whole by the caller.
    let through_pipe = best_of(runs, || {
        let out = Command::new(exe)
            .args(["inspect", "--json"])
            .arg(dir)
            .stderr(Stdio::inherit())
            .output()
            .expect("run");
        assert!(out.status.success());
        assert!(out.stdout.len() > tensors * 50);
    });

    println!(
        "weightscope open + summary (in-process):       {:8.1} ms",
        ms(in_process)
    );
    println!(
        "weightscope --version (process start only):    {:8.1} ms",
        ms(start_only)
    );
    println!(
        "weightscope inspect --json (whole process):    {:8.1} ms",
        ms(whole_process)
    );

    let Some(python) = python_venv() else {
        println!("python safetensors unavailable: no reference measured");
        return;
    };
    // Rounds alternate between Python and our process, so that a machine
    // whose speed drifts (a VM beside busy neighbours) moves both sides of
    // each round's ratio alike; the median round is reported.
    let rounds = 9;
    let mut ratios = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        let python = python_listing(&python, dir, 3, tensors);
        let ours = best_of(3, || run_quietly(&["inspect", "--json"], Some(dir)));
        let ratio = ours.as_secs_f64() / python.as_secs_f64();
        println!(
            "round {round}: python safe_open listing {:6.1} ms, inspect --json process {:6.1} ms, ratio {ratio:.2}",
            ms(python),
            ms(ours)
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let python = python_listing(&python, dir, runs, tensors);
    println!(
        "python safe_open listing (in-process):         {:8.1} ms",
        ms(python)
    );
    println!(
        "ratio inspect --json process / python in-process: {:.2} (median of {rounds} alternating rounds; goal <= 0.25)",
        ratios[rounds / 2]
    );
    println!(
        "ratio inspect --json through a pipe / python:      {:.2}",
        through_pipe.as_secs_f64() / python.as_secs_f64()
    );
    println!(
        "ratio in-process open / python in-process:        {:.2}",
        in_process.as_secs_f64() / python.as_secs_f64()
    );
}

/// Runs our binary with `args` (and `path`), output to /dev/null.
fn run_quietly(args: &[&str], path: Option<&Path>) {
    let status = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(args)
        .args(path)
        .stdout(Stdio::null())
        .status()
        .expect("run");
    assert!(status.success());
}

/// Python's best time over `runs` listings of every key and shape (its own
/// start and imports not counted).
fn python_listing(python: &Path, dir: &Path, runs: usize, tensors: usize) -> Duration {
    let out = Command::new(python)
        .args(["-c", PYTHON_LISTING])
        .arg(dir)
        .arg(runs.to_string())
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace();
    let listed: usize = fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let secs: f64 = fields
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN);
    assert_eq!(
        listed,
        tensors,
        "python listed {listed}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Duration::from_secs_f64(secs)
}
