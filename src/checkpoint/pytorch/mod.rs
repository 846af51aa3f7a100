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

/// A strided view of bytes: where each element of a tensor is, from the
/// first byte of the span its elements reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strided {
    /// Bytes an element.
    pub item_bytes: u64,
    /// The tensor's shape.
    pub shape: Vec<u64>,
    /// Its strides, in elements.
    pub stride: Vec<u64>,
}

impl Strided {
    /// The storage elements a view from element `offset` reaches: its
    /// first, and one past its last (`None` when that overflows).
    #[must_use]
    pub fn reach(&self, offset: u64) -> Option<(u64, u64)> {
        if self.shape.contains(&0) {
            return Some((offset, offset));
        }
        let last = self
            .shape
            .iter()
            .zip(&self.stride)
            .try_fold(0_u64, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            })?;
        Some((offset, offset.checked_add(last)?.checked_add(1)?))
    }

    /// The elements of the view, in row-major order, gathered from `span`
    /// (whose first byte is the view's first element); `None` when a
    /// stride reaches past `span`.
    #[must_use]
    pub fn gather(&self, span: &[u8]) -> Option<Vec<u8>> {
        let item = usize::try_from(self.item_bytes).ok()?;
        let elements: u64 = self.shape.iter().product();
        let mut out = Vec::with_capacity(usize::try_from(elements).ok()?.checked_mul(item)?);
        if elements == 0 {
            return Some(out);
        }
        // The reach is checked once: every offset below is inside `span`.
        let (_, end) = self.reach(0)?;
        if usize::try_from(end).ok()?.checked_mul(item)? > span.len() {
            return None;
        }
        let dims = self.shape.len();
        let (inner, inner_stride) = match (self.shape.last(), self.stride.last()) {
            (Some(&d), Some(&s)) => (usize::try_from(d).ok()?, usize::try_from(s).ok()?),
            _ => (1, 1),
        };
        let strides: Vec<usize> = self
            .stride
            .iter()
            .map(|&s| usize::try_from(s).ok())
            .collect::<Option<_>>()?;
        let outer = dims.saturating_sub(1);
        let mut index = vec![0_u64; outer];
        let mut at = 0_usize;
        loop {
            // One run along the last axis: a slice when its elements are
            // adjacent, else element by element.
            let start = at * item;
            if inner_stride == 1 {
                out.extend_from_slice(span.get(start..start + inner * item)?);
            } else {
                let step = inner_stride * item;
                for k in 0..inner {
                    let from = start + k * step;
                    out.extend_from_slice(span.get(from..from + item)?);
                }
            }
            // The next run: the outer index, last outer axis fastest, the
            // offset kept as it goes.
            let mut axis = outer;
            loop {
                if axis == 0 {
                    return Some(out);
                }
                axis -= 1;
                index[axis] += 1;
                at += strides[axis];
                if index[axis] < self.shape[axis] {
                    break;
                }
                at -= strides[axis] * usize::try_from(self.shape[axis]).ok()?;
                index[axis] = 0;
            }
        }
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

/// Where a torch file's bytes are read: a file on this machine, or a
/// remote one by range requests.
pub trait Source {
    /// The file's size in bytes.
    ///
    /// # Errors
    /// The source's failure, as an I/O error.
    fn size(&self) -> std::io::Result<u64>;
    /// The bytes `range` (fewer only at the end of the file).
    ///
    /// # Errors
    /// The source's failure, as an I/O error.
    fn read_at(&self, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>>;
    /// Whether a read costs little (a local file): the zip's local headers
    /// are then read for each storage rather than predicted.
    fn is_local(&self) -> bool {
        false
    }
}

/// A file on this machine as a [`Source`].
struct LocalFile(std::fs::File, u64);

impl Source for LocalFile {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.1)
    }

    fn read_at(&self, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt as _;
        let end = range.end.min(self.1);
        let mut bytes = vec![0; usize::try_from(end.saturating_sub(range.start)).unwrap_or(0)];
        self.0.read_exact_at(&mut bytes, range.start)?;
        Ok(bytes)
    }

    fn is_local(&self) -> bool {
        true
    }
}

/// Bytes a block of [`SourceReader`].
const BLOCK_BYTES: u64 = 256 << 10;
/// Blocks a [`SourceReader`] keeps.
const KEPT_BLOCKS: usize = 64;

