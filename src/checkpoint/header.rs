//! Reading one shard's header: the 8-byte length, the JSON, validation.
//! Tensor data is never read.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::dtype::Dtype;
use super::error::CheckpointError;
use super::scan;
use super::table::ShardTensors;

/// Largest header accepted, as the `safetensors` crate does: a bigger one is
/// either corrupt or hostile, and would be read into memory whole.
pub const HEADER_CAP_BYTES: u64 = 100_000_000;

/// A file's size in bytes and how it splits into the header and the data.
#[derive(Debug, Clone, Copy)]
struct FileBytes {
    total: u64,
    header: u64,
    data: u64,
}

/// One tensor entry while a header is checked: borrowed from the scanned
/// text or the parsed JSON, copied into the columns once the header is valid.
#[derive(Debug, Clone, Copy)]
struct Entry<'a> {
    name: &'a str,
    dtype: Dtype,
    shape: &'a [u64],
    data_offsets: (u64, u64),
}

/// One shard's header, validated: every tensor is well formed and the
/// tensors tile the data section exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHeader {
    /// The file's size in bytes.
    pub file_bytes: u64,
    /// The JSON header's length (without the 8-byte length prefix).
    pub header_bytes: u64,
    /// `__metadata__`, values as strings.
    pub metadata: BTreeMap<String, String>,
    /// Tensors in data order.
    pub tensors: ShardTensors,
    /// Each tensor's name hashed for the tensor table, in the same order
    /// (computed once, for the duplicate check here).
    pub(crate) name_hashes: Vec<u64>,
}

impl ShardHeader {
    /// Byte offset in the file where the data section starts.
    #[must_use]
    pub fn data_start(&self) -> u64 {
        8 + self.header_bytes
    }
}

/// Reads and validates the header of the safetensors file at `path`.
///
/// # Errors
/// One [`CheckpointError`] variant per problem, naming `path`.
pub fn read_header(path: &Path) -> Result<ShardHeader, CheckpointError> {
    read_header_with(path, &mut Vec::new())
}

/// [`read_header`] with `buf` for the header bytes: a thread parsing many
/// shards reuses one buffer instead of touching fresh memory per file.
pub(crate) fn read_header_with(
    path: &Path,
    buf: &mut Vec<u8>,
) -> Result<ShardHeader, CheckpointError> {
    super::require_regular(path)?;
    // Opened without blocking, and checked again once open: a FIFO
    // swapped in after the check above is refused, not waited on.
    // A folder is said as such ("is a folder, not a regular file").
    let (mut file, meta) = crate::files::open_regular(path)
        .map_err(|e| CheckpointError::unreadable_for(path, e.reason()))?;
    let file_bytes = meta.len();
    let mut prefix = [0u8; 8];
    if file_bytes >= 8 {
        file.read_exact(&mut prefix)
            .map_err(|e| CheckpointError::unreadable(path, &e))?;
    }
    let header_bytes = check_prefix(path, file_bytes, prefix)?;
    buf.clear();
    // Bounded by the cap, so the conversion cannot fail on any real platform.
    buf.reserve(usize::try_from(header_bytes).unwrap_or(0));
    let read = file
        .take(header_bytes)
        .read_to_end(buf)
        .map_err(|e| CheckpointError::unreadable(path, &e))?;
    if read as u64 != header_bytes {
        // The file shrank since its size was taken.
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        return Err(CheckpointError::unreadable(path, &eof));
    }
    parse_header(path, buf, file_bytes)
}

/// Like [`read_header`], on the bytes of a whole file held in memory (the
/// fuzz targets' entry point).
///
/// # Errors
/// As [`read_header`].
pub fn parse_file_bytes(path: &Path, bytes: &[u8]) -> Result<ShardHeader, CheckpointError> {
    parse_prefix(path, bytes.len() as u64, bytes)
}

