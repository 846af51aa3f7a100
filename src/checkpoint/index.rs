//! `model.safetensors.index.json`: which shard holds which tensor.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde::Deserialize;

use super::error::CheckpointError;
use super::scan::{self, IndexMetaValue};

/// A parsed index, less its per-tensor entries (those are checked against
/// the shards at open and not kept: the tensor table already says where each
/// tensor is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// The shard files the index names, each once, sorted by name.
    pub shard_files: Vec<String>,
    /// How many tensors the index places.
    pub tensor_count: usize,
    /// `metadata.total_size`, when given.
    pub total_size: Option<u64>,
    /// The `metadata` entries, as text.
    pub metadata: BTreeMap<String, String>,
}

/// The per-tensor entries of an index: tensor name (borrowed from the index
/// bytes where possible) and the position of its file in [`Index::shard_files`].
pub type IndexEntries<'a> = Vec<(Cow<'a, str>, usize)>;

#[derive(Deserialize)]
struct RawIndex<'a> {
    #[serde(default)]
    metadata: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(borrow)]
    weight_map: Pairs<'a>,
}

/// A JSON object of strings kept as a list of borrowed pairs: 90k entries that
/// are walked once need neither a tree nor 180k allocations.
struct Pairs<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Pairs<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor;
        impl<'de> serde::de::Visitor<'de> for PairsVisitor {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of tensor names to shard file names")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Pairs<'de>, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((name, file)) = map.next_entry::<Borrowed<'de>, Borrowed<'de>>()? {
                    pairs.push((name.0, file.0));
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor)
    }
}

