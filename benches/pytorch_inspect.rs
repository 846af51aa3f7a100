//! Benchmark: `weightscope inspect --json` of a sharded `.bin` folder
//! against `torch.load(..., weights_only=True)` of the same files, in the
//! same run (Debian's torch 1.13 in the torch test venv).
//!
//! The folder is a Llama-shaped state dict (hidden 2048, FFN 5632, 12
//! layers, a 32,000-token vocabulary, bf16: 0.75B parameters, 1.5 GB)
//! written by `torch.save` in two shards with their index, as
//! `save_pretrained(safe_serialization=False)` lays them out. torch.load
//! reads every storage's bytes; weightscope reads the pickles and the zip
//! directories only. Both with the files in the page cache (each is run
//! once before it is timed); best of several, alternating.
//!
//! Run with `cargo bench --bench pytorch_inspect` (needs `mlx-glue/setup
//! test`).

mod common;

use common::{best_of, ms};

use std::path::Path;
use std::process::Command;

const WRITE: &str = r#"
import collections, json, sys, torch
from pathlib import Path
out = Path(sys.argv[1]); out.mkdir(exist_ok=True)
hidden, ffn, layers, vocab = 2048, 5632, 12, 32000
sd = collections.OrderedDict()
sd["model.embed_tokens.weight"] = torch.zeros(vocab, hidden, dtype=torch.bfloat16)
for i in range(layers):
    p = f"model.layers.{i}."
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        sd[p + f"self_attn.{proj}.weight"] = torch.zeros(hidden, hidden, dtype=torch.bfloat16)
    sd[p + "mlp.gate_proj.weight"] = torch.zeros(ffn, hidden, dtype=torch.bfloat16)
    sd[p + "mlp.up_proj.weight"] = torch.zeros(ffn, hidden, dtype=torch.bfloat16)
    sd[p + "mlp.down_proj.weight"] = torch.zeros(hidden, ffn, dtype=torch.bfloat16)
    sd[p + "input_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    sd[p + "post_attention_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
sd["model.norm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
sd["lm_head.weight"] = torch.zeros(vocab, hidden, dtype=torch.bfloat16)
names = list(sd)
half = len(names) // 2
weight_map = {}
for k, part in enumerate((names[:half], names[half:]), start=1):
    file = f"pytorch_model-{k:05d}-of-00002.bin"
    torch.save(collections.OrderedDict((n, sd[n]) for n in part), out / file)
    weight_map.update({n: file for n in part})
total = sum(t.numel() * 2 for t in sd.values())
(out / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
print(len(sd))
"#;

const LOAD: &str = r"
import sys, time, torch
from pathlib import Path
files = sorted(Path(sys.argv[1]).glob('*.bin'))
best = None
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    n = 0
    for f in files:
        n += len(torch.load(f, map_location='cpu', weights_only=True))
    e = time.perf_counter() - t
    best = e if best is None else min(best, e)
print(best * 1e3, n)
";

fn main() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv-torch/bin/python");
    if !python.exists() {
        println!(
            "pytorch_inspect: skipped: {} is missing (run mlx-glue/setup test)",
            python.display()
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("llama-bin");
    let written = Command::new(&python)
        .args(["-c", WRITE])
        .arg(&folder)
        .output()
        .expect("python runs");
    assert!(
        written.status.success(),
        "torch.save failed: {}",
        String::from_utf8_lossy(&written.stderr)
    );
    let tensors: usize = String::from_utf8_lossy(&written.stdout)
        .trim()
        .parse()
        .expect("a count");
    let inspect = || {
        best_of(3, || {
            let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
                .args(["inspect", "--json"])
                .arg(&folder)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("runs");
            assert!(out.success());
        })
    };
    let load = || {
        let out = Command::new(&python)
            .args(["-c", LOAD])
            .arg(&folder)
            .arg("2")
            .output()
            .expect("python runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text.split_whitespace();
        let millis: f64 = parts
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "torch.load failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let n: usize = parts.next().and_then(|t| t.parse().ok()).unwrap_or(0);
        assert_eq!(n, tensors, "torch.load read every tensor");
        millis
    };
    // Warm: both read once before they are timed.
    inspect();
    load();
    let (mut ours, mut torch) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        ours = ours.min(ms(inspect()));
        torch = torch.min(load());
    }
    let bytes: u64 = std::fs::read_dir(&folder)
        .expect("folder")
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "sharded .bin folder ({tensors} tensors, 2 shards, {:.2} GB): torch.load(weights_only=True) of every shard {torch:.1} ms, `weightscope inspect --json` process {ours:.1} ms: {:.1}x faster",
        bytes as f64 / 1e9,
        torch / ours.max(1e-9)
    );
}