/// Like [`read_header`], on the first bytes of a file of `file_bytes`
/// bytes (its length prefix and header, read from elsewhere: a remote
/// file's first range).
///
/// # Errors
/// As [`read_header`]; fewer bytes than the header needs is
/// [`CheckpointError::Unreadable`].
pub(crate) fn parse_prefix(
    path: &Path,
    file_bytes: u64,
    bytes: &[u8],
) -> Result<ShardHeader, CheckpointError> {
    let mut prefix = [0u8; 8];
    if let Some(first) = bytes.get(..8) {
        prefix.copy_from_slice(first);
    }
    let header_bytes = check_prefix(path, file_bytes, prefix)?;
    let json = usize::try_from(8 + header_bytes)
        .ok()
        .and_then(|end| bytes.get(8..end))
        .ok_or_else(|| CheckpointError::Unreadable {
            path: path.to_path_buf(),
            reason: format!(
                "only {} of the header's {header_bytes} bytes came",
                bytes.len().saturating_sub(8)
            ),
        })?;
    parse_header(path, json, file_bytes)
}

/// Checks the 8-byte length prefix against the file size and the cap and
/// returns the header length.
fn check_prefix(path: &Path, file_bytes: u64, prefix: [u8; 8]) -> Result<u64, CheckpointError> {
    if file_bytes < 8 {
        return Err(CheckpointError::TooShort {
            path: path.to_path_buf(),
            file_bytes,
        });
    }
    let header_bytes = u64::from_le_bytes(prefix);
    if header_bytes > HEADER_CAP_BYTES {
        return Err(CheckpointError::HeaderTooLarge {
            path: path.to_path_buf(),
            header_bytes,
            cap_bytes: HEADER_CAP_BYTES,
        });
    }
    if header_bytes > file_bytes - 8 {
        return Err(CheckpointError::HeaderPastEnd {
            path: path.to_path_buf(),
            header_bytes,
            file_bytes,
        });
    }
    Ok(header_bytes)
}

/// Parses and validates header bytes `json` of a file of `file_bytes` bytes.
///
/// # Errors
/// As [`read_header`].
pub fn parse_header(
    path: &Path,
    json: &[u8],
    file_bytes: u64,
) -> Result<ShardHeader, CheckpointError> {
    let header_bytes = json.len() as u64;
    let data_bytes = file_bytes.saturating_sub(8 + header_bytes);
    let sizes = FileBytes {
        total: file_bytes,
        header: header_bytes,
        data: data_bytes,
    };
    // The scanner checks the text to be UTF-8 before it scans; what it
    // declines is checked again below, for the error's offset.
    if let Some(mut scanned) = scan::scan(json) {
        let metadata = std::mem::take(&mut scanned.metadata);
        let mut tensors = Vec::with_capacity(scanned.tensors.len());
        for t in &scanned.tensors {
            let dtype = match t.dtype {
                Ok(dtype) => dtype,
                Err(dtype) => {
                    return Err(CheckpointError::UnknownDtype {
                        path: path.to_path_buf(),
                        tensor: t.name.to_owned(),
                        dtype: dtype.to_owned(),
                    });
                }
            };
            let entry = Entry {
                name: t.name,
                dtype,
                shape: scanned.shape(t),
                data_offsets: t.data_offsets,
            };
            check_bytes(path, entry, data_bytes)?;
            tensors.push(entry);
        }
        let mut header = validate(path, metadata, tensors, sizes)?;
        // The scanner reads only names that need no escape.
        header.tensors.vouch_plain_names();
        Ok(header)
    } else {
        let text = std::str::from_utf8(json).map_err(|e| CheckpointError::HeaderNotUtf8 {
            path: path.to_path_buf(),
            offset: e.valid_up_to(),
        })?;
        let RawHeader {
            metadata,
            tensors: raw,
        } = parse_with_serde(path, text)?;
        let mut tensors = Vec::with_capacity(raw.len());
        for (name, entry) in &raw {
            tensors.push(validate_tensor(path, name, entry, data_bytes)?);
        }
        validate(path, metadata, tensors, sizes)
    }
}

/// The general path: any JSON, with `serde_json`'s precise errors.
fn parse_with_serde(path: &Path, text: &str) -> Result<RawHeader, CheckpointError> {
    serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            CheckpointError::HeaderShape {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        } else {
            CheckpointError::HeaderNotJson {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        }
    })
}

/// Whether the fast scanner agrees with `serde_json` on `bytes`: it either
/// declines them or they are UTF-8 and it reads exactly what `serde_json` reads. For the fuzz target.
#[doc(hidden)]
#[must_use]
pub fn scanner_agrees_with_serde(bytes: &[u8]) -> bool {
    scan::scan(bytes).is_none_or(|scanned| {
        std::str::from_utf8(bytes).is_ok_and(|text| {
            serde_json::from_str::<RawHeader>(text).is_ok_and(|raw| raw == RawHeader::from(scanned))
        })
    })
}

