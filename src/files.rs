//! Files weightscope reads that a user named (bounded, regular files only)
//! and files it writes (never over a checkpoint, never half-written).
//!
//! Every layer reads its small inputs (config.json, the index, view files,
//! traces) through [`read_bounded`] and writes its outputs (traces, CSV,
//! JSON summaries, settings) through [`write_atomic`]; the CLI and the
//! window check an output path with [`check_output`] before any work starts.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

/// Why a file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path is not a regular file (a FIFO, a device, a folder).
    #[error("not a regular file ({kind}): {}", path.display())]
    NotRegular {
        /// What it is instead.
        kind: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// Larger than this kind of file may be.
    #[error("{what} of {size} bytes is larger than the {cap}-byte limit: {}", path.display())]
    TooLarge {
        /// What the file was read as ("config.json", "a trace").
        what: &'static str,
        /// Its size (at least this much).
        size: u64,
        /// The limit.
        cap: u64,
        /// The path.
        path: PathBuf,
    },
    /// An output path that would overwrite a checkpoint.
    #[error("refusing to write {}: {reason}", path.display())]
    Protected {
        /// The output path.
        path: PathBuf,
        /// Why ("it is inside the checkpoint being read").
        reason: String,
    },
    /// The operating system's error.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// "read", "write".
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl FileError {
    /// The problem without the path, for an error that names the file
    /// itself ("is a FIFO, not a regular file").
    #[must_use]
    pub fn reason(&self) -> String {
        match self {
            Self::NotRegular { kind, .. } => format!("is {kind}, not a regular file"),
            Self::TooLarge {
                what, size, cap, ..
            } => {
                format!("{what} of {size} bytes is larger than the {cap}-byte limit")
            }
            Self::Io { source, .. } => source.to_string(),
            Self::Protected { reason, .. } => reason.clone(),
        }
    }

    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What a file type is, in words ("a FIFO", "a folder"), when it is not a
/// regular file; `None` for a regular file.
#[must_use]
pub fn irregular_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt as _;
    if file_type.is_file() {
        None
    } else if file_type.is_dir() {
        Some("a folder")
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_char_device() || file_type.is_block_device() {
        Some("a device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

/// Refuses what is not a regular file (following symlinks), before anything
/// opens it: opening a FIFO for reading blocks until a writer comes.
///
/// # Errors
/// [`FileError::NotRegular`], or the error of `stat`.
pub fn ensure_regular(path: &Path) -> Result<std::fs::Metadata, FileError> {
    let meta = std::fs::metadata(path).map_err(|e| FileError::io("read", path, e))?;
    match irregular_kind(meta.file_type()) {
        None => Ok(meta),
        Some(kind) => Err(FileError::NotRegular {
            kind,
            path: path.to_path_buf(),
        }),
    }
}

/// Reads a whole regular file of at most `cap` bytes. A FIFO, a device or a
/// folder is refused before it is opened; a file that grows past the cap
/// while being read is refused too (at most `cap + 1` bytes are read).
///
/// # Errors
/// [`FileError::NotRegular`], [`FileError::TooLarge`] or the read's error.
pub fn read_bounded(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::new();
    read_bounded_into(path, cap, what, &mut bytes)?;
    Ok(bytes)
}

/// [`read_bounded`] into `bytes` (cleared first; its memory reused, so that
/// many reads in a row do not each fault in a fresh buffer).
///
/// # Errors
/// As [`read_bounded`].
pub fn read_bounded_into(
    path: &Path,
    cap: u64,
    what: &'static str,
    bytes: &mut Vec<u8>,
) -> Result<(), FileError> {
    // `open_regular` refuses what is not a regular file before opening it.
    let (file, opened) = open_regular(path)?;
    if opened.len() > cap {
        return Err(FileError::TooLarge {
            what,
            size: opened.len(),
            cap,
            path: path.to_path_buf(),
        });
    }
    bytes.clear();
    bytes.reserve(usize::try_from(opened.len().min(cap)).unwrap_or(0));
    file.take(cap.saturating_add(1))
        .read_to_end(bytes)
        .map_err(|e| FileError::io("read", path, e))?;
    if bytes.len() as u64 > cap {
        return Err(FileError::TooLarge {
            what,
            size: bytes.len() as u64,
            cap,
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Opens a regular file for reading, and its metadata: a FIFO, a device or
/// a folder is refused before it is opened (opening a FIFO blocks until a
/// writer comes), and one swapped in after that check does not block the
/// open and is refused after it.
///
/// # Errors
/// [`FileError::NotRegular`] or the open's error.
pub fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), FileError> {
    ensure_regular(path)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        // A FIFO swapped in after the check must not block the open.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options
        .open(path)
        .map_err(|e| FileError::io("read", path, e))?;
    let opened = file
        .metadata()
        .map_err(|e| FileError::io("read", path, e))?;
    if let Some(kind) = irregular_kind(opened.file_type()) {
        return Err(FileError::NotRegular {
            kind,
            path: path.to_path_buf(),
        });
    }
    Ok((file, opened))
}

/// [`read_bounded`] as UTF-8 text.
///
/// # Errors
/// As [`read_bounded`], and [`FileError::Io`] (`InvalidData`) for bytes that
/// are not UTF-8.
pub fn read_bounded_text(path: &Path, cap: u64, what: &'static str) -> Result<String, FileError> {
    let bytes = read_bounded(path, cap, what)?;
    String::from_utf8(bytes).map_err(|_| {
        FileError::io(
            "read",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"),
        )
    })
}

/// Whether `name` ends with `suffix`, ignoring ASCII case (`.GGUF`).
#[must_use]
pub fn has_suffix(name: &str, suffix: &str) -> bool {
    name.len() >= suffix.len()
        && name.as_bytes()[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// Whether a file name is one a checkpoint is made of: shards, the index,
/// config.json, GGUF files.
#[must_use]
pub fn is_checkpoint_file_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let extension = Path::new(&lower)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    matches!(extension, "safetensors" | "gguf")
        || lower.ends_with(".safetensors.index.json")
        || lower == "config.json"
}

/// The absolute, symlink-resolved form of a path that may not exist yet:
/// its folder resolved, its name kept.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(full) = std::fs::canonicalize(path) {
        return full;
    }
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_path_buf(), |cwd| cwd.join(path))
    };
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map_or_else(|_| absolute.clone(), |parent| parent.join(name)),
        _ => absolute,
    }
}

/// Checks an output path before any work starts: refused when it is inside
/// (or is) one of the checkpoints being read, or names an existing
/// checkpoint file (a shard, an index, config.json, a GGUF file) anywhere.
///
/// # Errors
/// [`FileError::Protected`] with the reason.
pub fn check_output(path: &Path, inputs: &[&Path]) -> Result<(), FileError> {
    let protected = |reason: String| FileError::Protected {
        path: path.to_path_buf(),
        reason,
    };
    let out = resolved(path);
    for input in inputs {
        let input = resolved(input);
        if out == input || out.starts_with(&input) {
            return Err(protected(format!(
                "it is inside the checkpoint being read ({})",
                input.display()
            )));
        }
    }
    if let Ok(meta) = std::fs::metadata(&out) {
        if meta.is_dir() {
            return Err(protected("it is a folder".into()));
        }
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if is_checkpoint_file_name(&name) {
            return Err(protected(format!(
                "it is an existing checkpoint file ({name})"
            )));
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same folder,
/// renamed over `path` once complete: a failed write (a full disk) leaves
/// the previous file whole and no partial file behind.
///
/// # Errors
/// [`FileError::Io`] naming `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".weightscope-")
        .suffix(".part")
        .tempfile_in(folder)
        .map_err(|e| FileError::io("write", path, e))?;
    temp.write_all(bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|e| FileError::io("write", path, e))?;
    // The mode a file written the usual way would have: the replaced
    // file's, else 0666 less the umask (tempfile makes its files 0600).
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode =
            std::fs::metadata(path).map_or(0o666 & !umask(), |m| m.permissions().mode() & 0o7777);
        let _ = temp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode));
    }
    temp.persist(path)
        .map_err(|e| FileError::io("write", path, e.error))?;
    Ok(())
}

/// This process's umask, from `/proc/self/status` (asking the kernel with
/// umask(2) would change it, if only for a moment); 022 where unknown.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// weightscope's cache folder: `WEIGHTSCOPE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/weightscope`, else `~/.cache/weightscope`.
#[must_use]
pub fn cache_dir() -> Option<std::path::PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    var("WEIGHTSCOPE_CACHE_DIR").or_else(|| {
        var("XDG_CACHE_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".cache")))
            .map(|c| c.join("weightscope"))
    })
}

/// Makes `dir` and its missing parents (mode 0700), then checks that `dir`
/// is this user's own: a folder, not a link, owned by this process's user,
/// writable by no one else. What is kept there is then read back without
/// another user having had a way to put it there.
///
/// # Errors
/// When it cannot be made, or is not this user's alone.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    // The owner of /proc/self is this process's effective user.
    let me = std::fs::metadata("/proc/self")?.uid();
    if meta.is_dir() && meta.uid() == me && meta.mode() & 0o022 == 0 {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a folder of this user's alone",
        ))
    }
}

