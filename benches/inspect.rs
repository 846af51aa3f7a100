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

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weightscope::checkpoint::Checkpoint;

const SHARDS: usize = 163;
const LAYERS: usize = 61;
const DENSE_LAYERS: usize = 3;
const EXPERTS: usize = 256;
const HIDDEN: u64 = 7168;
const MOE_INTER: u64 = 2048;
const DENSE_INTER: u64 = 18432;
const BLOCK: u64 = 128;

struct Spec {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
}

fn fp8_weight(specs: &mut Vec<Spec>, name: &str, rows: u64, cols: u64) {
    specs.push(Spec {
        name: format!("{name}.weight"),
        dtype: "F8_E4M3",
        shape: vec![rows, cols],
    });
    specs.push(Spec {
        name: format!("{name}.weight_scale_inv"),
        dtype: "F32",
        shape: vec![rows.div_ceil(BLOCK), cols.div_ceil(BLOCK)],
    });
}

// One flat list of every tensor reads better than helpers split by block.
#[allow(clippy::too_many_lines)]
fn layout() -> Vec<Spec> {
    let mut specs = vec![Spec {
        name: "model.embed_tokens.weight".into(),
        dtype: "BF16",
        shape: vec![129_280, HIDDEN],
    }];
    for layer in 0..LAYERS {
        let p = format!("model.layers.{layer}");
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            specs.push(Spec {
                name: format!("{p}.{norm}.weight"),
                dtype: "BF16",
                shape: vec![HIDDEN],
            });
        }
        fp8_weight(&mut specs, &format!("{p}.self_attn.q_a_proj"), 1536, HIDDEN);
        fp8_weight(&mut specs, &format!("{p}.self_attn.q_b_proj"), 24_576, 1536);
        fp8_weight(
            &mut specs,
            &format!("{p}.self_attn.kv_a_proj_with_mqa"),
            576,
            HIDDEN,
        );
        fp8_weight(&mut specs, &format!("{p}.self_attn.kv_b_proj"), 32_768, 512);
        fp8_weight(&mut specs, &format!("{p}.self_attn.o_proj"), HIDDEN, 16_384);
        for norm in ["q_a_layernorm", "kv_a_layernorm"] {
            specs.push(Spec {
                name: format!("{p}.self_attn.{norm}.weight"),
                dtype: "BF16",
                shape: vec![if norm == "q_a_layernorm" { 1536 } else { 512 }],
            });
        }
        if layer < DENSE_LAYERS {
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.gate_proj"),
                DENSE_INTER,
                HIDDEN,
            );
            fp8_weight(&mut specs, &format!("{p}.mlp.up_proj"), DENSE_INTER, HIDDEN);
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.down_proj"),
                HIDDEN,
                DENSE_INTER,
            );
            continue;
        }
        specs.push(Spec {
            name: format!("{p}.mlp.gate.weight"),
            dtype: "BF16",
            shape: vec![EXPERTS as u64, HIDDEN],
        });
        specs.push(Spec {
            name: format!("{p}.mlp.gate.e_score_correction_bias"),
            dtype: "F32",
            shape: vec![EXPERTS as u64],
        });
        for e in 0..EXPERTS {
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.experts.{e}.gate_proj"),
                MOE_INTER,
                HIDDEN,
            );
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.experts.{e}.up_proj"),
                MOE_INTER,
                HIDDEN,
            );
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.experts.{e}.down_proj"),
                HIDDEN,
                MOE_INTER,
            );
        }
        fp8_weight(
            &mut specs,
            &format!("{p}.mlp.shared_experts.gate_proj"),
            MOE_INTER,
            HIDDEN,
        );
        fp8_weight(
            &mut specs,
            &format!("{p}.mlp.shared_experts.up_proj"),
            MOE_INTER,
            HIDDEN,
        );
        fp8_weight(
            &mut specs,
            &format!("{p}.mlp.shared_experts.down_proj"),
            HIDDEN,
            MOE_INTER,
        );
    }
    specs.push(Spec {
        name: "model.norm.weight".into(),
        dtype: "BF16",
        shape: vec![HIDDEN],
    });
    specs.push(Spec {
        name: "lm_head.weight".into(),
        dtype: "BF16",
        shape: vec![129_280, HIDDEN],
    });
    specs
}

fn bytes_of(spec: &Spec) -> u64 {
    let per = match spec.dtype {
        "F8_E4M3" => 1,
        "BF16" => 2,
        _ => 4,
    };
    spec.shape.iter().product::<u64>() * per
}

/// Writes the shards as sparse files: real headers, holes for data.
fn generate(dir: &Path) -> usize {
    let specs = layout();
    let per_shard = specs.len().div_ceil(SHARDS);
    let mut weight_map = String::new();
    for (i, chunk) in specs.chunks(per_shard).enumerate() {
        let file = format!("model-{:05}-of-{SHARDS:05}.safetensors", i + 1);
        let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
        let mut offset = 0u64;
        for spec in chunk {
            let end = offset + bytes_of(spec);
            let shape: Vec<String> = spec.shape.iter().map(u64::to_string).collect();
            let _ = write!(
                header,
                ",\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{offset},{end}]}}",
                spec.name,
                spec.dtype,
                shape.join(",")
            );
            let _ = write!(weight_map, "\"{}\":\"{file}\",", spec.name);
            offset = end;
        }
        header.push('}');
        while header.len() % 8 != 0 {
            header.push(' ');
        }
        let mut f = File::create(dir.join(&file)).expect("create shard");
        f.write_all(&(header.len() as u64).to_le_bytes())
            .expect("write");
        f.write_all(header.as_bytes()).expect("write");
        f.set_len(8 + header.len() as u64 + offset)
            .expect("sparse data");
    }
    weight_map.pop();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        format!("{{\"metadata\":{{}},\"weight_map\":{{{weight_map}}}}}"),
    )
    .expect("index");
    specs.len()
}

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

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // INSPECT_BENCH_KEEP=DIR keeps the generated layout there (for profiling).
    let temp = tempfile::tempdir().expect("tempdir");
    let kept = std::env::var_os("INSPECT_BENCH_KEEP").map(PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temp.path());
    std::fs::create_dir_all(dir).expect("bench folder");
    let t = Instant::now();
    let tensors = generate(dir);
    println!(
        "generated {SHARDS} sparse shards, {tensors} tensors in {:.0} ms",
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
    let start_only = best_of(runs, || {
        let status = Command::new(exe)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .expect("run");
        assert!(status.success());
    });
    // Our process alone: its output goes to /dev/null, so no reader's time counts.
    let whole_process = best_of(runs, || {
        let status = Command::new(exe)
            .args(["inspect", "--json"])
            .arg(dir)
            .stdout(Stdio::null())
            .status()
            .expect("run");
        assert!(status.success());
    });
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
    let python = Duration::from_secs_f64(secs);
    println!(
        "python safe_open listing (in-process):         {:8.1} ms",
        ms(python)
    );
    println!(
        "ratio inspect --json process / python in-process: {:.2} (goal <= 0.50, aim 0.25)",
        whole_process.as_secs_f64() / python.as_secs_f64()
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
