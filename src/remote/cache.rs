//! Headers, indexes and configs of Hub repos kept on disk by commit, so a
//! second open of the same commit costs one request (the commit look-up).
//! A commit's files never change, so nothing here goes stale; the folder
//! is kept under [`CAP_BYTES`] by removing the least recently written
//! commits. Everything is best effort: a cache that cannot be read or
//! written only costs requests.

use std::path::PathBuf;

/// The most the cache keeps on disk.
pub const CAP_BYTES: u64 = 256 << 20;

/// The cache folder: `WEIGHTSCOPE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/weightscope`, else `~/.cache/weightscope`; the Hub's
/// part is under `hub/`.
#[must_use]
pub fn folder() -> Option<PathBuf> {
    Some(crate::files::cache_dir()?.join("hub"))
}

/// One commit of one repo in the cache.
#[derive(Debug, Clone)]
pub struct CommitCache {
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
        let path = self.path(what, file);
        crate::files::read_bounded_into(&path, CAP_BYTES, "a cache entry", record).ok()?;
        Some(u64::from_le_bytes(*record.first_chunk::<8>()?))
    }

    /// The entry kept for `file` under `what`, opened and read past its
    /// size (given with it): for a large entry read a piece at a time.
    #[must_use]
    pub fn open(&self, what: &str, file: &str) -> Option<(u64, std::fs::File)> {
        use std::io::Read as _;
        let (mut opened, _) = crate::files::open_regular(&self.path(what, file)).ok()?;
        let mut size = [0u8; 8];
        opened.read_exact(&mut size).ok()?;
        Some((u64::from_le_bytes(size), opened))
    }

    /// Whether something is kept for `file` under `what`.
    #[must_use]
    pub fn has(&self, what: &str, file: &str) -> bool {
        self.path(what, file).is_file()
    }

    /// Keeps `bytes` of `file` (whose size is `size`).
    pub fn put(&self, what: &str, file: &str, size: u64, bytes: &[u8]) {
        if crate::files::private_dir(&self.dir).is_err() {
            return;
        }
        let mut record = Vec::with_capacity(8 + bytes.len());
        record.extend_from_slice(&size.to_le_bytes());
        record.extend_from_slice(bytes);
        let _ = crate::files::write_atomic(&self.path(what, file), &record);
    }

    fn path(&self, what: &str, file: &str) -> PathBuf {
        self.dir.join(format!("{what}.{}", safe_name(file)))
    }
}

/// A file name made of `text`: letters, digits, `-`, `_` and `.` kept,
/// anything else (a slash) as `%XX`; never `.` or `..`.
fn safe_name(text: &str) -> String {
    super::percent_encode(text, |at, b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_') || (b == b'.' && at > 0)
    })
}

/// Keeps the Hub's answer about the repo `repo_key` names at `revision`
/// (its commit and file list), for opens with `HF_HUB_OFFLINE` set. In the
/// repo's `refs` folder, which [`trim`] treats as a commit.
pub fn keep_answer(repo_key: &str, revision: &str, body: &[u8]) {
    let Some(dir) = folder().map(|root| root.join(safe_name(repo_key)).join("refs")) else {
        return;
    };
    if crate::files::private_dir(&dir).is_ok() {
        let _ = crate::files::write_atomic(&dir.join(safe_name(revision)), body);
    }
}

/// The answer [`keep_answer`] kept, at most `cap` bytes.
#[must_use]
pub fn kept_answer(repo_key: &str, revision: &str, cap: u64) -> Option<Vec<u8>> {
    let path = folder()?
        .join(safe_name(repo_key))
        .join("refs")
        .join(safe_name(revision));
    crate::files::read_bounded(&path, cap, "a kept answer of the Hub").ok()
}

/// Removes the least recently written commits until the cache holds at
/// most `cap` bytes.
pub fn trim(cap: u64) {
    let Some(root) = folder() else { return };
    let mut commits = Vec::new();
    let Ok(repos) = std::fs::read_dir(&root) else {
        return;
    };
    for repo in repos.flatten() {
        let Ok(dirs) = std::fs::read_dir(repo.path()) else {
            continue;
        };
        for commit in dirs.flatten() {
            let mut bytes = 0;
            let mut newest = std::time::SystemTime::UNIX_EPOCH;
            for file in std::fs::read_dir(commit.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if let Ok(meta) = file.metadata() {
                    bytes += meta.len();
                    newest = newest.max(meta.modified().unwrap_or(newest));
                }
            }
            commits.push((newest, bytes, commit.path()));
        }
    }
    let mut total: u64 = commits.iter().map(|c| c.1).sum();
    commits.sort();
    for (_, bytes, dir) in commits {
        if total <= cap {
            break;
        }
        if std::fs::remove_dir_all(&dir).is_ok() {
            total -= bytes;
        }
    }
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
