//! Benchmark: what recording costs a job, against the job alone and against
//! memray, in the same run (issue #57).
//!
//! Four Python jobs, each run bare, under `weightscope record` (the probe
//! sampling at 20 Hz, its held-by walks on) and under `memray run`, five
//! rounds alternated; prints each job's median wall time and its ratio to
//! bare, and the probe's own CPU as a share of one core (its sampling thread
//! and its walks measure themselves):
//! - `fold`: keeps 8 shards of 32 MiB of MLX arrays, a new high every half
//!   second (so the probe walks as often as it may);
//! - `dict`: a dict of 10^6 small Python objects beside growing MLX arrays
//!   (the walk's budget against a big container);
//! - `tiny`: 10^6 tiny MLX arrays in a list;
//! - `descriptors`: 18,000 open descriptors (this machine's hard limit is
//!   20,000) and a shard, while MLX works.
//!
//! Goal: recorded under 1 % of a core and under 2 % of the job's wall time
//! for each, and below memray's on every job.
//! Run with `cargo bench --bench job_cost` after `mlx-glue/setup test`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const JOBS: &[(&str, &str)] = &[
    (
        "fold",
        r"
import time
import mlx.core as mx
kept = []
for i in range(8):
    w = {'layers.%d.%d' % (i, j): mx.ones((1024, 1024)) for j in range(8)}
    mx.eval(list(w.values()))
    kept.append(w)
    end = time.monotonic() + 0.5
    x = mx.ones((128, 128))
    while time.monotonic() < end:
        x = (x @ x) / 128.0
        mx.eval(x)
print(len(kept))
",
    ),
    (
        "dict",
        r"
import time
import mlx.core as mx
objects = {i: (i, str(i)) for i in range(10**6)}
kept = []
for i in range(6):
    kept.append(mx.ones((1024, 1024)) * i)
    mx.eval(kept[-1])
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        mx.eval(mx.ones((64, 64)) @ mx.ones((64, 64)))
print(len(objects), len(kept))
",
    ),
    (
        "tiny",
        r"
import mlx.core as mx
tiny = [mx.array(i) for i in range(10**6)]
mx.eval(tiny[:1000])
print(len(tiny))
",
    ),
    (
        "descriptors",
        r"
import os, sys, time
import mlx.core as mx
held = [os.open('/dev/null', os.O_RDONLY) for _ in range(18000)]
shard = open(sys.argv[1], 'rb')
end = time.monotonic() + 3.0
x = mx.ones((128, 128))
while time.monotonic() < end:
    x = (x @ x) / 128.0
    mx.eval(x)
print(len(held))
",
    ),
];

/// Rounds of each job in each mode, alternated: the medians of five hold
/// on a loaded machine where those of three moved by a few percent.
const ROUNDS: usize = 5;

/// How a job is run.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Bare,
    Record,
    Memray,
}

/// Runs `file` (with `arg`) in `mode`; its wall time in seconds and, when
/// recorded, the probe's own CPU in % of a core.
fn run(venv: &Path, file: &Path, arg: &Path, mode: Mode, out: &Path) -> (f64, Option<f64>) {
    let python = venv.join("bin/python");
    let mut cmd = match mode {
        Mode::Bare => Command::new(&python),
        Mode::Record => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_weightscope"));
            c.args(["record", "--interval-ms", "50", "--json"])
                .arg(out.join("summary.json"))
                .arg("--")
                .arg(&python);
            c
        }
        Mode::Memray => {
            let mut c = Command::new(venv.join("bin/memray"));
            c.args(["run", "--force", "-q", "-o"])
                .arg(out.join("memray.bin"));
            c
        }
    };
    cmd.arg(file)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let status = cmd.status().expect("the job starts");
    let secs = started.elapsed().as_secs_f64();
    assert!(status.success(), "the job ran");
    let probe = (mode == Mode::Record).then(|| {
        let text = std::fs::read_to_string(out.join("summary.json")).expect("summary");
        let summary: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        summary["probe_info"]["cpu_percent_of_a_core"]
            .as_f64()
            .unwrap_or(0.0)
    });
    (secs, probe)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv");
    assert!(
        venv.join("bin/memray").exists(),
        "run `mlx-glue/setup test` first (the test venv with memray)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // A 32 MiB file for the descriptors job to hold open.
    let shard = dir.path().join("model.safetensors");
    std::fs::write(&shard, vec![0u8; 32 << 20]).expect("shard");
    println!("job          bare s   recorded s (ratio)   memray s (ratio)   probe % of a core");
    for (name, source) in JOBS {
        let file = dir.path().join(format!("{name}.py"));
        std::fs::write(&file, source).expect("job written");
        let (mut bare, mut recorded, mut memray, mut probe) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            bare.push(run(&venv, &file, &shard, Mode::Bare, dir.path()).0);
            let (secs, cost) = run(&venv, &file, &shard, Mode::Record, dir.path());
            recorded.push(secs);
            probe.push(cost.unwrap_or(0.0));
            memray.push(run(&venv, &file, &shard, Mode::Memray, dir.path()).0);
        }
        let (b, r, m, p) = (
            median(bare),
            median(recorded),
            median(memray),
            median(probe),
        );
        println!(
            "{name:<12} {b:>6.2}   {r:>6.2} ({:>5.3})       {m:>6.2} ({:>5.3})     {p:.2}",
            r / b,
            m / b
        );
    }
}
