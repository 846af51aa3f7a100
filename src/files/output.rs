//! Outputs a person named (`--json`, `--csv`, `--trace`, the window's
//! Save): checked before the work, and checked again at the moment of
//! writing, against what was checked.
//!
//! What may be written:
//! - nothing there, or a regular file of this user's with one name (one
//!   hard link): a temporary file made new in the folder opened at the
//!   check, renamed over the name (`renameat` replaces the folder entry and
//!   never follows it: whatever appears at the name in the last instant is
//!   replaced, not written through);
//! - a link of this user's to such a file: the file is replaced in its own
//!   folder (the link stays), only if the link still leads to it;
//! - written in place, only when it was there when named, with a deadline,
//!   giving up at a signal, and only these (an allow-list, the same for
//!   every path, `/proc` and `/dev/fd` included): this process's own
//!   standard output or error (whatever is at the path has the same device
//!   and inode as descriptor 1 or 2), a FIFO or a terminal of this user's,
//!   the controlling terminal `/dev/tty`, and the discarding devices
//!   `/dev/null`, `/dev/zero`, `/dev/full`.
//!
//! A path that leads through `/proc` (`/dev/stdout`, `/dev/fd/3`,
//! `/proc/self/root/…`, a link to one of them) is resolved to what it is
//! and checked as that: a regular file there is replaced as above, with
//! every check a file passes (never appended to).
//!
//! Never: a checkpoint file, anything inside a checkpoint being read, a
//! file of another user, a file with more than one name, a file of the
//! kernel's (`/proc`, `/sys`), a FIFO or terminal of another user, any
//! other device (`/dev/ptmx`, a disk), a socket, a folder, a link to
//! nothing, or anything that changed kind (a link, a FIFO) between the
//! check and the write.

use std::ffi::OsString;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, OFlags};

use super::FileError;

/// Why a device is refused.
const OTHER_DEVICE: &str = "it is a device other than a terminal or /dev/null; outputs are written only to files, FIFOs, terminals and /dev/null";

/// How long an in-place write (a FIFO, a pipe, a terminal) may make no
/// progress before it is given up.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// Termination signals seen so far ([`signal_arrived`]).
static SIGNALS: AtomicU64 = AtomicU64::new(0);

/// Tells blocked in-place writes that a termination signal arrived: a
/// write that started before it gives up (the first signal's outputs are
/// still written; a second signal stops a write nobody reads).
pub fn signal_arrived() {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// An output path, checked: write it with [`Output::write`].
#[derive(Debug)]
pub struct Output {
    /// As the person named it (every message says this, never a
    /// temporary name).
    named: PathBuf,
    /// The checkpoints being read, resolved.
    inputs: Vec<PathBuf>,
    /// What the check found.
    plan: Plan,
}

/// What is at an output path and how it is written.
#[derive(Debug)]
enum Plan {
    /// Replaced whole through a temporary file in `folder`.
    Replace {
        /// The folder, opened.
        folder: OwnedFd,
        /// Its identity (device, inode).
        folder_id: (u64, u64),
        /// The entry's name in the folder.
        name: OsString,
        /// The regular file there (device, inode, mode), if any.
        was: Option<(u64, u64, u32)>,
        /// Reached through a link of the person's.
        via_link: bool,
    },
    /// Written in place (a FIFO, a terminal, `/dev/null`, `/dev/stdout`).
    InPlace {
        /// The path to open.
        path: PathBuf,
        /// Device and inode: what is opened must be it.
        identity: (u64, u64),
        /// What it is.
        kind: InPlace,
    },
}

/// What an output written in place is: the allow-list, whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InPlace {
    /// This process's own standard output or error (descriptor 1 or 2).
    /// When it is a file (written at the descriptor's offset, in order with
    /// the rest) or a socket (which cannot be opened by its path), it is
    /// written through a copy of that descriptor (`through_copy`).
    Stdio { fd: i32, through_copy: bool },
    /// A FIFO of this user's.
    Fifo,
    /// A terminal of this user's.
    Terminal,
    /// `/dev/tty`: opening it gives the terminal it stands for (another
    /// node, so its identity is not compared).
    Controlling,
    /// `/dev/null`, `/dev/zero`, `/dev/full`.
    Discarding,
}

