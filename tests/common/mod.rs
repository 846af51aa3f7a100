//! Helpers shared by the integration tests: real checkpoints written with the
//! `safetensors` crate, and a lock for tests that read MLX's process-wide
//! memory counters.
#![allow(dead_code)]

pub mod convert;
pub mod hosts;
pub mod hub;
pub mod real;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use safetensors::tensor::{Dtype, TensorView};

static MLX_MEMORY: Mutex<()> = Mutex::new(());

/// Serializes tests that assert on MLX's global memory counters.
pub fn mlx_memory_lock() -> MutexGuard<'static, ()> {
    MLX_MEMORY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One tensor to write: name, dtype, shape, raw little-endian bytes.
pub struct Tensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Tensor {
    pub fn new(name: &str, dtype: Dtype, shape: &[usize], data: Vec<u8>) -> Self {
        Self {
            name: name.to_owned(),
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    pub fn f32(name: &str, shape: &[usize], values: &[f32]) -> Self {
        Self::new(
            name,
            Dtype::F32,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }
}

/// Writes `tensors` to `path` with the `safetensors` crate.
pub fn write_safetensors(path: &Path, tensors: &[Tensor]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            let view = TensorView::new(t.dtype, t.shape.clone(), &t.data)
                .expect("test tensor is consistent");
            (t.name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write test checkpoint");
}

/// The private test venv's Python (MLX, mlx-lm, pinned; made by
/// `mlx-glue/setup test`).
pub fn venv_python() -> std::path::PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `mlx-glue/setup test` (the README's test command does)",
        python.display()
    );
    python
}

/// The torch test venv's Python (Debian's torch 1.13, picklescan pinned;
/// made by `mlx-glue/setup test`), for files `torch.save` writes.
pub fn torch_python() -> std::path::PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv-torch/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `mlx-glue/setup test` (the README's test command does)",
        python.display()
    );
    python
}

/// Runs the test venv's Python on `script` (a path under the repository)
/// with `out` as its argument; the JSON objects it printed, one per line.
pub fn run_venv_writer(script: &str, out: &Path) -> Vec<serde_json::Value> {
    run_writer(&venv_python(), script, out)
}

/// [`run_venv_writer`] with `python` (the torch venv's, say).
pub fn run_writer(python: &Path, script: &str, out: &Path) -> Vec<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let output = std::process::Command::new(python)
        .arg(&script)
        .arg(out)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("the venv's python runs");
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// `tensor --json`'s values (`ours`) against gguf-py's dequantization of
/// the same tensor (`theirs`: `first`, `min`, `max`, `mean`, as
/// `tests/gguf/write_gguf.py` prints them): the first 64 values and the
/// extremes within one part in a million (the same `f32` arithmetic), the
/// mean within 1e-5.
pub fn assert_decoded_as_gguf_py(ours: &serde_json::Value, theirs: &serde_json::Value, what: &str) {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs() + 1e-9;
    let first = ours["first"].as_array().expect("first");
    let want = theirs["first"].as_array().expect("gguf-py's first");
    assert_eq!(first.len(), want.len().min(64), "{what}");
    for (a, b) in first.iter().zip(want) {
        let (a, b) = (a.as_f64().expect("f"), b.as_f64().expect("f"));
        assert!(close(a, b), "{what}: {a} vs gguf-py's {b}");
    }
    for key in ["min", "max"] {
        let (a, b) = (
            ours["stats"][key].as_f64().expect(key),
            theirs[key].as_f64().expect(key),
        );
        assert!(close(a, b), "{what} {key}: {a} vs gguf-py's {b}");
    }
    let (a, b) = (
        ours["stats"]["mean"].as_f64().expect("mean"),
        theirs["mean"].as_f64().expect("mean"),
    );
    assert!(
        (a - b).abs() <= 1e-5 * (b.abs() + 1e-3),
        "{what} mean: {a} vs gguf-py's {b}"
    );
}

/// Returns MLX's cached buffers and checks that nothing is left alive.
pub fn assert_all_freed() {
    weightscope::mlx::clear_cache().expect("clear the cache");
    assert_eq!(
        weightscope::mlx::memory().expect("memory").active_bytes,
        0,
        "every MLX array was freed"
    );
}

/// Fails unless `output` (an `inspect --json` document) validates against
/// `docs/inspect.schema.json`, the one schema of every format.
pub fn assert_inspect_schema(output: &serde_json::Value) {
    let errors = inspect_schema_errors(output);
    assert!(errors.is_empty(), "not the inspect schema: {errors:#?}");
}

/// Where `output` breaks `docs/inspect.schema.json` (the first ten).
pub fn inspect_schema_errors(output: &serde_json::Value) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/inspect.schema.json");
    let schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("the schema")).expect("JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    validator
        .iter_errors(output)
        .take(10)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}
