//! [`Checkpoint`]: a checkpoint opened from its headers (a folder with or
//! without an index, one file), its shards and its tensor table.

use super::{
    ByteSource, CheckpointError, Index, IndexEntries, ModelConfig, ShardHeader, Summary, TensorRef,
    TensorTable, gguf, header, index, parse_index, pytorch, read_config, summary, torch_checkpoint,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::table::name_hash;
use crate::par::on_cores;

/// One shard that opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// File name relative to the checkpoint folder.
    pub file: String,
    /// Full path.
    pub path: PathBuf,
    /// Size on disk.
    pub file_bytes: u64,
    /// Length of the JSON header.
    pub header_bytes: u64,
    /// `__metadata__`.
    pub metadata: BTreeMap<String, String>,
    /// Its tensors, as positions in [`Checkpoint::tensors`], in data order.
    pub tensors: std::ops::Range<usize>,
    /// Sum of its tensors' bytes.
    pub data_bytes: u64,
}

/// A shard of a checkpoint: its position in [`Checkpoint::shards`]. The
/// weights and worker layers name shards by it, never by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardId(pub usize);

impl ShardId {
    /// The position in [`Checkpoint::shards`].
    #[must_use]
    pub fn index(self) -> usize {
        self.0
    }
}

impl Shard {
    /// Byte offset in the file where the data section starts.
    #[must_use]
    pub fn data_start(&self) -> u64 {
        8 + self.header_bytes
    }
}

/// How the checkpoint was laid out on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// A folder with a `*.safetensors.index.json`.
    Indexed {
        /// The index file.
        index_path: PathBuf,
        /// Its contents.
        index: Index,
    },
    /// A folder of `*.safetensors` files, no index (sorted by name).
    Folder,
    /// One `.safetensors` file.
    SingleFile,
}

/// A checkpoint opened from its headers.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub(super) root: PathBuf,
    pub(super) layout: Layout,
    pub(super) shards: Vec<Shard>,
    pub(super) tensors: TensorTable,
    pub(crate) config: Option<ModelConfig>,
    pub(crate) problems: Vec<CheckpointError>,
    /// Where the files are when they are not on this machine.
    pub(crate) remote: Option<std::sync::Arc<dyn ByteSource>>,
    /// A GGUF file's ggml type per tensor position.
    pub(super) ggml: Option<std::sync::Arc<[gguf::GgmlType]>>,
    /// A GGUF file's header.
    pub(super) gguf: Option<std::sync::Arc<gguf::GgufHeader>>,
    /// PyTorch files' strides, storages and pickle globals.
    pub(super) torch: Option<std::sync::Arc<torch_checkpoint::TorchSide>>,
    /// Files of the folder that were not read because another format's
    /// files were (a `pytorch_model.bin` beside the safetensors).
    pub(crate) not_read: Vec<String>,
    /// The FP8 block the shapes say (see [`Checkpoint::fp8_shape_blocks`]),
    /// found once when first asked.
    pub(super) fp8_blocks: std::sync::OnceLock<summary::Fp8ShapeBlocks>,
}