impl InPlace {
    fn describe(self) -> &'static str {
        match self {
            Self::Stdio { fd: 1, .. } => "this process's standard output",
            Self::Stdio { .. } => "this process's standard error",
            Self::Fifo => "a FIFO",
            Self::Terminal => "a terminal",
            Self::Controlling => "the controlling terminal",
            Self::Discarding => "a discarding device",
        }
    }
}

impl Plan {
    fn describe(&self) -> String {
        match self {
            Self::Replace {
                was: None,
                via_link: false,
                ..
            } => "nothing".into(),
            Self::Replace {
                via_link: false, ..
            } => "a file".into(),
            Self::Replace { via_link: true, .. } => "a link to a file".into(),
            Self::InPlace { kind, .. } => kind.describe().into(),
        }
    }
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The absolute, symlink-resolved form of a path that may not exist yet:
/// its folder resolved, its name kept.
pub(super) fn resolved(path: &Path) -> PathBuf {
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

/// The character devices an output may be written into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writable {
    /// `/dev/null`, `/dev/zero`, `/dev/full`: nothing reaches anyone.
    Discarding,
    /// A terminal (a virtual console, a serial line, a pseudo-terminal's
    /// far end): written only when it is this user's.
    Terminal,
    /// `/dev/tty`: this process's controlling terminal, whoever owns the
    /// node.
    Controlling,
}

/// Which [`Writable`] device `rdev` is; `None` for every other device
/// (a disk, `/dev/mem`, `/dev/ptmx`, which makes a new terminal that
/// nobody reads, `/dev/console`).
fn writable_device(rdev: u64) -> Option<Writable> {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    match (major, minor) {
        (1, 3 | 5 | 7) => Some(Writable::Discarding),
        (5, 0) => Some(Writable::Controlling),
        (4 | 136..=143, _) => Some(Writable::Terminal),
        _ => None,
    }
}

/// The descriptor among 1 and 2 that is the file `meta` describes (the
/// same device and inode): this process's own standard output or error.
fn own_stdio(meta: &std::fs::Metadata) -> Option<i32> {
    use std::os::unix::fs::MetadataExt as _;
    let same = |st: rustix::fs::Stat| st.st_dev == meta.dev() && st.st_ino == meta.ino();
    if rustix::fs::fstat(std::io::stdout()).is_ok_and(same) {
        Some(1)
    } else if rustix::fs::fstat(std::io::stderr()).is_ok_and(same) {
        Some(2)
    } else {
        None
    }
}

/// A copy of this process's standard output (1) or error (2).
fn stdio_copy(fd: i32) -> std::io::Result<OwnedFd> {
    if fd == 1 {
        std::io::stdout().as_fd().try_clone_to_owned()
    } else {
        std::io::stderr().as_fd().try_clone_to_owned()
    }
}

/// File systems of the kernel's (`/proc`, `/sys`, cgroups, debugfs...):
/// their files are the kernel's interfaces, never an output.
fn kernel_file_system(folder: &OwnedFd) -> bool {
    const MAGICS: [i64; 11] = [
        0x9fa0,      // proc
        0x6265_6572, // sysfs
        0x0027_e0eb, // cgroup
        0x6367_7270, // cgroup2
        0x6462_6720, // debugfs
        0x7472_6163, // tracefs
        0x7365_6373, // securityfs
        0xcafe_4a11, // bpf
        0x6265_6570, // configfs
        0x6165_676c, // pstore
        0xde5e_81e4, // efivarfs
    ];
    // `f_type` is an i64 here, an i32 on some targets.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstatfs(folder).is_ok_and(|fs| MAGICS.contains(&(fs.f_type as i64)))
}

impl Output {
    /// Checks `path` before any work: refused when it is inside (or is)
    /// one of the checkpoints being read (`inputs`), names an existing
    /// checkpoint file, is not something an output may be written to, or
    /// its folder cannot be written.
    ///
    /// # Errors
    /// [`FileError::Protected`] with the reason; [`FileError::Io`] for a
    /// folder that cannot be written.
    pub fn check(path: &Path, inputs: &[&Path]) -> Result<Self, FileError> {
        let inputs: Vec<PathBuf> = inputs.iter().map(|p| resolved(p)).collect();
        let plan = plan(path, &inputs)?;
        if let Plan::Replace { folder, .. } = &plan {
            writable(folder).map_err(|e| FileError::Io {
                action: "write into the folder of",
                path: path.to_path_buf(),
                source: e,
            })?;
        }
        Ok(Self {
            named: path.to_path_buf(),
            inputs,
            plan,
        })
    }

