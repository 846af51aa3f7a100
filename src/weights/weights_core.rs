//! The Weights core: a model folder to lazy MLX arrays, cached per
//! canonical name, shards released whole (docs/weights.md).

use super::{CompiledView, MlxLoader, ShardLoader, View, ViewChoice, ViewError, ViewInfo};

/// How far opening a checkpoint has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenStep {
    /// Shard headers parsed so far, of the shard files found.
    Headers {
        /// Parsed.
        parsed: usize,
        /// Found.
        total: usize,
    },
    /// MLX maps opened so far (lazy: no tensor bytes read), of the shards.
    Maps {
        /// Opened.
        opened: usize,
        /// Shards.
        total: usize,
    },
}

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::checkpoint::{Checkpoint, CheckpointError, ShardId, TensorRef};
use crate::mlx::{Array, MlxError, ShardMap};

/// Errors of the Weights core.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The checkpoint's headers could not be read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// MLX failed (opening a shard, applying a fix-up).
    #[error(transparent)]
    Mlx(#[from] MlxError),
    /// A diff's two sides hold one name with different shapes.
    #[error("`{name}` has the shape {a:?} in A and {b:?} in B: its values cannot be compared")]
    ShapesDiffer {
        /// The tensor.
        name: String,
        /// A's logical shape.
        a: Vec<i32>,
        /// B's.
        b: Vec<i32>,
    },
    /// No tensor of that (canonical) name.
    #[error("no tensor named `{0}`")]
    NoTensor(String),
    /// The header lists the tensor but MLX's map of its shard lacks it.
    #[error(
        "tensor `{name}` is missing from MLX's map of {}",
        crate::units::Shown::path(path)
    )]
    MissingFromMap {
        /// Stored name.
        name: String,
        /// The shard file.
        path: std::path::PathBuf,
    },
    /// A view was installed after tensors were materialized.
    #[error("a view must be installed before the first tensor is materialized")]
    ViewTooLate,
    /// The shard file changed (size or modification time) since it was opened.
    #[error(
        "the shard changed on disk since it was opened (reopen the checkpoint): {}",
        crate::units::Shown::path(path)
    )]
    ShardChanged {
        /// The shard file.
        path: std::path::PathBuf,
    },
    /// The shard file is gone or unreadable since it was opened.
    #[error(
        "the shard cannot be read any more ({reason}): {}",
        crate::units::Shown::path(path)
    )]
    ShardGone {
        /// The shard file.
        path: std::path::PathBuf,
        /// The OS's reason.
        reason: String,
    },
    /// Materializing would pass MLX's memory limit.
    #[error(
        "materializing `{name}` needs {} but MLX's memory limit is {} with {} in use: release shards or raise the limit",
        crate::units::human_bytes(*needed),
        crate::units::human_bytes(*limit),
        crate::units::human_bytes(*active)
    )]
    OverLimit {
        /// The tensor.
        name: String,
        /// Bytes it needs.
        needed: u64,
        /// MLX active memory now.
        active: u64,
        /// MLX's limit.
        limit: u64,
    },
    /// The stored values cannot be decoded into numbers (weightscope never
    /// shows byte codes as values).
    #[error("cannot show the values of `{name}`: {reason}")]
    Undecodable {
        /// The tensor.
        name: String,
        /// Why.
        reason: String,
    },
    /// A view could not be made from its rules or file.
    #[error(transparent)]
    View(#[from] ViewError),
    /// A checkpoint to compare against holds no tensors.
    #[error("no tensors to compare: {}", crate::units::Shown::path(path))]
    NothingToCompare {
        /// The checkpoint.
        path: std::path::PathBuf,
    },
}

/// A shard file's size and modification time when it was opened.
pub(super) type Fingerprint = Option<(u64, std::time::SystemTime)>;

pub(super) fn fingerprint(path: &Path) -> std::io::Result<(u64, std::time::SystemTime)> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.len(), meta.modified()?))
}

