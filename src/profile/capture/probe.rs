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
/// The environment variable naming a FIFO in the probe's private folder,
/// which a process that did not inherit the pipe's descriptor (the ranks
/// `mlx.launch` starts) opens by path.
pub const PATH_VAR: &str = "WEIGHTSCOPE_PROBE_PATH";
/// The environment variable naming a file in the probe's private folder
/// that the recorder rewrites to ask for a held-by walk now (the job is
/// near its memory limit: the next moment may be its last).
pub const WALK_VAR: &str = "WEIGHTSCOPE_PROBE_WALK";
/// The environment variable holding the sampling interval in milliseconds.
pub const INTERVAL_VAR: &str = "WEIGHTSCOPE_PROBE_INTERVAL_MS";

/// The longest probe line read (the Python probe sends at most 4,000
/// bytes); a longer one is skipped to its newline and counted as bad.
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// Reads one line (its newline included) into `buf`, keeping at most `cap`
/// bytes: `Some(true)` for a line that fit, `Some(false)` for one that did
/// not (read to its newline and dropped, `buf` left empty), `None` at the
/// end. Memory stays within `cap` whatever the writer sends.
///
/// # Errors
/// The reader's error.
pub fn read_line_capped(
    reader: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<bool>> {
    let mut fits = true;
    let mut any = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if chunk.is_empty() {
            return Ok(any.then_some(fits));
        }
        any = true;
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (chunk.len(), false),
        };
        if fits {
            if buf.len() + take > cap {
                fits = false;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        reader.consume(take);
        if done {
            return Ok(Some(fits));
        }
    }
}

/// One line from a client, every field optional (unknown kinds and fields
/// are ignored, so clients may send more than this version reads).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ProbeLine {
    /// `hello`, `mlx`, `sample`, `stack`, `frame`, `stack-def`, `load`,
    /// `clear-cache`, `mark` or `bye`.
    pub kind: String,
    /// The sending process.
    #[serde(default)]
    pub pid: Option<u32>,
    /// `hello`: the client's name ("python", "c", "bun").
    #[serde(default)]
    pub client: Option<String>,
    /// `hello`: the process's rank in a distributed MLX job (`MLX_RANK`).
    #[serde(default)]
    pub rank: Option<u32>,
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
    /// `load`: the file loaded; `frame`: the source file.
    #[serde(default)]
    pub file: Option<String>,
    /// `clear-cache`: the cache before clearing, in bytes.
    #[serde(default)]
    pub cache_before: Option<u64>,
    /// `mark`: the text; `frame`: the line's code.
    #[serde(default)]
    pub text: Option<String>,
    /// `bye`: CPU seconds the probe's sampling thread used.
    #[serde(default)]
    pub probe_cpu_secs: Option<f64>,
    /// `bye`: seconds from the probe's start to the job's exit.
    #[serde(default)]
    pub wall_secs: Option<f64>,
    /// `frame`, `stack-def`: the frame's or stack's number.
    #[serde(default)]
    pub id: Option<u64>,
    /// `frame`: the line number.
    #[serde(default)]
    pub line: Option<u32>,
    /// `frame`: the function.
    #[serde(default)]
    pub function: Option<String>,
    /// `stack-def`: its frames' numbers, innermost first.
    #[serde(default)]
    pub frames: Option<Vec<u64>>,
    /// `sample`, `stack`: the number of the main thread's stack now
    /// (negative: none).
    #[serde(default)]
    pub stack: Option<i64>,
    /// `sample`, `stack`: the numbers of the other threads' stacks.
    #[serde(default)]
    pub threads: Option<Vec<i64>>,
    /// `exception`: where it was raised, innermost first: file, line,
    /// function, the line's code.
    #[serde(default)]
    pub traceback: Option<Vec<(String, u32, String, String)>>,
    /// `held`: the roots and what each holds.
    #[serde(default)]
    pub roots: Option<Vec<crate::profile::trace::census::HeldRoot>>,
    /// `held`: the bytes every root reached.
    #[serde(default)]
    pub reached: Option<u64>,
    /// `held`: whether the walk stopped at its budget.
    #[serde(default)]
    pub partial: Option<bool>,
    /// `held`: Python objects visited.
    #[serde(default)]
    pub objects: Option<u64>,
    /// `held`: milliseconds the walk took.
    #[serde(default)]
    pub millis: Option<f64>,
    /// `held`: how the bytes were counted (when by `nbytes` they added up
    /// to more than MLX held).
    #[serde(default)]
    pub buffers: Option<crate::profile::trace::census::BufferCount>,
    /// `held`: whether the walk left big containers and libraries'
    /// globals unwalked (too little unaccounted for).
    #[serde(default)]
    pub shallow: Option<bool>,
    /// `collective`: the collectives the evaluation runs (`all_sum`, …).
    #[serde(default)]
    pub ops: Option<Vec<String>>,
    /// `collective`: its number among the job's collective evaluations.
    #[serde(default)]
    pub step: Option<u64>,
    /// `collective`: `wait` (the evaluation starts) or `done` (it returned).
    #[serde(default)]
    pub phase: Option<String>,
    /// `collective`: the job's wall clock then (Unix seconds).
    #[serde(default)]
    pub wall: Option<f64>,
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
    /// Writes the probe into a new private folder: a random name, made with
    /// mode 0700 by one `mkdir` that fails when anything is at that path,
    /// inside a folder only this user can write ([`private_base`]). Once the
    /// folder is removed, no other user can put anything at that path, so a
    /// descendant of the job that outlives the recording and still has it on
    /// `PYTHONPATH` never imports another user's code.
    ///
    /// # Errors
    /// When no private folder can be had, or a file cannot be written.
    pub fn install() -> std::io::Result<Self> {
        let base = private_base()?;
        remove_stale(&base);
        let dir =
            crate::files::new_private_folder(&base, &format!("probe-{}-", std::process::id()))?;
        if let Ok(mut installed) = INSTALLED.lock() {
            installed.push(dir.clone());
        }
        let probe = Self { dir };
        for (name, text) in PYTHON_PROBE {
            crate::files::create_entry(&probe.dir, std::ffi::OsStr::new(name), text.as_bytes())?;
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
        crate::files::remove_own_tree(&self.dir);
        if let Ok(mut installed) = INSTALLED.lock() {
            installed.retain(|d| d != &self.dir);
        }
    }
}

/// The folder that holds probe folders: `weightscope/` in the user's
/// runtime folder (`$XDG_RUNTIME_DIR`, private by the XDG rules) when it is
/// usable, else in the user's cache folder, else `weightscope-UID` in the
/// temporary folder, else (that name taken by another user) a private
/// `weightscope-UID-XXXX` there. Whichever it is, it must be a real folder (not a
/// symlink) owned by this user with no access for anyone else; it is made
/// so (mode 0700) when missing, and refused when someone else owns it.
///
/// # Errors
/// When not even a new folder can be made in the temporary folder.
pub fn private_base() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    // The effective uid, without unsafe code: /proc/self belongs to it.
    let uid = std::fs::metadata("/proc/self")?.uid();
    let owned_private = |path: &Path| {
        std::fs::symlink_metadata(path)
            // No permission bit for the group or others: the low six zero.
            .is_ok_and(|m| {
                m.file_type().is_dir() && m.uid() == uid && m.mode().trailing_zeros() >= 6
            })
    };
    let mut candidates = Vec::new();
    let outside = &crate::environment::get().outside;
    if let Some(runtime) = outside.xdg_runtime_dir.clone()
        && runtime.is_absolute()
        && owned_private(&runtime)
    {
        candidates.push(runtime.join("weightscope"));
    }
    let cache = outside
        .xdg_cache_home
        .clone()
        .filter(|p| p.is_absolute())
        .or_else(|| {
            outside
                .home
                .clone()
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".cache"))
        });
    if let Some(cache) = cache {
        candidates.push(cache.join("weightscope").join("probe"));
    }
    let temp = std::env::temp_dir();
    candidates.push(temp.join(format!("weightscope-{uid}")));
    for base in candidates {
        if crate::files::make_private(&base, uid).is_ok() {
            return Ok(base);
        }
    }
    // Every usual place is taken (another user made `weightscope-UID` in
    // the temporary folder first, and there is no usable home): a folder of
    // ours with a random name, made by one mkdir that fails when anything
    // is there, kept (so that nobody else can take its name later) and
    // reused by the next recording.
    private_fallback(&temp, uid)
}