    /// The path as named.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.named
    }

    /// Writes `bytes` whole, after checking again that what is at the path
    /// is what was checked (or a regular file of this user's where there
    /// was nothing) and still passes every check.
    ///
    /// # Errors
    /// [`FileError::Protected`] when the path changed or no longer passes;
    /// [`FileError::Io`] naming the path (never a temporary name).
    pub fn write(&self, bytes: &[u8]) -> Result<(), FileError> {
        self.write_with(&mut |w| w.write_all(bytes))
    }

    /// [`Output::write`] of what `fill` writes (a file too large to hold:
    /// a converted shard, streamed tensor by tensor). A replaced file is
    /// whole or not there: `fill` writes a temporary file that is renamed
    /// into place only when it returns `Ok`.
    ///
    /// # Errors
    /// As [`Output::write`]; `fill`'s error, naming the path.
    pub fn write_with(
        &self,
        fill: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), FileError> {
        let protected = |reason: String| FileError::Protected {
            path: self.named.clone(),
            reason,
        };
        let now = plan(&self.named, &self.inputs)?;
        let changed = || {
            protected(format!(
                "it changed while the work ran (it was {}, it is now {}); nothing was written",
                self.plan.describe(),
                now.describe()
            ))
        };
        match (&self.plan, &now) {
            (
                Plan::InPlace { identity: a, .. },
                Plan::InPlace {
                    path,
                    identity: b,
                    kind,
                },
            ) if a == b => write_in_place(&self.named, path, *b, *kind, fill),
            (
                Plan::Replace {
                    folder,
                    folder_id: checked_folder,
                    via_link: false,
                    ..
                },
                Plan::Replace {
                    folder_id,
                    name,
                    was,
                    via_link: false,
                    ..
                },
            ) if folder_id == checked_folder => replace_in(&self.named, folder, name, *was, fill),
            (
                Plan::Replace {
                    folder,
                    folder_id: checked_folder,
                    was: Some(checked),
                    via_link: true,
                    ..
                },
                Plan::Replace {
                    folder_id,
                    name,
                    was: Some(target),
                    via_link: true,
                    ..
                },
            ) if folder_id == checked_folder && checked.0 == target.0 && checked.1 == target.1 => {
                replace_in(&self.named, folder, name, Some(*target), fill)
            }
            _ => Err(changed()),
        }
    }
}

/// Whether this process may make files in `folder` (a read-only mount or a
/// folder of another user's says so now, not after the work).
fn writable(folder: &OwnedFd) -> std::io::Result<()> {
    rustix::fs::accessat(
        folder,
        ".",
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        AtFlags::EACCESS,
    )
    .map_err(std::io::Error::from)?;
    let vfs = rustix::fs::fstatvfs(folder)?;
    if vfs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        return Err(std::io::Error::from(rustix::io::Errno::ROFS));
    }
    Ok(())
}

fn open_folder(named: &Path, folder: &Path) -> Result<(OwnedFd, (u64, u64)), FileError> {
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let io = FileError::writing(named);
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        folder,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io(e.into()))?;
    Ok((fd, (st.st_dev, st.st_ino)))
}