impl From<scan::ScannedHeader<'_>> for RawHeader {
    fn from(scanned: scan::ScannedHeader<'_>) -> Self {
        let nats = |values| Nats {
            values,
            texts: None,
        };
        let tensors = scanned
            .tensors
            .iter()
            .map(|t| {
                let (start, end) = t.data_offsets;
                let entry = RawTensor {
                    dtype: t
                        .dtype
                        .map_or_else(|d| RawDtype::Unknown(d.to_owned()), RawDtype::Known),
                    shape: nats(scanned.shape(t).to_vec()),
                    data_offsets: nats(vec![start, end]),
                };
                (t.name.to_owned(), entry)
            })
            .collect();
        Self {
            metadata: scanned.metadata,
            tensors,
        }
    }
}

/// Checks what concerns the header as a whole: unique names, and tensors
/// that tile the data section. Returns the tensors in data order.
fn validate(
    path: &Path,
    metadata: BTreeMap<String, String>,
    mut tensors: Vec<Entry<'_>>,
    sizes: FileBytes,
) -> Result<ShardHeader, CheckpointError> {
    let FileBytes {
        total: file_bytes,
        header: header_bytes,
        data: data_bytes,
    } = sizes;
    // Names are hashed once, for this check and for the tensor table.
    let mut name_hashes: Vec<u64> = tensors
        .iter()
        .map(|t| super::table::name_hash(t.name))
        .collect();
    let mut seen: hashbrown::HashTable<usize> = hashbrown::HashTable::with_capacity(tensors.len());
    for (i, (t, &hash)) in tensors.iter().zip(&name_hashes).enumerate() {
        let same = |&j: &usize| tensors.get(j).is_some_and(|u| u.name == t.name);
        if seen.find(hash, same).is_some() {
            return Err(CheckpointError::DuplicateTensor {
                tensor: t.name.to_owned(),
                first: path.to_path_buf(),
                second: path.to_path_buf(),
            });
        }
        seen.insert_unique(hash, i, |&j| name_hashes.get(j).copied().unwrap_or(0));
    }
    drop(seen);
    // Data order: writers mostly list tensors in it already, so the two
    // lists are reordered only when they do not.
    let in_data_order = |a: &Entry<'_>, b: &Entry<'_>| {
        a.data_offsets
            .cmp(&b.data_offsets)
            .then_with(|| a.name.cmp(b.name))
    };
    if !tensors
        .windows(2)
        .all(|w| in_data_order(&w[0], &w[1]).is_le())
    {
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_unstable_by(|&a, &b| in_data_order(&tensors[a], &tensors[b]));
        tensors = order.iter().map(|&i| tensors[i]).collect();
        name_hashes = order.iter().map(|&i| name_hashes[i]).collect();
    }
    check_tiling(path, &tensors, data_bytes)?;
    let name_bytes = tensors.iter().map(|t| t.name.len()).sum();
    let mut columns = ShardTensors::with_capacity(tensors.len(), name_bytes);
    for t in &tensors {
        // A header under the cap holds far less than 4 GiB of names.
        if !columns.push(t.name, t.dtype, t.shape, t.data_offsets) {
            return Err(CheckpointError::HeaderShape {
                path: path.to_path_buf(),
                reason: "more names or dimensions than a header can hold".into(),
            });
        }
    }
    Ok(ShardHeader {
        file_bytes,
        header_bytes,
        metadata,
        tensors: columns,
        name_hashes,
    })
}