/// A string borrowed from the input unless it has escapes.
struct Borrowed<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Borrowed<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> serde::de::Visitor<'de> for StrVisitor {
            type Value = Borrowed<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Borrowed<'de>, E> {
                Ok(Borrowed(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Borrowed<'de>, E> {
                Ok(Borrowed(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// The largest index read: a million tensors' entries take about 80 MB.
pub const MAX_INDEX_BYTES: u64 = 128 << 20;

/// Reads and checks the index at `path` (see [`parse_index`]).
///
/// # Errors
/// As [`parse_index`], or when the file cannot be read.
pub fn read_index(path: &Path) -> Result<Index, CheckpointError> {
    let bytes = crate::files::read_bounded(path, MAX_INDEX_BYTES, "the index")
        .map_err(|e| CheckpointError::unreadable_for(path, e.reason()))?;
    parse_index(path, &bytes).map(|(index, _)| index)
}

/// Parses index bytes: the index and its per-tensor entries.
///
/// # Errors
/// When the index is not JSON, lacks a `weight_map` of strings, or names a
/// shard outside its folder.
pub fn parse_index<'a>(
    path: &Path,
    bytes: &'a [u8],
) -> Result<(Index, IndexEntries<'a>), CheckpointError> {
    parse_index_with(path, bytes, Some(bytes.len()))
}

/// Whether the fast index scanner changes nothing: [`parse_index`] with and
/// without it give the same result on `bytes`, and so does reading the
/// bytes in pieces of any size. For the fuzz target.
#[doc(hidden)]
#[must_use]
pub fn index_scanner_agrees_with_serde(bytes: &[u8]) -> bool {
    let path = Path::new("model.safetensors.index.json");
    let serde = format!("{:?}", parse_index_with(path, bytes, None));
    [bytes.len(), 1, 7, 64].into_iter().all(|piece| {
        format!("{:?}", parse_index_with(path, bytes, Some(piece))) == serde
            && folded_agrees(path, bytes, piece)
    })
}

/// Whether [`read_index_folded`] over `bytes` in pieces of `piece` gives
/// [`parse_index`]'s index and entries, folded per file.
fn folded_agrees(path: &Path, bytes: &[u8], piece: usize) -> bool {
    let fold = |names: &mut Vec<String>, name: &str| names.push(name.to_owned());
    let folded = fold_index(path, bytes, piece, || Ok(bytes.to_vec()), fold);
    match (parse_index(path, bytes), folded) {
        (Ok((index, entries)), Ok((folded_index, names))) => {
            let mut want = vec![Vec::new(); index.shard_files.len()];
            for (name, file) in entries {
                want[file].push(name.into_owned());
            }
            index == folded_index && want == names
        }
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

/// Reads the index at `path` a piece at a time (never whole: a 90k-entry
/// index is 8 MB of text), folding each entry's tensor name into a value
/// kept per shard file with `add`. Returns the index and those values in
/// [`Index::shard_files`] order. An index in an unusual shape is read whole
/// and parsed as [`parse_index`] does, with the same errors.
///
/// # Errors
/// As [`read_index`].
pub(crate) fn read_index_folded<T: Default>(
    path: &Path,
    add: impl FnMut(&mut T, &str),
) -> Result<(Index, Vec<T>), CheckpointError> {
    // A regular file only, opened without blocking (a FIFO there would
    // hang the open).
    let (file, meta) = crate::files::open_regular(path)
        .map_err(|e| CheckpointError::unreadable_for(path, e.reason()))?;
    let size = meta.len();
    if size > MAX_INDEX_BYTES {
        return Err(CheckpointError::Unreadable {
            path: path.to_path_buf(),
            reason: format!(
                "the index of {size} bytes is larger than the {MAX_INDEX_BYTES}-byte limit"
            ),
        });
    }
    let whole = || {
        crate::files::read_bounded(path, MAX_INDEX_BYTES, "the index")
            .map_err(|e| CheckpointError::unreadable_for(path, e.reason()))
    };
    fold_index(path, file, INDEX_PIECE_BYTES, whole, add)
}

/// [`read_index_folded`] on an index held in memory (read from a remote
/// repo in one request).
///
/// # Errors
/// As [`parse_index`].
// Used by the remote layer (an index read over the network).
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn fold_index_bytes<T: Default>(
    path: &Path,
    bytes: &[u8],
    add: impl FnMut(&mut T, &str),
) -> Result<(Index, Vec<T>), CheckpointError> {
    fold_index(path, bytes, INDEX_PIECE_BYTES, || Ok(bytes.to_vec()), add)
}

/// [`read_index_folded`] from `reader` (an index kept on disk with
/// something before it, a cache entry); `whole` gives all its bytes for
/// an index in an unusual shape.
///
/// # Errors
/// As [`parse_index`].
// Used by the remote layer (an index read over the network).
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn fold_index_reader<T: Default>(
    path: &Path,
    reader: impl std::io::Read,
    whole: impl FnOnce() -> Result<Vec<u8>, CheckpointError>,
    add: impl FnMut(&mut T, &str),
) -> Result<(Index, Vec<T>), CheckpointError> {
    fold_index(path, reader, INDEX_PIECE_BYTES, whole, add)
}

/// How much of an index is read at a time: a few thousand entries, few
/// enough to stay in the CPU's cache.
const INDEX_PIECE_BYTES: usize = 256 << 10;

/// [`read_index_folded`] from `reader`; `whole` reads all of it again for
/// serde when the scanner declines it.
fn fold_index<T: Default>(
    path: &Path,
    reader: impl std::io::Read,
    piece: usize,
    whole: impl FnOnce() -> Result<Vec<u8>, CheckpointError>,
    mut add: impl FnMut(&mut T, &str),
) -> Result<(Index, Vec<T>), CheckpointError> {
    let mut files = ShardFiles::default();
    let mut folded: Vec<T> = Vec::new();
    let mut count = 0;
    let scanned = scan::scan_index(reader, piece, |name, file| {
        let k = files.position(file);
        if k == folded.len() {
            folded.push(T::default());
        }
        if let Some(value) = folded.get_mut(k) {
            add(value, name);
        }
        count += 1;
    })
    .map_err(|e| CheckpointError::unreadable(path, &e))?;
    let Some(scanned) = scanned else {
        // Not in the common shape: whole, through serde (or its error).
        let bytes = whole()?;
        let (index, entries) = parse_index_with(path, &bytes, None)?;
        let mut folded: Vec<T> = std::iter::repeat_with(T::default)
            .take(index.shard_files.len())
            .collect();
        for (name, file) in &entries {
            if let Some(value) = folded.get_mut(*file) {
                add(value, name);
            }
        }
        return Ok((index, folded));
    };
    let (index, rank) = finish(path, files, metadata_values(scanned.metadata), count)?;
    let mut sorted: Vec<Option<T>> = std::iter::repeat_with(|| None).take(rank.len()).collect();
    for (value, &k) in folded.into_iter().zip(&rank) {
        if let Some(slot) = sorted.get_mut(k) {
            *slot = Some(value);
        }
    }
    Ok((
        index,
        sorted.into_iter().map(Option::unwrap_or_default).collect(),
    ))
}

/// `scanner_piece`: scan in pieces of that many bytes; `None`: serde only.
fn parse_index_with<'a>(
    path: &Path,
    bytes: &'a [u8],
    scanner_piece: Option<usize>,
) -> Result<(Index, IndexEntries<'a>), CheckpointError> {
    let mut files = ShardFiles::default();
    // Indexes as programs write them are scanned directly; anything else
    // (escapes, other fields, other value types, bad JSON) goes to serde.
    let mut entries: IndexEntries<'a> = Vec::new();
    let scanned = scanner_piece.and_then(|piece| {
        // About 80 bytes of JSON per entry (capped: padding reserves nothing).
        entries.reserve((bytes.len() / 80).min(1 << 17));
        scan::scan_index(bytes, piece, |name, file| {
            entries.push((Cow::Owned(name.to_owned()), files.position(file)));
        })
        .ok()
        .flatten()
    });
    let raw_metadata = if let Some(scanned) = scanned {
        metadata_values(scanned.metadata)
    } else {
        let raw: RawIndex<'a> = serde_json::from_slice(bytes).map_err(|e| {
            if e.is_data() {
                CheckpointError::IndexShape {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                }
            } else {
                CheckpointError::IndexNotJson {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                }
            }
        })?;
        files = ShardFiles::default();
        entries = raw
            .weight_map
            .0
            .into_iter()
            .map(|(name, file)| {
                let position = files.position(&file);
                (name, position)
            })
            .collect();
        raw.metadata
    };
    let (index, rank) = finish(path, files, raw_metadata, entries.len())?;
    for entry in &mut entries {
        entry.1 = rank[entry.1];
    }
    Ok((index, entries))
}

/// Scanned metadata values as serde's.
fn metadata_values(
    scanned: Option<BTreeMap<String, IndexMetaValue>>,
) -> Option<BTreeMap<String, serde_json::Value>> {
    scanned.map(|map| {
        map.into_iter()
            .map(|(key, value)| {
                let value = match value {
                    IndexMetaValue::Text(text) => serde_json::Value::String(text),
                    IndexMetaValue::Nat(n) => serde_json::Value::from(n),
                };
                (key, value)
            })
            .collect()
    })
}

/// The index from its files (in first-seen order), metadata and entry
/// count, with each file's rank in the sorted [`Index::shard_files`]
/// (`rank[first_seen]`).
fn finish(
    path: &Path,
    files: ShardFiles,
    raw_metadata: Option<BTreeMap<String, serde_json::Value>>,
    tensor_count: usize,
) -> Result<(Index, Vec<usize>), CheckpointError> {
    let shard_files = files.check(path)?;
    let mut order: Vec<usize> = (0..shard_files.len()).collect();
    order.sort_unstable_by(|&a, &b| shard_files[a].cmp(&shard_files[b]));
    let mut rank = vec![0; order.len()];
    for (new, &old) in order.iter().enumerate() {
        rank[old] = new;
    }
    let sorted_files = order.iter().map(|&i| shard_files[i].clone()).collect();
    let mut metadata = BTreeMap::new();
    let mut total_size = None;
    for (key, value) in raw_metadata.unwrap_or_default() {
        if key == "total_size" {
            total_size = value.as_u64();
        }
        let text = match value {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        metadata.insert(key, text);
    }
    let index = Index {
        shard_files: sorted_files,
        tensor_count,
        total_size,
        metadata,
    };
    Ok((index, rank))
}

/// The distinct shard file names of an index, in first-seen order.
#[derive(Default)]
struct ShardFiles {
    names: Vec<String>,
    positions: foldhash::HashMap<String, usize>,
    /// The last name looked up: neighbouring entries mostly share a file.
    last: Option<usize>,
}

impl ShardFiles {
    /// The position of `file`, added if new.
    fn position(&mut self, file: &str) -> usize {
        if let Some(last) = self.last.filter(|&i| self.names[i] == file) {
            return last;
        }
        let position = if let Some(&position) = self.positions.get(file) {
            position
        } else {
            self.positions.insert(file.to_owned(), self.names.len());
            self.names.push(file.to_owned());
            self.names.len() - 1
        };
        self.last = Some(position);
        position
    }

    /// The names, once each is known to be a file in the index's folder.
    fn check(self, path: &Path) -> Result<Vec<String>, CheckpointError> {
        for shard in &self.names {
            let inside = Path::new(shard)
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
            if !inside || shard.is_empty() {
                return Err(CheckpointError::IndexShape {
                    path: path.to_path_buf(),
                    reason: format!("shard name `{shard}` is not a file in the index's folder"),
                });
            }
        }
        Ok(self.names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Index, CheckpointError> {
        parse_index(
            Path::new("/m/model.safetensors.index.json"),
            json.as_bytes(),
        )
        .map(|(index, _)| index)
    }

    #[test]
    fn a_valid_index() {
        let json = r#"{"metadata":{"total_size":24,"format":"pt"},
                "weight_map":{"a":"s2.safetensors","b":"s1.safetensors","c\u00e9":"s2.safetensors"}}"#;
        let (index, entries) = parse_index(
            Path::new("/m/model.safetensors.index.json"),
            json.as_bytes(),
        )
        .expect("valid");
        assert_eq!(index.total_size, Some(24));
        assert_eq!(index.shard_files, ["s1.safetensors", "s2.safetensors"]);
        assert_eq!(index.metadata["format"], "pt");
        assert_eq!(index.tensor_count, 3);
        let entries: Vec<(&str, usize)> = entries.iter().map(|(n, f)| (n.as_ref(), *f)).collect();
        assert_eq!(
            entries,
            [("a", 1), ("b", 0), ("cé", 1)],
            "escaped names are decoded"
        );
    }

    #[test]
    fn the_scanner_reads_what_serde_reads() {
        for json in [
            r#"{"metadata":{"total_size":24,"format":"pt","format":"mlx"},
                "weight_map":{"a":"s2.safetensors","b":"s1.safetensors","c":"s2.safetensors"}}"#,
            r#" { "weight_map" : { } , "metadata" : { } } "#,
            r#"{"weight_map":{"a":"s.safetensors","a":"t.safetensors"}}"#,
            r#"{"weight_map":{"a":"../s.safetensors"}}"#,
        ] {
            let scanned = scan::scan_index(json.as_bytes(), 5, |_, _| ());
            assert!(scanned.is_ok_and(|s| s.is_some()), "{json}");
            assert!(index_scanner_agrees_with_serde(json.as_bytes()), "{json}");
        }
        for json in [
            r#"{"metadata":{"total_size":2.5},"weight_map":{}}"#,
            r#"{"metadata":null,"weight_map":{}}"#,
            r#"{"weight_map":{"c\u00e9":"s.safetensors"}}"#,
            r#"{"weight_map":{},"other":1}"#,
            r#"{"metadata":{}}"#,
        ] {
            let scanned = scan::scan_index(json.as_bytes(), 5, |_, _| ());
            assert!(scanned.is_ok_and(|s| s.is_none()), "{json}");
            assert!(index_scanner_agrees_with_serde(json.as_bytes()), "{json}");
        }
    }

    #[test]
    fn an_index_read_in_pieces_of_any_size_reads_the_same() {
        // A name of several-byte characters, numbers and strings cut at
        // every place by some piece size.
        let json = "{ \"metadata\" : {\"total_size\": 1234567, \"format\":\"pt\"},\n \
            \"weight_map\": {\"d\u{e9}j\u{e0}.vu.\u{1f600}\": \"m-2.safetensors\",\n \
            \"b.weight\":\"m-1.safetensors\" , \"c\":\"m-2.safetensors\"} }\n";
        let path = Path::new("model.safetensors.index.json");
        let (index, entries) = parse_index(path, json.as_bytes()).expect("valid");
        assert_eq!(index.total_size, Some(1_234_567));
        assert_eq!(entries[0].0, "d\u{e9}j\u{e0}.vu.\u{1f600}");
        for piece in 1..=json.len() {
            let add = |names: &mut Vec<String>, name: &str| names.push(name.to_owned());
            let whole =
                || -> Result<Vec<u8>, CheckpointError> { panic!("scanned, never read whole") };
            let (folded, names) =
                fold_index(path, json.as_bytes(), piece, whole, add).expect("valid");
            assert_eq!(folded, index, "piece {piece}");
            assert_eq!(
                names,
                [
                    vec!["b.weight".to_owned()],
                    vec!["d\u{e9}j\u{e0}.vu.\u{1f600}".to_owned(), "c".to_owned()]
                ]
            );
        }
        // Cut short anywhere, it is never read as complete.
        for end in 0..json.trim_end().len() {
            let cut = &json.as_bytes()[..end];
            let scanned = scan::scan_index(cut, 3, |_, _| ()).expect("read");
            assert!(scanned.is_none(), "{}", String::from_utf8_lossy(cut));
        }
        // A byte that is not UTF-8 anywhere (after the closing brace too),
        // or a character left unfinished at the end: never read as valid.
        for at in 0..json.len() {
            let mut bad = json.as_bytes().to_vec();
            bad[at] = 0xff;
            for piece in [3, 7, 64] {
                let scanned = scan::scan_index(&bad[..], piece, |_, _| ()).expect("read");
                assert!(scanned.is_none(), "0xff at {at}, piece {piece}");
            }
        }
        let mut unfinished = json.as_bytes().to_vec();
        unfinished.extend_from_slice(&[0xe2, 0x82]);
        for piece in [1, 3, 64] {
            let scanned = scan::scan_index(&unfinished[..], piece, |_, _| ()).expect("read");
            assert!(scanned.is_none(), "piece {piece}");
        }
    }

    #[test]
    fn dots_inside_a_file_name_are_not_a_parent_folder() {
        // Found by the fuzzer (a wrong assertion in the target, not a bug here).
        let index =
            parse(r#"{"weight_map":{"a":"mod..-00000of-00002.safeteno]s"}}"#).expect("valid");
        assert_eq!(index.shard_files, ["mod..-00000of-00002.safeteno]s"]);
    }

    #[test]
    fn not_json() {
        let err = parse("{weight_map:").expect_err("bad");
        assert!(matches!(err, CheckpointError::IndexNotJson { .. }), "{err}");
    }

    #[test]
    fn wrong_shape_or_escaping_names() {
        for json in [
            r#"{"metadata":{}}"#,
            r#"{"weight_map":{"a":1}}"#,
            r#"{"weight_map":{"a":"../../etc/passwd"}}"#,
            r#"{"weight_map":{"a":"/abs.safetensors"}}"#,
            r#"{"weight_map":{"a":""}}"#,
        ] {
            let err = parse(json).expect_err(json);
            assert!(
                matches!(err, CheckpointError::IndexShape { .. }),
                "{json}: {err}"
            );
        }
    }
}