/// The OS message without Rust's " (os error N)" suffix, lower-cased first letter.
#[must_use]
pub fn io_reason(err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reads_refuse_big_files_and_fifos() {
        let dir = tempfile::tempdir().expect("dir");
        let small = dir.path().join("config.json");
        std::fs::write(&small, b"{}").expect("write");
        assert_eq!(read_bounded(&small, 2, "config.json").expect("read"), b"{}");
        let err = read_bounded(&small, 1, "config.json").expect_err("too big");
        assert!(
            err.to_string().contains("larger than the 1-byte limit"),
            "{err}"
        );
        let err = read_bounded(dir.path(), 10, "config.json").expect_err("a folder");
        assert!(err.to_string().contains("a folder"), "{err}");
        let err = read_bounded(Path::new("/dev/zero"), 10, "a trace").expect_err("a device");
        assert!(err.to_string().contains("a device"), "{err}");
        #[cfg(target_os = "linux")]
        {
            let fifo = dir.path().join("fifo");
            let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("c");
            #[allow(unsafe_code)]
            // SAFETY: mkfifo on a NUL-terminated path in our own folder.
            let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
            assert_eq!(made, 0);
            let err = read_bounded(&fifo, 10, "a view").expect_err("a FIFO");
            assert!(err.to_string().contains("a FIFO"), "{err}");
        }
    }

    #[test]
    fn outputs_inside_a_checkpoint_or_over_its_files_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let model = dir.path().join("model");
        std::fs::create_dir(&model).expect("mkdir");
        let shard = model.join("model-00001-of-00002.safetensors");
        std::fs::write(&shard, b"x").expect("write");
        let err = check_output(&shard, &[&model]).expect_err("inside");
        assert!(err.to_string().contains("inside the checkpoint"), "{err}");
        assert!(check_output(&model.join("new.csv"), &[&model]).is_err());
        // Through `..` and a relative name it is still inside.
        let sneaky = dir.path().join("model/../model/trace.json");
        assert!(check_output(&sneaky, &[&model]).is_err());
        // A single-file checkpoint is itself protected.
        assert!(check_output(&shard, &[&shard]).is_err());
        // An existing checkpoint file elsewhere is refused; a new one is fine.
        let other = dir.path().join("other.safetensors");
        std::fs::write(&other, b"x").expect("write");
        let err = check_output(&other, &[&model]).expect_err("existing shard");
        assert!(
            err.to_string().contains("existing checkpoint file"),
            "{err}"
        );
        let config = dir.path().join("config.json");
        std::fs::write(&config, b"{}").expect("write");
        assert!(check_output(&config, &[]).is_err());
        assert!(check_output(&dir.path().join("trace.csv"), &[&model]).is_ok());
        assert!(check_output(dir.path(), &[]).is_err(), "a folder");
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_nothing_on_failure() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("trace.json");
        write_atomic(&path, b"first").expect("write");
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o666 & !umask(), "as a file written the usual way");
        }
        write_atomic(&path, b"second").expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"second");
        // A folder that does not exist: an error naming the path, no file.
        let missing = dir.path().join("missing/trace.json");
        let err = write_atomic(&missing, b"x").expect_err("no folder");
        assert!(err.to_string().contains("missing/trace.json"), "{err}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["trace.json"], "no temporary file left");
    }
}