fn validate_tensor<'a>(
    path: &Path,
    name: &'a str,
    entry: &'a RawTensor,
    data_bytes: u64,
) -> Result<Entry<'a>, CheckpointError> {
    let dtype = match &entry.dtype {
        RawDtype::Known(dtype) => *dtype,
        RawDtype::Unknown(dtype) => {
            return Err(CheckpointError::UnknownDtype {
                path: path.to_path_buf(),
                tensor: name.to_owned(),
                dtype: dtype.clone(),
            });
        }
    };
    if let Some(texts) = &entry.shape.texts {
        let found = texts
            .iter()
            .find(|t| t.parse::<u64>().is_err())
            .cloned()
            .unwrap_or_default();
        return Err(CheckpointError::BadShape {
            path: path.to_path_buf(),
            tensor: name.to_owned(),
            reason: format!("dimension {found} is not a non-negative integer"),
        });
    }
    let data_offsets = match (
        entry.data_offsets.texts.is_none(),
        entry.data_offsets.values.as_slice(),
    ) {
        (true, &[start, end]) if start <= end => (start, end),
        _ => {
            return Err(CheckpointError::BadOffsets {
                path: path.to_path_buf(),
                tensor: name.to_owned(),
                found: entry.data_offsets.describe(),
            });
        }
    };
    let tensor = Entry {
        name,
        dtype,
        shape: &entry.shape.values,
        data_offsets,
    };
    check_bytes(path, tensor, data_bytes)?;
    Ok(tensor)
}

/// A tensor's bytes must lie inside the data section and be exactly what
/// its dtype and shape need (checked arithmetic: no overflow).
fn check_bytes(path: &Path, tensor: Entry<'_>, data_bytes: u64) -> Result<(), CheckpointError> {
    let (start, end) = tensor.data_offsets;
    if end > data_bytes {
        return Err(CheckpointError::OffsetsPastEnd {
            path: path.to_path_buf(),
            tensor: tensor.name.to_owned(),
            end,
            data_bytes,
        });
    }
    let bytes = end - start;
    let expected = tensor
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|elements| elements.checked_mul(tensor.dtype.bits()));
    let matches = expected.is_some_and(|bits| bits % 8 == 0 && bits / 8 == bytes);
    if !matches {
        return Err(CheckpointError::SizeMismatch {
            path: path.to_path_buf(),
            tensor: tensor.name.to_owned(),
            dtype: tensor.dtype.name().to_owned(),
            shape: tensor.shape.to_vec(),
            bytes,
            expected: match expected {
                None => "more than 2^64 bits".to_owned(),
                Some(bits) if bits % 8 != 0 => format!("{bits} bits, not a whole number of bytes"),
                Some(bits) => format!("{} bytes", bits / 8),
            },
        });
    }
    Ok(())
}

/// The tensors (sorted by offsets) must cover the data section exactly:
/// no byte claimed twice, none unclaimed.
fn check_tiling(
    path: &Path,
    tensors: &[Entry<'_>],
    data_bytes: u64,
) -> Result<(), CheckpointError> {
    let mut cursor = 0u64;
    let mut last: Option<&Entry<'_>> = None;
    for tensor in tensors {
        let (start, end) = tensor.data_offsets;
        if start < cursor {
            return Err(CheckpointError::Overlap {
                path: path.to_path_buf(),
                first: last.map(|t| t.name.to_owned()).unwrap_or_default(),
                second: tensor.name.to_owned(),
            });
        }
        if start > cursor {
            return Err(CheckpointError::Hole {
                path: path.to_path_buf(),
                start: cursor,
                end: start,
            });
        }
        if end > cursor || last.is_none() {
            last = Some(tensor);
        }
        cursor = end;
    }
    if cursor < data_bytes {
        return Err(CheckpointError::Hole {
            path: path.to_path_buf(),
            start: cursor,
            end: data_bytes,
        });
    }
    Ok(())
}

/// The header as JSON gives it, before validation. `__metadata__` is kept
/// apart; tensor entries keep their order and duplicates (caught later).
#[derive(Debug, PartialEq)]
struct RawHeader {
    metadata: BTreeMap<String, String>,
    tensors: Vec<(String, RawTensor)>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct RawTensor {
    dtype: RawDtype,
    shape: Nats,
    data_offsets: Nats,
}

/// A dtype name, parsed while the JSON is read (no allocation when known).
#[derive(Debug, PartialEq)]
enum RawDtype {
    Known(Dtype),
    Unknown(String),
}

/// A JSON list that should hold non-negative integers. Once an entry is not
/// one, every entry is also kept as text for the error message.
#[derive(Debug, PartialEq)]
struct Nats {
    values: Vec<u64>,
    texts: Option<Vec<String>>,
}

impl Nats {
    fn describe(&self) -> String {
        let texts = self
            .texts
            .clone()
            .unwrap_or_else(|| self.values.iter().map(u64::to_string).collect());
        format!("[{}]", texts.join(", "))
    }
}

/// One list entry: a non-negative integer, or its description.
enum Loose {
    Nat(u64),
    Other(String),
}

impl<'de> Deserialize<'de> for RawDtype {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DtypeVisitor;
        impl Visitor<'_> for DtypeVisitor {
            type Value = RawDtype;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a dtype name")
            }
            fn visit_str<E>(self, v: &str) -> Result<RawDtype, E> {
                Ok(v.parse()
                    .map_or_else(|_| RawDtype::Unknown(v.to_owned()), RawDtype::Known))
            }
        }
        deserializer.deserialize_str(DtypeVisitor)
    }
}

