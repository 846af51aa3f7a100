//! Issue #58: a job recorded from the window is recorded as the CLI records
//! it. The window runs the typed line through `sh -c`, so the job is a
//! shell's child; on a loaded machine the recorder's samples of that tree
//! took longer than the interval and the probe's lines waited behind them:
//! the MLX series froze while the job grew, and the findings took the
//! difference for host memory.

use crate::common;

use egui_kittest::kittest::Queryable;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use weightscope::memory::Sample;
use weightscope::weights::demo;

const MIB: u64 = 1 << 20;
/// One shard of the job's checkpoint: two 4096 x 8192 float32 tensors.
const SHARD: u64 = 256 * MIB;

/// Two processes that spin until dropped: the loaded machine.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start() -> Self {
        Self(
            (0..2)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("a CPU hog")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// The MLX series never stays behind RSS: at each sample with MLX's
/// figures, the anonymous memory beyond them is what it was at the first
/// (Python and MLX's own), give or take a shard. A frozen series left
/// gigabytes of the job's arrays "beyond MLX".
fn assert_mlx_keeps_up(who: &str, samples: &[(f64, u64, Option<u64>)]) {
    let with: Vec<(f64, u64, u64)> = samples
        .iter()
        .filter_map(|&(t, anon, mlx)| mlx.map(|m| (t, anon, m)))
        .collect();
    assert!(with.len() >= 10, "{who}: {} samples with MLX", with.len());
    let base = with[0].1.saturating_sub(with[0].2);
    for &(t, anon, mlx) in &with {
        let beyond = anon.saturating_sub(mlx);
        assert!(
            beyond <= base + SHARD,
            "{who}: at {t:.2} s RSS anonymous {} MiB, MLX {} MiB: the series stayed behind",
            anon / MIB,
            mlx / MIB
        );
    }
    // And no stretch without figures between the first and the last.
    let first = samples.iter().position(|s| s.2.is_some()).unwrap_or(0);
    let last = samples.iter().rposition(|s| s.2.is_some()).unwrap_or(0);
    let missing = samples[first..=last]
        .iter()
        .filter(|s| s.2.is_none())
        .count();
    assert!(missing <= 1, "{who}: {missing} samples without MLX figures");
}

fn kinds(findings: impl Iterator<Item = String>) -> Vec<String> {
    let mut kinds: Vec<String> = findings.collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

#[test]
#[allow(clippy::too_many_lines)] // one scripted comparison, read top to bottom
fn a_job_recorded_from_the_window_under_load_equals_the_clis_recording() {
    let _lock = common::mlx_memory_lock();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = common::venv_python();
    let jobs = root.join("tests/record/jobs.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = dir.path().join("ck");
    // 8 shards of 256 MiB: the job keeps all of them (2 GiB).
    let made = Command::new(&python)
        .arg(&jobs)
        .args(["make"])
        .arg(&checkpoint)
        .args(["8", "4096", "8192"])
        .status()
        .expect("python runs");
    assert!(made.success());
    let hogs = Hogs::start();

    // The CLI, as a user runs it.
    let json = dir.path().join("cli.json");
    let cli = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["record", "--interval-ms", "50", "--json"])
        .arg(&json)
        .arg("--")
        .arg(&python)
        .arg(&jobs)
        .arg("keep")
        .arg(&checkpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("weightscope record");
    assert!(cli.success());
    let cli: Value = serde_json::from_slice(&std::fs::read(&json).expect("summary")).expect("JSON");

    // The window: the line typed into "Record a command…" (run by sh -c).
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = crate::window_on(&demo, egui::vec2(1400.0, 860.0));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();
    harness.get_by_label("Record a command…").click();
    harness.run();
    let line = crate::typed_line(&[
        python.as_os_str(),
        jobs.as_os_str(),
        "keep".as_ref(),
        checkpoint.as_os_str(),
    ]);
    crate::start_in_form(&mut harness, &line);
    assert!(crate::hooks(&mut harness).wait_for_recording());
    drop(hogs);
    let (window, window_findings) = crate::hooks(&mut harness)
        .last_recording()
        .expect("a recording");
    assert_eq!(
        window.exit,
        Some(weightscope::profile::analysis::recording::JobExit::Code(0))
    );

    // The same peak (MLX's own counter, read by the probe in both).
    let cli_peak = cli["peak_mlx_active_bytes"].as_u64().expect("peak");
    let window_peak = window.peak_mlx_active_bytes.expect("an MLX peak");
    assert!(
        cli_peak.abs_diff(window_peak) <= MIB,
        "CLI {cli_peak}, window {window_peak}"
    );
    assert!(
        cli_peak >= 8 * SHARD,
        "the job kept every shard: {cli_peak}"
    );
    // MLX series that keep up with RSS, in both.
    let cli_samples: Vec<(f64, u64, Option<u64>)> = cli["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            (
                s["t"].as_f64().unwrap_or(0.0),
                s["rss_anon"].as_u64().unwrap_or(0),
                s["mlx_active"].as_u64(),
            )
        })
        .collect();
    let window_samples: Vec<(f64, u64, Option<u64>)> = window
        .samples
        .iter()
        .map(|s: &Sample| (s.at, s.process.anon_bytes, s.mlx.map(|m| m.active_bytes)))
        .collect();
    assert_mlx_keeps_up("CLI", &cli_samples);
    assert_mlx_keeps_up("window", &window_samples);
    // The same findings (by kind: their lines and times differ by a
    // sample), none of them about host memory or a gap.
    let cli_kinds = kinds(
        cli["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter_map(|f| f["code"].as_str().map(str::to_owned)),
    );
    let window_kinds = kinds(window_findings.iter().map(|f| {
        serde_json::to_value(f.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }));
    assert_eq!(cli_kinds, window_kinds);
    assert!(
        !window_kinds
            .iter()
            .any(|k| k == "host-copies" || k == "mlx-gap"),
        "{window_kinds:?}"
    );
}
