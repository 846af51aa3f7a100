//! Everything that can be wrong with a checkpoint, one variant per problem.
//! Each message is one line that names the problem and, last, the file.

use std::path::{Path, PathBuf};

/// A problem with a checkpoint file, index or folder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The file or folder could not be opened or read.
    #[error("cannot read ({reason}): {}", crate::units::Shown::path(path))]
    Unreadable {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// Fewer than the 8 bytes that hold the header length.
    #[error(
        "file is {file_bytes} bytes, too short for a safetensors header: {}",
        crate::units::Shown::path(path)
    )]
    TooShort {
        /// The shard.
        path: PathBuf,
        /// Its size.
        file_bytes: u64,
    },
    /// The header length exceeds the size cap.
    // The declared length is not printed: those are the file's first 8
    // bytes, and a file that fails this check may be no checkpoint at all
    // (a secret read through a link).
    #[error(
        "header length (the file's first 8 bytes) exceeds the {cap_bytes}-byte cap: {}",
        crate::units::Shown::path(path)
    )]
    HeaderTooLarge {
        /// The shard.
        path: PathBuf,
        /// The declared header length.
        header_bytes: u64,
        /// The cap.
        cap_bytes: u64,
    },
    /// The header length runs past the end of the file.
    #[error(
        "header length (the file's first 8 bytes) runs past the end of the file ({file_bytes} bytes): {}",
        crate::units::Shown::path(path)
    )]
    HeaderPastEnd {
        /// The shard.
        path: PathBuf,
        /// The declared header length.
        header_bytes: u64,
        /// The file's size.
        file_bytes: u64,
    },
    /// The header bytes are not UTF-8.
    #[error(
        "header is not UTF-8 (invalid byte at offset {offset}): {}",
        crate::units::Shown::path(path)
    )]
    HeaderNotUtf8 {
        /// The shard.
        path: PathBuf,
        /// Offset of the first bad byte within the header.
        offset: usize,
    },
    /// The header is not JSON at all.
    #[error("header is not JSON ({reason}): {}", crate::units::Shown::path(path))]
    HeaderNotJson {
        /// The shard.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// The header is JSON but not shaped like a safetensors header.
    #[error(
        "header is not a safetensors header ({reason}): {}",
        crate::units::Shown::path(path)
    )]
    HeaderShape {
        /// The shard.
        path: PathBuf,
        /// What is wrong with its shape.
        reason: String,
    },
    /// A tensor's dtype is not one the format defines.
    #[error(
        "tensor `{tensor}` has unknown dtype `{dtype}`: {}",
        crate::units::Shown::path(path)
    )]
    UnknownDtype {
        /// The shard.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The dtype as written.
        dtype: String,
    },
    /// A shape entry is not a non-negative integer.
    #[error(
        "tensor `{tensor}` has a bad shape ({reason}): {}",
        crate::units::Shown::path(path)
    )]
    BadShape {
        /// The shard.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// `data_offsets` is not two ascending non-negative integers.
    #[error(
        "tensor `{tensor}` data_offsets must be two ascending integers, found {found}: {}",
        crate::units::Shown::path(path)
    )]
    BadOffsets {
        /// The shard.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What the header holds.
        found: String,
    },
    /// A tensor's bytes run past the end of the data section.
    #[error(
        "tensor `{tensor}` ends at byte {end} of the data, past its end ({data_bytes} bytes): {}",
        crate::units::Shown::path(path)
    )]
    OffsetsPastEnd {
        /// The shard.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its end offset.
        end: u64,
        /// The data section's length.
        data_bytes: u64,
    },
    /// Two tensors share bytes.
    #[error(
        "tensors `{first}` and `{second}` overlap in the data: {}",
        crate::units::Shown::path(path)
    )]
    Overlap {
        /// The shard.
        path: PathBuf,
        /// The tensor that starts first.
        first: String,
        /// The tensor that starts inside it.
        second: String,
    },
    /// Bytes of the data section belong to no tensor.
    #[error(
        "data bytes {start}..{end} belong to no tensor: {}",
        crate::units::Shown::path(path)
    )]
    Hole {
        /// The shard.
        path: PathBuf,
        /// First unclaimed byte.
        start: u64,
        /// One past the last unclaimed byte.
        end: u64,
    },
    /// Byte length differs from elements x dtype size.
    #[error(
        "tensor `{tensor}` holds {bytes} bytes but {dtype} x {shape:?} needs {expected}: {}",
        crate::units::Shown::path(path)
    )]
    SizeMismatch {
        /// The shard.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: String,
        /// Its shape.
        shape: Vec<u64>,
        /// The bytes its offsets span.
        bytes: u64,
        /// The bytes dtype and shape need (or why none can be computed).
        expected: String,
    },
    /// A tensor name appears twice.
    #[error(
        "tensor `{tensor}` appears twice, in {} and {}",
        crate::units::Shown::path(first),
        crate::units::Shown::path(second)
    )]
    DuplicateTensor {
        /// The tensor.
        tensor: String,
        /// Where it was first seen.
        first: PathBuf,
        /// Where it was seen again (may be the same file).
        second: PathBuf,
    },
    /// The index file is not JSON.
    #[error("index is not JSON ({reason}): {}", crate::units::Shown::path(path))]
    IndexNotJson {
        /// The index file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// The index is JSON but not shaped like an index.
    #[error(
        "index is not a safetensors index ({reason}): {}",
        crate::units::Shown::path(path)
    )]
    IndexShape {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The index names a shard file that does not exist.
    #[error(
        "index names shard `{shard}`, which does not exist: {}",
        crate::units::Shown::path(index)
    )]
    IndexMissingShard {
        /// The index file.
        index: PathBuf,
        /// The shard file name.
        shard: String,
    },
    /// The index names a tensor its shard does not hold.
    #[error("index puts tensor `{tensor}` in `{shard}`, which does not hold it{}: {}", more_text(*more), crate::units::Shown::path(index))]
    IndexTensorNotInShard {
        /// The index file.
        index: PathBuf,
        /// The first such tensor.
        tensor: String,
        /// The shard file name.
        shard: String,
        /// How many more such tensors there are.
        more: usize,
    },
    /// A folder with no safetensors file in it.
    #[error(
        "no .safetensors files in the folder: {}",
        crate::units::Shown::path(path)
    )]
    EmptyFolder {
        /// The folder.
        path: PathBuf,
    },
    /// `config.json` is present but unusable (the checkpoint still opens).
    #[error(
        "config.json is not usable ({reason}): {}",
        crate::units::Shown::path(path)
    )]
    BadConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn more_text(more: usize) -> String {
    match more {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    }
}