impl<'de> Deserialize<'de> for Nats {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NatsVisitor;
        impl<'de> Visitor<'de> for NatsVisitor {
            type Value = Nats;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of non-negative integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Nats, A::Error> {
                let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(4));
                let mut texts: Option<Vec<String>> = None;
                while let Some(entry) = seq.next_element::<Loose>()? {
                    match (entry, &mut texts) {
                        (Loose::Nat(n), None) => values.push(n),
                        (Loose::Nat(n), Some(texts)) => texts.push(n.to_string()),
                        (Loose::Other(text), texts) => texts
                            .get_or_insert_with(|| values.iter().map(u64::to_string).collect())
                            .push(text),
                    }
                }
                Ok(Nats { values, texts })
            }
        }
        deserializer.deserialize_seq(NatsVisitor)
    }
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeaderVisitor;
        impl<'de> Visitor<'de> for HeaderVisitor {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
                let mut metadata = BTreeMap::new();
                let mut tensors = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(key) = map.next_key::<String>()? {
                    if key == "__metadata__" {
                        // MLX's writer stores `null` when there is no metadata.
                        let values: Option<BTreeMap<String, serde_json::Value>> =
                            map.next_value()?;
                        metadata = values
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| match v {
                                serde_json::Value::String(s) => (k, s),
                                other => (k, other.to_string()),
                            })
                            .collect();
                    } else {
                        let entry = map
                            .next_value::<RawTensor>()
                            .map_err(|e| de::Error::custom(format_args!("tensor `{key}`: {e}")))?;
                        tensors.push((key, entry));
                    }
                }
                Ok(RawHeader { metadata, tensors })
            }
        }
        deserializer.deserialize_map(HeaderVisitor)
    }
}