impl Checkpoint {
    /// Opens the checkpoint at `path` on this machine: a folder (with or
    /// without an index), one safetensors file, or a GGUF file. Shard
    /// headers are parsed in parallel. (A Hub repo or a URL opens through
    /// the remote layer, `remote::open_checkpoint`, which gives this layer
    /// a [`ByteSource`].)
    ///
    /// # Errors
    /// When nothing can be opened at all: the path is unreadable, the folder
    /// holds no safetensors file, or the index is unusable. Problems with
    /// single shards are not errors here: see [`Checkpoint::problems`].
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        Self::open_reporting(path, &|_, _| {})
    }

    /// [`Checkpoint::open`], calling `report(parsed, total)` as shard
    /// headers are parsed (from the parsing threads; `total` counts the
    /// shard files found). Nothing is printed: progress goes to `report`.
    ///
    /// # Errors
    /// As [`Checkpoint::open`].
    pub fn open_reporting(
        path: &Path,
        report: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Self, CheckpointError> {
        let meta = std::fs::metadata(path).map_err(|e| CheckpointError::unreadable(path, &e))?;
        if meta.is_dir() {
            Self::open_folder(path, report)
        } else if gguf::is_gguf(path) {
            Self::open_gguf(path)
        } else if pytorch::is_torch(path) {
            Self::open_torch(path)
        } else {
            let file = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let mut checkpoint = Self::assemble(
                path.to_path_buf(),
                Layout::SingleFile,
                vec![(file, path.to_path_buf())],
                Vec::new(),
                report,
            );
            if let Some(dir) = path.parent() {
                checkpoint.read_config(&dir.join("config.json"));
            }
            Ok(checkpoint)
        }
    }

    pub(super) fn open_folder(
        dir: &Path,
        report: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Self, CheckpointError> {
        let entries = std::fs::read_dir(dir).map_err(|e| CheckpointError::unreadable(dir, &e))?;
        let mut shard_files = Vec::new();
        let mut index_files = Vec::new();
        let mut torch_files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| CheckpointError::unreadable(dir, &e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".safetensors.index.json") {
                index_files.push(name);
            } else if name.ends_with(".safetensors") {
                shard_files.push(name);
            } else if name.ends_with(".bin.index.json") || torch_checkpoint::is_torch_name(&name) {
                torch_files.push(name);
            }
        }
        index_files.sort_unstable();
        shard_files.sort_unstable();
        torch_files.sort_unstable();
        if index_files.is_empty() && shard_files.is_empty() && !torch_files.is_empty() {
            return Self::open_torch_folder(dir, torch_files, report);
        }
        let mut checkpoint = if let Some(index_name) = index_files.first() {
            let index_path = dir.join(index_name);
            require_regular(&index_path)?;
            // The index is read and parsed while the shard headers the
            // folder lists are (a 90k-entry index is 8 MB of JSON, as much
            // as many shards); it then picks its shards, in its order. It is
            // read a piece at a time and only a digest of its entries per
            // shard file is kept: neither its text nor its entries are ever
            // whole in memory.
            let read_and_parse = || {
                index::read_index_folded(&index_path, |digest: &mut NameDigest, name| {
                    digest.add(name_hash(name));
                })
            };
            let listed: Vec<(String, PathBuf)> = shard_files
                .iter()
                .map(|file| (file.clone(), dir.join(file)))
                .collect();
            // The first header thread reads the index before any header: its
            // 8 MB of text are freed while few shards' tensors are held.
            let index_parsed = std::sync::OnceLock::new();
            let listed_headers = parse_all(
                &listed,
                report,
                &|| {
                    index_parsed.get_or_init(read_and_parse);
                },
                crate::par::cores(),
                &read_local,
            );
            // Should that thread not have started, the index is read here.
            let parsed = index_parsed.into_inner().unwrap_or_else(read_and_parse);
            let (index, index_digests) = parsed?;
            let (files, headers, problems) = in_index_order(
                &index,
                &index_path,
                listed,
                listed_headers,
                &|file| dir.join(file),
                &|_, path| path.exists(),
                crate::par::cores(),
                &read_local,
            );
            let layout = Layout::Indexed { index_path, index };
            let (mut checkpoint, shard_digests) =
                Self::assemble_parsed(dir.to_path_buf(), layout, files, headers, problems);
            let reread = |index_path: &Path| {
                crate::files::read_bounded(index_path, index::MAX_INDEX_BYTES, "the index")
                    .map_err(|e| CheckpointError::unreadable_for(index_path, e.reason()))
            };
            checkpoint.check_index(&index_digests, &shard_digests, &reread);
            checkpoint
        } else if shard_files.is_empty() {
            return Err(CheckpointError::EmptyFolder {
                path: dir.to_path_buf(),
            });
        } else {
            let files = shard_files
                .into_iter()
                .map(|file| {
                    let path = dir.join(&file);
                    (file, path)
                })
                .collect();
            Self::assemble(dir.to_path_buf(), Layout::Folder, files, Vec::new(), report)
        };
        checkpoint.not_read = torch_files
            .into_iter()
            .filter(|n| !n.ends_with(".index.json"))
            .collect();
        checkpoint.read_config(&dir.join("config.json"));
        Ok(checkpoint)
    }

    /// Parses every shard (in parallel), then builds the tensor table.
    pub(super) fn assemble(
        root: PathBuf,
        layout: Layout,
        files: Vec<(String, PathBuf)>,
        problems: Vec<CheckpointError>,
        report: &(dyn Fn(usize, usize) + Sync),
    ) -> Self {
        let headers = parse_all(&files, report, &|| {}, crate::par::cores(), &read_local);
        Self::assemble_parsed(root, layout, files, headers, problems).0
    }

    /// Builds the tensor table from parsed headers (one per file, in order),
    /// with each opened shard's [`NameDigest`] (`None` for a shard that had
    /// names left out as duplicates).
    pub(crate) fn assemble_parsed(
        root: PathBuf,
        layout: Layout,
        files: Vec<(String, PathBuf)>,
        headers: Vec<Parsed>,
        mut problems: Vec<CheckpointError>,
    ) -> (Self, Vec<Option<NameDigest>>) {
        // Each file's header, or its error, in order; the opened ones' columns
        // and name hashes go to the table together.
        let mut parts = Vec::with_capacity(files.len());
        let mut part_hashes = Vec::with_capacity(files.len());
        let parsed: Vec<_> = files
            .into_iter()
            .zip(headers)
            .map(|(file, header)| {
                header.map(|(mut header, hashes)| {
                    parts.push(std::mem::take(&mut header.tensors));
                    part_hashes.push(hashes);
                    (file, header)
                })
            })
            .collect();
        let (tensors, duplicates) = TensorTable::from_shards(parts, &part_hashes);
        let mut digests = Vec::with_capacity(part_hashes.len());
        let mut shards: Vec<Shard> = Vec::with_capacity(part_hashes.len());
        let mut opened = part_hashes.iter().zip(duplicates);
        for result in parsed {
            let ((file, path), header) = match result {
                Ok(parsed) => parsed,
                Err(err) => {
                    problems.push(err);
                    continue;
                }
            };
            let Some((hashes, duplicates)) = opened.next() else {
                break;
            };
            let mut digest = NameDigest::default();
            for &hash in hashes {
                digest.add(hash);
            }
            digests.push(duplicates.is_empty().then_some(digest));
            for (tensor, first) in duplicates {
                let first_shard = tensors
                    .get(first)
                    .and_then(|t| shards.get(t.shard().index()));
                problems.push(CheckpointError::DuplicateTensor {
                    tensor,
                    first: first_shard.map_or_else(|| path.clone(), |s: &Shard| s.path.clone()),
                    second: path.clone(),
                });
            }
            let range = tensors.part_range(shards.len());
            let data_bytes = tensors
                .iter_range(range.clone())
                .map(TensorRef::bytes)
                .sum();
            shards.push(Shard {
                file,
                path,
                file_bytes: header.file_bytes,
                header_bytes: header.header_bytes,
                metadata: header.metadata,
                tensors: range,
                data_bytes,
            });
        }
        let checkpoint = Self {
            root,
            layout,
            shards,
            tensors,
            config: None,
            problems,
            remote: None,
            ggml: None,
            gguf: None,
            torch: None,
            not_read: Vec::new(),
            fp8_blocks: std::sync::OnceLock::new(),
        };
        (checkpoint, digests)
    }

    /// Every tensor the index places must be in the shard it names. Each
    /// shard's names are first compared as a digest with the index's names
    /// for it (`index_digests` in index file order, `shard_digests` in shard
    /// order); only when one differs is the index read again and every
    /// entry looked up, to say which.
    pub(crate) fn check_index(
        &mut self,
        index_digests: &[NameDigest],
        shard_digests: &[Option<NameDigest>],
        reread: &dyn Fn(&Path) -> Result<Vec<u8>, CheckpointError>,
    ) {
        let Layout::Indexed { index_path, index } = &self.layout else {
            return;
        };
        let opened = self.shard_positions();
        let agree = index
            .shard_files
            .iter()
            .zip(index_digests)
            .all(|(file, digest)| {
                // A missing or bad shard was reported already.
                opened
                    .get(file.as_str())
                    .is_none_or(|&k| shard_digests.get(k).copied().flatten() == Some(*digest))
            });
        if agree {
            return;
        }
        let index_path = index_path.clone();
        let entries = reread(&index_path).and_then(|bytes| {
            let (_, entries, hashes) = parse_index_hashed(&index_path, &bytes)?;
            Ok(self.misplaced_entry(&entries, &hashes))
        });
        match entries {
            Ok(Some(problem)) | Err(problem) => self.problems.push(problem),
            Ok(None) => {}
        }
    }

    /// Shard file name → its position among the shards that opened (one
    /// map, not a search per index file: an index may name 100k shards).
    pub(super) fn shard_positions(&self) -> foldhash::HashMap<&str, usize> {
        self.shards
            .iter()
            .enumerate()
            .map(|(k, s)| (s.file.as_str(), k))
            .collect()
    }

    /// The first index entry whose tensor is not in the shard it names, as
    /// a problem counting the others. `hashes[i]` is the [`name_hash`] of
    /// `entries[i]`'s name. The 90k look-ups are split over the cores.
    pub(super) fn misplaced_entry(
        &self,
        entries: &IndexEntries<'_>,
        hashes: &[u64],
    ) -> Option<CheckpointError> {
        let Layout::Indexed { index_path, index } = &self.layout else {
            return None;
        };
        // Index file position → position among the shards that opened.
        let positions = self.shard_positions();
        let opened: Vec<Option<usize>> = index
            .shard_files
            .iter()
            .map(|file| positions.get(file.as_str()).copied())
            .collect();
        // The first misplaced entry in `range`, and how many there are.
        let misplaced = |range: std::ops::Range<usize>| -> (Option<usize>, usize) {
            let mut first = None;
            let mut count = 0;
            for i in range {
                let (tensor, file) = &entries[i];
                // A missing or bad shard was reported already.
                let wrong = opened[*file].is_some_and(|shard| {
                    self.tensors
                        .position_hashed(tensor, hashes[i])
                        .and_then(|t| self.tensors.get(t))
                        .is_none_or(|t| t.shard().index() != shard)
                });
                if wrong {
                    first.get_or_insert(i);
                    count += 1;
                }
            }
            (first, count)
        };
        let found = on_cores(entries.len(), 1 << 14, "index-check", &misplaced);
        let count: usize = found.iter().map(|(_, n)| n).sum();
        let i = found.iter().find_map(|(first, _)| *first)?;
        let (tensor, file) = &entries[i];
        Some(CheckpointError::IndexTensorNotInShard {
            index: index_path.clone(),
            tensor: tensor.to_string(),
            shard: index.shard_files[*file].clone(),
            more: count - 1,
        })
    }

    pub(super) fn read_config(&mut self, path: &Path) {
        // Absent is fine; there but not a regular file (a FIFO, a folder)
        // is a problem said as one, never silently passed over.
        if std::fs::symlink_metadata(path).is_err() {
            return;
        }
        match read_config(path) {
            Ok(config) => self.config = Some(config),
            // config.json that cannot be read is a config problem (the
            // `config.unusable` finding), not a shard that failed.
            Err(CheckpointError::Unreadable { path, reason }) => self
                .problems
                .push(CheckpointError::BadConfig { path, reason }),
            Err(err) => self.problems.push(err),
        }
    }

    /// The folder (or single file) opened.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How the checkpoint is laid out.
    #[must_use]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Shards that opened, in order (index order, or sorted by name).
    #[must_use]
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Every tensor of every shard that opened, shard by shard in data order.
    #[must_use]
    pub fn tensors(&self) -> &TensorTable {
        &self.tensors
    }

    /// The tensor named `name`.
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        self.tensors.find(name)
    }

    /// Position of the tensor named `prefix` + `suffix` (no allocation).
    pub(crate) fn position_joined(&self, prefix: &str, suffix: &str) -> Option<usize> {
        self.tensors.position_joined(prefix, suffix)
    }

    /// The shard holding `tensor`.
    #[must_use]
    pub fn shard_of(&self, tensor: TensorRef<'_>) -> &Shard {
        self.shard(tensor.shard())
    }

    /// Shard `id` (an id from this checkpoint: its tensors' or
    /// [`Checkpoint::find_shard`]'s).
    #[must_use]
    pub fn shard(&self, id: ShardId) -> &Shard {
        &self.shards[id.0]
    }

    /// The shard whose file is `file` (relative to the folder), if any:
    /// the one place a shard is looked up by name.
    #[must_use]
    pub fn find_shard(&self, file: &str) -> Option<ShardId> {
        self.shards.iter().position(|s| s.file == file).map(ShardId)
    }

    /// `config.json`, when present and usable.
    #[must_use]
    pub fn config(&self) -> Option<&ModelConfig> {
        self.config.as_ref()
    }

    /// Problems found while opening (bad shards, index mismatches, a bad
    /// `config.json`); what is listed above still loaded.
    #[must_use]
    pub fn problems(&self) -> &[CheckpointError] {
        &self.problems
    }

    /// The problems that make the checkpoint unusable for a command that
    /// reads it whole (see [`CheckpointError::is_fatal`]).
    #[must_use]
    pub fn fatal_problems(&self) -> Vec<&CheckpointError> {
        self.problems().iter().filter(|p| p.is_fatal()).collect()
    }

    /// Totals, parameter counts and quantization, from the headers.
    #[must_use]
    pub fn summary(&self) -> Summary {
        Summary::of(self)
    }

    /// `__metadata__` of all shards merged (the first shard's value wins).
    #[must_use]
    pub fn metadata(&self) -> BTreeMap<String, String> {
        let mut merged = BTreeMap::new();
        for shard in &self.shards {
            for (k, v) in &shard.metadata {
                merged.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        merged
    }
}

/// An order-free digest of a set of tensor names: how many, and the sum and
/// the exclusive or of their [`name_hash`]es. Two sets that differ give
/// different digests except by a 64-bit coincidence in both sums at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NameDigest {
    pub(super) count: u64,
    pub(super) sum: u64,
    pub(super) xor: u64,
}

