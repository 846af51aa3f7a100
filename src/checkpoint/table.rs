//! The tensor table: every tensor's name, dtype, shape and byte range, kept
//! column by column, one set of columns per shard.
//!
//! A 671B checkpoint lists 90k tensors. Kept as one struct per tensor (a
//! `String` and a `Vec` each) that is 180k heap allocations, and copying the
//! per-shard lists into one list touches every byte twice. Here each shard's
//! parsing thread writes its tensors into a few growing columns (names in one
//! string, dimensions in one array), and the checkpoint keeps those columns
//! as they are: nothing is built twice. Tensors are read through
//! [`TensorRef`], a small copyable view.

use super::dtype::Dtype;

/// The tensors of one shard, in data order, column by column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardTensors {
    /// Every name, one after the other.
    names: String,
    /// End of each name in `names`.
    name_ends: Vec<u32>,
    /// Every dimension, one shape after the other.
    dims: Vec<u64>,
    /// End of each shape in `dims`.
    dim_ends: Vec<u32>,
    dtypes: Vec<Dtype>,
    offsets: Vec<(u64, u64)>,
    /// Every name is known to need no escape in JSON (see
    /// [`ShardTensors::vouch_plain_names`]).
    plain_names: bool,
}

impl ShardTensors {
    /// Room for about `tensors` tensors with names of `name_bytes` in all.
    #[must_use]
    pub fn with_capacity(tensors: usize, name_bytes: usize) -> Self {
        Self {
            names: String::with_capacity(name_bytes),
            name_ends: Vec::with_capacity(tensors),
            dims: Vec::with_capacity(tensors * 2),
            dim_ends: Vec::with_capacity(tensors),
            dtypes: Vec::with_capacity(tensors),
            offsets: Vec::with_capacity(tensors),
            plain_names: false,
        }
    }

    /// Records that every name is a JSON plain run (no quote, backslash or
    /// control character): the header scanner reads only such names, so
    /// JSON writers copy them without looking at each byte again. A later
    /// [`ShardTensors::push`] forgets it.
    pub(super) fn vouch_plain_names(&mut self) {
        debug_assert!(
            (0..self.len()).all(|i| {
                let name = self.name(i);
                crate::units::json_plain_run(name.as_bytes()) == name.len()
            }),
            "a name that needs an escape was vouched for"
        );
        self.plain_names = true;
    }

    /// Appends one tensor. Headers are capped far below 4 GiB, so the
    /// column ends always fit in `u32`; a table that would outgrow them
    /// refuses the tensor (`false`).
    pub fn push(
        &mut self,
        name: &str,
        dtype: Dtype,
        shape: &[u64],
        data_offsets: (u64, u64),
    ) -> bool {
        let (Ok(name_end), Ok(dim_end)) = (
            u32::try_from(self.names.len() + name.len()),
            u32::try_from(self.dims.len() + shape.len()),
        ) else {
            return false;
        };
        self.plain_names = false;
        self.names.push_str(name);
        self.name_ends.push(name_end);
        self.dims.extend_from_slice(shape);
        self.dim_ends.push(dim_end);
        self.dtypes.push(dtype);
        self.offsets.push(data_offsets);
        true
    }

    /// Number of tensors.
    #[must_use]
    pub fn len(&self) -> usize {
        self.dtypes.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.dtypes.is_empty()
    }

