//! The probe's line protocol (docs/record.md) and the Python probe package
//! that `record` puts on a job's `PYTHONPATH`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The Python probe's files, shipped in `assets/probe` and embedded so an
/// installed binary carries them.
const PYTHON_PROBE: [(&str, &str); 2] = [
    (
        "sitecustomize.py",
        include_str!("../../../assets/probe/sitecustomize.py"),
    ),
    (
        "weightscope_probe.py",
        include_str!("../../../assets/probe/weightscope_probe.py"),
    ),
];

/// The environment variable naming the pipe's descriptor in the job.
pub const FD_VAR: &str = "WEIGHTSCOPE_PROBE_FD";
/// The environment variable holding the pipe's inode, so a client can tell
/// the pipe from another file that reuses the descriptor number.
pub const INO_VAR: &str = "WEIGHTSCOPE_PROBE_INO";
/// The environment variable holding the sampling interval in milliseconds.
pub const INTERVAL_VAR: &str = "WEIGHTSCOPE_PROBE_INTERVAL_MS";

/// One line from a client, every field optional (unknown kinds and fields
/// are ignored, so clients may send more than this version reads).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ProbeLine {
    /// `hello`, `mlx`, `sample`, `load`, `clear-cache`, `mark` or `bye`.
    pub kind: String,
    /// The sending process.
    #[serde(default)]
    pub pid: Option<u32>,
    /// `hello`: the client's name ("python", "c", "bun").
    #[serde(default)]
    pub client: Option<String>,
    /// `mlx`: MLX's version.
    #[serde(default)]
    pub version: Option<String>,
    /// `sample`: MLX active memory in bytes.
    #[serde(default)]
    pub active: Option<u64>,
    /// `sample`: MLX cache memory in bytes.
    #[serde(default)]
    pub cache: Option<u64>,
    /// `sample`: MLX peak memory in bytes.
    #[serde(default)]
    pub peak: Option<u64>,
    /// `load`: the file loaded.
    #[serde(default)]
    pub file: Option<String>,
    /// `clear-cache`: the cache before clearing, in bytes.
    #[serde(default)]
    pub cache_before: Option<u64>,
    /// `mark`: the text.
    #[serde(default)]
    pub text: Option<String>,
    /// `bye`: CPU seconds the probe's sampling thread used.
    #[serde(default)]
    pub probe_cpu_secs: Option<f64>,
    /// `bye`: seconds from the probe's start to the job's exit.
    #[serde(default)]
    pub wall_secs: Option<f64>,
}

impl ProbeLine {
    /// Parses one line; `None` for what is not a JSON object with a `kind`.
    #[must_use]
    pub fn parse(line: &str) -> Option<Self> {
        serde_json::from_str(line.trim()).ok()
    }
}

/// The Python probe written to a private folder for one recording, removed
/// when dropped.
#[derive(Debug)]
pub struct PythonProbe {
    dir: PathBuf,
}

impl PythonProbe {
    /// Writes the probe into a new folder under the temporary directory.
    ///
    /// # Errors
    /// When the folder or a file cannot be written.
    pub fn install() -> std::io::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("weightscope-probe-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        if let Ok(mut installed) = INSTALLED.lock() {
            installed.push(dir.clone());
        }
        let probe = Self { dir };
        for (name, text) in PYTHON_PROBE {
            std::fs::write(probe.dir.join(name), text)?;
        }
        Ok(probe)
    }

    /// The folder to put first on `PYTHONPATH`.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PythonProbe {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Ok(mut installed) = INSTALLED.lock() {
            installed.retain(|d| d != &self.dir);
        }
    }
}

/// The folders of probes installed and not yet removed.
static INSTALLED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Removes every probe folder still installed. For the end of the process:
/// it ends with `_exit` (no destructors), and a recorder thread still
/// waiting for its job (the window closed mid-recording) would otherwise
/// leave its folder in the temporary directory.
pub fn remove_installed() {
    let folders = INSTALLED
        .lock()
        .map(|mut installed| std::mem::take(&mut *installed))
        .unwrap_or_default();
    for dir in folders {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_garbage_does_not() {
        let line = ProbeLine::parse(
            r#"{"kind":"sample","pid":7,"active":10,"cache":2,"peak":12,"new":1}"#,
        )
        .expect("a sample");
        assert_eq!(line.kind, "sample");
        assert_eq!(
            (line.pid, line.active, line.cache, line.peak),
            (Some(7), Some(10), Some(2), Some(12))
        );
        assert!(ProbeLine::parse("not json").is_none());
        assert!(ProbeLine::parse(r#"{"active":1}"#).is_none(), "no kind");
    }

    #[test]
    fn the_probe_installs_and_cleans_up() {
        let probe = PythonProbe::install().expect("installed");
        let dir = probe.dir().to_path_buf();
        assert!(dir.join("sitecustomize.py").is_file());
        assert!(dir.join("weightscope_probe.py").is_file());
        drop(probe);
        assert!(!dir.exists());
        // One test: `remove_installed` takes every probe of the process.
        let kept = PythonProbe::install().expect("installed");
        let kept_dir = kept.dir().to_path_buf();
        remove_installed();
        assert!(!kept_dir.exists(), "removed while its probe is still held");
        drop(kept); // its own removal finds nothing: harmless
    }
}
