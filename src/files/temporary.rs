//! Temporary files: made new in an opened folder under a name that no other
//! host, container or user can claim, and removed after a crash only when
//! they are provably ours.
//!
//! A name is `.weightscope-TAG-PID-RANDOM.part`. TAG is 16 hex digits of a
//! hash of the host name, the boot id and the PID namespace: two hosts
//! writing into one shared folder (the several-hosts recipe), two
//! containers on one host, or one host before and after a reboot never
//! share a TAG, so a PID is compared only with the processes of the
//! namespace that made it.

use std::ffi::{CStr, OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt as _;
use std::sync::OnceLock;

/// The start of every temporary name.
const PREFIX: &str = ".weightscope-";
/// The end of every temporary name.
const SUFFIX: &str = ".part";

/// FNV-1a, 64 bits: stable across builds, enough to tell namespaces apart.
fn fnv(bytes: &[u8], mut hash: u64) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// This host's, boot's and PID namespace's tag (16 hex digits).
#[must_use]
pub fn tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let host = rustix::system::uname();
        let boot = super::read_bounded(
            std::path::Path::new("/proc/sys/kernel/random/boot_id"),
            4096,
            "the boot id",
        )
        .unwrap_or_default();
        let namespace = std::fs::read_link("/proc/self/ns/pid").unwrap_or_default();
        let mut hash = 0xcbf2_9ce4_8422_2325;
        for part in [
            host.nodename().to_bytes(),
            &boot,
            namespace.as_os_str().as_bytes(),
        ] {
            hash = fnv(part, hash);
            hash = fnv(&[0], hash);
        }
        format!("{hash:016x}")
    })
}

/// A temporary file made new (`O_EXCL`, never through a link) in a folder.
#[derive(Debug)]
pub struct Temporary {
    /// Its name in the folder.
    pub name: OsString,
    /// Open for writing.
    pub file: std::fs::File,
}

/// A few random letters and digits (no crate: the standard library's
/// randomly keyed hasher, fed a counter and the time).
fn random_letters() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut value = hasher.finish();
    let alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..10)
        .map(|_| {
            let i = usize::try_from(value % 36).unwrap_or(0);
            value /= 36;
            char::from(alphabet[i])
        })
        .collect()
}

/// Makes a new temporary file (mode 0600) in `folder`.
///
/// # Errors
/// The OS's error (an unwritable folder, no space).
pub fn create_in(folder: impl AsFd) -> std::io::Result<Temporary> {
    use rustix::fs::{Mode, OFlags};
    let mut last = std::io::Error::other("no free temporary name");
    for _ in 0..16 {
        let name = format!(
            "{PREFIX}{}-{}-{}{SUFFIX}",
            tag(),
            std::process::id(),
            random_letters()
        );
        match rustix::fs::openat(
            folder.as_fd(),
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => {
                return Ok(Temporary {
                    name: OsString::from(name),
                    file: std::fs::File::from(fd),
                });
            }
            Err(rustix::io::Errno::EXIST) => last = rustix::io::Errno::EXIST.into(),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last)
}

/// The PID in a temporary name of this namespace's (`None` for any other
/// name, including temporary names of other hosts and namespaces).
fn own_pid(name: &OsStr) -> Option<u32> {
    let name = name.to_str()?;
    let rest = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let mut parts = rest.split('-');
    let (tag_part, pid, random) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || tag_part != tag()
        || random.is_empty()
        || !random.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return None;
    }
    pid.parse().ok()
}

/// Whether `/proc` shows this PID namespace's processes (in a container
/// whose `/proc` is the host's, it does not, and no PID can be judged).
fn proc_is_ours() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
        == Some(std::process::id())
}

/// Removes from `folder` the temporary files of this namespace's
/// weightscope processes that are gone (killed mid-write): only names with
/// this namespace's tag, a PID not running, regular files (never a link)
/// of this user's. Another host's, container's or user's are never
/// touched, live or not.
pub fn remove_leftovers(folder: impl AsFd) {
    if !proc_is_ours() {
        return;
    }
    let me = rustix::process::geteuid().as_raw();
    let Ok(mut dir) = rustix::fs::Dir::read_from(folder.as_fd()) else {
        return;
    };
    let mut gone = Vec::new();
    while let Some(Ok(entry)) = dir.read() {
        let name: &CStr = entry.file_name();
        let name = OsStr::from_bytes(name.to_bytes());
        let Some(pid) = own_pid(name) else { continue };
        if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        gone.push(name.to_os_string());
    }
    for name in gone {
        let ours = rustix::fs::statat(
            folder.as_fd(),
            name.as_os_str(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
                && st.st_uid == me
        });
        if ours {
            let _ = rustix::fs::unlinkat(
                folder.as_fd(),
                name.as_os_str(),
                rustix::fs::AtFlags::empty(),
            );
        }
    }
}

/// Removes a temporary file of ours by name (after a failed write).
pub fn remove(folder: impl AsFd, name: &OsStr) {
    let _ = rustix::fs::unlinkat(folder.as_fd(), name, rustix::fs::AtFlags::empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_namespaces_names_are_ours() {
        let mine = format!("{PREFIX}{}-123-abc{SUFFIX}", tag());
        assert_eq!(own_pid(OsStr::new(&mine)), Some(123));
        let other = format!("{PREFIX}0000000000000000-123-abc{SUFFIX}");
        assert_eq!(own_pid(OsStr::new(&other)), None, "another namespace's");
        // The old shape, with no tag, is never judged.
        assert_eq!(own_pid(OsStr::new(".weightscope-123-abc.part")), None);
        assert_eq!(tag().len(), 16);
    }
}