    /// The tensor at `local` (shard 0, position `local`: a lone header's view).
    #[must_use]
    pub fn get(&self, local: usize) -> Option<TensorRef<'_>> {
        (local < self.len()).then_some(TensorRef {
            part: self,
            local,
            shard: 0,
            position: local,
        })
    }

    /// Every tensor in data order.
    #[must_use = "an iterator does nothing unless used"]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = TensorRef<'_>> + Clone + '_ {
        (0..self.len()).map(move |local| TensorRef {
            part: self,
            local,
            shard: 0,
            position: local,
        })
    }

    /// The same tensors without those at `skipped` (sorted positions): a
    /// rare path, for names already filed by an earlier shard.
    #[must_use]
    pub fn without(&self, skipped: &[usize]) -> Self {
        let mut kept = Self::with_capacity(self.len(), self.names.len());
        for t in self.iter() {
            if skipped.binary_search(&t.local).is_err() {
                kept.push(t.name(), t.dtype(), t.shape(), t.data_offsets());
            }
        }
        // Some of the same names: as plain as they were.
        kept.plain_names = self.plain_names;
        kept
    }

    fn name(&self, local: usize) -> &str {
        let end = self.name_ends[local] as usize;
        let start = local
            .checked_sub(1)
            .map_or(0, |p| self.name_ends[p] as usize);
        // `push` appends whole strings, so these are character boundaries.
        self.names.get(start..end).unwrap_or_default()
    }

    fn shape(&self, local: usize) -> &[u64] {
        let end = self.dim_ends[local] as usize;
        let start = local
            .checked_sub(1)
            .map_or(0, |p| self.dim_ends[p] as usize);
        &self.dims[start..end]
    }
}

/// Where [`TensorTable::partner`] looks first: how far from its owner the
/// last partner of one kind was found.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartnerGuess {
    delta: isize,
}

/// One tensor: a view into its shard's columns. Copy it freely.
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    part: &'a ShardTensors,
    local: usize,
    shard: usize,
    position: usize,
}

impl<'a> TensorRef<'a> {
    /// The tensor `delta` places away in the same shard, if there is one.
    fn in_shard(self, delta: isize) -> Option<TensorRef<'a>> {
        let local = self.local.checked_add_signed(delta)?;
        if local >= self.part.len() {
            return None;
        }
        Some(TensorRef {
            part: self.part,
            local,
            shard: self.shard,
            position: self.position.checked_add_signed(delta)?,
        })
    }

    /// The tensor at `position` when it is in this tensor's shard, found
    /// without a search (its scales, its block scale, its owner).
    #[must_use]
    pub fn sibling(self, position: usize) -> Option<TensorRef<'a>> {
        let delta = isize::try_from(position).ok()? - isize::try_from(self.position).ok()?;
        self.in_shard(delta)
    }

    /// Name as stored.
    #[must_use]
    pub fn name(self) -> &'a str {
        self.part.name(self.local)
    }

    /// Whether the name is known to need no escape in JSON (`false`: not
    /// known, it may or may not).
    #[must_use]
    pub fn name_is_plain(self) -> bool {
        self.part.plain_names
    }

    /// Element type.
    #[must_use]
    pub fn dtype(self) -> Dtype {
        self.part.dtypes[self.local]
    }

    /// Dimensions.
    #[must_use]
    pub fn shape(self) -> &'a [u64] {
        self.part.shape(self.local)
    }

    /// Start and end of its bytes in its shard's data section.
    #[must_use]
    pub fn data_offsets(self) -> (u64, u64) {
        self.part.offsets[self.local]
    }

    /// Its shard.
    #[must_use]
    pub fn shard(self) -> super::ShardId {
        super::ShardId(self.shard)
    }

    /// Its position in [`super::Checkpoint::tensors`].
    #[must_use]
    pub fn position(self) -> usize {
        self.position
    }

    /// Bytes on disk.
    #[must_use]
    pub fn bytes(self) -> u64 {
        let (start, end) = self.data_offsets();
        end - start
    }

    /// Number of stored elements (validated not to overflow at open).
    #[must_use]
    pub fn elements(self) -> u64 {
        self.shape().iter().product()
    }
}

impl TensorRef<'_> {
    /// An owned copy, for holding while the checkpoint is used otherwise.
    #[must_use]
    pub fn to_info(self) -> TensorInfo {
        TensorInfo {
            name: self.name().to_owned(),
            dtype: self.dtype(),
            shape: self.shape().to_vec(),
            data_offsets: self.data_offsets(),
            shard: self.shard,
        }
    }
}

/// One tensor's entry, owned (see [`TensorRef::to_info`]); the same
/// accessors as [`TensorRef`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
    shard: usize,
}