/// Decides how `named` is written, from what is there now, with every
/// check.
fn plan(named: &Path, inputs: &[PathBuf]) -> Result<Plan, FileError> {
    let protected = |reason: String| FileError::Protected {
        path: named.to_path_buf(),
        reason,
    };
    let io = FileError::writing(named);
    let out = resolved(named);
    for input in inputs {
        if out == *input || out.starts_with(input) {
            return Err(protected(format!(
                "it is inside the checkpoint being read ({})",
                input.display()
            )));
        }
    }
    let parent = named.parent().unwrap_or(Path::new(""));
    let Some(name) = named.file_name() else {
        return Err(protected("it names no file".into()));
    };
    let link = match std::fs::symlink_metadata(named) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (folder, folder_id) = open_folder(named, parent)?;
            return Ok(Plan::Replace {
                folder,
                folder_id,
                name: name.to_os_string(),
                was: None,
                via_link: false,
            });
        }
        Err(e) => return Err(io(e)),
    };
    let via_link = link.file_type().is_symlink();
    let meta = if via_link {
        match std::fs::metadata(named) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(protected(
                    "it is a link to a file that does not exist".into(),
                ));
            }
            Err(e) => return Err(io(e)),
        }
    } else {
        link.clone()
    };
    if let Some(plan) = plan_not_a_file(named, &meta) {
        return plan;
    }
    // A regular file, itself or through a link.
    plan_file(named, name, &link, &meta)
}

/// How `named` is written when what is there (`meta`, links followed) is
/// not a regular file of another process's: in place (this process's own
/// stdout or stderr, a FIFO or terminal of this user's, `/dev/tty`, the
/// discarding devices) or refused; `None` for a regular file, which is
/// replaced after the checks of [`plan_file`].
fn plan_not_a_file(named: &Path, meta: &std::fs::Metadata) -> Option<Result<Plan, FileError>> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let protected = |reason: String| FileError::Protected {
        path: named.to_path_buf(),
        reason,
    };
    let kind = meta.file_type();
    let me = euid();
    let in_place = |kind: InPlace| {
        Ok(Plan::InPlace {
            path: named.to_path_buf(),
            identity: (meta.dev(), meta.ino()),
            kind,
        })
    };
    // This process's own standard output or error, whatever it is and
    // however it is named (`/dev/stdout`, `/proc/self/fd/1`, the terminal
    // or file it leads to): what the person's shell gave it.
    if let Some(fd) = own_stdio(meta) {
        return Some(in_place(InPlace::Stdio {
            fd,
            through_copy: kind.is_file() || kind.is_socket(),
        }));
    }
    let of_another = |what: &str| {
        Err(protected(format!(
            "it is {what} of another user (uid {}); weightscope writes in place only into FIFOs and terminals of yours",
            meta.uid()
        )))
    };
    if kind.is_fifo() {
        if meta.uid() != me {
            return Some(of_another("a FIFO"));
        }
        return Some(in_place(InPlace::Fifo));
    }
    if kind.is_char_device() {
        return Some(match writable_device(meta.rdev()) {
            Some(Writable::Discarding) => in_place(InPlace::Discarding),
            Some(Writable::Controlling) => in_place(InPlace::Controlling),
            Some(Writable::Terminal) if meta.uid() == me => in_place(InPlace::Terminal),
            Some(Writable::Terminal) => of_another("a terminal"),
            None => Err(protected(OTHER_DEVICE.into())),
        });
    }
    if !kind.is_file() {
        return Some(Err(protected(match super::irregular_kind(kind) {
            Some("a folder") => "it is a folder".into(),
            Some("a device") => OTHER_DEVICE.into(),
            Some("a socket") => {
                "it is a socket; outputs are written only to files, FIFOs, terminals and /dev/null"
                    .into()
            }
            Some(kind) => format!("it is {kind}, not a file"),
            None => "it is not a file".into(),
        })));
    }
    None
}

