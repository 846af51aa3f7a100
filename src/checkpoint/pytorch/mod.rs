//! PyTorch checkpoints (`pytorch_model.bin`, `.pth`, `.pt`) read without
//! running their pickle: the zip format `torch.save` writes since 1.6 and
//! the legacy format before it.
//!
//! The pickle is read by [`pickle`], which calls nothing; the tensors it
//! names are listed with their dtype (from the storage type), shape,
//! strides and storage offset, and each storage's bytes are located in the
//! file (a zip entry stored uncompressed, or the legacy file's storage
//! section) so that a tensor's bytes are read in place, never inflated.
//! Every global the pickle imports is listed with its class
//! ([`verdict::Safety`]).

pub mod pickle;
pub mod verdict;

mod legacy;
mod listing;
mod source;
#[cfg(feature = "remote")]
pub(crate) use source::sought;
mod strided;
mod zipped;

pub use listing::{MAX_NAME_BYTES, listing_budget, pickle_tensors, storage_dtype};
pub use source::Source;
pub use strided::Strided;
pub use zipped::predicted_offsets_agree;

use legacy::read_legacy;
use source::LocalFile;
use zipped::read_zip;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use pickle::{Persistent, Unpickled, Value};
pub use verdict::Safety;

use super::Dtype;

/// The most bytes of pickle read from one file (a 90k-tensor state dict's
/// `data.pkl` is about 10 MB).
pub const MAX_PICKLE_BYTES: u64 = 256 << 20;
/// At most this many non-tensor values kept as metadata.
const MAX_METADATA: usize = 10_000;
/// At most this deep a key path.
const MAX_DEPTH: usize = 64;
/// A metadata value is cut to this many characters.
const MAX_VALUE_CHARS: usize = 200;

/// The first bytes of a legacy `torch.save` file: a pickle of its magic
/// number (protocol 2, `LONG1` of 0x1950a86a20f9469cfc6c).
const LEGACY_MAGIC: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e";

/// Which of torch's two file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TorchFormat {
    /// A zip archive: `<name>/data.pkl`, `<name>/data/<key>`.
    Zip,
    /// Pickles and storages one after the other (before torch 1.6, or
    /// `_use_new_zipfile_serialization=False`).
    Legacy,
}

impl TorchFormat {
    /// Its name in one word.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Zip => "zip",
            Self::Legacy => "legacy",
        }
    }
}

/// Whether the file at `path` starts as a torch file (zip or legacy).
#[must_use]
pub fn is_torch(path: &Path) -> bool {
    use std::os::unix::fs::FileExt as _;
    let Ok((file, _)) = crate::files::open_regular(path) else {
        return false;
    };
    let mut head = [0_u8; 15];
    let Ok(n) = file.read_at(&mut head, 0) else {
        return false;
    };
    starts_as_torch(head.get(..n).unwrap_or_default())
}

/// Whether `head` (a file's first bytes) is a zip's or a legacy torch
/// file's start.
#[must_use]
pub fn starts_as_torch(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04") || head.starts_with(LEGACY_MAGIC)
}

/// One global the pickle imports, with its class.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Imported {
    /// `module.name`.
    pub global: String,
    /// Its class.
    pub safety: Safety,
}

/// A storage: where its bytes are in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storage {
    /// Its key (`data/<key>` in the zip).
    pub key: String,
    /// Offset of its first byte in the file.
    pub file_offset: u64,
    /// Its bytes.
    pub bytes: u64,
}

/// One tensor of a torch file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchTensor {
    /// Its key path, joined by `.`.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its strides, in elements.
    pub stride: Vec<u64>,
    /// Elements of its storage before its first.
    pub offset: u64,
    /// Its storage, a position in [`TorchFile::storages`].
    pub storage: usize,
}

impl TorchTensor {
    /// Whether its elements are its storage's from `offset` in row-major
    /// order (no view but a plain slice of the storage).
    #[must_use]
    pub fn contiguous(&self) -> bool {
        let mut expected = 1_u64;
        for (&d, &s) in self.shape.iter().zip(&self.stride).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected = expected.saturating_mul(d);
        }
        true
    }

    /// Elements it has.
    #[must_use]
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// The storage elements it reaches: from its offset to one past its
    /// last element (`None` when that overflows).
    #[must_use]
    pub fn reach(&self) -> Option<(u64, u64)> {
        Strided {
            item_bytes: 1,
            shape: self.shape.clone(),
            stride: self.stride.clone(),
        }
        .reach(self.offset)
    }
}

