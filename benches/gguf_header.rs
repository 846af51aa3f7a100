//! Benchmark: reading a GGUF file's header, against llama.cpp's own
//! gguf-py `GGUFReader` on the same file, in the same run.
//!
//! The file is shaped like a Qwen3-8B `Q4_K_M` conversion: a 151,936-token
//! vocabulary and 151,387 merges (string arrays), a token-type array, and
//! 399 tensors (36 layers: `Q4_K` and `Q6_K` weights, F32 norms) with their real
//! shapes; the data section is a hole (sparse), since only the header is
//! read. Times, best of several:
//! - `GGUFReader(path)` in Python (in-process: it reads the header and maps
//!   every tensor);
//! - `GgufHeader::read` in-process;
//! - `weightscope inspect --json` as a whole process.
//!
//! Needs the test venv (`mlx-glue/setup test`: gguf-py 0.19.0 pinned).
//! Run with `cargo bench --bench gguf_header` (`GGUF_BENCH_KEEP=1` keeps the
//! files it writes, for profiling).

mod common;

use common::{best_of, ms};

use std::path::Path;
use std::process::Command;

use weightscope::checkpoint::gguf::GgufHeader;

const WRITE: &str = r#"
import os, sys
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T, GGML_QUANT_SIZES
path = sys.argv[1]
w = GGUFWriter(path, "qwen3")
w.add_name("Qwen3-8B-shaped")
w.add_block_count(36)
w.add_context_length(40960)
w.add_token_list([f"token{i}" for i in range(151936)])
w.add_token_types([1] * 151936)
w.add_token_merges([f"m{i} n{i}" for i in range(151387)])
hidden, inter, heads, kv, dim = 4096, 12288, 32, 8, 128
def info(name, shape, kind):
    if kind == T.F32:
        w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        return
    values, size = GGML_QUANT_SIZES[kind]
    # gguf-py takes a quantized tensor's shape in bytes.
    byte_shape = (*shape[:-1], shape[-1] // values * size)
    n = int(np.prod(byte_shape))
    w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), n, raw_dtype=kind)
info("token_embd.weight", (151936, hidden), T.Q4_K)
for b in range(36):
    p = f"blk.{b}."
    info(p + "attn_norm.weight", (hidden,), T.F32)
    info(p + "attn_q.weight", (heads * dim, hidden), T.Q4_K)
    info(p + "attn_k.weight", (kv * dim, hidden), T.Q4_K)
    info(p + "attn_v.weight", (kv * dim, hidden), T.Q6_K)
    info(p + "attn_output.weight", (hidden, heads * dim), T.Q4_K)
    info(p + "attn_q_norm.weight", (dim,), T.F32)
    info(p + "attn_k_norm.weight", (dim,), T.F32)
    info(p + "ffn_norm.weight", (hidden,), T.F32)
    info(p + "ffn_gate.weight", (inter, hidden), T.Q4_K)
    info(p + "ffn_up.weight", (inter, hidden), T.Q4_K)
    info(p + "ffn_down.weight", (hidden, inter), T.Q6_K)
info("output_norm.weight", (hidden,), T.F32)
info("output.weight", (151936, hidden), T.Q6_K)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_ti_data_to_file()
w.close()
"#;

/// The inspect bench's 163-shard layout (90k tensors) as one GGUF file:
/// the same names and shapes, `BF16` and `F32` as themselves, `F8_E4M3` as
/// `I8` (GGUF has no FP8); the data section a hole.
const WRITE_LAYOUT: &str = r#"
import json, os, struct, sys
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T
src, path = sys.argv[1], sys.argv[2]
w = GGUFWriter(path, "deepseek2")
for f in sorted(f for f in os.listdir(src) if f.endswith(".safetensors")):
    with open(os.path.join(src, f), "rb") as h:
        n = struct.unpack("<Q", h.read(8))[0]
        header = json.loads(h.read(n))
    for name, t in header.items():
        if name == "__metadata__":
            continue
        shape = tuple(t["shape"])
        count = int(np.prod(shape))
        if t["dtype"] == "F32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), count * 4)
        elif t["dtype"] == "BF16":
            byte_shape = (*shape[:-1], shape[-1] * 2)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), count * 2, raw_dtype=T.BF16)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.int8), count)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_ti_data_to_file()