/// A private folder `weightscope-UID-XXXX` in `temp`: one made earlier
/// (ours, a real folder, no access for others), else a new one.
fn private_fallback(temp: &Path, uid: u32) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let prefix = format!("weightscope-{uid}-");
    if let Ok(entries) = std::fs::read_dir(temp) {
        for entry in entries.flatten() {
            let ours = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
                && std::fs::symlink_metadata(entry.path()).is_ok_and(|m| {
                    m.file_type().is_dir() && m.uid() == uid && m.mode().trailing_zeros() >= 6
                });
            if ours {
                return Ok(entry.path());
            }
        }
    }
    crate::files::new_private_folder(temp, &prefix)
}

/// Removes probe folders in `base` left by a weightscope that was killed
/// (SIGKILL leaves no chance to clean up): those whose process is gone.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("probe-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            crate::files::remove_own_tree(&entry.path());
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
        crate::files::remove_own_tree(&dir);
    }
}

impl crate::profile::trace::census::Census {
    /// A probe's `held` line of process `pid`, arrived at `t_secs`.
    #[must_use]
    pub fn from_line(t_secs: f64, pid: u32, line: ProbeLine) -> Self {
        Self {
            t_secs,
            pid,
            active_bytes: line.active.unwrap_or(0),
            reached_bytes: line.reached.unwrap_or(0),
            partial: line.partial.unwrap_or(false),
            objects: line.objects.unwrap_or(0),
            millis: line.millis.unwrap_or(0.0),
            buffers: line.buffers,
            shallow: line.shallow.unwrap_or(false),
            roots: line
                .roots
                .unwrap_or_default()
                .into_iter()
                .take(64)
                .collect(),
        }
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
    fn long_lines_are_dropped_and_reading_goes_on() {
        let mut input: Vec<u8> = b"{\"kind\":\"a\"}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100_000));
        input.extend_from_slice(b"\n\xff\xfe\n{\"kind\":\"b\"}");
        let mut reader = std::io::BufReader::with_capacity(16, input.as_slice());
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while let Some(fits) = read_line_capped(&mut reader, &mut buf, 64).expect("read") {
            assert!(buf.len() <= 64, "memory stays within the cap");
            lines.push((fits, String::from_utf8_lossy(&buf).into_owned()));
            buf.clear();
        }
        assert_eq!(
            lines,
            [
                (true, "{\"kind\":\"a\"}\n".to_owned()),
                (false, String::new()),
                (true, "\u{fffd}\u{fffd}\n".to_owned()),
                (true, "{\"kind\":\"b\"}".to_owned()),
            ]
        );
    }

    #[test]
    fn folders_of_processes_gone_are_removed() {
        let dir = tempfile::tempdir().expect("dir");
        // No pid is above the kernel's pid_max (at most 2^22).
        let stale = dir.path().join("probe-4194305-abcdef");
        let live = dir
            .path()
            .join(format!("probe-{}-abcdef", std::process::id()));
        let other = dir.path().join("not-a-probe");
        for folder in [&stale, &live, &other] {
            std::fs::create_dir(folder).expect("mkdir");
        }
        remove_stale(dir.path());
        assert!(!stale.exists());
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn a_base_folder_of_another_user_is_refused() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let dir = tempfile::tempdir().expect("dir");
        let uid = std::fs::metadata("/proc/self").expect("proc").uid();
        // Made here: mode 0700.
        let mine = dir.path().join("mine");
        crate::files::make_private(&mine, uid).expect("made");
        let meta = std::fs::metadata(&mine).expect("stat");
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        // A symlink to a folder is not a folder.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).expect("symlink");
        let err = crate::files::make_private(&link, uid).expect_err("a symlink");
        assert!(err.to_string().contains("not a folder"), "{err}");
        // Another uid's folder (as when another user made it first).
        let err = crate::files::make_private(&mine, uid + 1).expect_err("another user's");
        assert!(err.to_string().contains("another user"), "{err}");
    }

    #[test]
    fn the_probe_installs_and_cleans_up() {
        let probe = PythonProbe::install().expect("installed");
        let dir = probe.dir().to_path_buf();
        assert!(dir.join("sitecustomize.py").is_file());
        assert!(dir.join("weightscope_probe.py").is_file());
        {
            use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
            let uid = std::fs::metadata("/proc/self").expect("proc").uid();
            for folder in [&dir, &dir.parent().expect("base").to_path_buf()] {
                let meta = std::fs::symlink_metadata(folder).expect("stat");
                assert_eq!(
                    meta.permissions().mode() & 0o777,
                    0o700,
                    "{}",
                    folder.display()
                );
                assert_eq!(meta.uid(), uid);
            }
        }
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