impl NameDigest {
    pub(crate) fn add(&mut self, hash: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(hash);
        self.xor ^= hash;
    }
}

/// [`parse_index`], with the [`name_hash`] of every entry's name.
pub(super) fn parse_index_hashed<'a>(
    path: &Path,
    bytes: &'a [u8],
) -> Result<(Index, IndexEntries<'a>, Vec<u64>), CheckpointError> {
    let (index, entries) = parse_index(path, bytes)?;
    let hashes = entries.iter().map(|(name, _)| name_hash(name)).collect();
    Ok((index, entries, hashes))
}

/// A shard's parsed header with its tensor names' [`name_hash`]es.
pub(crate) type Parsed = Result<(ShardHeader, Vec<u64>), CheckpointError>;

/// Reads a shard header with `buf` and hashes its names.
pub(super) fn read_hashed(path: &Path, buf: &mut Vec<u8>) -> Parsed {
    let mut header = header::read_header_with(path, buf)?;
    let hashes = std::mem::take(&mut header.name_hashes);
    Ok((header, hashes))
}

/// Reads one shard's header (given its name and path, and a buffer it may
/// reuse).
pub(crate) type ReadHeader<'a> = dyn Fn(&(String, PathBuf), &mut Vec<u8>) -> Parsed + Sync + 'a;