impl TensorInfo {
    /// Name as stored.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Element type.
    #[must_use]
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Dimensions.
    #[must_use]
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Its shard.
    #[must_use]
    pub fn shard(&self) -> super::ShardId {
        super::ShardId(self.shard)
    }

    /// Bytes on disk.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.data_offsets.1 - self.data_offsets.0
    }
}

impl std::fmt::Debug for TensorRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorRef")
            .field("name", &self.name())
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("data_offsets", &self.data_offsets())
            .field("shard", &self.shard)
            .finish()
    }
}

impl PartialEq for TensorRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
            && self.dtype() == other.dtype()
            && self.shape() == other.shape()
            && self.data_offsets() == other.data_offsets()
            && self.shard == other.shard
    }
}

/// Every tensor of a checkpoint: the shards' columns in shard order, and
/// positions by name.
#[derive(Debug, Clone, Default)]
pub struct TensorTable {
    /// One per shard that opened, in shard order.
    parts: Vec<ShardTensors>,
    /// Position of each part's first tensor.
    starts: Vec<usize>,
    len: usize,
    /// (part, local) packed as `part << 32 | local`, by [`name_hash`]: one
    /// table per [`NameIndex`] slice of the hashes, filled side by side.
    by_name: Vec<hashbrown::HashTable<u64>>,
}

/// Which of the name index's tables files a hash: a power of two of them,
/// told apart by bits the tables themselves do not use (a table takes its
/// buckets from the low bits and its tags from the top seven).
#[derive(Debug, Clone, Copy)]
struct NameIndex {
    tables: usize,
}

impl NameIndex {
    fn for_cores() -> Self {
        Self {
            tables: crate::par::cores().clamp(1, 64).next_power_of_two(),
        }
    }

    fn table_of(self, hash: u64) -> usize {
        // Below 64 tables: the cast keeps every bit that the mask keeps.
        #[allow(clippy::cast_possible_truncation)]
        let bits = (hash >> 40) as usize;
        bits & (self.tables - 1)
    }
}

impl TensorTable {
    /// The table of `parts` in shard order (`hashes[k][i]` is the
    /// [`name_hash`] of part `k`'s tensor `i`). A name already filed from
    /// an earlier part is left out; such names come back, per part, as
    /// (name, position filed first). The name index is filled on every
    /// core at once, each thread taking one slice of the hashes through all
    /// the parts in order, so the first of equal names is always the one
    /// filed.
    pub(super) fn from_shards(
        mut parts: Vec<ShardTensors>,
        hashes: &[Vec<u64>],
    ) -> (Self, Vec<Vec<(String, usize)>>) {
        let split = NameIndex::for_cores();
        // Beyond any real checkpoint (4G shards or tensors in one): such a
        // part is refused whole rather than wrapped around.
        let too_large: Vec<bool> = parts
            .iter()
            .enumerate()
            .map(|(k, p)| u32::try_from(k).is_err() || u32::try_from(p.len()).is_err())
            .collect();
        let fill = |slice: usize| fill_slice(&parts, hashes, &too_large, split, slice);
        let filled: Vec<_> = if split.tables == 1 {
            vec![fill(0)]
        } else {
            let (done, ()) = crate::par::on_workers(split.tables, "name-index", &fill, |_| ());
            // A slice whose thread did not start or failed: filled here.
            done.into_iter()
                .enumerate()
                .map(|(slice, d)| d.unwrap_or_else(|| fill(slice)))
                .collect()
        };
        let mut by_name = Vec::with_capacity(filled.len());
        // Per part: the positions in it of the names left out.
        let mut left_out: Vec<Vec<usize>> = vec![Vec::new(); parts.len()];
        for (table, repeated) in filled {
            by_name.push(table);
            for (k, local) in repeated {
                left_out[k].push(local);
            }
        }
        // Per part: each name left out, with its hash.
        let mut skipped_names: Vec<Vec<(String, u64)>> = vec![Vec::new(); parts.len()];
        for (k, out) in left_out.iter_mut().enumerate() {
            if too_large.get(k) == Some(&true) {
                skipped_names[k] = parts[k]
                    .iter()
                    .map(|t| (t.name().to_owned(), name_hash(t.name())))
                    .collect();
                parts[k] = ShardTensors::default();
                continue;
            }
            if out.is_empty() {
                continue;
            }
            out.sort_unstable();
            let skipped: &[usize] = out;
            skipped_names[k] = skipped
                .iter()
                .map(|&local| {
                    let hash = hashes[k].get(local).copied().unwrap_or(0);
                    (parts[k].name(local).to_owned(), hash)
                })
                .collect();
            // Keys filed for this part shift down past each left-out name.
            for (local, &hash) in hashes[k].iter().enumerate().take(parts[k].len()) {
                let shift = skipped.partition_point(|&s| s < local);
                if shift == 0 || skipped.get(shift) == Some(&local) {
                    continue;
                }
                let key = pack(k, local);
                if let Some(filed) = by_name
                    .get_mut(split.table_of(hash))
                    .and_then(|t| t.find_mut(hash, |&f| f == key))
                {
                    *filed -= shift as u64;
                }
            }
            parts[k] = parts[k].without(skipped);
        }
        let mut starts = Vec::with_capacity(parts.len());
        let mut len = 0;
        for part in &parts {
            starts.push(len);
            len += part.len();
        }
        let table = Self {
            parts,
            starts,
            len,
            by_name,
        };
        // Where each name left out was filed first, looked up now that
        // positions are final (its own part may have lost names before it).
        let duplicates = skipped_names
            .into_iter()
            .map(|names| {
                names
                    .into_iter()
                    .map(|(name, hash)| {
                        let first = table.position_hashed(&name, hash).unwrap_or(0);
                        (name, first)
                    })
                    .collect()
            })
            .collect();
        (table, duplicates)
    }

