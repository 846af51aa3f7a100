//! Headers, indexes and configs of Hub repos kept on disk by commit, so a
//! second open of the same commit costs one request (the commit look-up).
//! A commit's files never change, so nothing here goes stale; the folder
//! is kept under [`CAP_BYTES`] by removing the least recently written
//! commits. Everything is best effort: a cache that cannot be read or
//! written only costs requests.

use std::path::{Path, PathBuf};

/// The most the cache keeps on disk.
pub const CAP_BYTES: u64 = 256 << 20;

/// The cache folder: `WEIGHTSCOPE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/weightscope`, else `~/.cache/weightscope`; the Hub's
/// part is under `hub/`. `None` (no cache) when that folder, or the one
/// holding it, is not this user's alone (another user's, writable by
/// others, a link): what is in it could be anyone's. Said once.
#[must_use]
pub fn folder() -> Option<PathBuf> {
    let root = crate::files::cache_dir()?;
    let hub = root.join("hub");
    // Missing is fine (made private on the first write); present, it must
    // be ours.
    let usable = [&root, &hub]
        .iter()
        .all(|dir| std::fs::symlink_metadata(dir).map_or(true, |m| m.is_dir() && ours(&m)));
    if usable {
        Some(hub)
    } else {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            crate::units::stderr_line(format_args!(
                "not using the cache at {}: it is not this user's alone (another user's, writable by others, or a link); every read goes to the network",
                root.display()
            ));
        });
        None
    }
}

/// Whether a cache folder or entry is this user's alone: owned by this
/// process's user, writable by nobody else, not a link.
fn ours(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let me = std::fs::metadata("/proc/self").map(|m| m.uid());
    !meta.file_type().is_symlink()
        && me.is_ok_and(|me| meta.uid() == me)
        && meta.mode() & 0o022 == 0
}

/// Whether every folder from the cache root down to `path`'s folder, and
/// `path` itself, is this user's alone (no link anywhere on the way).
fn trusted(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root) else {
        return false;
    };
    let mut at = root.to_path_buf();
    for part in rest.components() {
        at.push(part);
        if !std::fs::symlink_metadata(&at).is_ok_and(|m| ours(&m)) {
            return false;
        }
    }
    true
}

/// An entry opened for reading only if it is trusted ([`trusted`]) and is
/// still, once open, the regular file that was checked (`O_NOFOLLOW`).
fn open_trusted(root: &Path, path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::MetadataExt as _;
    if !trusted(root, path) {
        return None;
    }
    let checked = std::fs::symlink_metadata(path).ok()?;
    let file = crate::files::open_entry(path).ok()?;
    let opened = file.metadata().ok()?;
    (opened.is_file() && opened.dev() == checked.dev() && opened.ino() == checked.ino())
        .then_some(file)
}

/// One commit of one repo in the cache.
#[derive(Debug, Clone)]
pub struct CommitCache {
    /// The cache's root (`hub/`): every folder below it is checked.
    root: PathBuf,
    dir: PathBuf,
}

impl CommitCache {
    /// The cache of `commit` (40 hex digits, as the Hub names commits; any
    /// other text gets no cache) of the repo `repo_key` names.
    #[must_use]
    pub fn new(repo_key: &str, commit: &str) -> Option<Self> {
        if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let root = folder()?;
        Some(Self {
            dir: root
                .join(safe_name(repo_key))
                .join(commit.to_ascii_lowercase()),
            root,
        })
    }

    /// What was kept for `file` under `what` (`header`, `whole`): the file's
    /// size and the bytes.
    #[must_use]
    pub fn get(&self, what: &str, file: &str) -> Option<(u64, Vec<u8>)> {
        let mut bytes = Vec::new();
        let size = self.get_into(what, file, &mut bytes)?;
        bytes.drain(..8);
        Some((size, bytes))
    }

    /// [`CommitCache::get`] into `record` (its memory reused): the file's
    /// size, the bytes at `record[8..]`.
    #[must_use]
    pub fn get_into(&self, what: &str, file: &str, record: &mut Vec<u8>) -> Option<u64> {
        use std::io::Read as _;
        let opened = open_trusted(&self.root, &self.path(what, file))?;
        record.clear();
        opened.take(CAP_BYTES + 1).read_to_end(record).ok()?;
        if record.len() as u64 > CAP_BYTES {
            return None;
        }
        let size = u64::from_le_bytes(*record.first_chunk::<8>()?);
        // Checked against what it claims: it cannot hold more bytes of the
        // file than the file has (else it is not what it says; fetched again).
        (record.len() as u64 - 8 <= size).then_some(size)
    }

    /// The entry kept for `file` under `what`, opened and read past its
    /// size (given with it): for a large entry read a piece at a time.
    #[must_use]
    pub fn open(&self, what: &str, file: &str) -> Option<(u64, std::fs::File)> {
        use std::io::Read as _;
        let mut opened = open_trusted(&self.root, &self.path(what, file))?;
        let mut size = [0u8; 8];
        opened.read_exact(&mut size).ok()?;
        let size = u64::from_le_bytes(size);
        let held = opened.metadata().ok()?.len().saturating_sub(8);
        (held <= size).then_some((size, opened))
    }

    /// Whether something is kept for `file` under `what`.
    #[must_use]
    pub fn has(&self, what: &str, file: &str) -> bool {
        open_trusted(&self.root, &self.path(what, file)).is_some()
    }

