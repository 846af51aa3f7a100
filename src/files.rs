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
    // What is there decides how it may be written (a device, a socket, a
    // dangling link are refused now, before any work).
    output_target(path)?;
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

/// How an output path is written, decided from what is there now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OutputTarget {
    /// Nothing there: a new file, made through a temporary file and
    /// linked in without replacing anything that appeared meanwhile.
    New(PathBuf),
    /// A regular file (the path itself, or the target of a link that passed
    /// the checks): replaced whole through a temporary file in its folder.
    Replace(PathBuf),
    /// A FIFO, a terminal, `/dev/null`, `/dev/full`, or a regular file
    /// reached through `/proc` (`/dev/stdout`): written in place, never
    /// renamed over.
    InPlace {
        /// The path to open (links followed by the kernel).
        path: PathBuf,
        /// Device and inode of what was checked: what is opened must be it.
        identity: (u64, u64),
    },
}

/// The character devices an output may be written into: the memory
/// devices that discard (`/dev/null`, `/dev/zero`, `/dev/full`) and
/// terminals. Any other device (a disk, `/dev/mem`) is refused.
fn writable_device(rdev: u64) -> bool {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    matches!((major, minor), (1, 3 | 5 | 7)) || matches!(major, 4 | 5 | 136..=143)
}

/// What an existing output is, after the checks that say how it may be
/// written: a folder, a socket, a block device or another character
/// device is refused; a link is followed only to a target that passes the
/// same checks (a link to nothing is refused: following it would create a
/// file wherever it points).
fn output_target(path: &Path) -> Result<OutputTarget, FileError> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let protected = |reason: String| FileError::Protected {
        path: path.to_path_buf(),
        reason,
    };
    let link = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(OutputTarget::New(path.to_path_buf()));
        }
        Err(e) => return Err(FileError::io("write", path, e)),
    };
    let is_link = link.file_type().is_symlink();
    let meta = if is_link {
        match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(protected(
                    "it is a link to a file that does not exist".into(),
                ));
            }
            Err(e) => return Err(FileError::io("write", path, e)),
        }
    } else {
        link
    };
    let in_place = || OutputTarget::InPlace {
        path: path.to_path_buf(),
        identity: (meta.dev(), meta.ino()),
    };
    let kind = meta.file_type();
    if kind.is_file() {
        if !is_link {
            return Ok(OutputTarget::Replace(path.to_path_buf()));
        }
        // `/dev/stdout` and `/dev/fd/N` lead through /proc to a descriptor
        // of ours: the file behind it is written where the descriptor is.
        let through_proc = std::fs::read_link(path).is_ok_and(|t| t.starts_with("/proc"));
        if through_proc {
            return Ok(in_place());
        }
        return std::fs::canonicalize(path)
            .map(OutputTarget::Replace)
            .map_err(|e| FileError::io("write", path, e));
    }
    if kind.is_fifo() || (kind.is_char_device() && writable_device(meta.rdev())) {
        return Ok(in_place());
    }
    Err(protected(match irregular_kind(kind) {
        Some("a folder") => "it is a folder".into(),
        Some("a device") => "it is a device other than a terminal or /dev/null; outputs are written only to files, FIFOs, terminals and /dev/null".into(),
        Some(kind) => format!("it is {kind}, not a file"),
        None => "it is not a file".into(),
    }))
}

/// Writes `bytes` to `path`, and nothing else of the user's is touched:
/// - a regular file (or nothing yet) is written through a temporary file
///   in the same folder, renamed over `path` once complete: a failed write
///   (a full disk) leaves the previous file whole and no partial file
///   behind; a file that appears meanwhile is not replaced;
/// - a link is followed only to a target that passes the same checks, and
///   the target is replaced (the link stays);
/// - a FIFO, a terminal, `/dev/null`, `/dev/full` or `/dev/stdout` is
///   written in place, never renamed over; any other device, a socket or a
///   folder is refused.
///
/// Temporary files left by a process that is gone (killed mid-write) are
/// removed from the folder first.
///
/// # Errors
/// [`FileError::Io`] or [`FileError::Protected`] naming `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    match output_target(path)? {
        OutputTarget::InPlace { path: at, identity } => write_in_place(path, &at, identity, bytes),
        OutputTarget::New(at) => match write_through_temporary(path, &at, bytes, false) {
            // Something appeared there meanwhile: decided again, once.
            Err(FileError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                match output_target(path)? {
                    OutputTarget::Replace(at) => write_through_temporary(path, &at, bytes, true),
                    OutputTarget::InPlace { path: at, identity } => {
                        write_in_place(path, &at, identity, bytes)
                    }
                    OutputTarget::New(_) => Err(FileError::io(
                        "write",
                        path,
                        std::io::Error::other("it changed while being written"),
                    )),
                }
            }
            other => other,
        },
        OutputTarget::Replace(at) => write_through_temporary(path, &at, bytes, true),
    }
}

/// The prefix of weightscope's temporary files: `.weightscope-PID-`.
const PART_PREFIX: &str = ".weightscope-";
const PART_SUFFIX: &str = ".part";