/// A checkpoint opened for reading tensors through MLX.
pub struct Weights<N: ShardLoader = MlxLoader> {
    /// Shared with the UI, which lists tensors while this layer owns the arrays.
    pub(super) checkpoint: Arc<Checkpoint>,
    pub(super) native: N,
    /// Shard position in the checkpoint → its live native map.
    pub(super) maps: HashMap<ShardId, ShardMap>,
    /// Cached arrays by canonical name.
    pub(super) arrays: HashMap<String, Array>,
    /// Shard position → stored tensors evaluated from its live map, with
    /// their bytes: what the map keeps alive until [`Weights::release_shard`],
    /// whatever [`Weights::release`] did (the profiler's attribution).
    pub(super) resident: HashMap<ShardId, HashMap<String, u64>>,
    /// Shard position → the sum of its `resident` bytes, kept as they
    /// change (a walk asks after every tensor: summing would be quadratic).
    pub(super) resident_totals: HashMap<ShardId, u64>,
    /// Canonical name → the stored tensors evaluating it made resident (its
    /// own, a quantized weight's scales and biases): what
    /// [`Weights::forget`] lets go of.
    pub(super) made_resident: HashMap<String, Vec<String>>,
    pub(super) view: Option<View>,
    /// What the installed rule view did to the names (for people).
    pub(super) view_info: Option<Arc<ViewInfo>>,
    /// Canonical names whose fix-up changed the value.
    pub(super) fixed: std::collections::HashSet<String>,
    /// Per shard, its size and modification time when opened: a shard
    /// rewritten, truncated or deleted since is an error, not garbage values.
    pub(super) fingerprints: Vec<Fingerprint>,
}

impl Weights<MlxLoader> {
    /// Opens the checkpoint at `path`: parses every header and opens every
    /// shard's native MLX map (lazily: no tensor bytes are read).
    ///
    /// # Errors
    /// When the headers cannot be read, or MLX cannot open a shard (every
    /// map already opened is released first).
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        Self::open_with(crate::remote::open_checkpoint(path, &|_, _| {})?, MlxLoader)
    }

    /// [`Weights::open`], calling `report` as headers are parsed and as
    /// shard maps are opened (the window's progress while it opens).
    ///
    /// # Errors
    /// As [`Weights::open`].
    pub fn open_reporting(
        path: &Path,
        report: &(dyn Fn(OpenStep) + Sync),
    ) -> Result<Self, WeightsError> {
        let checkpoint = crate::remote::open_checkpoint(path, &|parsed, total| {
            report(OpenStep::Headers { parsed, total });
        })?;
        Self::open_with_reporting(checkpoint, MlxLoader, report)
    }

    /// Opens `path` whole and installs the chosen view: the B side of a
    /// diff, where a shard that failed to open would silently drop tensors.
    ///
    /// # Errors
    /// When the checkpoint cannot be opened, any shard or the index has a
    /// problem (only an unusable `config.json` is tolerated), or the view
    /// cannot be made or installed; one line naming the file and the problem.
    pub fn open_viewed(path: &Path, choice: &ViewChoice) -> Result<Self, WeightsError> {
        let checkpoint = crate::remote::open_checkpoint(path, &|_, _| {})?;
        if let Some(problem) = checkpoint.fatal_problems().first() {
            return Err(WeightsError::Checkpoint((*problem).clone()));
        }
        if checkpoint.tensors().is_empty() {
            return Err(WeightsError::NothingToCompare {
                path: path.to_owned(),
            });
        }
        let mut weights = Self::open_with(checkpoint, MlxLoader)?;
        weights.install_choice(choice)?;
        Ok(weights)
    }
}

impl<N: ShardLoader> Weights<N> {
    /// Opens every shard of `checkpoint` through `native`. If shard N fails,
    /// the maps of shards 1..N-1 are freed before the error is returned.
    ///
    /// # Errors
    /// The first shard MLX cannot open.
    pub fn open_with(checkpoint: Checkpoint, native: N) -> Result<Self, WeightsError> {
        Self::open_with_reporting(checkpoint, native, &|_| {})
    }