/// How a regular file at `named` (itself, or the target of the link
/// `link`) is replaced, after the checks a file must pass: the link and
/// the file this user's, one name, not a checkpoint file.
fn plan_file(
    named: &Path,
    name: &std::ffi::OsStr,
    link: &std::fs::Metadata,
    meta: &std::fs::Metadata,
) -> Result<Plan, FileError> {
    use std::os::unix::fs::MetadataExt as _;
    let protected = |reason: String| FileError::Protected {
        path: named.to_path_buf(),
        reason,
    };
    let io = FileError::writing(named);
    let via_link = link.file_type().is_symlink();
    let me = euid();
    if via_link && link.uid() != me {
        return Err(protected(format!(
            "it is a link made by another user (uid {}); weightscope follows only links of yours",
            link.uid()
        )));
    }
    if meta.uid() != me {
        return Err(protected(format!(
            "it belongs to another user (uid {}); weightscope replaces only files of yours",
            meta.uid()
        )));
    }
    if meta.nlink() > 1 {
        return Err(protected(format!(
            "it has {} names (hard links); weightscope replaces only a file with one, so that no other name of it changes",
            meta.nlink()
        )));
    }
    let target = if via_link {
        std::fs::canonicalize(named).map_err(io)?
    } else {
        named.to_path_buf()
    };
    // A link through /proc to a file that was deleted, or whose name now
    // leads elsewhere: there is no name to replace it by.
    if via_link
        && !std::fs::symlink_metadata(&target)
            .is_ok_and(|at| at.is_file() && at.dev() == meta.dev() && at.ino() == meta.ino())
    {
        return Err(protected(
            "it leads to a file that has no name of its own any more (deleted or moved); nothing is written through it".into(),
        ));
    }
    let target_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if super::is_checkpoint_file_name(&target_name) {
        return Err(protected(format!(
            "it is an existing checkpoint file ({target_name})"
        )));
    }
    let (folder, folder_id) = open_folder(named, target.parent().unwrap_or(Path::new("")))?;
    if kernel_file_system(&folder) {
        return Err(protected(
            "it is a file of the kernel's (/proc, /sys), not an output".into(),
        ));
    }
    Ok(Plan::Replace {
        folder,
        folder_id,
        name: target.file_name().unwrap_or(name).to_os_string(),
        was: Some((meta.dev(), meta.ino(), meta.mode() & 0o7777)),
        via_link,
    })
}

/// Writes `bytes` as `name` in `folder` through a temporary file: the entry
/// found there at the last moment must be `was` (or nothing, where a new
/// file of ours may be linked in without replacing anything).
fn replace_in(
    named: &Path,
    folder: &OwnedFd,
    name: &std::ffi::OsStr,
    was: Option<(u64, u64, u32)>,
    fill: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), FileError> {
    use std::io::Write as _;
    let io = FileError::writing(named);
    super::temporary::remove_leftovers(folder);
    let mut temp = super::temporary::create_in(folder).map_err(io)?;
    let mode = was.map_or(0o666 & !super::umask(), |w| w.2);
    let written = {
        let mut buffered = std::io::BufWriter::with_capacity(1 << 20, &mut temp.file);
        fill(&mut buffered).and_then(|()| buffered.flush())
    }
    .and_then(|()| {
        rustix::fs::fchmod(&temp.file, rustix::fs::Mode::from_raw_mode(mode))
            .map_err(std::io::Error::from)
    })
    .and_then(|()| temp.file.sync_all());
    let placed = written.map_err(io).and_then(|()| {
        let there = rustix::fs::statat(folder, name, AtFlags::SYMLINK_NOFOLLOW);
        match (there, was) {
            (Err(rustix::io::Errno::NOENT), _) => link_new(folder, &temp.name, name).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    FileError::Protected {
                        path: named.to_path_buf(),
                        reason: "something appeared at it while it was being written; nothing was replaced".into(),
                    }
                } else {
                    io(e)
                }
            }),
            (Ok(st), Some((dev, ino, _)))
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                    && st.st_dev == dev
                    && st.st_ino == ino =>
            {
                rustix::fs::renameat(folder, temp.name.as_os_str(), folder, name)
                    .map_err(|e| io(e.into()))
            }
            (Ok(st), None)
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                    && st.st_uid == euid()
                    && st.st_nlink == 1 =>
            {
                rustix::fs::renameat(folder, temp.name.as_os_str(), folder, name)
                    .map_err(|e| io(e.into()))
            }
            (Ok(_), _) => Err(FileError::Protected {
                path: named.to_path_buf(),
                reason: "it changed while it was being written; nothing was replaced".into(),
            }),
            (Err(e), _) => Err(io(e.into())),
        }
    });
    if placed.is_err() {
        super::temporary::remove(folder, &temp.name);
    }
    placed
}