    /// Keeps `bytes` of `file` (whose size is `size`).
    pub fn put(&self, what: &str, file: &str, size: u64, bytes: &[u8]) {
        if crate::files::private_dir(&self.dir).is_err() {
            return;
        }
        let mut record = Vec::with_capacity(8 + bytes.len());
        record.extend_from_slice(&size.to_le_bytes());
        record.extend_from_slice(bytes);
        // Renamed over the entry's name: a link someone put there is
        // replaced, never written through.
        let _ = crate::files::replace_entry(
            &self.dir,
            std::ffi::OsStr::new(&Self::entry_name(what, file)),
            &record,
        );
    }

    fn path(&self, what: &str, file: &str) -> PathBuf {
        self.dir.join(Self::entry_name(what, file))
    }

    fn entry_name(what: &str, file: &str) -> String {
        format!("{what}.{}", safe_name(file))
    }
}

/// Bytes a cache entry's name keeps (a leading `.` is escaped apart).
const NAME_KEEPS: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.');

/// A file name made of `text`: letters, digits, `-`, `_` and `.` kept,
/// anything else (a slash) as `%XX`, and a leading `.` too: never a hidden
/// name, `.` or `..`.
fn safe_name(text: &str) -> String {
    let encoded = percent_encoding::utf8_percent_encode(text, NAME_KEEPS).to_string();
    match encoded.strip_prefix('.') {
        Some(rest) => format!("%2E{rest}"),
        None => encoded,
    }
}

/// Keeps the Hub's answer about the repo `repo_key` names at `revision`
/// (its commit and file list), for opens with `HF_HUB_OFFLINE` set. In the
/// repo's `refs` folder, which [`trim`] treats as a commit.
pub fn keep_answer(repo_key: &str, revision: &str, body: &[u8]) {
    let Some(dir) = folder().map(|root| root.join(safe_name(repo_key)).join("refs")) else {
        return;
    };
    if crate::files::private_dir(&dir).is_ok() {
        let _ = crate::files::replace_entry(&dir, std::ffi::OsStr::new(&safe_name(revision)), body);
    }
}

/// The answer [`keep_answer`] kept, at most `cap` bytes.
#[must_use]
pub fn kept_answer(repo_key: &str, revision: &str, cap: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let root = folder()?;
    let path = root
        .join(safe_name(repo_key))
        .join("refs")
        .join(safe_name(revision));
    let mut bytes = Vec::new();
    open_trusted(&root, &path)?
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= cap).then_some(bytes)
}

/// Removes the least recently written commits until the cache holds at
/// most `cap` bytes.
///
/// Only what the cache made is touched: below the root, repo folders (as
/// [`safe_name`] names them), in each a commit folder (40 hex digits) or
/// `refs`, in those regular files; each checked without following links
/// and owned by this user. A link, or anything else, is neither followed
/// nor removed, and nothing outside the root is reached. A commit is
/// removed file by file, then its folder (kept if anything else is in it).
pub fn trim(cap: u64) {
    let Some(root) = folder() else { return };
    let commits = cache_commits(&root);
    let mut total = commits.iter().fold(0_u64, |a, c| a.saturating_add(c.1));
    let mut commits = commits;
    commits.sort();
    for (_, bytes, dir, files) in commits {
        if total <= cap {
            break;
        }
        for file in &files {
            // Checked again just before: still a regular file of ours.
            if std::fs::symlink_metadata(file).is_ok_and(|m| m.is_file() && ours(&m)) {
                crate::files::remove_entry(file);
            }
        }
        crate::files::remove_empty_folder(&dir);
        total = total.saturating_sub(bytes);
    }
}

/// The commit folders the cache made under `root`: when last written, the
/// bytes of their files, the folder, its files.
type CommitEntry = (std::time::SystemTime, u64, PathBuf, Vec<PathBuf>);

fn cache_commits(root: &Path) -> Vec<CommitEntry> {
    let is_ours_dir =
        |path: &Path| std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && ours(&m));
    let mut commits = Vec::new();
    if !is_ours_dir(root) {
        return commits;
    }
    let Ok(repos) = std::fs::read_dir(root) else {
        return commits;
    };
    for repo in repos.flatten() {
        let repo_path = repo.path();
        let named = repo.file_name().to_str().is_some_and(|n| {
            !n.starts_with('.')
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'%'))
        });
        if !named || !is_ours_dir(&repo_path) {
            continue;
        }
        let Ok(dirs) = std::fs::read_dir(&repo_path) else {
            continue;
        };
        for commit in dirs.flatten() {
            let name = commit.file_name();
            let is_commit = name.to_str().is_some_and(|n| {
                n == "refs"
                    || (n.len() == 40
                        && n.bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            });
            let commit_path = commit.path();
            if !is_commit || !is_ours_dir(&commit_path) {
                continue;
            }
            let mut bytes = 0_u64;
            let mut newest = std::time::SystemTime::UNIX_EPOCH;
            let mut files = Vec::new();
            for file in std::fs::read_dir(&commit_path)
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = file.path();
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.is_file() && ours(&meta) {
                    bytes = bytes.saturating_add(meta.len());
                    newest = newest.max(meta.modified().unwrap_or(newest));
                    files.push(path);
                }
            }
            commits.push((newest, bytes, commit_path, files));
        }
    }
    commits
}

#[cfg(test)]
mod tests {
    use super::safe_name;

    #[test]
    fn names_in_the_cache_cannot_climb_out() {
        assert_eq!(
            safe_name("sub/model-00001.safetensors"),
            "sub%2Fmodel-00001.safetensors"
        );
        assert_eq!(safe_name(".."), "%2E.");
        assert_eq!(safe_name("a b"), "a%20b");
    }
}