    /// [`Weights::open_with`], calling `report` after each shard's map.
    ///
    /// # Errors
    /// As [`Weights::open_with`].
    pub fn open_with_reporting(
        checkpoint: Checkpoint,
        mut native: N,
        report: &(dyn Fn(OpenStep) + Sync),
    ) -> Result<Self, WeightsError> {
        let total = checkpoint.shards().len();
        let mut maps = HashMap::with_capacity(checkpoint.shards().len());
        let fingerprints = checkpoint
            .shards()
            .iter()
            .map(|s| fingerprint(&s.path).ok())
            .collect();
        for i in 0..total {
            match native.open_shard(&checkpoint, ShardId(i)) {
                Ok(map) => {
                    maps.insert(ShardId(i), map);
                    report(OpenStep::Maps {
                        opened: i + 1,
                        total,
                    });
                }
                Err(err) => {
                    for (_, map) in maps.drain() {
                        native.free_shard(map);
                    }
                    return Err(err.into());
                }
            }
        }
        Ok(Self {
            checkpoint: Arc::new(checkpoint),
            native,
            maps,
            arrays: HashMap::new(),
            resident: HashMap::new(),
            resident_totals: HashMap::new(),
            made_resident: HashMap::new(),
            view: None,
            view_info: None,
            fixed: std::collections::HashSet::new(),
            fingerprints,
        })
    }

    /// The checkpoint's metadata.
    #[must_use]
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The checkpoint's metadata, shared (cheap to clone, safe to send).
    #[must_use]
    pub fn shared_checkpoint(&self) -> Arc<Checkpoint> {
        Arc::clone(&self.checkpoint)
    }

    /// The installation seam (for tests that count calls).
    #[must_use]
    pub fn native(&self) -> &N {
        &self.native
    }

    /// Installs a checkpoint view. Must come before the first [`Weights::tensor`]:
    /// the cache is keyed by canonical names.
    ///
    /// # Errors
    /// [`WeightsError::ViewTooLate`] when a tensor was already materialized.
    pub fn set_view(&mut self, view: View) -> Result<(), WeightsError> {
        if !self.arrays.is_empty() {
            return Err(WeightsError::ViewTooLate);
        }
        self.view = Some(view);
        Ok(())
    }

    /// Installs a compiled rule view (see [`Weights::set_view`]) and keeps
    /// what it did to the names.
    ///
    /// # Errors
    /// [`WeightsError::ViewTooLate`] when a tensor was already materialized.
    pub fn install(&mut self, compiled: CompiledView) -> Result<Arc<ViewInfo>, WeightsError> {
        self.set_view(compiled.view)?;
        let info = Arc::new(compiled.info);
        self.view_info = Some(Arc::clone(&info));
        Ok(info)
    }

    /// Resolves `choice` against this checkpoint and installs it (no view
    /// for identity, or for auto when nothing calls for one).
    ///
    /// # Errors
    /// The view cannot be made (a bad file, a name collision) or installed.
    pub fn install_choice(
        &mut self,
        choice: &ViewChoice,
    ) -> Result<Option<Arc<ViewInfo>>, WeightsError> {
        let Some(rules) = choice.resolve(&self.checkpoint)? else {
            return Ok(None);
        };
        let compiled = rules.compile(&self.checkpoint)?;
        Ok(Some(self.install(compiled)?))
    }

    /// What the installed rule view did to the names, if one is installed.
    #[must_use]
    pub fn view_info(&self) -> Option<&Arc<ViewInfo>> {
        self.view_info.as_ref()
    }

    /// Whether the view's fix-up changed the value of `name` (known once
    /// the tensor was asked for).
    #[must_use]
    pub fn is_fixed(&self, name: &str) -> bool {
        self.fixed.contains(name)
    }

    /// The stored array behind canonical `name`, before any fix-up.
    ///
    /// # Errors
    /// No such tensor, or MLX cannot reopen its shard.
    pub fn stored_of(&mut self, name: &str) -> Result<Array, WeightsError> {
        let source = self
            .source(name)
            .ok_or_else(|| WeightsError::NoTensor(name.to_owned()))?
            .to_owned();
        self.stored(&source)
    }

