//! Journals: files written line by line while a job runs (`record
//! --trace`), for this process alone.

use std::path::Path;

use super::FileError;

/// Opens a journal for this process alone: made with `O_EXCL` and
/// `O_NOFOLLOW` when new; an existing one must be a regular file of this
/// user's (not a link, FIFO or device) with one name (a hard link to a
/// shard would truncate the shard), and is emptied only once this process
/// holds its lock and has checked the open file again. A journal another
/// recording is writing (it holds the lock) is refused. The lock lasts as
/// long as the returned file.
///
/// # Errors
/// [`FileError::Protected`] for a link, a non-file, a file of another
/// user, a file with several names or a journal in use; [`FileError::Io`]
/// otherwise.
pub fn open_journal(path: &Path) -> Result<std::fs::File, FileError> {
    use rustix::fs::{Mode, OFlags};
    let protected = |reason: String| FileError::Protected {
        path: path.to_path_buf(),
        reason,
    };
    let io = FileError::writing(path);
    let flags =
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(0o666 & !super::umask());
    let fd = match rustix::fs::openat(
        rustix::fs::CWD,
        path,
        flags | OFlags::CREATE | OFlags::EXCL,
        mode,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::EXIST) => {
            let meta = std::fs::symlink_metadata(path).map_err(io)?;
            if meta.file_type().is_symlink() {
                return Err(protected(
                    "it is a link; a journal is never written through one".into(),
                ));
            }
            if let Some(kind) = super::irregular_kind(meta.file_type()) {
                return Err(protected(format!("it is {kind}, not a file")));
            }
            rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty())
                .map_err(|e| io(e.into()))?
        }
        Err(e) => return Err(io(e.into())),
    };
    // Checked on the open file: what was opened is what is emptied.
    let st = rustix::fs::fstat(&fd).map_err(|e| io(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(protected("it is not a regular file".into()));
    }
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Err(protected(format!(
            "it belongs to another user (uid {}); a journal is only a file of yours",
            st.st_uid
        )));
    }
    if st.st_nlink > 1 {
        return Err(protected(format!(
            "it has {} names (hard links); emptying it would empty the others",
            st.st_nlink
        )));
    }
    let file = std::fs::File::from(fd);
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(protected(
                "another recording is writing it (give this one another --trace)".into(),
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    super::set_blocking(&file).map_err(io)?;
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
