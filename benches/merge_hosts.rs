//! Benchmark: `report`'s merge of one distributed job's journals (and
//! `export`'s, which is the same), against reading the same files' bytes in
//! the same run. Two shapes, written here as `record` writes them (JSON
//! traces with an origin, 20 Hz samples with MLX figures, a collective
//! every second on every rank):
//! - 300 journals of 30 s (a 300-rank job, or many restarts);
//! - 2 journals of one hour.
//!
//! Goals (issue #61): under 2 s and under 1 s, memory by the lanes.
//! Run with `cargo bench --bench merge_hosts`.

mod common;

use common::{best_of, ms};

use std::path::{Path, PathBuf};

use weightscope::memory::{MarkKind, MlxFigures, ProcessFigures, Sample};
use weightscope::profile::trace::collective_detail;
use weightscope::profile::{JobInfo, Origin, Trace, TraceEvent};

/// One rank's journal: `secs` seconds at 20 Hz, a collective a second.
fn journal(dir: &Path, rank: u32, world: u32, secs: u32) -> PathBuf {
    let mut trace = Trace::new(format!("rank {rank}"));
    trace.job = Some(JobInfo::default());
    trace.origin = Some(Origin {
        host: format!("host{}", rank / 8),
        wall_unix_secs: 1_700_000_000.0 + f64::from(rank % 7) * 0.01,
        rank: Some(rank),
        world_size: Some(world),
    });
    let samples = secs * 20;
    trace.samples = (0..samples)
        .map(|k| {
            let at = f64::from(k) / 20.0;
            let active = (1u64 << 30) + u64::from((k * 7919 + rank * 104_729) % 4096) * (1 << 20);
            Sample {
                at,
                process: ProcessFigures {
                    rss_bytes: active + (512 << 20),
                    ..ProcessFigures::default()
                },
                mlx: Some(MlxFigures {
                    active_bytes: active,
                    ..MlxFigures::default()
                }),
                gpu: None,
            }
        })
        .collect();
    for step in 0..u64::from(secs) {
        let wait = step as f64 + 0.5 + f64::from(rank % 5) * 0.002;
        for (kind, t) in [
            (MarkKind::CollectiveWait, wait),
            (
                MarkKind::CollectiveDone,
                wait + 0.01 + f64::from(rank % 3) * 0.001,
            ),
        ] {
            let mut event = TraceEvent::bare(t, kind, "all_sum".into());
            event.detail = collective_detail(Some(rank), step);
            trace.events.push(event);
        }
    }
    let path = dir.join(format!("rank-{rank}.json"));
    trace
        .save(&weightscope::files::check_output(&path, &[]).expect("output"))
        .expect("save");
    path
}

fn run(name: &str, journals: u32, secs: u32, goal_secs: f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths: Vec<PathBuf> = (0..journals)
        .map(|r| journal(dir.path(), r, journals, secs))
        .collect();
    let bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let read = best_of(3, || {
        for p in &paths {
            std::hint::black_box(std::fs::read(p).expect("read"));
        }
    });
    let mut lanes = 0;
    let merged = best_of(3, || {
        let m = weightscope::profile::analysis::journals::merge_journals(
            &paths,
            weightscope::profile::analysis::journals::ShownLane::Peak,
        )
        .expect("merge");
        lanes = m.lanes.len() + 1;
    });
    println!(
        "{name}: {journals} journals x {secs} s ({:.1} MB): merged in {:.1} ms ({:.2} s; goal {goal_secs} s), reading their bytes {:.1} ms, ratio {:.1}; {lanes} lanes",
        bytes as f64 / 1e6,
        ms(merged),
        merged.as_secs_f64(),
        ms(read),
        merged.as_secs_f64() / read.as_secs_f64().max(1e-9),
    );
}

fn main() {
    run("many ranks", 300, 30, 2.0);
    run("two hours", 2, 3600, 1.0);
}
