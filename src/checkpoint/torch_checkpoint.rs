//! PyTorch files as a checkpoint: each `.bin`/`.pth`/`.pt` file one shard
//! whose tensors are listed in the tensor table as a safetensors shard's
//! are, so the window, `diff`, `check` and `walk` read them as they read
//! safetensors. What only torch files have (strides, storages shared by
//! two names, the pickle's globals) is kept beside the table
//! ([`Checkpoint::torch_tensor_at`], [`Checkpoint::torch_shard`]).
//!
//! A tensor's range in the table is its logical bytes: from its storage's
//! first byte at its offset, as many bytes as its elements take. For a
//! contiguous tensor those are its bytes; a view (a transposed weight, a
//! column slice) is read through its strides ([`TorchAt::stride`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::header::ShardHeader;
use super::pytorch::{self, Storage, TorchFile, TorchFormat};
use super::table::name_hash;
use super::{Checkpoint, CheckpointError, Parsed, ShardTensors};

/// What a torch shard holds besides its tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchShard {
    /// Zip or legacy.
    pub format: TorchFormat,
    /// Every global its pickle imports, with its class.
    pub globals: Vec<pytorch::Imported>,
    /// Values that could not be listed.
    pub skipped: Vec<String>,
    /// Bytes of its pickle.
    pub pickle_bytes: u64,
    /// The archive's `version` record.
    pub version: Option<String>,
    /// Its storages.
    pub storages: Vec<Storage>,
}

impl TorchShard {
    /// The worst class among its globals.
    #[must_use]
    pub fn verdict(&self) -> pytorch::Safety {
        self.globals
            .iter()
            .map(|g| g.safety)
            .max()
            .unwrap_or(pytorch::Safety::Innocuous)
    }
}

/// Where a torch tensor's elements are in its storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchAt {
    /// Its storage's key.
    pub storage_key: String,
    /// Offset of the storage's first byte in the file.
    pub storage_file_offset: u64,
    /// Elements of the storage before the tensor's first.
    pub offset: u64,
    /// Strides, in elements.
    pub stride: Vec<u64>,
    /// Whether its elements are a plain run of the storage.
    pub contiguous: bool,
    /// The first tensor (by position) on the same storage, when this one is
    /// not it: a tied weight, or a view of another tensor's bytes.
    pub tied_to: Option<usize>,
    /// Whether [`TorchAt::tied_to`]'s tensor is this very view (same
    /// offset, shape and strides): one tensor under two names.
    pub same_view: bool,
}

/// Torch facts of a checkpoint: per shard, per tensor position.
#[derive(Debug, Default)]
pub(crate) struct TorchSide {
    shards: Vec<Option<TorchShard>>,
    tensors: Vec<Option<TorchAt>>,
}

/// The file names of a folder that are torch checkpoints.
#[must_use]
pub fn is_torch_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".bin", ".pt", ".pth", ".ckpt"]
        .iter()
        .any(|ext| lower.ends_with(ext))
        && !lower.starts_with("training_args")
}

/// Reads torch files into shard headers, keeping each file's torch facts
/// aside (by path) for [`Checkpoint::attach_torch`].
#[derive(Debug, Default)]
pub struct TorchReader {
    files: Mutex<Vec<(PathBuf, TorchFile)>>,
}

impl TorchReader {
    /// Reads the torch file at `path` as one shard header.
    pub(crate) fn read(&self, path: &Path) -> Parsed {
        let unreadable = |reason: String| CheckpointError::Unreadable {
            path: path.to_path_buf(),
            reason,
        };
        let file_bytes = std::fs::metadata(path)
            .map_err(|e| CheckpointError::unreadable(path, &e))?
            .len();
        let torch = pytorch::read(path).map_err(|e| unreadable(e.to_string()))?;
        let (header, hashes) = shard_header(&torch, file_bytes).map_err(unreadable)?;
        if let Ok(mut files) = self.files.lock() {
            files.push((path.to_path_buf(), torch));
        }
        Ok((header, hashes))
    }

    /// Reads the torch file `source` (shown as `path`) as one shard header.
    ///
    /// # Errors
    /// The file cannot be read as a torch file (one line naming `path`).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))] // the remote layer's
    pub(crate) fn read_source(&self, path: &Path, source: &dyn pytorch::Source) -> Parsed {
        let unreadable = |reason: String| CheckpointError::Unreadable {
            path: path.to_path_buf(),
            reason,
        };
        let file_bytes = source
            .size()
            .map_err(|e| unreadable(super::io_reason(&e)))?;
        let torch = pytorch::read_from(source).map_err(|e| unreadable(e.to_string()))?;
        let (header, hashes) = shard_header(&torch, file_bytes).map_err(unreadable)?;
        if let Ok(mut files) = self.files.lock() {
            files.push((path.to_path_buf(), torch));
        }
        Ok((header, hashes))
    }