impl CheckpointError {
    /// [`CheckpointError::Unreadable`]: `path` could not be read, for
    /// `reason` (in words already).
    #[must_use]
    pub fn unreadable_for(path: &Path, reason: impl Into<String>) -> Self {
        Self::Unreadable {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// The file or folder the problem is in.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            Self::Unreadable { path, .. }
            | Self::TooShort { path, .. }
            | Self::HeaderTooLarge { path, .. }
            | Self::HeaderPastEnd { path, .. }
            | Self::HeaderNotUtf8 { path, .. }
            | Self::HeaderNotJson { path, .. }
            | Self::HeaderShape { path, .. }
            | Self::UnknownDtype { path, .. }
            | Self::BadShape { path, .. }
            | Self::BadOffsets { path, .. }
            | Self::OffsetsPastEnd { path, .. }
            | Self::Overlap { path, .. }
            | Self::Hole { path, .. }
            | Self::SizeMismatch { path, .. }
            | Self::IndexNotJson { path, .. }
            | Self::IndexShape { path, .. }
            | Self::EmptyFolder { path }
            | Self::BadConfig { path, .. } => path,
            Self::DuplicateTensor { second, .. } => second,
            Self::IndexMissingShard { index, .. } | Self::IndexTensorNotInShard { index, .. } => {
                index
            }
        }
    }

    /// Whether this problem makes the checkpoint unusable for a command
    /// that reads it whole (`inspect`, `walk`, `diff`, `check`: exit 2). An
    /// unusable `config.json` only loses the quantization settings: not fatal.
    #[must_use]
    pub fn is_fatal(&self) -> bool {
        !matches!(self, Self::BadConfig { .. })
    }

    pub(crate) fn unreadable(path: &Path, err: &std::io::Error) -> Self {
        Self::Unreadable {
            path: path.to_path_buf(),
            reason: io_reason(err),
        }
    }
}

pub use crate::files::io_reason;
