//! Reads of files at paths someone else controls (config.json, the index,
//! view files, traces, journals, hostfiles): bounded, regular files only,
//! never blocking on a FIFO, refused before they are opened where they are
//! not regular files.

use std::io::Read as _;
use std::path::Path;

use super::FileError;

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

/// Opens `path` read-only with `extra` flags, never blocking, never
/// following a link at its last component, closed on exec.
fn open_without_following(
    path: &Path,
    extra: rustix::fs::OFlags,
) -> std::io::Result<std::fs::File> {
    use rustix::fs::OFlags;
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        path,
        extra | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

/// Opens an entry weightscope keeps (a cache record, a compiled kernel)
/// for reading, without following a link at its last component and
/// without blocking: the caller checks what the returned file is.
///
/// # Errors
/// The open's error (`ELOOP` for a link).
pub fn open_entry(path: &Path) -> std::io::Result<std::fs::File> {
    open_without_following(path, rustix::fs::OFlags::RDONLY)
}

/// Opens a FIFO that weightscope made (in a private folder) for reading,
/// also for writing so that its reader never sees an end of file while
/// writers come and go; non-blocking. Only ever read.
///
/// # Errors
/// The open's error; a path that is not a FIFO.
pub fn open_own_fifo(path: &Path) -> std::io::Result<std::fs::File> {
    let file = open_without_following(path, rustix::fs::OFlags::RDWR)?;
    let stat = rustix::fs::fstat(&file)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Fifo {
        return Err(std::io::Error::other("not a FIFO"));
    }
    Ok(file)
}

/// The targets of the links in `folder` (a process's `/proc/PID/fd`),
/// each given to `each`; links that vanish meanwhile are passed over.
/// Each is read relative to the folder's descriptor: a path from the root
/// would be looked up again for each of a job's 18,000 descriptors.
pub fn each_link_target(folder: &Path, mut each: impl FnMut(&Path)) {
    use std::os::unix::ffi::OsStrExt as _;
    let (Ok(entries), Ok(table)) = (std::fs::read_dir(folder), std::fs::File::open(folder)) else {
        return;
    };
    let mut buf = Vec::new();
    for entry in entries.flatten() {
        let Ok(target) = rustix::fs::readlinkat(&table, entry.file_name().as_os_str(), buf) else {
            buf = Vec::new();
            continue;
        };
        let target = target.into_bytes();
        each(Path::new(std::ffi::OsStr::from_bytes(&target)));
        buf = target;
    }
}