    fn take(&self) -> Vec<(PathBuf, TorchFile)> {
        self.files
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default()
    }
}

/// The table of a torch file: its tensors by their logical byte ranges,
/// in file order; the non-tensor values as metadata.
fn shard_header(torch: &TorchFile, file_bytes: u64) -> Result<(ShardHeader, Vec<u64>), String> {
    let base = torch
        .storages
        .iter()
        .map(|s| s.file_offset)
        .min()
        .unwrap_or(8)
        .max(8);
    let mut order: Vec<(u64, &pytorch::TorchTensor)> = Vec::with_capacity(torch.tensors.len());
    for t in &torch.tensors {
        let storage = torch
            .storages
            .get(t.storage)
            .ok_or_else(|| format!("tensor `{}` names no storage", t.name))?;
        let size = t.dtype.bits().div_ceil(8);
        let start = t
            .offset
            .checked_mul(size)
            .and_then(|o| o.checked_add(storage.file_offset))
            .ok_or_else(|| format!("tensor `{}`: its offset overflows", t.name))?;
        order.push((start - base, t));
    }
    order.sort_by_key(|(start, _)| *start);
    let names_len = order.iter().map(|(_, t)| t.name.len()).sum();
    let mut tensors = ShardTensors::with_capacity(order.len(), names_len);
    let mut hashes = Vec::with_capacity(order.len());
    let mut seen = foldhash::HashSet::default();
    for (start, t) in order {
        if !seen.insert(t.name.as_str()) {
            return Err(format!("tensor `{}` is listed twice", t.name));
        }
        let bytes = t
            .elements()
            .checked_mul(t.dtype.bits())
            .map(|b| b.div_ceil(8))
            .ok_or_else(|| format!("tensor `{}`: its size overflows", t.name))?;
        if !tensors.push(&t.name, t.dtype, &t.shape, (start, start + bytes)) {
            return Err("too many tensors".into());
        }
        hashes.push(name_hash(&t.name));
    }
    let header = ShardHeader {
        file_bytes,
        header_bytes: base - 8,
        metadata: torch.metadata.clone(),
        tensors,
        name_hashes: Vec::new(),
    };
    Ok((header, hashes))
}

impl Checkpoint {
    /// Opens the torch file at `path` as a one-shard checkpoint.
    pub(crate) fn open_torch(path: &Path) -> Result<Self, CheckpointError> {
        let reader = TorchReader::default();
        let parsed = reader.read(path)?;
        let file = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let (mut checkpoint, _) = Self::assemble_parsed(
            path.to_path_buf(),
            super::Layout::SingleFile,
            vec![(file, path.to_path_buf())],
            vec![Ok(parsed)],
            Vec::new(),
        );
        checkpoint.attach_torch(&reader);
        if let Some(dir) = path.parent() {
            checkpoint.read_config(&dir.join("config.json"));
        }
        Ok(checkpoint)
    }

    /// Opens a folder of torch files: the shards a `*.bin.index.json` names,
    /// in its order, or else every torch file, by name.
    pub(crate) fn open_torch_folder(
        dir: &Path,
        names: Vec<String>,
        report: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Self, CheckpointError> {
        let reader = TorchReader::default();
        let read = |file: &(String, PathBuf), _: &mut Vec<u8>| reader.read(&file.1);
        let (indexes, files): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|n| n.ends_with(".index.json"));
        let listed: Vec<(String, PathBuf)> = files
            .iter()
            .map(|file| (file.clone(), dir.join(file)))
            .collect();
        let mut checkpoint = if let Some(index_name) = indexes.first() {
            let index_path = dir.join(index_name);
            super::require_regular(&index_path)?;
            let (index, index_digests) =
                super::index::read_index_folded(&index_path, |d: &mut super::NameDigest, name| {
                    d.add(name_hash(name));
                })?;
            // Only the files the index names are read.
            let in_index: Vec<(String, PathBuf)> = listed
                .into_iter()
                .filter(|(f, _)| index.shard_files.contains(f))
                .collect();
            let headers = super::parse_all(&in_index, report, &|| {}, crate::par::cores(), &read);
            let (files, headers, problems) = super::in_index_order(
                &index,
                &index_path,
                in_index,
                headers,
                &|file| dir.join(file),
                &|_, path| path.exists(),
                crate::par::cores(),
                &read,
            );
            let layout = super::Layout::Indexed { index_path, index };
            let (mut checkpoint, shard_digests) =
                Self::assemble_parsed(dir.to_path_buf(), layout, files, headers, problems);
            let reread = |index_path: &Path| {
                crate::files::read_bounded(index_path, super::index::MAX_INDEX_BYTES, "the index")
                    .map_err(|e| CheckpointError::unreadable_for(index_path, e.reason()))
            };
            checkpoint.check_index(&index_digests, &shard_digests, &reread);
            checkpoint
        } else {
            let headers = super::parse_all(&listed, report, &|| {}, crate::par::cores(), &read);
            Self::assemble_parsed(
                dir.to_path_buf(),
                super::Layout::Folder,
                listed,
                headers,
                Vec::new(),
            )
            .0
        };
        checkpoint.attach_torch(&reader);
        checkpoint.read_config(&dir.join("config.json"));
        Ok(checkpoint)
    }