impl<'de> Deserialize<'de> for Loose {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LooseVisitor;
        impl<'de> Visitor<'de> for LooseVisitor {
            type Value = Loose;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative integer")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Loose, E> {
                Ok(Loose::Nat(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Loose, E> {
                Ok(u64::try_from(v).map_or_else(|_| Loose::Other(v.to_string()), Loose::Nat))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Loose, E> {
                Ok(Loose::Other(format!("{v:?}")))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Loose, E> {
                Ok(Loose::Other(v.to_string()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Loose, E> {
                Ok(Loose::Other(format!("{v:?}")))
            }
            fn visit_unit<E>(self) -> Result<Loose, E> {
                Ok(Loose::Other("null".into()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose::Other("a list".into()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Loose::Other("an object".into()))
            }
        }
        deserializer.deserialize_any(LooseVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::TensorRef;
    use std::path::PathBuf;

    fn path() -> PathBuf {
        PathBuf::from("/m/model.safetensors")
    }

    /// Parses `json` as the header of a file with `data_bytes` of data.
    fn parse(json: &str, data_bytes: u64) -> Result<ShardHeader, CheckpointError> {
        let file_bytes = 8 + json.len() as u64 + data_bytes;
        parse_header(&path(), json.as_bytes(), file_bytes)
    }

    fn write_file(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("x.safetensors");
        std::fs::write(&file, bytes).expect("write");
        (dir, file)
    }

    #[test]
    fn a_valid_header_is_read_in_data_order_with_metadata() {
        let json = r#"{"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},
            "__metadata__":{"format":"mlx","n":3},
            "a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
            "z":{"dtype":"F4","shape":[4],"data_offsets":[12,14]}}"#;
        let header = parse(json, 14).expect("valid");
        let names: Vec<&str> = header.tensors.iter().map(TensorRef::name).collect();
        assert_eq!(names, ["a", "b", "z"]);
        assert_eq!(
            header.tensors.get(1).map(TensorRef::dtype),
            Some(Dtype::BF16)
        );
        assert_eq!(header.metadata["format"], "mlx");
        assert_eq!(header.metadata["n"], "3");
    }

    #[test]
    fn the_scanner_reads_what_serde_reads() {
        for text in [
            r#"{"__metadata__":{"format":"pt","k":"v","k":"w"},"b":{"data_offsets":[0,4],"shape":[2],"dtype":"BF16"}}"#,
            r#" {"a" : { "dtype" : "Q9" , "shape" : [ 0 , 7 ] , "data_offsets" : [ 0 , 0 ] } }  "#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"a":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}}"#,
            "{}",
        ] {
            assert!(scan::scan(text.as_bytes()).is_some(), "{text}");
            assert!(scanner_agrees_with_serde(text.as_bytes()), "{text}");
        }
        // Declined texts agree trivially; serde then gives the errors.
        assert!(scanner_agrees_with_serde(
            br#"{"a":{"dtype":"F16","shape":[1.5]}}"#
        ));
        // So do bytes that are not UTF-8, in a name or outside strings.
        assert!(scanner_agrees_with_serde(
            b"{\"a\xff\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}"
        ));
        assert!(
            scan::scan(b"{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}\xff")
                .is_none()
        );
        let scanned = parse(
            r#"{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,2]}}"#,
            2,
        );
        assert!(matches!(scanned, Err(CheckpointError::UnknownDtype { .. })));
    }

    #[test]
    fn null_metadata_as_mlx_writes_it() {
        let header = parse(
            r#"{"__metadata__":null,"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
            1,
        )
        .expect("valid");
        assert!(header.metadata.is_empty());
    }

    #[test]
    fn not_utf8() {
        let err = parse_header(&path(), b"{\"\xff\": 1}", 20).expect_err("bad");
        assert!(
            matches!(err, CheckpointError::HeaderNotUtf8 { offset: 2, .. }),
            "{err}"
        );
        // In a name of a header the scanner would otherwise read.
        let json = b"{\"a\xff\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}";
        let err = parse_header(&path(), json, 8 + json.len() as u64 + 2).expect_err("bad");
        assert!(
            matches!(err, CheckpointError::HeaderNotUtf8 { offset: 3, .. }),
            "{err}"
        );
    }

    #[test]
    fn not_json() {
        let err = parse("this is not json", 0).expect_err("bad");
        assert!(
            matches!(err, CheckpointError::HeaderNotJson { .. }),
            "{err}"
        );
        assert!(err.to_string().ends_with("/m/model.safetensors"), "{err}");
    }

    /// `json` over `bytes` of data is refused with an error `is` accepts.
    fn refused(json: &str, bytes: u64, is: impl Fn(&CheckpointError) -> bool) {
        let err = parse(json, bytes).expect_err(json);
        assert!(is(&err), "{json}: {err}");
    }

    #[test]
    fn json_of_the_wrong_shape() {
        for json in [
            "[1, 2]",
            r#"{"a": {"dtype": "F32"}}"#,
            r#"{"a": 7}"#,
            r#"{"__metadata__": [1]}"#,
        ] {
            refused(json, 0, |e| {
                matches!(e, CheckpointError::HeaderShape { .. })
            });
        }
    }

    #[test]
    fn unknown_dtype() {
        refused(
            r#"{"a":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}}"#,
            4,
            |e| matches!(e, CheckpointError::UnknownDtype { dtype, tensor, .. } if dtype == "F12" && tensor == "a"),
        );
    }

    #[test]
    fn bad_shapes() {
        for shape in ["[-1]", "[1.5]", r#"["2"]"#, "[null]"] {
            let json = format!(r#"{{"a":{{"dtype":"F32","shape":{shape},"data_offsets":[0,4]}}}}"#);
            refused(&json, 4, |e| matches!(e, CheckpointError::BadShape { .. }));
        }
    }

    #[test]
    fn offsets_not_two_ascending_integers() {
        for offsets in [
            "[4, 0]",
            "[0]",
            "[0, 4, 8]",
            "[0.0, 4]",
            "[-4, 0]",
            r#"["0", 4]"#,
        ] {
            let json = format!(r#"{{"a":{{"dtype":"U8","shape":[4],"data_offsets":{offsets}}}}}"#);
            refused(&json, 4, |e| {
                matches!(e, CheckpointError::BadOffsets { .. })
            });
        }
    }

    #[test]
    fn offsets_past_the_end_of_the_data() {
        refused(
            r#"{"a":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}}"#,
            8,
            |e| {
                matches!(
                    e,
                    CheckpointError::OffsetsPastEnd {
                        end: 100,
                        data_bytes: 8,
                        ..
                    }
                )
            },
        );
    }

    #[test]
    fn overlapping_tensors() {
        let json = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                       "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
        refused(
            json,
            12,
            |e| matches!(e, CheckpointError::Overlap { first, second, .. } if first == "a" && second == "b"),
        );
    }

    #[test]
    fn holes_between_and_after_tensors() {
        // (header, data bytes, the hole's start and end)
        let cases = [
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                    "b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}"#,
                20,
                (8, 12),
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
                12,
                (8, 12),
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                12,
                (0, 4),
            ),
        ];
        for (json, bytes, hole) in cases {
            refused(
                json,
                bytes,
                |e| matches!(e, CheckpointError::Hole { start, end, .. } if (*start, *end) == hole),
            );
        }
    }

    #[test]
    fn byte_length_must_match_dtype_times_shape() {
        let err = parse(
            r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            8,
        )
        .expect_err("bad");
        assert!(
            matches!(err, CheckpointError::SizeMismatch { bytes: 8, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("needs 12 bytes"), "{err}");
        // Sub-byte: three 4-bit values are not a whole number of bytes.
        let err = parse(
            r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
            2,
        )
        .expect_err("bad");
        assert!(
            err.to_string().contains("not a whole number of bytes"),
            "{err}"
        );
        // Overflow is caught, not wrapped.
        let huge = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#;
        let err = parse(huge, 0).expect_err("bad");
        assert!(err.to_string().contains("more than 2^64 bits"), "{err}");
    }

    #[test]
    fn duplicate_names_in_one_header() {
        let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},
                       "a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        let err = parse(json, 2).expect_err("bad");
        assert!(
            matches!(err, CheckpointError::DuplicateTensor { .. }),
            "{err}"
        );
    }

    #[test]
    fn empty_and_zero_sized_tensors_are_fine() {
        let header = parse("{}", 0).expect("an empty header is valid");
        assert!(header.tensors.is_empty());
        let json = r#"{"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},
                       "a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        assert_eq!(parse(json, 4).expect("valid").tensors.len(), 2);
    }

    #[test]
    fn file_shorter_than_the_length_prefix() {
        let (_dir, file) = write_file(b"abc");
        let err = read_header(&file).expect_err("bad");
        assert!(
            matches!(err, CheckpointError::TooShort { file_bytes: 3, .. }),
            "{err}"
        );
    }

    #[test]
    fn header_length_over_the_cap_or_past_the_end() {
        let (_dir, file) = write_file(&(HEADER_CAP_BYTES + 1).to_le_bytes());
        let err = read_header(&file).expect_err("bad");
        assert!(
            matches!(err, CheckpointError::HeaderTooLarge { .. }),
            "{err}"
        );
        let mut bytes = 1000u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        let (_dir, file) = write_file(&bytes);
        let err = read_header(&file).expect_err("bad");
        assert!(
            matches!(
                err,
                CheckpointError::HeaderPastEnd {
                    header_bytes: 1000,
                    file_bytes: 10,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn in_memory_files_are_checked_like_files_on_disk() {
        let p = Path::new("/m/x.safetensors");
        assert!(matches!(
            parse_file_bytes(p, b"abc"),
            Err(CheckpointError::TooShort { .. })
        ));
        let mut bytes = 2u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        assert!(
            parse_file_bytes(p, &bytes)
                .expect("valid")
                .tensors
                .is_empty()
        );
        bytes[0] = 3;
        assert!(matches!(
            parse_file_bytes(p, &bytes),
            Err(CheckpointError::HeaderPastEnd { .. })
        ));
    }

    #[test]
    fn unreadable_paths() {
        let err = read_header(Path::new("/nonexistent/x.safetensors")).expect_err("bad");
        assert!(matches!(err, CheckpointError::Unreadable { .. }), "{err}");
        assert!(err.to_string().contains("no such file"), "{err}");
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read_header(dir.path()).expect_err("a folder is not a shard");
        assert!(err.to_string().contains("is a folder"), "{err}");
    }
}