w.close()
"#;

const READ: &str = r"
import sys, time
from gguf import GGUFReader
best = None
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    r = GGUFReader(sys.argv[1])
    n = len(r.tensors)
    e = time.perf_counter() - t
    best = e if best is None else min(best, e)
print(best * 1e3, n)
";

fn main() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv/bin/python");
    if !python.exists() {
        println!(
            "gguf_header: skipped: {} is missing (run mlx-glue/setup test)",
            python.display()
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("qwen3-8b-shaped.gguf");
    let header = write_sparse(&python, WRITE, &[], &path);
    let runs = 5;
    let output = Command::new(&python)
        .args(["-c", READ])
        .arg(&path)
        .arg(runs.to_string())
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let python_ms: f64 = text
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "GGUFReader failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let ours = best_of(runs, || {
        let header = GgufHeader::read(&path).expect("read");
        std::hint::black_box(header.tensors.len());
    });
    let process = best_of(runs, || {
        let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
            .args(["inspect", "--json"])
            .arg(&path)
            .output()
            .expect("runs");
        assert!(out.status.success());
    });
    println!(
        "GGUF header ({} tensors, 151,936-token vocabulary, {:.1} MiB of header): gguf-py GGUFReader {python_ms:.1} ms, weightscope {:.2} ms in-process ({:.0}x faster), `inspect --json` process {:.1} ms",
        header.tensors.len(),
        header.header_bytes as f64 / f64::from(1 << 20),
        ms(ours),
        python_ms / ms(ours).max(1e-9),
        ms(process)
    );
    per_tensor(&python, dir.path());
    // GGUF_BENCH_KEEP=1 keeps the files (for profiling): the folder is printed.
    if std::env::var_os("GGUF_BENCH_KEEP").is_some() {
        println!("kept in {}", dir.keep().display());
    }
}

/// `inspect --json` of the inspect bench's 90k-tensor layout as one GGUF
/// file against the same layout as 163 safetensors shards: time a tensor,
/// best of alternating rounds.
fn per_tensor(python: &Path, dir: &Path) {
    let shards = dir.join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    let tensors = common::generate(&shards);
    let gguf = dir.join("layout.gguf");
    let header = write_sparse(python, WRITE_LAYOUT, &[&shards], &gguf);
    assert_eq!(header.tensors.len(), tensors);
    let inspect = |path: &Path| {
        best_of(3, || {
            let out = Command::new(env!("CARGO_BIN_EXE_weightscope"))
                .args(["inspect", "--json"])
                .arg(path)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("runs");
            assert!(out.success());
        })
    };
    let (mut safetensors, mut single) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        safetensors = safetensors.min(ms(inspect(&shards)));
        single = single.min(ms(inspect(&gguf)));
    }
    let per = |total: f64| total * 1e3 / tensors as f64;
    println!(
        "{tensors} tensors, `inspect --json` process: 163 safetensors shards {safetensors:.1} ms ({:.2} us a tensor), one GGUF file {single:.1} ms ({:.2} us a tensor): GGUF / safetensors {:.2}",
        per(safetensors),
        per(single),
        single / safetensors
    );
}

/// Runs gguf-py's `script` with `args` then `path` (where it writes the
/// file), and gives the file the data section its tensors claim, as a hole
/// (the header is read before: `GgufHeader::read` checks the data is
/// there). Returns the header.
fn write_sparse(python: &Path, script: &str, args: &[&Path], path: &Path) -> GgufHeader {
    let status = Command::new(python)
        .args(["-c", script])
        .args(args)
        .arg(path)
        .status()
        .expect("python runs");
    assert!(
        status.success(),
        "gguf-py could not write {}",
        path.display()
    );
    let file = std::fs::File::open(path).expect("open");
    let header = GgufHeader::from_reader(std::io::BufReader::new(file)).expect("our reader");
    let end = header
        .tensors
        .iter()
        .map(|t| t.offset + t.bytes)
        .max()
        .unwrap_or(0);
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(end))
        .expect("sparse data");
    header
}