    /// Positions of part `k`'s tensors (empty past the last part).
    pub(super) fn part_range(&self, k: usize) -> std::ops::Range<usize> {
        let start = self.starts.get(k).copied().unwrap_or(self.len);
        let end = self.starts.get(k + 1).copied().unwrap_or(self.len);
        start..end
    }

    /// Number of tensors.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tensor at `position`.
    #[must_use]
    pub fn get(&self, position: usize) -> Option<TensorRef<'_>> {
        if position >= self.len {
            return None;
        }
        // The last part starting at or before `position` (empty parts share
        // their successor's start).
        let shard = self
            .starts
            .partition_point(|&s| s <= position)
            .checked_sub(1)?;
        let part = self.parts.get(shard)?;
        Some(TensorRef {
            part,
            local: position - self.starts[shard],
            shard,
            position,
        })
    }

    /// The tensor at `position`, which the table handed out.
    ///
    /// # Panics
    /// When `position` is out of range: positions come from this table (its
    /// iterator, its look-ups, the summary), never from a file.
    #[must_use]
    pub fn at(&self, position: usize) -> TensorRef<'_> {
        match self.get(position) {
            Some(t) => t,
            None => panic!(
                "tensor position {position} out of range ({} tensors)",
                self.len
            ),
        }
    }

    /// Every tensor, shard by shard in data order.
    #[must_use]
    pub fn iter(&self) -> TensorIter<'_> {
        TensorIter {
            table: self,
            shard: 0,
            local: 0,
            position: 0,
            end: self.len,
        }
    }

    /// The tensors at `positions`, in order (a shard's tensors are
    /// [`super::Shard::tensors`]).
    #[must_use]
    pub fn iter_range(&self, positions: std::ops::Range<usize>) -> TensorIter<'_> {
        let end = positions.end.min(self.len);
        let (shard, local) = self
            .get(positions.start)
            .map_or((self.parts.len(), 0), |t| (t.shard, t.local));
        TensorIter {
            table: self,
            shard,
            local,
            position: positions.start.min(end),
            end,
        }
    }

    /// Position of the tensor named `name`.
    #[must_use]
    pub fn position(&self, name: &str) -> Option<usize> {
        self.position_hashed(name, name_hash(name))
    }

    /// [`TensorTable::position_joined`] for a partner of `near` (a weight's
    /// scales, say), looked for first where `guess` says, then right after
    /// and right before `near`, and only then in the hash table: in a header
    /// in name order a weight's block scale follows it and its scales come
    /// just before; in one grouped by dtype (as the `safetensors` writer
    /// orders them) each pair lies as far apart as the previous one. Names
    /// are unique in the table, so a name found nearby is the one the hash
    /// table would give.
    #[must_use]
    pub fn partner(
        &self,
        near: TensorRef<'_>,
        prefix: &str,
        suffix: &str,
        guess: &mut PartnerGuess,
    ) -> Option<usize> {
        let is_joined = |name: &str| {
            name.len() == prefix.len() + suffix.len()
                && name.starts_with(prefix)
                && name.ends_with(suffix)
        };
        for delta in [guess.delta, 1, -1] {
            if let Some(t) = near.in_shard(delta).filter(|t| is_joined(t.name())) {
                guess.delta = delta;
                return Some(t.position());
            }
        }
        let found = self.position_joined(prefix, suffix)?;
        if let (Ok(found), Ok(near)) = (isize::try_from(found), isize::try_from(near.position())) {
            guess.delta = found - near;
        }
        Some(found)
    }

    /// [`TensorTable::position`] of `prefix` followed by `suffix`, without
    /// allocating the joined name (the summary pairs 90k tensors this way).
    #[must_use]
    pub fn position_joined(&self, prefix: &str, suffix: &str) -> Option<usize> {
        let len = prefix.len() + suffix.len();
        let mut stack = [0u8; 256];
        let heap;
        let joined: &str = if let Some(buf) = stack.get_mut(..len) {
            buf[..prefix.len()].copy_from_slice(prefix.as_bytes());
            buf[prefix.len()..].copy_from_slice(suffix.as_bytes());
            // Two strings joined are a string: this never fails.
            std::str::from_utf8(buf).ok()?
        } else {
            heap = format!("{prefix}{suffix}");
            &heap
        };
        self.position(joined)
    }

    /// [`TensorTable::position`] with the name's [`name_hash`] known.
    pub(super) fn position_hashed(&self, name: &str, hash: u64) -> Option<usize> {
        // An empty table (the default) has no name index at all.
        let tables = NameIndex {
            tables: self.by_name.len().max(1),
        };
        let &key = self.by_name.get(tables.table_of(hash))?.find(hash, |&k| {
            let (p, l) = unpack(k);
            self.parts.get(p).is_some_and(|q| q.name(l) == name)
        })?;
        let (p, l) = unpack(key);
        Some(self.starts.get(p)? + l)
    }

    /// The tensor named `name`.
    #[must_use]
    pub fn find(&self, name: &str) -> Option<TensorRef<'_>> {
        self.get(self.position(name)?)
    }
}

