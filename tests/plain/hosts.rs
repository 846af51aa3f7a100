//! One distributed job recorded as if on four hosts: four ranks started
//! by hand as `mlx.launch` starts them on each host (`MLX_RANK`,
//! `MLX_HOSTFILE`, MLX's ring backend over loopback), each under its own
//! `weightscope record` writing its own journal, one of them with its
//! wall clock shifted by seconds; `weightscope report` of the three
//! journals reads them as one.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::venv_python;
use serde_json::Value;

/// `weightscope report` of every rank's journal, with `extra` arguments.
fn report(journal: &dyn Fn(u32) -> std::path::PathBuf, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("report")
        .args((0..common::hosts::RANKS).map(journal))
        .args(extra)
        .output()
        .expect("report")
}

#[test]
fn four_hosts_journals_merge_into_one_view_with_the_straggler_and_the_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = common::hosts::rank_journals(dir.path());
    let out = report(&journal, &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let lanes = merged["lanes"].as_array().expect("lanes");
    assert_eq!(lanes.len(), 4);
    for (rank, lane) in lanes.iter().enumerate() {
        assert_eq!(lane["ranks"], serde_json::json!([rank]), "{lane}");
        assert_eq!(lane["steps_matched"], 4, "{lane}");
    }
    // The shifted clock is found from the collectives, within a few ms.
    let offset = lanes[2]["offset_secs"].as_f64().expect("offset");
    assert!((offset + 7.0).abs() < 0.05, "rank 2's clock: {offset}");
    assert!(lanes[1]["offset_secs"].as_f64().expect("offset").abs() < 0.05);
    let residual = merged["residual_secs"].as_f64().expect("aligned");
    // (A busy machine may deschedule one rank between its return and its
    // reading of the clock: the median offset keeps to the bound.)
    assert!(residual < 0.25, "residual {residual}");
    // Rank 1 came last to step 2; the first rank there waited for it. (At
    // other steps a rank may come late too: a busy machine starts the
    // processes unevenly.)
    let straggler = merged["stragglers"]
        .as_array()
        .expect("stragglers")
        .iter()
        .find(|s| s["step"] == 2)
        .unwrap_or_else(|| panic!("step 2: {}", merged["stragglers"]));
    assert_eq!(straggler["rank"], 1, "{straggler}");
    assert_eq!(straggler["ops"], "all_sum", "{straggler}");
    let waited = straggler["waited_secs"].as_f64().expect("waited");
    assert!((0.4..5.0).contains(&waited), "waited {waited}");
    // Rank 2 held the most, at its own line.
    assert_eq!(merged["peak_lane"], 2, "{merged}");
    assert!(lanes[2]["mlx"].as_bool().expect("kind"));
    let at = lanes[2]["peak_where"].as_str().expect("where");
    assert!(at.starts_with("job.py:"), "{at}");
    assert!(merged["stuck"].as_array().expect("stuck").is_empty());
    // In words, as the terminal shows it.
    let out = report(&journal, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("aligned by their collectives"), "{text}");
    assert!(text.contains("straggler: rank "), "{text}");
    assert!(text.contains("highest: rank 2"), "{text}");
    // The rank that peaked highest is told whole after the merged view:
    // its summary, its peak line on the merged clock.
    assert_eq!(merged["shown_lane"], 2, "{merged}");
    let shown = &merged["shown"];
    let rank_of = |shown: &Value| shown["ranks"][0]["rank"].as_u64();
    assert_eq!(rank_of(shown), Some(2), "{}", shown["ranks"]);
    assert!(
        shown["lines"].is_array() && shown["findings"].is_array(),
        "{shown}"
    );
    // On the merged clock: its first sample at its lane's start.
    let first = shown["samples"][0]["t"].as_f64().expect("a sample");
    let start = lanes[2]["start_secs"].as_f64().expect("start");
    assert!((first - start).abs() < 0.5, "{first} vs {start}");
    // Its duration stays a duration (not its end on the merged clock).
    let lasted = shown["elapsed_secs"].as_f64().expect("elapsed");
    let end = lanes[2]["end_secs"].as_f64().expect("end");
    assert!(
        (lasted - (end - start)).abs() < 0.5,
        "{lasted} vs {end} - {start}"
    );
    assert!(
        text.contains("rank 2 (") && text.contains("told whole (its memory peaked highest"),
        "{text}"
    );
    // Another rank, asked for by number.
    let out = report(&journal, &["--rank", "1", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let other: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(other["shown_lane"], 1, "{other}");
    assert_eq!(
        other["lanes"], merged["lanes"],
        "the merged view is the same"
    );
    assert_eq!(
        rank_of(&other["shown"]),
        Some(1),
        "{}",
        other["shown"]["ranks"]
    );
    let text = String::from_utf8_lossy(&report(&journal, &["--rank", "1"]).stdout).into_owned();
    assert!(
        text.contains("\nrank 1 (") && text.contains("told whole (as asked)"),
        "{text}"
    );
    // A rank no journal recorded: one line, exit 2, nothing on stdout.
    let out = report(&journal, &["--rank", "9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("rank 9: no journal recorded it"), "{why}");
    assert_eq!(why.lines().count(), 1, "{why}");
}

/// Three `all_sum` steps; at step 1 rank 1 grows past its memory cgroup's
/// limit before its collective, while the others wait in theirs.
const KILLED_JOB: &str = r"
import mlx.core as mx

def run():
    group = mx.distributed.init(backend='ring', strict=True)
    rank = group.rank()
    grown = []
    for step in range(3):
        x = mx.ones((256, 1024)) * (rank + 1)
        if rank == 1 and step == 1:
            while True:
                grown.append(mx.ones((16, 1024, 1024)))
                mx.eval(grown[-1])
        y = mx.distributed.all_sum(x)
        mx.eval(y)

run()
";

/// A memory cgroup (v1) for one test, with `limit` bytes; `None` (and a
/// message) where there is none to write to.
fn memory_cgroup(name: &str, limit: u64) -> Option<std::path::PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let path = own
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_owned()))?;
    let cgroup = Path::new("/sys/fs/cgroup/memory")
        .join(path.trim_start_matches('/'))
        .join(format!("weightscope-{name}-{}", std::process::id()));
    std::fs::create_dir(&cgroup).ok()?;
    std::fs::write(cgroup.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
    let _ = std::fs::write(
        cgroup.join("memory.memsw.limit_in_bytes"),
        limit.to_string(),
    );
    Some(cgroup)
}

#[test]
fn a_rank_killed_for_memory_is_told_with_the_ranks_it_left_waiting() {
    let Some(cgroup) = memory_cgroup("hosts", 300 << 20) else {
        eprintln!("skipped: no writable cgroup v1 memory controller here");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let job = dir.path().join("job.py");
    std::fs::write(&job, KILLED_JOB).expect("job");
    let hosts = common::hosts::hostfile(dir.path(), common::hosts::RANKS);
    let journal = |rank: u32| dir.path().join(format!("rank{rank}.jsonl"));
    let enter = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cgroup.display());
    let ranks: Vec<std::process::Child> = (0..common::hosts::RANKS)
        .map(|rank: u32| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_weightscope"));
            command
                .args(["record", "--interval-ms", "20", "--trace"])
                .arg(journal(rank))
                .arg("--");
            if rank == 1 {
                // Only rank 1's job goes into the cgroup.
                command.args(["sh", "-c", &enter, "sh"]);
            }
            command
                .arg(venv_python())
                .arg(&job)
                .env("MLX_RANK", rank.to_string())
                .env("MLX_HOSTFILE", &hosts)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("weightscope record")
        })
        .collect();
    for child in ranks {
        // Rank 1 killed; the others fail when their peer is gone.
        let _ = child.wait_with_output().expect("recorded");
    }
    let _ = std::fs::remove_dir(&cgroup);
    let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("report")
        .args((0..common::hosts::RANKS).map(&journal))
        .arg("--json")
        .output()
        .expect("report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let lanes = merged["lanes"].as_array().expect("lanes");
    assert_eq!(lanes[1]["killed"], true, "{merged}");
    assert!(!lanes[0]["killed"].as_bool().expect("killed"), "{merged}");
    let at = lanes[1]["last_where"].as_str().expect("where");
    assert!(at.starts_with("job.py:"), "{at}");
    let waiting: Vec<(u64, u64)> = merged["stuck"]
        .as_array()
        .expect("stuck")
        .iter()
        .map(|s| {
            (
                s["rank"].as_u64().expect("rank"),
                s["step"].as_u64().expect("step"),
            )
        })
        .collect();
    assert_eq!(waiting, [(0, 1), (2, 1), (3, 1)], "{merged}");
    let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("report")
        .args((0..common::hosts::RANKS).map(&journal))
        .output()
        .expect("report");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rank 1 (") && text.contains("was killed for memory at"),
        "{text}"
    );
    assert!(
        text.contains("ranks 0, 2, 3 waited in all_sum (step 1)"),
        "{text}"
    );
}
