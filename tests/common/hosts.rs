//! One distributed job recorded as if on four hosts (see
//! `tests/plain/hosts.rs`): four ranks started by hand as `mlx.launch`
//! starts them on each host, over MLX's ring backend on loopback, each
//! under its own `weightscope record` writing its own journal; rank 2's
//! wall clock shifted 7 s.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::venv_python;

/// Four `all_sum` steps; rank 1 comes half a second late to step 2; rank 2
/// keeps 4 MiB more at each step.
const JOB: &str = r"
import time
import mlx.core as mx

def run():
    group = mx.distributed.init(backend='ring', strict=True)
    rank = group.rank()
    kept = []
    for step in range(4):
        x = mx.ones((256, 1024)) * (rank + 1)
        if rank == 1 and step == 2:
            time.sleep(0.5)
        if rank == 2:
            kept.append(mx.ones((1024, 1024)))
            mx.eval(kept[-1])
        y = mx.distributed.all_sum(x)
        mx.eval(y)
    return float(y[0, 0].item())

print(run())
";

/// The job's ranks (hosts).
pub const RANKS: u32 = 4;

/// `ranks` loopback addresses for the ring, on ports free now.
pub fn hostfile(dir: &Path, ranks: u32) -> std::path::PathBuf {
    let listeners: Vec<std::net::TcpListener> = (0..ranks)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a port"))
        .collect();
    let hosts: Vec<Vec<String>> = listeners
        .iter()
        .map(|l| vec![l.local_addr().expect("address").to_string()])
        .collect();
    let path = dir.join("hosts.json");
    std::fs::write(&path, serde_json::to_string(&hosts).expect("json")).expect("hostfile");
    path
}

/// Records the [`RANKS`] ranks into `dir` (`rank0.jsonl` …); the journal
/// of each rank by its number.
pub fn rank_journals(dir: &Path) -> impl Fn(u32) -> PathBuf {
    let job = dir.join("job.py");
    std::fs::write(&job, JOB).expect("job");
    let hosts = hostfile(dir, RANKS);
    let journal = |rank: u32| dir.join(format!("rank{rank}.jsonl"));
    let ranks: Vec<std::process::Child> = (0..RANKS)
        .map(|rank: u32| {
            Command::new(env!("CARGO_BIN_EXE_weightscope"))
                .args(["record", "--interval-ms", "20", "--trace"])
                .arg(journal(rank))
                .arg("--")
                .arg(venv_python())
                .arg(&job)
                .env("MLX_RANK", rank.to_string())
                .env("MLX_HOSTFILE", &hosts)
                // Rank 2's host: a clock 7 s ahead.
                .env(
                    "WEIGHTSCOPE_TEST_WALL_SHIFT_SECS",
                    if rank == 2 { "7" } else { "0" },
                )
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("weightscope record")
        })
        .collect();
    for (rank, child) in ranks.into_iter().enumerate() {
        let out = child.wait_with_output().expect("recorded");
        assert!(
            out.status.success(),
            "rank {rank}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dir = dir.to_path_buf();
    move |rank: u32| dir.join(format!("rank{rank}.jsonl"))
}