/// Tensors of a [`TensorTable`] in order.
#[derive(Clone)]
pub struct TensorIter<'a> {
    table: &'a TensorTable,
    shard: usize,
    local: usize,
    position: usize,
    end: usize,
}

impl<'a> Iterator for TensorIter<'a> {
    type Item = TensorRef<'a>;

    fn next(&mut self) -> Option<TensorRef<'a>> {
        if self.position >= self.end {
            return None;
        }
        loop {
            let part = self.table.parts.get(self.shard)?;
            if self.local < part.len() {
                let t = TensorRef {
                    part,
                    local: self.local,
                    shard: self.shard,
                    position: self.position,
                };
                self.local += 1;
                self.position += 1;
                return Some(t);
            }
            self.shard += 1;
            self.local = 0;
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.position;
        (left, Some(left))
    }
}

impl ExactSizeIterator for TensorIter<'_> {}

impl<'a> IntoIterator for &'a TensorTable {
    type Item = TensorRef<'a>;
    type IntoIter = TensorIter<'a>;

    fn into_iter(self) -> TensorIter<'a> {
        self.iter()
    }
}

/// The name index's table `slice` (of `split`) for `parts` (leaving out
/// those `too_large`), and the (part, position) of each name in it that
/// an earlier one had filed.
fn fill_slice(
    parts: &[ShardTensors],
    hashes: &[Vec<u64>],
    too_large: &[bool],
    split: NameIndex,
    slice: usize,
) -> (hashbrown::HashTable<u64>, Vec<(usize, usize)>) {
    let total: usize = parts.iter().map(ShardTensors::len).sum();
    let mut table = hashbrown::HashTable::with_capacity(total / split.tables + 64);
    let mut repeated = Vec::new();
    for (k, (part, part_hashes)) in parts.iter().zip(hashes).enumerate() {
        if too_large.get(k) == Some(&true) {
            continue;
        }
        for (local, &hash) in part_hashes.iter().enumerate().take(part.len()) {
            if split.table_of(hash) != slice {
                continue;
            }
            let name = part.name(local);
            let same = |&key: &u64| {
                let (p, l) = unpack(key);
                parts.get(p).is_some_and(|q| q.name(l) == name)
            };
            let rehash = |&key: &u64| {
                let (p, l) = unpack(key);
                parts.get(p).map_or(0, |q| name_hash(q.name(l)))
            };
            match table.entry(hash, same, rehash) {
                hashbrown::hash_table::Entry::Occupied(_) => repeated.push((k, local)),
                hashbrown::hash_table::Entry::Vacant(slot) => {
                    slot.insert(pack(k, local));
                }
            }
        }
    }
    (table, repeated)
}