/// Puts the temporary file `from` at `to` in `folder` without replacing
/// anything there (`AlreadyExists` when something is).
fn link_new(folder: &OwnedFd, from: &std::ffi::OsStr, to: &std::ffi::OsStr) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    match rustix::fs::renameat_with(folder, from, folder, to, rustix::fs::RenameFlags::NOREPLACE) {
        Ok(()) => return Ok(()),
        // A file system without RENAME_NOREPLACE: a hard link, then the
        // temporary name removed.
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {}
        Err(e) => return Err(e.into()),
    }
    rustix::fs::linkat(folder, from, folder, to, AtFlags::empty())?;
    super::temporary::remove(folder, from);
    Ok(())
}

/// Writes into what is at `path` (a FIFO, a terminal, `/dev/null`, this
/// process's standard output) without creating, truncating or renaming
/// anything. What is opened must be what was checked (`identity`); a
/// FIFO with no reader is an error, not a wait; a reader that stops
/// reading is given [`STALL_LIMIT`], and a termination signal ends the
/// wait.
fn write_in_place(
    named: &Path,
    path: &Path,
    identity: (u64, u64),
    kind: InPlace,
    fill: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), FileError> {
    let io = FileError::writing(named);
    let fd = match kind {
        InPlace::Stdio {
            fd,
            through_copy: true,
        } => stdio_copy(fd).map_err(io)?,
        _ => rustix::fs::openat(
            rustix::fs::CWD,
            path,
            OFlags::WRONLY | OFlags::APPEND | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| match (e, kind) {
            (rustix::io::Errno::NXIO, InPlace::Controlling) => io(std::io::Error::other(
                "this process has no controlling terminal",
            )),
            (rustix::io::Errno::NXIO, InPlace::Fifo) => {
                io(std::io::Error::other("it is a FIFO nobody is reading"))
            }
            (e, _) => io(e.into()),
        })?,
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io(e.into()))?;
    // `/dev/tty` opens the terminal it stands for, another node.
    if (st.st_dev, st.st_ino) != identity && kind != InPlace::Controlling {
        return Err(io(std::io::Error::other(
            "it was replaced while being opened",
        )));
    }
    fill(&mut DeadlineWriter(&fd)).map_err(io)
}

/// Writes through [`write_with_deadline`]: a stalled reader is waited for
/// at most [`STALL_LIMIT`] at a time.
struct DeadlineWriter<'a>(&'a OwnedFd);

impl std::io::Write for DeadlineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_with_deadline(self.0, buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes all of `bytes` to a non-blocking descriptor, waiting for room at
/// most [`STALL_LIMIT`] at a time, and giving up at a termination signal
/// that arrives meanwhile.
pub(super) fn write_with_deadline(fd: &OwnedFd, mut bytes: &[u8]) -> std::io::Result<()> {
    let signals = SIGNALS.load(Ordering::SeqCst);
    let mut stalled_since = std::time::Instant::now();
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = bytes.get(n..).unwrap_or_default();
                stalled_since = std::time::Instant::now();
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {
                if SIGNALS.load(Ordering::SeqCst) != signals {
                    return Err(std::io::Error::other(
                        "stopped by a signal while nobody read it",
                    ));
                }
                if stalled_since.elapsed() >= STALL_LIMIT {
                    return Err(std::io::Error::other(format!(
                        "nobody read it for {} s",
                        STALL_LIMIT.as_secs()
                    )));
                }
                let mut fds = [rustix::event::PollFd::new(
                    fd,
                    rustix::event::PollFlags::OUT,
                )];
                let slice = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                let _ = rustix::event::poll(&mut fds, Some(&slice));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
