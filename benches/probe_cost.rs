//! Benchmark: what the Python probe's stacks cost the job.
//!
//! Records the same Python job twice in this run, at 20 Hz: with the probe
//! sampling the main thread's stack (the default) and with stacks turned
//! off (`WEIGHTSCOPE_PROBE_STACKS=0`). The job holds a 50-frame Python stack
//! and keeps MLX busy for a few seconds, so every sample walks 50 frames.
//! Prints the probe's own CPU time as a share of one core for each (its
//! sampling thread measures itself with `time.thread_time`, the held-by
//! walks, which run in the job's main thread, measure theirs), and their
//! difference: what stacks add. The target is at most 1 % of a core in all.
//!
//! Then the held-by walks: a fold that imports `mlx_lm` and transformers (600+
//! modules) and keeps each of 8 shards (a new high every half second, so
//! the probe walks as often as it may: once a second, and once more when
//! memory settles), recorded with the walks and without them
//! (`WEIGHTSCOPE_PROBE_HELD=0`): the probe's cost for each, and the walks'
//! own time from the recording.
//! Run with `cargo bench --bench probe_cost` after `mlx-glue/setup test`.

use std::path::Path;
use std::process::{Command, Stdio};

const JOB: &str = r"
import sys, time
import mlx.core as mx

def deep(n):
    if n:
        return deep(n - 1)
    end = time.monotonic() + float(sys.argv[1])
    x = mx.ones((256, 256))
    while time.monotonic() < end:
        x = (x @ x) / 256.0
        mx.eval(x)
    return float(x[0, 0].item())

print(deep(46))
";

const FOLD: &str = r"
import sys, time
import mlx.core as mx
import mlx_lm, transformers

def main(shards):
    kept = []
    for i in range(shards):
        w = {'layers.%d.%d' % (i, j): mx.ones((1024, 1024)) for j in range(8)}
        mx.eval(list(w.values()))
        kept.append(w)
        end = time.monotonic() + 0.5
        x = mx.ones((128, 128))
        while time.monotonic() < end:
            x = (x @ x) / 128.0
            mx.eval(x)
    return len(kept)

print(main(int(sys.argv[1])))
";

/// Records `job` (Python source) run with `arg`, with `switch` set as
/// given, at 20 Hz; returns the summary and the saved trace.
fn record(
    python: &Path,
    job: &str,
    arg: &str,
    switch: (&str, bool),
) -> (serde_json::Value, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("summary.json");
    let trace = dir.path().join("trace.json");
    let file = dir.path().join("job.py");
    std::fs::write(&file, job).expect("job written");
    let status = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["record", "--interval-ms", "50", "--json"])
        .arg(&json)
        .arg("--trace")
        .arg(&trace)
        .arg("--")
        .arg(python)
        .arg(&file)
        .arg(arg)
        .env(switch.0, if switch.1 { "1" } else { "0" })
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("weightscope runs");
    assert!(status.success(), "the job ran");
    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).expect("written")).expect("JSON")
    };
    (read(&json), read(&trace))
}

/// The probe's own CPU time in % of a core, from a summary.
fn percent(summary: &serde_json::Value) -> f64 {
    summary["probe_info"]["cpu_percent_of_a_core"]
        .as_f64()
        .expect("the probe's cost")
}

fn held_cost(python: &Path, held: bool) -> (f64, usize, f64) {
    let (summary, saved) = record(python, FOLD, "8", ("WEIGHTSCOPE_PROBE_HELD", held));
    let walks = saved["stacks"]["held"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let millis: f64 = walks.iter().filter_map(|w| w["millis"].as_f64()).sum();
    (percent(&summary), walks.len(), millis)
}

fn cost(python: &Path, stacks: bool, seconds: &str) -> (f64, usize) {
    let (summary, _) = record(python, JOB, seconds, ("WEIGHTSCOPE_PROBE_STACKS", stacks));
    let depth = summary["peak_stack"].as_array().map_or(0, Vec::len);
    (percent(&summary), depth)
}

fn main() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv/bin/python");
    assert!(python.exists(), "run `mlx-glue/setup test` first");
    let seconds = std::env::var("PROBE_BENCH_SECS").unwrap_or_else(|_| "5".into());
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut depth = 0;
    // Alternated, three rounds: medians.
    for _ in 0..3 {
        let (w, d) = cost(&python, true, &seconds);
        with.push(w);
        depth = depth.max(d);
        without.push(cost(&python, false, &seconds).0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (w, wo) = (median(&mut with), median(&mut without));
    println!("probe cost, {seconds} s job at 20 Hz, stacks {depth} frames deep (median of 3)");
    println!("  with stacks:    {w:.3} % of a core");
    println!("  without stacks: {wo:.3} % of a core");
    println!(
        "  stacks add:     {:.3} % of a core ({:.2}x the probe without them)",
        w - wo,
        w / wo.max(1e-9)
    );
    let mut with = Vec::new();
    let mut without = Vec::new();
    let (mut walks, mut millis) = (0, 0.0);
    for _ in 0..3 {
        let (w, n, ms) = held_cost(&python, true);
        with.push(w);
        walks = n;
        millis = ms;
        without.push(held_cost(&python, false).0);
    }
    let (w, wo) = (median(&mut with), median(&mut without));
    println!("held-by walks, a fold of 8 shards importing mlx_lm and transformers (median of 3)");
    println!(
        "  with walks:    {w:.3} % of a core ({walks} walks, {millis:.1} ms in all, last run)"
    );
    println!("  without walks: {wo:.3} % of a core");
    println!("  walks add:     {:.3} % of a core", w - wo);
}
