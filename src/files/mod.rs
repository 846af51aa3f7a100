//! Every file weightscope opens for writing, and every file it reads from
//! a path someone else controls, goes through this module; no other module
//! of `src/` opens a file for writing, makes a folder, renames or removes
//! (a test reads the source and fails when one does).
//!
//! - [`Output`]: an output a person named (`--json`, `--csv`, `--trace`, the
//!   window's Save), checked before the work and again at the moment of
//!   writing (links, hard links, FIFOs and devices that appeared meanwhile
//!   are refused; nothing is written through a link that is not the
//!   person's own);
//! - [`open_journal`]: a file written line by line while a job runs;
//! - [`replace_entry`] and the rest of `private`: weightscope's own folders
//!   (caches, kernels, the probe, settings), whose entries are replaced by
//!   rename, never written through;
//! - [`read_bounded`] and the rest of `read`: bounded reads of regular
//!   files only, never blocking on a FIFO.
//!
//! Temporary files carry a name no other host, container or user can
//! claim (`temporary`), and only our own are ever removed.

use std::path::{Path, PathBuf};

mod journal;
mod output;
mod private;
mod read;
mod temporary;

pub use journal::{open_journal, remove_if_same};
pub use output::{Output, STALL_LIMIT, signal_arrived};
pub use private::{
    create_entry, make_fifo, make_private, new_private_folder, private_dir, remove_empty_folder,
    remove_entry, remove_own_tree, replace_entry, replace_entry_mode, replace_settings,
    write_proc_self,
};
pub use read::{
    each_link_target, ensure_regular, irregular_kind, open_entry, open_own_fifo, open_regular,
    read_bounded, read_bounded_into, read_bounded_text,
};
pub use temporary::tag as temporary_tag;

/// Checks an output path before any work starts ([`Output::check`]).
///
/// # Errors
/// As [`Output::check`].
pub fn check_output(path: &Path, inputs: &[&Path]) -> Result<Output, FileError> {
    Output::check(path, inputs)
}

/// Makes the output folder `path` a person named (`convert OUT`), or takes
/// it as it is when it is a folder already: refused when it is inside (or
/// is) one of the `inputs` being read, or is a link or anything but a
/// folder. Its files are then written each through [`Output`].
///
/// # Errors
/// [`FileError::Protected`] with the reason; [`FileError::Io`] when it
/// cannot be made.
pub fn make_output_folder(path: &Path, inputs: &[&Path]) -> Result<(), FileError> {
    let protected = |reason: String| FileError::Protected {
        path: path.to_path_buf(),
        reason,
    };
    let out = output::resolved(path);
    for input in inputs {
        let input = output::resolved(input);
        if out == input || out.starts_with(&input) {
            return Err(protected(format!(
                "it is inside the checkpoint being read ({})",
                input.display()
            )));
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(meta) if meta.file_type().is_symlink() => {
            Err(protected("it is a link; name the folder itself".into()))
        }
        Ok(_) => Err(protected("it is not a folder".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(path).map_err(|e| FileError::Io {
                action: "make the folder",
                path: path.to_path_buf(),
                source: e,
            })
        }
        Err(e) => Err(FileError::Io {
            action: "read",
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Clears `O_NONBLOCK` on an open file (set only so that opening a FIFO
/// never waits).
fn set_blocking(file: &std::fs::File) -> std::io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(file)?;
    rustix::fs::fcntl_setfl(file, flags - rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// Why a file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path is not a regular file (a FIFO, a device, a folder).
    #[error("not a regular file ({kind}): {}", crate::units::Shown::path(path))]
    NotRegular {
        /// What it is instead.
        kind: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// Larger than this kind of file may be.
    #[error(
        "{what} of {size} bytes is larger than the {cap}-byte limit: {}",
        crate::units::Shown::path(path)
    )]
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
    #[error("refusing to write {}: {reason}", crate::units::Shown::path(path))]
    Protected {
        /// The output path.
        path: PathBuf,
        /// Why ("it is inside the checkpoint being read").
        reason: String,
    },
    /// The operating system's error.
    #[error(
        "cannot {action} {}: {}",
        crate::units::Shown::path(path),
        io_reason(source)
    )]
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
            Self::Io { source, .. } => io_reason(source),
            Self::Protected { reason, .. } => reason.clone(),
        }
    }

    /// A writer of `path`'s errors: the OS's error, naming the path as the
    /// person named it (never a temporary name).
    fn writing(path: &Path) -> impl Fn(std::io::Error) -> Self + Copy + '_ {
        move |source| Self::io("write", path, source)
    }

    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
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
    let outside = &crate::environment::get().outside;
    outside
        .cache_dir
        .clone()
        .or_else(|| outside.user_cache().map(|c| c.join("weightscope")))
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
            rustix::fs::mkfifoat(
                rustix::fs::CWD,
                &fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
            )
            .expect("mkfifo");
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
        check_output(&path, &[])
            .and_then(|out| out.write(b"first"))
            .expect("write");
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o666 & !umask(), "as a file written the usual way");
        }
        check_output(&path, &[])
            .and_then(|out| out.write(b"second"))
            .expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"second");
        // A folder that does not exist: an error naming the path, no file.
        let missing = dir.path().join("missing/trace.json");
        let err = check_output(&missing, &[])
            .and_then(|out| out.write(b"x"))
            .expect_err("no folder");
        assert!(err.to_string().contains("missing/trace.json"), "{err}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["trace.json"], "no temporary file left");
    }
}