fn write_through_temporary(
    named: &Path,
    path: &Path,
    bytes: &[u8],
    replace: bool,
) -> Result<(), FileError> {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    remove_leftover_parts(folder);
    let mut temp = tempfile::Builder::new()
        .prefix(&format!("{PART_PREFIX}{}-", std::process::id()))
        .suffix(PART_SUFFIX)
        .tempfile_in(folder)
        .map_err(|e| FileError::io("write", named, e))?;
    temp.write_all(bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|e| FileError::io("write", named, e))?;
    // The mode a file written the usual way would have: the replaced
    // file's, else 0666 less the umask (tempfile makes its files 0600).
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::symlink_metadata(path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map_or(0o666 & !umask(), |m| m.permissions().mode() & 0o7777);
        let _ = temp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode));
    }
    if replace {
        temp.persist(path)
            .map_err(|e| FileError::io("write", named, e.error))?;
    } else {
        temp.persist_noclobber(path)
            .map_err(|e| FileError::io("write", named, e.error))?;
    }
    Ok(())
}

/// Writes into what is at `path` (a FIFO, a terminal, `/dev/null`, a file
/// behind `/dev/stdout`) without creating, truncating or renaming anything.
/// What is opened must be what was checked (`identity`); a FIFO with no
/// reader is an error, not a wait.
fn write_in_place(
    named: &Path,
    path: &Path,
    identity: (u64, u64),
    bytes: &[u8],
) -> Result<(), FileError> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ENXIO) {
                FileError::io(
                    "write",
                    named,
                    std::io::Error::other("it is a FIFO nobody is reading"),
                )
            } else {
                FileError::io("write", named, e)
            }
        })?;
    let opened = file
        .metadata()
        .map_err(|e| FileError::io("write", named, e))?;
    if (opened.dev(), opened.ino()) != identity {
        return Err(FileError::io(
            "write",
            named,
            std::io::Error::other("it was replaced while being opened"),
        ));
    }
    set_blocking(&file).map_err(|e| FileError::io("write", named, e))?;
    file.write_all(bytes)
        .map_err(|e| FileError::io("write", named, e))
}

/// Clears `O_NONBLOCK` on an open file (set only so that opening a FIFO
/// never waits).
fn set_blocking(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let fd = file.as_raw_fd();
    #[allow(unsafe_code)]
    // SAFETY: fcntl on a descriptor this function's caller owns, open for
    // the whole call; F_GETFL/F_SETFL read and set flags, touching no memory.
    let done = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if done {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Removes from `folder` the temporary files of weightscope processes that
/// are gone (`.weightscope-PID-XXXXXX.part` whose PID is not running): a
/// process killed mid-write leaves one. Only regular files (never a link),
/// owned by this user, with that exact name shape are removed.
fn remove_leftover_parts(folder: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    let Ok(me) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(leftover_part_pid) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.uid() == me) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The PID in a temporary file's name `.weightscope-PID-XXXXXX.part`.
fn leftover_part_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PART_PREFIX)?.strip_suffix(PART_SUFFIX)?;
    let (pid, random) = rest.split_once('-')?;
    if random.is_empty() || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    pid.parse().ok()
}

/// Opens a journal (a file written line by line while a job runs) for this
/// process alone: made with `O_EXCL` and `O_NOFOLLOW` when new; an existing
/// one must be a regular file (not a link, FIFO or device), and is emptied
/// only once this process holds its lock. A journal another recording is
/// writing (it holds the lock) is refused. The lock lasts as long as the
/// returned file.
///
/// # Errors
/// [`FileError::Protected`] for a link, a non-file or a journal in use;
/// [`FileError::Io`] otherwise.
pub fn open_journal(path: &Path) -> Result<std::fs::File, FileError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let protected = |reason: String| FileError::Protected {
        path: path.to_path_buf(),
        reason,
    };
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta =
                std::fs::symlink_metadata(path).map_err(|e| FileError::io("write", path, e))?;
            if meta.file_type().is_symlink() {
                return Err(protected(
                    "it is a link; a journal is never written through one".into(),
                ));
            }
            if let Some(kind) = irregular_kind(meta.file_type()) {
                return Err(protected(format!("it is {kind}, not a file")));
            }
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(flags)
                .open(path)
                .map_err(|e| FileError::io("write", path, e))?
        }
        Err(e) => return Err(FileError::io("write", path, e)),
    };
    let opened = file
        .metadata()
        .map_err(|e| FileError::io("write", path, e))?;
    if let Some(kind) = irregular_kind(opened.file_type()) {
        return Err(protected(format!("it is {kind}, not a file")));
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(protected(
                "another recording is writing it (give this one another --trace)".into(),
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(FileError::io("write", path, e)),
    }
    file.set_len(0)
        .and_then(|()| set_blocking(&file))
        .map_err(|e| FileError::io("write", path, e))?;
    Ok(file)
}

/// Removes `path` if it is still the file `file` is (same device and
/// inode, not a link): a journal is removed only by the recording that
/// wrote it.
pub fn remove_if_same(path: &Path, file: &std::fs::File) {
    use std::os::unix::fs::MetadataExt as _;
    let (Ok(now), Ok(ours)) = (std::fs::symlink_metadata(path), file.metadata()) else {
        return;
    };
    if now.is_file() && now.dev() == ours.dev() && now.ino() == ours.ino() {
        let _ = std::fs::remove_file(path);
    }
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