/// [`read_hashed`] on a file of this machine.
pub(super) fn read_local(file: &(String, PathBuf), buf: &mut Vec<u8>) -> Parsed {
    read_hashed(&file.1, buf)
}

/// The index's shards in its order, each with its header: taken from
/// `listed` (the shard files the folder lists, parsed while the index was),
/// the others (a shard in a subfolder) parsed now, `workers` at a time,
/// where `exists(file, path)` says they are, else reported missing.
#[allow(clippy::too_many_arguments)]
pub(crate) fn in_index_order(
    index: &Index,
    index_path: &Path,
    listed: Vec<(String, PathBuf)>,
    listed_headers: Vec<Parsed>,
    path_of: &dyn Fn(&str) -> PathBuf,
    exists: &dyn Fn(&str, &Path) -> bool,
    workers: usize,
    read: &ReadHeader<'_>,
) -> (Vec<(String, PathBuf)>, Vec<Parsed>, Vec<CheckpointError>) {
    let mut by_file: foldhash::HashMap<String, Parsed> = listed
        .into_iter()
        .map(|(file, _)| file)
        .zip(listed_headers)
        .collect();
    let mut problems = Vec::new();
    let mut files = Vec::new();
    let mut headers: Vec<Option<Parsed>> = Vec::new();
    let mut unlisted = Vec::new();
    for file in &index.shard_files {
        let path = path_of(file);
        let header = by_file.remove(file);
        if header.is_none() {
            if !exists(file, &path) {
                problems.push(CheckpointError::IndexMissingShard {
                    index: index_path.to_path_buf(),
                    shard: file.clone(),
                });
                continue;
            }
            unlisted.push((headers.len(), (file.clone(), path.clone())));
        }
        files.push((file.clone(), path));
        headers.push(header);
    }
    let (at, more): (Vec<usize>, Vec<(String, PathBuf)>) = unlisted.into_iter().unzip();
    for (i, parsed) in at
        .into_iter()
        .zip(parse_all(&more, &|_, _| {}, &|| {}, workers, read))
    {
        headers[i] = Some(parsed);
    }
    // Every place was filled: from the listing or just now.
    let headers: Vec<Parsed> = headers.into_iter().flatten().collect();
    debug_assert_eq!(headers.len(), files.len());
    (files, headers, problems)
}