/// A [`Source`] read and sought as the zip reader wants, a block at a time,
/// the last blocks kept: the central directory at the end and `data.pkl`
/// at the start cost a request or two each.
struct SourceReader<'a> {
    source: &'a dyn Source,
    size: u64,
    pos: u64,
    blocks: Vec<(u64, Vec<u8>)>,
}

impl SourceReader<'_> {
    fn block(&mut self, index: u64) -> std::io::Result<&[u8]> {
        if let Some(k) = self.blocks.iter().position(|(i, _)| *i == index) {
            return Ok(&self.blocks[k].1);
        }
        let start = index * BLOCK_BYTES;
        let bytes = self
            .source
            .read_at(start..(start + BLOCK_BYTES).min(self.size))?;
        if self.blocks.len() >= KEPT_BLOCKS {
            self.blocks.remove(0);
        }
        self.blocks.push((index, bytes));
        Ok(&self.blocks[self.blocks.len() - 1].1)
    }
}

impl std::io::Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let index = self.pos / BLOCK_BYTES;
        let within = usize::try_from(self.pos % BLOCK_BYTES).unwrap_or(0);
        let block = self.block(index)?;
        let available = block.get(within..).unwrap_or_default();
        let n = available.len().min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        buf[..n].copy_from_slice(&available[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for SourceReader<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let at = match to {
            std::io::SeekFrom::Start(n) => Some(n),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            std::io::SeekFrom::End(d) => self.size.checked_add_signed(d),
        };
        self.pos = at.ok_or_else(|| std::io::Error::other("seek out of the file"))?;
        Ok(self.pos)
    }
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

/// Where each entry's data starts, from the central directory alone: torch
/// writes its records one after the other, so an entry's data ends where
/// the next entry's local header begins (the central directory after the
/// last), less a data descriptor when the entry has one; and it aligns
/// every record's data to 64 bytes. A start that is not so aligned, or
/// falls inside its own local header, is `None`: read the header then.
fn predicted_data_starts<R: std::io::Read + std::io::Seek>(
    zip: &zip::ZipArchive<R>,
) -> Vec<Option<u64>> {
    let mut order: Vec<(u64, usize)> = (0..zip.len())
        .filter_map(|i| zip.by_index_data(i).ok().map(|e| (e.header_start(), i)))
        .collect();
    order.sort_unstable();
    let mut starts = vec![None; zip.len()];
    for (k, &(header, i)) in order.iter().enumerate() {
        let next = order
            .get(k + 1)
            .map_or(zip.central_directory_start(), |&(h, _)| h);
        let Ok(entry) = zip.by_index_data(i) else {
            continue;
        };
        let descriptor = if entry.flags().is_using_data_descriptor() {
            if entry.compressed_size() >= u64::from(u32::MAX) {
                24
            } else {
                16
            }
        } else {
            0
        };
        let name = entry.name_raw().len() as u64;
        let start = next
            .checked_sub(entry.compressed_size())
            .and_then(|s| s.checked_sub(descriptor));
        starts[i] = start.filter(|&s| s % 64 == 0 && s >= header + 30 + name);
    }
    starts
}

/// Whether [`predicted_data_starts`] gives the local headers' own data
/// offsets for every storage of the zip-format torch file at `path` (for
/// the tests against torch's writer).
///
/// # Errors
/// The file cannot be read as a zip archive.
pub fn predicted_offsets_agree(path: &Path) -> Result<bool, TorchError> {
    let (file, meta) = crate::files::open_regular(path).map_err(|e| TorchError::Io(e.reason()))?;
    let source = LocalFile(file, meta.len());
    let reader = SourceReader {
        source: &source,
        size: meta.len(),
        pos: 0,
        blocks: Vec::new(),
    };
    let mut zip = zip::ZipArchive::new(reader).map_err(|e| TorchError::Archive(e.to_string()))?;
    let predicted = predicted_data_starts(&zip);
    for (i, want) in predicted.into_iter().enumerate() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| TorchError::Archive(e.to_string()))?;
        if want.is_none() || entry.data_start() != want {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Where each storage's bytes are in a zip archive: a local file's from its
/// entry's local header (cheap), a remote one's from `predicted` (the
/// central directory), else from its local header.
fn locate_storages<R: std::io::Read + std::io::Seek>(
    zip: &mut zip::ZipArchive<R>,
    predicted: &[Option<u64>],
    wanted: &[(String, u64)],
    prefix: &str,
    local: bool,
    file_bytes: u64,
) -> Result<Vec<Storage>, TorchError> {
    let archive_err = |e: zip::result::ZipError| TorchError::Archive(e.to_string());
    let mut storages = Vec::with_capacity(wanted.len());
    for (key, needed) in wanted {
        let name = format!("{prefix}data/{key}");
        let i = zip
            .index_for_name(&name)
            .ok_or_else(|| TorchError::Storage {
                key: key.clone(),
                what: "is not in the archive".into(),
            })?;
        let (compression, bytes) = {
            let entry = zip.by_index_data(i).map_err(archive_err)?;
            (entry.compression(), entry.size())
        };
        if compression != zip::CompressionMethod::Stored {
            return Err(TorchError::Compressed(name));
        }
        // A local file's header is read (cheap); a remote one's is
        // predicted from the central directory, else read.
        let known = predicted.get(i).copied().flatten().filter(|_| !local);
        let start = match known {
            Some(start) => start,
            None => zip
                .by_index_raw(i)
                .map_err(archive_err)?
                .data_start()
                .ok_or_else(|| TorchError::Storage {
                    key: key.clone(),
                    what: "has no data offset".into(),
                })?,
        };
        if bytes < *needed || start.checked_add(bytes).is_none_or(|end| end > file_bytes) {
            return Err(TorchError::Storage {
                key: key.clone(),
                what: format!(
                    "is {bytes} bytes; its tensors need {needed} within the file's {file_bytes}"
                ),
            });
        }
        storages.push(Storage {
            key: key.clone(),
            file_offset: start,
            bytes,
        });
    }
    Ok(storages)
}

fn read_zip(source: &dyn Source, file_bytes: u64) -> Result<TorchFile, TorchError> {
    let archive_err = |e: zip::result::ZipError| TorchError::Archive(e.to_string());
    let reader = SourceReader {
        source,
        size: file_bytes,
        pos: 0,
        blocks: Vec::new(),
    };
    let mut zip = zip::ZipArchive::new(reader).map_err(archive_err)?;
    let predicted = predicted_data_starts(&zip);
    // One top folder holds every record: `<name>/data.pkl`.
    let pkl_name = zip
        .file_names()
        .filter_map(Result::ok)
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| TorchError::Archive("no `<name>/data.pkl` record".into()))?;
    let prefix = pkl_name.trim_end_matches("data.pkl").to_owned();
    let read_record = |zip: &mut zip::ZipArchive<_>, name: &str, cap: u64| {
        let Some(i) = zip.index_for_name(name) else {
            return Ok(None);
        };
        let entry = zip.by_index_raw(i).map_err(archive_err)?;
        if entry.compression() != zip::CompressionMethod::Stored {
            return Err(TorchError::Compressed(name.to_owned()));
        }
        if entry.size() > cap {
            return Err(TorchError::Archive(format!(
                "record `{name}` is {} bytes, over the {cap}-byte cap",
                entry.size()
            )));
        }
        let mut bytes = Vec::new();
        entry
            .take(cap)
            .read_to_end(&mut bytes)
            .map_err(|e| TorchError::Io(super::io_reason(&e)))?;
        Ok(Some(bytes))
    };
    if let Some(order) = read_record(&mut zip, &format!("{prefix}byteorder"), 64)? {
        let order = String::from_utf8_lossy(&order).trim().to_owned();
        if order != "little" {
            return Err(TorchError::BigEndian(order));
        }
    }
    let version = read_record(&mut zip, &format!("{prefix}version"), 64)?
        .map(|v| String::from_utf8_lossy(&v).trim().to_owned());
    let pkl = read_record(&mut zip, &pkl_name, MAX_PICKLE_BYTES)?.unwrap_or_default();
    let unpickled = pickle::unpickle(&pkl, Persistent::Zip)?;
    let mut listed = list(&unpickled);
    let storages = locate_storages(
        &mut zip,
        &predicted,
        &listed.storages,
        &prefix,
        source.is_local(),
        file_bytes,
    )?;
    Ok(TorchFile {
        format: TorchFormat::Zip,
        tensors: std::mem::take(&mut listed.tensors),
        storages,
        globals: imported(&unpickled),
        metadata: listed.metadata,
        skipped: listed.skipped,
        pickle_bytes: pkl.len() as u64,
        version,
    })
}

fn read_legacy(source: &dyn Source, file_bytes: u64) -> Result<TorchFile, TorchError> {
    let io = |e: &std::io::Error| TorchError::Io(super::io_reason(e));
    // The five pickles come first; their length is known only by reading
    // them, so the head is read growing until they all parse.
    let mut len = (1_u64 << 20).min(file_bytes);
    let (pickles, head_end, head) = loop {
        let head = source.read_at(0..len).map_err(|e| io(&e))?;
        match legacy_pickles(&head) {
            Ok((pickles, end)) => break (pickles, end, head),
            Err(pickle::PickleError::Truncated(_) | pickle::PickleError::NoStop)
                if len < file_bytes.min(MAX_PICKLE_BYTES) =>
            {
                len = (len * 4).min(file_bytes).min(MAX_PICKLE_BYTES);
            }
            Err(e) => return Err(e.into()),
        }
    };
    drop(head);
    let [_, _, sys_info, object, keys] = pickles;
    if let Some(Value::Dict(id)) = sys_info.root {
        let little = sys_info.pairs(id).iter().find_map(|(k, v)| match (k, v) {
            (Value::Str(k), Value::Bool(b)) if &**k == "little_endian" => Some(*b),
            _ => None,
        });
        if little == Some(false) {
            return Err(TorchError::BigEndian("big".into()));
        }
    }
    let mut listed = list(&object);
    let Some(Value::List(keys_id)) = keys.root else {
        return Err(TorchError::Archive(
            "the storage keys are not a list".into(),
        ));
    };
    let element_bytes: BTreeMap<&str, u64> = listed
        .storage_kinds
        .iter()
        .map(|(k, size)| (k.as_str(), *size))
        .collect();
    let mut places = BTreeMap::new();
    let mut at = head_end as u64;
    for key in keys.items(keys_id) {
        let Value::Str(key) = key else {
            return Err(TorchError::Archive("a storage key is not text".into()));
        };
        let count = source.read_at(at..at + 8).map_err(|e| io(&e))?;
        let numel = count
            .first_chunk::<8>()
            .map(|c| u64::from_le_bytes(*c))
            .ok_or_else(|| TorchError::Storage {
                key: key.to_string(),
                what: "has no element count: the file ends".into(),
            })?;
        let size = element_bytes.get(&**key).copied().unwrap_or(1);
        let bytes = numel.checked_mul(size).ok_or_else(|| TorchError::Storage {
            key: key.to_string(),
            what: "has a size that overflows".into(),
        })?;
        let start = at + 8;
        let end = start
            .checked_add(bytes)
            .filter(|&e| e <= file_bytes)
            .ok_or_else(|| TorchError::Storage {
                key: key.to_string(),
                what: format!("runs past the end of the file ({file_bytes} bytes)"),
            })?;
        places.insert(key.to_string(), (start, bytes));
        at = end;
    }
    let mut storages = Vec::with_capacity(listed.storages.len());
    for (key, needed) in &listed.storages {
        let &(start, bytes) = places.get(key).ok_or_else(|| TorchError::Storage {
            key: key.clone(),
            what: "is not in the file's storage list".into(),
        })?;
        if bytes < *needed {
            return Err(TorchError::Storage {
                key: key.clone(),
                what: format!("is {bytes} bytes; its tensors need {needed}"),
            });
        }
        storages.push(Storage {
            key: key.clone(),
            file_offset: start,
            bytes,
        });
    }
    Ok(TorchFile {
        format: TorchFormat::Legacy,
        tensors: std::mem::take(&mut listed.tensors),
        storages,
        globals: imported(&object),
        metadata: listed.metadata,
        skipped: listed.skipped,
        pickle_bytes: head_end as u64,
        version: None,
    })
}

/// The legacy file's five pickles (magic, protocol, system, object,
/// storage keys) and where they end.
fn legacy_pickles(head: &[u8]) -> Result<([Unpickled; 5], usize), pickle::PickleError> {
    let mut at = 0;
    let mut next = || -> Result<Unpickled, pickle::PickleError> {
        let rest = head.get(at..).unwrap_or_default();
        let u = pickle::unpickle(rest, Persistent::Legacy)?;
        at += u.end;
        Ok(u)
    };
    let out = [next()?, next()?, next()?, next()?, next()?];
    Ok((out, at))
}

/// The tensors and globals of one pickle (a zip archive's `data.pkl`),
/// with no storage located: for the fuzz target and tests of the machine.
///
/// # Errors
/// As [`pickle::unpickle`].
pub fn pickle_tensors(
    data: &[u8],
) -> Result<(Vec<TorchTensor>, Vec<Imported>), pickle::PickleError> {
    let unpickled = pickle::unpickle(data, Persistent::Zip)?;
    let listed = list(&unpickled);
    Ok((listed.tensors, imported(&unpickled)))
}

fn imported(u: &Unpickled) -> Vec<Imported> {
    u.globals
        .iter()
        .map(|g| Imported {
            global: g.clone(),
            safety: verdict::classify(g),
        })
        .collect()
}

/// The safetensors dtype of a torch storage type, with its element bytes.
#[must_use]
pub fn storage_dtype(kind: &str) -> Option<Dtype> {
    Some(match kind {
        "FloatStorage" => Dtype::F32,
        "DoubleStorage" => Dtype::F64,
        "HalfStorage" => Dtype::F16,
        "BFloat16Storage" => Dtype::BF16,
        "LongStorage" => Dtype::I64,
        "IntStorage" => Dtype::I32,
        "ShortStorage" => Dtype::I16,
        "CharStorage" => Dtype::I8,
        "ByteStorage" | "UntypedStorage" => Dtype::U8,
        "BoolStorage" => Dtype::BOOL,
        "UInt16Storage" => Dtype::U16,
        "UInt32Storage" => Dtype::U32,
        "UInt64Storage" => Dtype::U64,
        "ComplexFloatStorage" => Dtype::C64,
        "Float8_e4m3fnStorage" => Dtype::F8_E4M3,
        "Float8_e5m2Storage" => Dtype::F8_E5M2,
        _ => return None,
    })
}

/// What walking the pickle's value found.
#[derive(Default)]
struct Listed {
    tensors: Vec<TorchTensor>,
    /// Storage key → bytes its tensors need, in first-seen order.
    storages: Vec<(String, u64)>,
    /// Storage key → element bytes.
    storage_kinds: Vec<(String, u64)>,
    metadata: BTreeMap<String, String>,
    skipped: Vec<String>,
}

fn list(u: &Unpickled) -> Listed {
    let mut out = Listed::default();
    let mut positions: BTreeMap<String, usize> = BTreeMap::new();
    // Storages named by persistent ids, even those no listed tensor uses
    // (the legacy file's storage section needs every element size).
    let mut visited = vec![false; u.nodes.len()];
    if let Some(root) = &u.root {
        walk(
            u,
            root,
            &mut String::new(),
            0,
            &mut visited,
            &mut |path, value| {
                visit(path, value, &mut out, &mut positions);
            },
        );
    }
    out
}

fn visit(path: &str, value: &Value, out: &mut Listed, positions: &mut BTreeMap<String, usize>) {
    match value {
        Value::Tensor(t) => {
            let Some(dtype) = storage_dtype(&t.storage.kind) else {
                out.skipped.push(format!(
                    "{path}: storage type {} is not decoded",
                    t.storage.kind
                ));
                return;
            };
            let size = dtype.bits().div_ceil(8);
            let tensor_at = |storage| TorchTensor {
                name: path.to_owned(),
                dtype,
                shape: t.shape.clone(),
                stride: t.stride.clone(),
                offset: t.offset,
                storage,
            };
            let key = t.storage.key.to_string();
            let storage = *positions.entry(key.clone()).or_insert_with(|| {
                out.storages.push((key.clone(), 0));
                out.storage_kinds.push((key.clone(), size));
                out.storages.len() - 1
            });
            let tensor = tensor_at(storage);
            let Some(needed) = tensor
                .reach()
                .and_then(|(_, end)| end.max(t.storage.numel).checked_mul(size))
            else {
                out.skipped
                    .push(format!("{path}: its shape and strides overflow"));
                return;
            };
            if let Some(s) = out.storages.get_mut(storage) {
                s.1 = s.1.max(needed);
            }
            out.tensors.push(tensor);
        }
        Value::Storage(s) => {
            if let Some(dtype) = storage_dtype(&s.kind) {
                let key = s.key.to_string();
                if !out.storage_kinds.iter().any(|(k, _)| *k == key) {
                    out.storage_kinds.push((key, dtype.bits().div_ceil(8)));
                }
            }
        }
        Value::Opaque(what) => {
            let line = format!("{path}: made by `{what}`, which is not called");
            if out.skipped.len() < MAX_METADATA && !out.skipped.contains(&line) {
                out.skipped.push(line);
            }
        }
        scalar => {
            if out.metadata.len() < MAX_METADATA
                && let Some(text) = scalar_text(scalar)
            {
                out.metadata.insert(path.to_owned(), text);
            }
        }
    }
}

/// A scalar in one short line (`None` for containers).
fn scalar_text(value: &Value) -> Option<String> {
    let text = match value {
        Value::None => "None".to_owned(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        Value::Int(i) => i.to_string(),
        Value::BigInt => "(an integer over 64 bits)".to_owned(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.chars().take(MAX_VALUE_CHARS).collect(),
        Value::Bytes(n) => format!("({n} bytes)"),
        Value::Global(g) => g.to_string(),
        _ => return None,
    };
    Some(text)
}

/// Calls `f(path, leaf)` for every value under `value` that is not a dict,
/// list or tuple, with its key path joined by `.`. Each container is
/// visited once (a pickle may refer to one from two places, or to itself).
fn walk(
    u: &Unpickled,
    value: &Value,
    path: &mut String,
    depth: usize,
    visited: &mut [bool],
    f: &mut dyn FnMut(&str, &Value),
) {
    let enter = |visited: &mut [bool], id: pickle::NodeId| {
        let slot = visited.get_mut(id as usize);
        match slot {
            Some(seen) if !*seen => {
                *seen = true;
                true
            }
            _ => false,
        }
    };
    match value {
        Value::Dict(id) if depth < MAX_DEPTH => {
            if !enter(visited, *id) {
                return;
            }
            for (k, v) in u.pairs(*id) {
                let key = match k {
                    Value::Str(s) => s.to_string(),
                    Value::Int(i) => i.to_string(),
                    _ => continue,
                };
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
                walk(u, v, path, depth + 1, visited, f);
                path.truncate(len);
            }
        }
        Value::List(id) | Value::Tuple(id) if depth < MAX_DEPTH => {
            if !enter(visited, *id) {
                return;
            }
            for (i, v) in u.items(*id).iter().enumerate() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&i.to_string());
                walk(u, v, path, depth + 1, visited, f);
                path.truncate(len);
            }
        }
        Value::Set(_) | Value::Dict(_) | Value::List(_) | Value::Tuple(_) | Value::Mark => {}
        leaf => f(path, leaf),
    }
}

#[cfg(test)]
mod tests {
    use super::Strided;

    /// Element `i` of a storage of 2-byte items: `[i, 0x80]`.
    fn storage(n: u8) -> Vec<u8> {
        (0..n).flat_map(|i| [i, 0x80]).collect()
    }

    fn gathered(shape: &[u64], stride: &[u64], offset: u64, span: &[u8]) -> Option<Vec<u8>> {
        let view = Strided {
            item_bytes: 2,
            shape: shape.to_vec(),
            stride: stride.to_vec(),
        };
        let (first, _) = view.reach(offset)?;
        view.gather(span.get(usize::try_from(first * 2).ok()?..)?)
            .map(|b| b.chunks(2).map(|c| c[0]).collect())
    }

    #[test]
    fn views_gather_in_row_major_order() {
        let s = storage(12);
        // A 3x4 matrix, its transpose, a column slice, a 3-D view, a scalar.
        assert_eq!(gathered(&[3, 4], &[4, 1], 0, &s), Some((0..12).collect()));
        assert_eq!(
            gathered(&[4, 3], &[1, 4], 0, &s),
            Some(vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11])
        );
        assert_eq!(
            gathered(&[3, 2], &[4, 1], 1, &s),
            Some(vec![1, 2, 5, 6, 9, 10])
        );
        assert_eq!(
            gathered(&[2, 2, 2], &[6, 1, 3], 0, &s),
            Some(vec![0, 3, 1, 4, 6, 9, 7, 10])
        );
        assert_eq!(gathered(&[], &[], 5, &s), Some(vec![5]));
        assert_eq!(gathered(&[0, 4], &[4, 1], 0, &s), Some(vec![]));
        // Strides past the bytes: refused, never a panic.
        assert_eq!(gathered(&[4, 4], &[4, 1], 0, &s), None);
    }
}