    /// The installed view, if any.
    #[must_use]
    pub fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    /// Canonical name → the name the file stores (identity without a view;
    /// `None` when the view drops the name).
    pub(super) fn source<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        match &self.view {
            None => Some(name),
            Some(view) => view.names.get(name).map(String::as_str),
        }
    }

    /// Whether the graph can ask for `name`.
    #[must_use]
    pub fn has(&self, name: &str) -> bool {
        self.source(name)
            .is_some_and(|s| self.checkpoint.tensor(s).is_some())
    }

    /// The header entry of the (canonical) tensor `name`.
    #[must_use]
    pub fn info(&self, name: &str) -> Option<TensorRef<'_>> {
        self.source(name).and_then(|s| self.checkpoint.tensor(s))
    }

    /// The shard file holding `name` (for release scheduling).
    #[must_use]
    pub fn file_of(&self, name: &str) -> Option<&str> {
        self.info(name)
            .map(|t| self.checkpoint.shard(t.shard()).file.as_str())
    }

    /// Canonical names: with a view, exactly the tensors the graph can ask
    /// for (renamed, drops excluded); without, every stored tensor.
    #[must_use]
    pub fn tensor_names(&self) -> Vec<String> {
        match &self.view {
            Some(view) => view.names.keys().cloned().collect(),
            None => self
                .checkpoint
                .tensors()
                .iter()
                .map(|t| t.name().to_owned())
                .collect(),
        }
    }

    /// The lazy array for `name`, cached per canonical name. A tensor whose
    /// shard was released reopens that shard (header only, lazy).
    ///
    /// # Errors
    /// No such tensor, MLX cannot reopen the shard, or the fix-up fails.
    pub fn tensor(&mut self, name: &str) -> Result<Array, WeightsError> {
        if let Some(array) = self.arrays.get(name) {
            return Ok(array.clone());
        }
        let source = self
            .source(name)
            .ok_or_else(|| WeightsError::NoTensor(name.to_owned()))?;
        if self.checkpoint.tensor(source).is_none() {
            return Err(WeightsError::NoTensor(name.to_owned()));
        }
        let source = source.to_owned();
        let raw = self.stored(&source)?;
        let array = self.fixed_up(name, raw)?;
        self.arrays.insert(name.to_owned(), array.clone());
        Ok(array)
    }

    /// `array` (the values of canonical `name`) with the view's fix-up
    /// applied, when one applies. The fixed array is a lazy graph node
    /// holding its own reference to the source, so the raw handle can go.
    pub(crate) fn fixed_up(&mut self, name: &str, array: Array) -> Result<Array, WeightsError> {
        match self.view.as_ref().and_then(|v| v.fixup.as_ref()) {
            Some(fixup) => match fixup(name, &array)? {
                Some(fixed) => {
                    self.fixed.insert(name.to_owned());
                    Ok(fixed)
                }
                None => Ok(array),
            },
            None => Ok(array),
        }
    }

    /// Whether the installed view's fix-ups touch canonical `name`.
    pub(crate) fn has_fixup(&self, name: &str) -> bool {
        self.view_info
            .as_ref()
            .is_some_and(|v| !v.fixups_for(name).is_empty())
    }

    /// The array for `name`, evaluated (its bytes read into MLX memory), and
    /// recorded as resident in its shard until the shard is released.
    ///
    /// # Errors
    /// As [`Weights::tensor`], or when MLX fails to evaluate it (unreadable
    /// shard, memory limit).
    pub fn materialize(&mut self, name: &str) -> Result<Array, WeightsError> {
        self.check_room(name, 0)?;
        let array = self.tensor(name)?;
        crate::mlx::evaluate(&array)?;
        if let Some(stored) = self.source(name).map(str::to_owned) {
            self.note_resident(name, &stored);
        }
        Ok(array)
    }

    /// Whether shard `shard` is still the file that was opened.
    pub(super) fn check_unchanged(&self, shard: ShardId) -> Result<(), WeightsError> {
        let path = &self.checkpoint.shard(shard).path;
        let Some(Some(opened)) = self.fingerprints.get(shard.index()) else {
            return Ok(());
        };
        match fingerprint(path) {
            Ok(now) if now == *opened => Ok(()),
            Ok(_) => Err(WeightsError::ShardChanged { path: path.clone() }),
            Err(err) => Err(WeightsError::ShardGone {
                path: path.clone(),
                reason: crate::checkpoint::io_reason(&err),
            }),
        }
    }

    /// Refuses to materialize `name` (plus `extra` bytes of derived values)
    /// past MLX's memory limit. MLX itself treats the limit as a guideline
    /// (on the CPU it waits for memory rather than failing; on CUDA the
    /// managed allocator can oversubscribe the card), so the check is ours.
    pub(crate) fn check_room(&self, name: &str, extra: u64) -> Result<(), WeightsError> {
        let Some(info) = self.info(name) else {
            return Ok(()); // `tensor` reports the missing name
        };
        let already = self
            .resident
            .get(&info.shard())
            .is_some_and(|t| t.contains_key(info.name()));
        let needed = if already { 0 } else { info.bytes() } + extra;
        let Ok(memory) = crate::mlx::memory() else {
            return Ok(());
        };
        if needed > 0 && memory.active_bytes.saturating_add(needed) > memory.limit_bytes {
            return Err(WeightsError::OverLimit {
                name: name.to_owned(),
                needed,
                active: memory.active_bytes,
                limit: memory.limit_bytes,
            });
        }
        Ok(())
    }

    /// Records that the stored tensor `stored_name` was evaluated from its
    /// shard's map (which now holds its bytes) for canonical `name`.
    pub(crate) fn note_resident(&mut self, name: &str, stored_name: &str) {
        if let Some(info) = self.checkpoint.tensor(stored_name) {
            let (shard, bytes) = (info.shard(), info.bytes());
            let tensors = self.resident.entry(shard).or_default();
            // Already there: the same tensor, the same bytes.
            if !tensors.contains_key(stored_name) {
                tensors.insert(stored_name.to_owned(), bytes);
                *self.resident_totals.entry(shard).or_default() += bytes;
            }
            let made = self.made_resident.entry(name.to_owned()).or_default();
            if !made.iter().any(|s| s == stored_name) {
                made.push(stored_name.to_owned());
            }
        }
    }

    /// Bytes that showing canonical `name` holds resident (its stored
    /// tensors still evaluated in their maps), by the core's bookkeeping.
    #[must_use]
    pub fn resident_bytes_of(&self, name: &str) -> u64 {
        let Some(made) = self.made_resident.get(name) else {
            return 0;
        };
        made.iter()
            .filter_map(|stored| {
                let shard = self.checkpoint.tensor(stored)?.shard();
                self.resident.get(&shard)?.get(stored).copied()
            })
            .sum()
    }

    /// Lets go of what materializing canonical `name` made resident: its
    /// cached array, and its stored tensors' evaluated bytes in their
    /// shards' maps (each map keeps a fresh, lazy handle: asking again
    /// reads the bytes again), unless another name still shown uses them
    /// (a view that splits one stored tensor). The bytes go to MLX's cache.
    /// Unlike [`Weights::release`], this frees while the shard stays open;
    /// the budget of the window's previews is kept with it. Returns the
    /// bytes freed by the core's bookkeeping.
    ///
    /// # Errors
    /// When MLX cannot read a shard's header again for the fresh handle
    /// (the bytes are then let go with the whole map).
    pub fn forget(&mut self, name: &str) -> Result<u64, WeightsError> {
        self.arrays.remove(name);
        let Some(made) = self.made_resident.remove(name) else {
            return Ok(0);
        };
        let mut freed = 0;
        for stored in made {
            if self.made_resident.values().any(|m| m.contains(&stored)) {
                continue;
            }
            let Some(shard) = self.checkpoint.tensor(&stored).map(TensorRef::shard) else {
                continue;
            };
            if let Some(tensors) = self.resident.get_mut(&shard)
                && let Some(bytes) = tensors.remove(&stored)
            {
                freed += bytes;
                if let Some(total) = self.resident_totals.get_mut(&shard) {
                    *total = total.saturating_sub(bytes);
                }
            }
            if let Some(map) = self.maps.get_mut(&shard)
                && let Err(err) = self.native.forget(map, &stored)
            {
                self.release_shard(shard);
                return Err(err.into());
            }
        }
        Ok(freed)
    }

    /// Bytes the live map of shard `shard` (a position in the checkpoint's
    /// shards) holds in evaluated tensors, by the core's own bookkeeping.
    #[must_use]
    pub fn resident_bytes(&self, shard: ShardId) -> u64 {
        self.resident_totals.get(&shard).copied().unwrap_or(0)
    }

    /// Canonical names in walk order: by shard, then by position in the
    /// shard's data (what a streaming transform reads sequentially).
    #[must_use]
    pub fn walk_order(&self) -> Vec<String> {
        let mut names: Vec<(ShardId, u64, String)> = self
            .tensor_names()
            .into_iter()
            .filter_map(|name| {
                let info = self.info(&name)?;
                Some((info.shard(), info.data_offsets().0, name))
            })
            .collect();
        names.sort_unstable();
        names.into_iter().map(|(_, _, name)| name).collect()
    }

    /// A stored tensor straight from its shard's map (not cached by name),
    /// reopening the shard if it was released: `tensor` and the scales and
    /// biases a dequantization needs.
    pub(super) fn stored(&mut self, stored_name: &str) -> Result<Array, WeightsError> {
        let info = self
            .checkpoint
            .tensor(stored_name)
            .ok_or_else(|| WeightsError::NoTensor(stored_name.to_owned()))?;
        let shard = info.shard();
        self.check_unchanged(shard)?;
        if !self.maps.contains_key(&shard) {
            let map = self.native.open_shard(&self.checkpoint, shard)?;
            self.maps.insert(shard, map);
        }
        let Some(map) = self.maps.get_mut(&shard) else {
            return Err(WeightsError::NoTensor(stored_name.to_owned()));
        };
        self.native
            .get(map, stored_name)?
            .ok_or_else(|| WeightsError::MissingFromMap {
                name: stored_name.to_owned(),
                path: map.path().to_path_buf(),
            })
    }

    /// Drops the cached array of `name`. Safe for names never asked for.
    ///
    /// This frees nothing while the tensor's shard is open: the shard's map
    /// still holds the evaluated array. That is the trap that made streaming
    /// transforms accumulate the whole model; use [`Weights::release_shard`].
    pub fn release(&mut self, name: &str) {
        self.arrays.remove(name);
    }

    /// Drops the native map of `shard` and every cached array from it,
    /// freeing all bytes materialized from it (into MLX's cache), and
    /// returns those bytes (by the core's bookkeeping). The shard reopens on
    /// the next [`Weights::tensor`] that needs it. An id past the
    /// checkpoint's shards frees nothing.
    pub fn release_shard(&mut self, shard: ShardId) -> u64 {
        let freed = self.resident_bytes(shard);
        let doomed: Vec<String> = self
            .arrays
            .keys()
            .filter(|name| self.info(name).is_some_and(|t| t.shard() == shard))
            .cloned()
            .collect();
        for name in doomed {
            self.arrays.remove(&name);
        }
        if let Some(map) = self.maps.remove(&shard) {
            self.native.free_shard(map);
        }
        self.resident.remove(&shard);
        self.resident_totals.remove(&shard);
        let checkpoint = &self.checkpoint;
        self.made_resident.retain(|_, made| {
            made.retain(|s| checkpoint.tensor(s).is_some_and(|t| t.shard() != shard));
            !made.is_empty()
        });
        freed
    }

    /// Drops every cached array and every map.
    pub fn release_all(&mut self) {
        self.arrays.clear();
        self.made_resident.clear();
        self.resident.clear();
        self.resident_totals.clear();
        for (_, map) in self.maps.drain() {
            self.native.free_shard(map);
        }
    }

    /// Whether `shard` has a live native map.
    #[must_use]
    pub fn is_shard_open(&self, shard: ShardId) -> bool {
        self.maps.contains_key(&shard)
    }
}

impl<N: ShardLoader> Drop for Weights<N> {
    fn drop(&mut self) {
        self.release_all();
    }
}