/// Parses every shard header with `read` (given the file and a buffer it
/// may reuse), spreading files over at most `workers` threads;
/// `report(parsed, total)` after each file. One thread runs `first` before
/// it takes a file.
pub(crate) fn parse_all(
    files: &[(String, PathBuf)],
    report: &(dyn Fn(usize, usize) + Sync),
    first: &(dyn Fn() + Sync),
    workers: usize,
    read: &ReadHeader<'_>,
) -> Vec<Parsed> {
    let workers = workers.min(files.len()).max(1);
    if workers == 1 {
        first();
        let mut buf = Vec::new();
        return files
            .iter()
            .enumerate()
            .map(|(i, file)| {
                let parsed = read(file, &mut buf);
                report(i + 1, files.len());
                parsed
            })
            .collect();
    }
    let next = AtomicUsize::new(0);
    let parsed = AtomicUsize::new(0);
    let parse = |k: usize| {
        if k == 0 {
            first();
        }
        let mut done = Vec::new();
        let mut buf = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(file) = files.get(i) else { break };
            done.push((i, read(file, &mut buf)));
            report(parsed.fetch_add(1, Ordering::Relaxed) + 1, files.len());
        }
        done
    };
    let (done, ()) = crate::par::on_workers(workers, "header-parse", &parse, |_| ());
    // Should no worker start, every file is left unparsed, reported as
    // such; a worker only panics on a bug, and its files read as unreadable.
    let mut results: Vec<Option<Parsed>> = vec![None; files.len()];
    for (i, result) in done.into_iter().flatten().flatten() {
        results[i] = Some(result);
    }
    results
        .into_iter()
        .zip(files)
        .map(|(result, (_, path))| {
            result.unwrap_or_else(|| {
                Err(CheckpointError::Unreadable {
                    path: path.clone(),
                    reason: "header parser failed".into(),
                })
            })
        })
        .collect()
}

/// Refuses a path that is neither a regular file nor a folder (a FIFO, a
/// device, a socket) before anything opens it: opening a FIFO for reading
/// blocks until a writer comes, which would hang `inspect` and the window.
/// Links are followed (a link to a regular file is fine).
///
/// # Errors
/// [`CheckpointError::Unreadable`] naming the file and what it is.
pub(crate) fn require_regular(path: &Path) -> Result<(), CheckpointError> {
    let kind = match std::fs::metadata(path) {
        Ok(meta) => meta.file_type(),
        // Missing or unreadable: the open that follows says why.
        Err(_) => return Ok(()),
    };
    match crate::files::irregular_kind(kind) {
        None | Some("a folder") => Ok(()),
        Some(what) => Err(CheckpointError::Unreadable {
            path: path.to_path_buf(),
            reason: format!("is {what}, not a regular file"),
        }),
    }
}
