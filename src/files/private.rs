//! Folders of weightscope's own (caches, compiled kernels, the probe's
//! folders, the settings, the demo) and what is written in them: the folder
//! is checked to be this user's alone, and an entry is replaced through a
//! temporary file renamed over its name, so a link put at the name is
//! replaced, never written through.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
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
    if meta.is_dir() && meta.uid() == euid() && meta.mode() & 0o022 == 0 {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a folder of this user's alone",
        ))
    }
}

/// Makes `base` a folder owned by `uid` with no access for anyone else
/// (mode 0700; a folder of ours with more access is narrowed), its parents
/// made as needed; refused when it is a link, not a folder, or another
/// user's.
///
/// # Errors
/// Why not, naming `base`.
pub fn make_private(base: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(base) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err),
    }
    let meta = std::fs::symlink_metadata(base)?;
    let refuse = |why: &str| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} {why}; refusing it for the probe", base.display()),
        ))
    };
    if !meta.file_type().is_dir() {
        return refuse("is not a folder (a symlink?)");
    }
    if meta.uid() != uid {
        return refuse("belongs to another user");
    }
    if meta.mode().trailing_zeros() < 6 {
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Makes a new folder (mode 0700) in `base` named `PREFIX` and random
/// letters, by one `mkdir` that fails when anything is at that name.
///
/// # Errors
/// The OS's error.
pub fn new_private_folder(base: &Path, prefix: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .rand_bytes(16)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(base)?
        .keep())
}

/// Opens a folder of this user's alone (checked on the open folder);
/// `shared` also takes a folder of this user's that others may write
/// (the settings folder, made under umask 002).
fn open_private(dir: &Path, shared: bool) -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if st.st_uid != euid() || (!shared && st.st_mode & 0o022 != 0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a folder of this user's alone",
        ));
    }
    Ok(fd)
}

/// Keeps `bytes` as `name` in the private folder `dir`: a temporary file
/// made new there, renamed over the name. Whatever is at the name (a link
/// someone put there) is replaced, never followed.
///
/// # Errors
/// When `dir` is not this user's alone, or the write fails.
pub fn replace_entry(dir: &Path, name: &OsStr, bytes: &[u8]) -> std::io::Result<()> {
    replace_entry_mode(dir, name, bytes, 0o600)
}

/// [`replace_entry`] with the file's mode.
///
/// # Errors
/// As [`replace_entry`].
pub fn replace_entry_mode(
    dir: &Path,
    name: &OsStr,
    bytes: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    replace_in(&open_private(dir, false)?, name, bytes, mode)
}

/// Keeps the settings file `name` in `dir`, a folder of this user's (made
/// 0700 when missing; one that others may write, made by an earlier
/// version under umask 002, is used as it is): replaced by rename, never
/// written through.
///
/// # Errors
/// When `dir` is not a folder of this user's, or the write fails.
pub fn replace_settings(dir: &Path, name: &OsStr, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    replace_in(&open_private(dir, true)?, name, bytes, 0o600)
}

/// Writes `bytes` as `name` in `folder` through a temporary file renamed
/// over the name.
fn replace_in(folder: &OwnedFd, name: &OsStr, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    super::temporary::remove_leftovers(folder);
    let mut temp = super::temporary::create_in(folder)?;
    let done = temp
        .file
        .write_all(bytes)
        .and_then(|()| {
            rustix::fs::fchmod(&temp.file, Mode::from_raw_mode(mode)).map_err(Into::into)
        })
        .and_then(|()| temp.file.sync_all())
        .and_then(|()| {
            rustix::fs::renameat(folder, temp.name.as_os_str(), folder, name).map_err(Into::into)
        });
    if done.is_err() {
        super::temporary::remove(folder, &temp.name);
    }
    done
}

/// Makes `name` in the private folder `dir` new (`O_EXCL`, never through a
/// link) with `bytes`.
///
/// # Errors
/// When anything is at the name already, or the write fails.
pub fn create_entry(dir: &Path, name: &OsStr, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let folder = open_private(dir, false)?;
    let fd = rustix::fs::openat(
        &folder,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    std::fs::File::from(fd).write_all(bytes)
}

/// Removes `path` when it is a regular file of this user's (checked
/// without following a link; a link is left alone).
pub fn remove_entry(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let Ok(folder) = rustix::fs::openat(
        rustix::fs::CWD,
        if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        },
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let ours = rustix::fs::statat(&folder, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && st.st_uid == euid()
    });
    if ours {
        let _ = rustix::fs::unlinkat(&folder, name, AtFlags::empty());
    }
}

/// Removes an empty folder (a cache's commit folder once its files are
/// gone); one with anything left in it stays.
pub fn remove_empty_folder(dir: &Path) {
    let _ = std::fs::remove_dir(dir);
}

/// Removes a folder weightscope made (a probe's) and everything in it,
/// when it is a folder of this user's (not a link). The standard
/// library's removal never follows a link inside.
pub fn remove_own_tree(dir: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == euid()) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Makes a FIFO at `path` with mode 0600 (in a private folder: the
/// processes of a job that closes inherited descriptors open it by path).
///
/// # Errors
/// The OS's error.
pub fn make_fifo(path: &Path) -> std::io::Result<()> {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, Mode::from_raw_mode(0o600)).map_err(Into::into)
}

/// Writes `bytes` to a file of this process in `/proc/self` (`clear_refs`).
///
/// # Errors
/// The OS's error; a name with a folder in it.
pub fn write_proc_self(name: &str, bytes: &[u8]) -> std::io::Result<()> {
    if name.contains('/') {
        return Err(std::io::Error::other("not a file of /proc/self"));
    }
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        format!("/proc/self/{name}").as_str(),
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::io::write(&fd, bytes)?;
    Ok(())
}