    /// Keeps the torch facts `reader` read beside the table, and counts each
    /// shard's bytes as its storages (a storage two names share, once).
    pub(crate) fn attach_torch(&mut self, reader: &TorchReader) {
        let mut files: foldhash::HashMap<PathBuf, TorchFile> = reader.take().into_iter().collect();
        let mut side = TorchSide {
            shards: Vec::with_capacity(self.shards.len()),
            tensors: vec![None; self.tensors.len()],
        };
        for shard in &mut self.shards {
            let Some(torch) = files.remove(&shard.path) else {
                side.shards.push(None);
                continue;
            };
            shard.data_bytes = torch.storages.iter().map(|s| s.bytes).sum();
            let by_name: foldhash::HashMap<&str, &pytorch::TorchTensor> =
                torch.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
            let mut first_on: foldhash::HashMap<usize, usize> = foldhash::HashMap::default();
            for position in shard.tensors.clone() {
                let Some(t) = self
                    .tensors
                    .get(position)
                    .and_then(|r| by_name.get(r.name()))
                else {
                    continue;
                };
                let Some(storage) = torch.storages.get(t.storage) else {
                    continue;
                };
                let first = *first_on.entry(t.storage).or_insert(position);
                let tied_to = (first != position).then_some(first);
                let same_view = tied_to
                    .and_then(|f| side.tensors.get(f).cloned().flatten())
                    .is_some_and(|other| {
                        other.offset == t.offset
                            && other.stride == t.stride
                            && self.tensors.at(first).shape() == t.shape.as_slice()
                    });
                side.tensors[position] = Some(TorchAt {
                    storage_key: storage.key.clone(),
                    storage_file_offset: storage.file_offset,
                    offset: t.offset,
                    stride: t.stride.clone(),
                    contiguous: t.contiguous(),
                    tied_to,
                    same_view,
                });
            }
            side.shards.push(Some(TorchShard {
                format: torch.format,
                globals: torch.globals,
                skipped: torch.skipped,
                pickle_bytes: torch.pickle_bytes,
                version: torch.version,
                storages: torch.storages,
            }));
        }
        self.torch = Some(Arc::new(side));
    }

    /// Files of the folder that were not read because another format's
    /// were (a `pytorch_model.bin` beside the safetensors, as transformers
    /// prefers them too).
    #[must_use]
    pub fn not_read(&self) -> &[String] {
        &self.not_read
    }

    /// Whether the checkpoint is PyTorch files.
    #[must_use]
    pub fn is_torch(&self) -> bool {
        self.torch.is_some()
    }

    /// The torch facts of shard `shard` (`None` for other formats).
    #[must_use]
    pub fn torch_shard(&self, shard: super::ShardId) -> Option<&TorchShard> {
        self.torch.as_ref()?.shards.get(shard.index())?.as_ref()
    }

    /// Where the tensor at position `i` of a torch checkpoint is in its
    /// storage.
    #[must_use]
    pub fn torch_tensor_at(&self, i: usize) -> Option<&TorchAt> {
        self.torch.as_ref()?.tensors.get(i)?.as_ref()
    }

    /// The worst class among every shard's pickle globals, with the globals
    /// that are not innocuous (each once, worst first).
    #[must_use]
    pub fn torch_verdict(&self) -> Option<(pytorch::Safety, Vec<pytorch::Imported>)> {
        let side = self.torch.as_ref()?;
        let mut worst = pytorch::Safety::Innocuous;
        let mut flagged: Vec<pytorch::Imported> = Vec::new();
        for shard in side.shards.iter().flatten() {
            worst = worst.max(shard.verdict());
            for g in &shard.globals {
                if g.safety != pytorch::Safety::Innocuous && !flagged.contains(g) {
                    flagged.push(g.clone());
                }
            }
        }
        flagged.sort_by_key(|g| std::cmp::Reverse(g.safety));
        Some((worst, flagged))
    }
}