/// A torch file read header-only: its tensors, its storages, its pickle's
/// globals and the values that are not tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchFile {
    /// Zip or legacy.
    pub format: TorchFormat,
    /// Tensors in the order the pickle names them.
    pub tensors: Vec<TorchTensor>,
    /// Storages, each once.
    pub storages: Vec<Storage>,
    /// Every global the pickle imports, each once.
    pub globals: Vec<Imported>,
    /// Non-tensor values by key path (`epoch`, `lr`), cut to one line.
    pub metadata: BTreeMap<String, String>,
    /// Values that could not be listed, each said once (a tensor of an
    /// unknown storage type, a call never made).
    pub skipped: Vec<String>,
    /// Bytes of the pickle.
    pub pickle_bytes: u64,
    /// The archive's `version` record, when it has one.
    pub version: Option<String>,
}

impl TorchFile {
    /// The worst class among the pickle's globals.
    #[must_use]
    pub fn verdict(&self) -> Safety {
        self.globals
            .iter()
            .map(|g| g.safety)
            .max()
            .unwrap_or(Safety::Innocuous)
    }

    /// The globals that are not innocuous, worst first.
    #[must_use]
    pub fn unsafe_globals(&self) -> Vec<&Imported> {
        let mut out: Vec<_> = self
            .globals
            .iter()
            .filter(|g| g.safety != Safety::Innocuous)
            .collect();
        out.sort_by_key(|g| std::cmp::Reverse(g.safety));
        out
    }
}

/// Why a torch file cannot be read (one line; the caller names the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TorchError {
    /// The file could not be read.
    #[error("{0}")]
    Io(String),
    /// The zip archive is not one torch writes.
    #[error("not a torch archive: {0}")]
    Archive(String),
    /// The pickle cannot be read.
    #[error("its pickle cannot be read: {0}")]
    Pickle(#[from] pickle::PickleError),
    /// Big-endian tensor bytes.
    #[error("its tensors are big-endian (byteorder `{0}`), which is not decoded")]
    BigEndian(String),
    /// A storage entry is compressed.
    #[error(
        "storage `{0}` is compressed in the archive; torch stores it uncompressed, and it is not inflated here"
    )]
    Compressed(String),
    /// A storage the pickle names is not in the file, or is too short.
    #[error("storage `{key}` {what}")]
    Storage {
        /// Its key.
        key: String,
        /// What is wrong.
        what: String,
    },
    /// The pickle names no tensor and is not a state dict.
    #[error("the pickle holds no tensor")]
    NoTensor,
}

/// Reads the torch file at `path` (zip or legacy), header-only: the
/// pickle, the archive's directory, the storages' places.
///
/// # Errors
/// The file cannot be read, is no torch file, or its pickle or storages
/// are malformed.
pub fn read(path: &Path) -> Result<TorchFile, TorchError> {
    let (file, meta) = crate::files::open_regular(path).map_err(|e| TorchError::Io(e.reason()))?;
    read_from(&LocalFile(file, meta.len()))
}

/// [`read`] from any [`Source`] (a Hub repo's file by range requests:
/// the zip's end, its central directory and `data.pkl`, never the whole
/// file).
///
/// # Errors
/// As [`read`].
pub fn read_from(source: &dyn Source) -> Result<TorchFile, TorchError> {
    let io = |e: std::io::Error| TorchError::Io(super::io_reason(&e));
    let size = source.size().map_err(io)?;
    let head = source.read_at(0..15.min(size)).map_err(io)?;
    if head.len() < 4 {
        return Err(TorchError::Archive("too short".into()));
    }
    if head.starts_with(b"PK\x03\x04") {
        read_zip(source, size)
    } else if head.starts_with(LEGACY_MAGIC) {
        read_legacy(source, size)
    } else {
        Err(TorchError::Archive(
            "neither a zip archive nor a legacy torch file".into(),
        ))
    }
}
