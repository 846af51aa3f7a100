//! Benchmark: what recording from the window costs the job.
//!
//! The same Python job (MLX matrix products on every core for a few
//! seconds) is run three ways in this run, each five times, and times
//! itself (`time.perf_counter` around its work, written to a FIFO the
//! benchmark reads, so nothing here polls):
//!
//! - alone (the reference);
//! - under `weightscope record` (the CLI);
//! - recorded from the real window: `weightscope` on the demo under Xvfb
//!   (software OpenGL: every frame drawn costs the job's cores), the
//!   command typed into the palette's "Record a command" form with
//!   `xdotool`, as a user would, while the live plot redraws.
//!
//! Prints the median of each and of the window's against the CLI's within
//! a round (the goal is at most 1.10). Needs Xvfb (`xvfb-run`), `xdotool` and the test venv
//! (`mlx-glue/dev test` makes it; `apt-get install xdotool`). Run with
//! `cargo bench --bench record_window`.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The job: matrix products for a fixed amount of work, then its own wall
/// time written to `argv[1]`.
const JOB: &str = r"
import sys, time
import mlx.core as mx

start = time.perf_counter()
x = mx.random.normal((512, 512))
kept = []
for i in range(int(sys.argv[2])):
    y = (x @ x) / 512.0
    mx.eval(y)
    if i % 10 == 0:
        kept.append(mx.ones((1024, 1024)))
        mx.eval(kept[-1])
    if len(kept) > 8:
        kept.clear()
wall = time.perf_counter() - start
with open(sys.argv[1], 'w') as out:
    out.write(repr(wall))
";

/// Matrix products per run: about five seconds here (MLX's CPU matrix
/// product runs on one core on this machine).
const STEPS: &str = "100";

fn main() {
    if std::env::var_os("DISPLAY").is_none() {
        // Run again under a fresh X server of its own.
        let Ok(status) = Command::new("xvfb-run")
            .args(["-a", "-s", "-screen 0 1400x900x24"])
            .arg(std::env::current_exe().expect("this benchmark"))
            .args(std::env::args_os().skip(1))
            .status()
        else {
            println!("record_window: skipped (no xvfb-run; apt-get install xvfb)");
            return;
        };
        std::process::exit(status.code().unwrap_or(1));
    }
    if Command::new("xdotool").arg("version").output().is_err() {
        println!("record_window: skipped (no xdotool; apt-get install xdotool)");
        return;
    }
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv/bin/python");
    if !python.exists() {
        println!("record_window: skipped (no test venv; run `mlx-glue/dev test` once)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let job = dir.path().join("job.py");
    std::fs::write(&job, JOB).expect("job written");
    let bench = Bench {
        dir: dir.path().to_path_buf(),
        python,
        job,
    };

    let mut alone = Vec::new();
    let mut cli = Vec::new();
    let mut window = Vec::new();
    let mut ratios = Vec::new();
    // Interleaved, so that a slow minute of the machine falls on all three;
    // each round's window/CLI ratio is taken within the round.
    for round in 0..ROUNDS {
        alone.push(bench.alone(round));
        cli.push(bench.cli(round));
        window.push(bench.window(round));
        ratios.push(window[round] / cli[round]);
        println!(
            "round {round}: alone {:.2} s, CLI {:.2} s, window {:.2} s",
            alone[round], cli[round], window[round]
        );
    }
    let (alone, cli, window) = (median(alone), median(cli), median(window));
    println!("job alone:                       {alone:6.2} s (median of {ROUNDS})");
    println!(
        "job under `weightscope record`:  {cli:6.2} s ({:.3} of alone)",
        cli / alone
    );
    println!(
        "job recorded from the window:    {window:6.2} s ({:.3} of alone)",
        window / alone
    );
    println!(
        "window / CLI, median of rounds:  {:6.3} (goal <= 1.10)",
        median(ratios)
    );
}

/// Rounds of the three runs.
const ROUNDS: usize = 5;

struct Bench {
    dir: PathBuf,
    python: PathBuf,
    job: PathBuf,
}

impl Bench {
    /// A fresh FIFO the job writes its wall time to.
    fn fifo(&self, name: &str) -> PathBuf {
        let path = self.dir.join(name);
        let _ = std::fs::remove_file(&path);
        let status = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
        assert!(status.success(), "mkfifo");
        path
    }

    /// Reads the job's wall time: blocks until the job writes it, or fails
    /// after two minutes (the job never started).
    fn wall(fifo: &Path) -> f64 {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.to_path_buf();
        std::thread::spawn(move || {
            let mut text = String::new();
            let read = std::fs::File::open(&path).and_then(|mut f| f.read_to_string(&mut text));
            let _ = tx.send(read.map(|_| text));
        });
        let text = rx
            .recv_timeout(std::time::Duration::from_mins(2))
            .unwrap_or_else(|_| panic!("no time from the job in 120 s ({})", fifo.display()))
            .expect("the job's time");
        text.trim().parse().expect("seconds")
    }

    fn alone(&self, round: usize) -> f64 {
        let fifo = self.fifo(&format!("alone{round}"));
        let mut child = Command::new(&self.python)
            .arg(&self.job)
            .arg(&fifo)
            .arg(STEPS)
            .stdin(Stdio::null())
            .spawn()
            .expect("python");
        let wall = Self::wall(&fifo);
        assert!(child.wait().expect("job").success(), "the job ran");
        wall
    }

    fn cli(&self, round: usize) -> f64 {
        let fifo = self.fifo(&format!("cli{round}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_weightscope"))
            .args(["record", "--json"])
            .arg(self.dir.join(format!("cli{round}.json")))
            .arg("--")
            .arg(&self.python)
            .arg(&self.job)
            .arg(&fifo)
            .arg(STEPS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("weightscope record");
        let wall = Self::wall(&fifo);
        assert!(child.wait().expect("record").success(), "the job ran");
        wall
    }

    fn window(&self, round: usize) -> f64 {
        let fifo = self.fifo(&format!("window{round}"));
        let home = self.dir.join(format!("home{round}"));
        std::fs::create_dir_all(&home).expect("home");
        // A fresh home: no saved settings or recent checkpoints.
        let app = Command::new(env!("CARGO_BIN_EXE_weightscope"))
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the window");
        let app = Killed(app);
        let id = xdotool(&[
            "search",
            "--sync",
            "--onlyvisible",
            "--name",
            "^weightscope",
        ]);
        let id = id.lines().next().expect("a window id").to_owned();
        xdotool(&["windowfocus", "--sync", &id]);
        let line = format!(
            "{} {} {} {STEPS}",
            self.python.display(),
            self.job.display(),
            fifo.display()
        );
        xdotool(&["key", "ctrl+k"]);
        xdotool(&["type", "record a command"]);
        xdotool(&["key", "Return"]);
        // A user's pause before typing into the form: letters sent in the
        // very batch of events that holds Enter would reach the palette.
        std::thread::sleep(std::time::Duration::from_millis(300));
        xdotool(&["type", &line]);
        xdotool(&["key", "Return"]);
        let wall = Self::wall(&fifo);
        drop(app);
        wall
    }
}

/// Kills the window when the round ends (or the benchmark fails).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn xdotool(args: &[&str]) -> String {
    let out = Command::new("xdotool")
        .args(args)
        .output()
        .expect("xdotool");
    assert!(out.status.success(), "xdotool {args:?}: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