/// A part and a position in it as one key (both below 2^32, checked in
/// [`TensorTable::from_shards`]).
fn pack(part: usize, local: usize) -> u64 {
    (part as u64) << 32 | local as u64
}

// Both halves were `u32`s (see `pack`).
#[allow(clippy::cast_possible_truncation)]
fn unpack(key: u64) -> (usize, usize) {
    ((key >> 32) as usize, (key & u64::from(u32::MAX)) as usize)
}

/// The hash the table files a tensor name under. Deterministic, so the
/// threads that parse headers and the index compute it while they parse,
/// leaving the serial assembly only table work.
pub(crate) fn name_hash(name: &str) -> u64 {
    std::hash::BuildHasher::hash_one(&foldhash::fast::FixedState::default(), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(names: &[&str]) -> (ShardTensors, Vec<u64>) {
        let mut columns = ShardTensors::default();
        let mut at = 0;
        for (i, name) in names.iter().enumerate() {
            let shape = vec![i as u64 + 1; i % 3];
            let bytes = shape.iter().product::<u64>();
            assert!(columns.push(name, Dtype::U8, &shape, (at, at + bytes)));
            at += bytes;
        }
        let hashes = names.iter().map(|n| name_hash(n)).collect();
        (columns, hashes)
    }

    fn table_of(shards: &[&[&str]]) -> (TensorTable, Vec<Vec<(String, usize)>>) {
        let (parts, hashes): (Vec<_>, Vec<_>) = shards.iter().map(|names| part(names)).unzip();
        TensorTable::from_shards(parts, &hashes)
    }

    #[test]
    fn columns_read_back_what_was_pushed() {
        let (columns, _) = part(&["a", "", "ünï.weight", "d"]);
        assert_eq!(columns.len(), 4);
        let t = columns.get(2).expect("third");
        assert_eq!(
            (t.name(), t.shape(), t.data_offsets()),
            ("ünï.weight", &[3, 3][..], (3, 12))
        );
        assert_eq!(columns.get(1).map(TensorRef::name), Some(""));
        assert!(columns.get(4).is_none());
    }

    #[test]
    fn a_name_filed_by_an_earlier_shard_is_left_out_and_positions_stay_dense() {
        let (table, dups) = table_of(&[&["x", "y"], &[], &["p", "y", "q", "x", "r"]]);
        assert_eq!(dups[0], []);
        assert_eq!(dups[1], []);
        assert_eq!(dups[2], vec![("y".to_owned(), 1), ("x".to_owned(), 0)]);
        let names: Vec<&str> = table.iter().map(TensorRef::name).collect();
        assert_eq!(names, ["x", "y", "p", "q", "r"]);
        for (position, t) in table.iter().enumerate() {
            assert_eq!(t.position(), position);
            assert_eq!(table.position(t.name()), Some(position));
            assert_eq!(table.at(position), t);
        }
        assert_eq!(table.at(3).shard(), super::super::ShardId(2));
        assert_eq!(table.at(3).data_offsets(), table_entry_offsets("q"));
        let shard_b: Vec<&str> = table.iter_range(2..5).map(TensorRef::name).collect();
        assert_eq!(shard_b, ["p", "q", "r"]);
        assert_eq!(table.iter_range(1..3).len(), 2);
        assert_eq!(table.iter_range(5..5).len(), 0);
        assert_eq!(table.position_joined("r", ""), Some(4));
        assert!(table.position("z").is_none() && table.get(5).is_none());
    }

    #[test]
    fn a_name_first_filed_after_left_out_ones_is_found_where_it_moved() {
        // `b` loses `x` (filed by `a`), so its `y` moves down one place;
        // `c`'s `y` is reported against that place, and every name is
        // found where it is.
        let (table, dups) = table_of(&[&["x"], &["x", "y"], &["y", "z"]]);
        assert_eq!(dups[1], vec![("x".to_owned(), 0)]);
        assert_eq!(dups[2], vec![("y".to_owned(), 1)]);
        let names: Vec<&str> = table.iter().map(TensorRef::name).collect();
        assert_eq!(names, ["x", "y", "z"]);
        for (position, t) in table.iter().enumerate() {
            assert_eq!(table.position(t.name()), Some(position));
        }
        assert_eq!(table.part_range(1), 1..2);
        assert_eq!(table.part_range(3), 3..3);
    }

    #[test]
    fn a_short_shard_after_a_long_one_files_every_name() {
        // Probing compares against names of earlier, longer shards.
        let long: Vec<String> = (0..3000)
            .map(|i| format!("model.layers.{i}.weight"))
            .collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        let short: Vec<String> = (0..50).map(|i| format!("lm_head.{i}")).collect();
        let mut names: Vec<&[&str]> = vec![&long];
        let short: Vec<[&str; 1]> = short.iter().map(|n| [n.as_str()]).collect();
        names.extend(short.iter().map(|n| &n[..]));
        let (table, dups) = table_of(&names);
        assert!(dups.iter().all(Vec::is_empty));
        for (i, [name]) in short.iter().enumerate() {
            assert_eq!(table.position(name), Some(3000 + i));
        }
        assert_eq!(table.position("model.layers.2999.weight"), Some(2999));
    }

    #[test]
    fn partners_are_found_nearby_or_in_the_hash_table_alike() {
        // Name order (scale after weight), dtype order (weights, then
        // scales), a partner in another shard and one that does not exist.
        let first = [
            "a.weight",
            "a.weight_scale_inv",
            "b.weight",
            "c.weight",
            "d.weight",
        ];
        let second = [
            "b.weight_scale_inv",
            "e.weight",
            "f.weight",
            "e.weight_scale_inv",
            "f.weight_scale_inv",
            "c.weight_scale_inv",
        ];
        let (table, dups) = table_of(&[&first, &second]);
        assert!(dups.iter().all(Vec::is_empty));
        let mut guess = PartnerGuess::default();
        for t in &table {
            if t.name().ends_with("_scale_inv") {
                continue;
            }
            let found = table.partner(t, t.name(), "_scale_inv", &mut guess);
            assert_eq!(
                found,
                table.position_joined(t.name(), "_scale_inv"),
                "{}",
                t.name()
            );
        }
        assert_eq!(
            table.partner(table.at(0), "a", ".weight_scale_inv", &mut guess),
            Some(1)
        );
        assert_eq!(
            table.partner(table.at(4), "d.weight", "_scale_inv", &mut guess),
            None
        );
    }

    /// The offsets `part` gave `name` in the third shard above.
    fn table_entry_offsets(name: &str) -> (u64, u64) {
        let (b, _) = part(&["p", "y", "q", "x", "r"]);
        b.iter()
            .find(|t| t.name() == name)
            .map(TensorRef::data_offsets)
            .expect("listed")
    }
}
