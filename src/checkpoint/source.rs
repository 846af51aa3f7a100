//! Where a checkpoint's bytes come from when its files are not on this
//! machine: one trait, implemented above this layer (the remote layer's
//! Hub repos and URLs), so that the checkpoint layer needs no network.

use std::path::PathBuf;
use std::sync::Arc;

use super::{Checkpoint, CheckpointError};

/// Reads the bytes of a checkpoint's files from elsewhere.
pub trait ByteSource: std::fmt::Debug + Send + Sync {
    /// The bytes `range` (offsets in the file) of `file`, a name in the
    /// checkpoint's folder.
    ///
    /// # Errors
    /// The source's own error (a request that failed), as it is.
    fn read_at(
        &self,
        file: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>>;

    /// The revision the files are read at, when the source has one (a Hub
    /// commit).
    fn commit(&self) -> Option<&str> {
        None
    }
}

impl Checkpoint {
    /// Where the files are read from when they are not on this machine;
    /// `None` for a checkpoint on this machine.
    #[must_use]
    pub fn remote(&self) -> Option<&dyn ByteSource> {
        self.remote.as_deref()
    }

    /// What reads shard `shard`'s bytes (owned: a read-through map keeps it).
    #[must_use]
    pub fn shard_bytes(&self, shard: super::ShardId) -> ShardBytes {
        let s = self.shard(shard);
        ShardBytes {
            path: s.path.clone(),
            file: s.file.clone(),
            source: self.remote.clone(),
        }
    }

    /// The bytes `range` (offsets in the file) of shard `shard`.
    ///
    /// # Errors
    /// As [`ShardBytes::read`].
    pub fn read_bytes(
        &self,
        shard: super::ShardId,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, CheckpointError> {
        self.shard_bytes(shard).read(range)
    }
}

/// Reads a shard's bytes: from its file, or from the checkpoint's
/// [`ByteSource`].
#[derive(Debug, Clone)]
pub struct ShardBytes {
    path: PathBuf,
    file: String,
    source: Option<Arc<dyn ByteSource>>,
}

impl ShardBytes {
    /// The bytes `range` (offsets in the file).
    ///
    /// # Errors
    /// The file or the request failed; one line naming the shard.
    pub fn read(&self, range: std::ops::Range<u64>) -> Result<Vec<u8>, CheckpointError> {
        use std::os::unix::fs::FileExt as _;
        if let Some(source) = &self.source {
            return source.read_at(&self.file, range).map_err(|reason| {
                CheckpointError::Unreadable {
                    path: self.path.clone(),
                    reason: reason.to_string(),
                }
            });
        }
        let (file, _) =
            crate::files::open_regular(&self.path).map_err(|e| CheckpointError::Unreadable {
                path: self.path.clone(),
                reason: e.reason(),
            })?;
        let mut bytes = vec![0; usize::try_from(range.end - range.start).unwrap_or(0)];
        file.read_exact_at(&mut bytes, range.start)
            .map_err(|e| CheckpointError::unreadable(&self.path, &e))?;
        Ok(bytes)
    }
}
