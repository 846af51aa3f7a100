//! GGUF files (llama.cpp's format) read header-only: the version, the
//! metadata (big arrays such as a tokenizer's vocabulary summarized, never
//! kept whole), and each tensor's ggml type, shape, place and size; what
//! MLX's own loader (`mx.load`) does with each type.
//!
//! The layout, as llama.cpp's `gguf-py` writes and reads it (little-endian):
//! the magic `GGUF`, a `u32` version (2 or 3), the tensor and key-value
//! counts (`u64`), the key-values (a string key, a `u32` value type, the
//! value; arrays carry their element type and a `u64` length), the tensor
//! infos (name, `u32` dimension count, `u64` dimensions innermost first, a
//! `u32` ggml type, a `u64` offset into the data section), then the data
//! section at the next multiple of `general.alignment` (32 by default).
//! GGUF lists dimensions innermost first; the shapes here are row-major, as
//! numpy and MLX show them (`[4096, 11008]` for a weight stored as
//! `ne = [11008, 4096]`).

mod types;

use std::io::{Read, Seek};
use std::path::Path;

pub use types::{GgmlType, MlxLoad};

/// The file's first four bytes.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// Bounds on what a header may claim, so a damaged or hostile file is a
/// clear error, not an allocation of its claimed size.
const MAX_TENSORS: u64 = 1 << 22;
/// The most bytes of a remote GGUF file read as its header (a 256k-token
/// vocabulary with its scores and types is about 10 MB).
pub const MAX_HEADER_BYTES: u64 = 1 << 28;
const MAX_KEYS: u64 = 1 << 20;
const MAX_STRING: u64 = 1 << 24;
const MAX_DIMS: u32 = 8;
/// Array elements kept to show (the rest are counted, skipped).
const ARRAY_PREVIEW: usize = 8;
/// The most bytes kept of one metadata string (a chat template is a few
/// KB); a longer one keeps its first bytes and says its length.
pub const STRING_KEPT: usize = 16 << 10;
/// The most bytes of metadata strings kept in all: past it, strings keep
/// no text, only their length (a 2 GB file of long strings shows MBs).
const STRINGS_KEPT_IN_ALL: u64 = 16 << 20;

/// A metadata value: scalars and strings whole, arrays summarized.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// Any integer type, widened.
    Int(i128),
    /// An `f32` (shown by its own shortest form: `1e-5` reads `0.00001`,
    /// not the `f64` it widens to).
    F32(f32),
    /// An `f64`.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string (escaped when shown).
    Str(String),
    /// A string longer than what is kept ([`STRING_KEPT`], or past the
    /// header's budget): its first bytes and its length.
    Cut {
        /// Its first bytes (whole characters), perhaps none.
        prefix: String,
        /// Its length in the file, in bytes.
        bytes: u64,
    },
    /// An array: its element type's name, its length, its first elements.
    Array {
        /// `u32`, `string`, ….
        element: &'static str,
        /// Elements in the file.
        len: u64,
        /// The first few.
        first: Vec<MetaValue>,
    },
}

/// A tensor's dimensions, held in its entry up to four (as many as ggml
/// has; the up to eight a file may claim go to the heap).
pub type GgufShape = smallvec::SmallVec<[u64; 4]>;

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensor {
    /// Its name (llama.cpp's: `blk.0.attn_q.weight`).
    pub name: String,
    /// Its type, as the file's id and, when known, its traits.
    pub type_id: u32,
    /// Row-major shape (GGUF's dimensions reversed).
    pub shape: GgufShape,
    /// Offset of its data, from the start of the file.
    pub offset: u64,
    /// Bytes of its data.
    pub bytes: u64,
}

/// The name of ggml type `type_id` (`Q4_K`), or `type N` for one not known.
#[must_use]
pub fn type_name(type_id: u32) -> String {
    GgmlType::from_id(type_id).map_or_else(|| format!("type {type_id}"), |g| g.name.to_owned())
}

impl GgufTensor {
    /// Its type's traits, when the type is known.
    #[must_use]
    pub fn ggml_type(&self) -> Option<GgmlType> {
        GgmlType::from_id(self.type_id)
    }

    /// Its type's name (`Q4_K`), or `type N` for a type id not known.
    #[must_use]
    pub fn type_name(&self) -> String {
        type_name(self.type_id)
    }

    /// Its logical values (parameters).
    #[must_use]
    pub fn values(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A GGUF file's header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// 2 or 3.
    pub version: u32,
    /// The key-values, in file order.
    pub metadata: Vec<(String, MetaValue)>,
    /// The tensors, in file order.
    pub tensors: Vec<GgufTensor>,
    /// Where the data section starts.
    pub data_start: u64,
    /// The data section's alignment.
    pub alignment: u64,
    /// The header's own bytes (up to the data section).
    pub header_bytes: u64,
}

/// Why a GGUF header could not be read: one line.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Reading failed.
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    /// Not GGUF.
    #[error("not a GGUF file (it does not start with \"GGUF\")")]
    NotGguf,
    /// A version this reader does not know.
    #[error("GGUF version {0} (versions 2 and 3 are read)")]
    Version(u32),
    /// A count or size beyond reason.
    #[error("the header claims {what} {value}, more than {limit}: damaged or not GGUF")]
    TooLarge {
        /// What is counted.
        what: &'static str,
        /// The claimed figure.
        value: u64,
        /// The bound.
        limit: u64,
    },
    /// Something the format does not allow.
    #[error("{0}")]
    Invalid(String),
}

/// A reader that counts the bytes it has read. Over a local file it reads
/// ahead into its own buffer, and the header's small fields (a 90k-tensor
/// file has half a million) are copied out of it; over a remote file
/// (`ahead` empty) every read goes to the reader as asked, which fetches
/// no byte past the header.
struct Counted<R> {
    inner: R,
    at: u64,
    /// Bytes of metadata strings kept so far.
    kept: u64,
    /// Read ahead of the parser: `ahead[pos..end]`.
    ahead: Vec<u8>,
    pos: usize,
    end: usize,
}

impl<R: Read + Seek> Counted<R> {
    fn new(inner: R, read_ahead: usize) -> Self {
        Self {
            inner,
            at: 0,
            kept: 0,
            ahead: vec![0; read_ahead],
            pos: 0,
            end: 0,
        }
    }

    /// The next `n` bytes when they are already read ahead (consumed).
    #[inline]
    fn take_buffered(&mut self, n: usize) -> Option<&[u8]> {
        let start = self.pos;
        let taken = self.ahead.get(start..self.end)?.get(..n)?;
        self.pos = start + n;
        self.at += n as u64;
        Some(taken)
    }

    /// Fills `buf`, counting it; a header that ends early says where.
    #[inline]
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), GgufError> {
        if let Some(ready) = self.take_buffered(buf.len()) {
            buf.copy_from_slice(ready);
            return Ok(());
        }
        self.fill_from_inner(buf)
    }

    /// [`Counted::fill`] when the bytes are not all read ahead.
    #[cold]
    fn fill_from_inner(&mut self, buf: &mut [u8]) -> Result<(), GgufError> {
        let early = |at: u64, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                GgufError::Invalid(format!("the header ends early, at byte {at}"))
            }
            _ => GgufError::Io(e),
        };
        let buffered = self.ahead.get(self.pos..self.end).unwrap_or_default();
        let (head, rest) = buf.split_at_mut(buffered.len().min(buf.len()));
        head.copy_from_slice(buffered.get(..head.len()).unwrap_or_default());
        (self.pos, self.end) = (0, 0);
        if rest.len() >= self.ahead.len() {
            self.inner.read_exact(rest).map_err(|e| early(self.at, e))?;
        } else {
            while self.end < rest.len() {
                let into = self.ahead.get_mut(self.end..).unwrap_or_default();
                match self.inner.read(into) {
                    Ok(0) => {
                        let eof = std::io::ErrorKind::UnexpectedEof.into();
                        return Err(early(self.at, eof));
                    }
                    Ok(k) => self.end += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(GgufError::Io(e)),
                }
            }
            rest.copy_from_slice(self.ahead.get(..rest.len()).unwrap_or_default());
            self.pos = rest.len();
        }
        self.at += buf.len() as u64;
        Ok(())
    }
    #[inline]
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut buf = [0u8; N];
        self.fill(&mut buf)?;
        Ok(buf)
    }
    #[inline]
    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    #[inline]
    /// A string's length, refused past [`MAX_STRING`] (the error says
    /// `what` it was).
    fn string_len(&mut self, what: &'static str) -> Result<u64, GgufError> {
        let len = self.u64()?;
        if len > MAX_STRING {
            return Err(GgufError::TooLarge {
                what,
                value: len,
                limit: MAX_STRING,
            });
        }
        Ok(len)
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        let step = i64::try_from(n).map_err(|_| GgufError::TooLarge {
            what: "a value of",
            value: n,
            limit: i64::MAX as u64,
        })?;
        let buffered = self.end - self.pos;
        match usize::try_from(n) {
            Ok(n) if n <= buffered => self.pos += n,
            _ => {
                (self.pos, self.end) = (0, 0);
                // `n` is past what is buffered (at most the buffer's size).
                let buffered = i64::try_from(buffered).unwrap_or(0);
                self.inner.seek_relative(step - buffered)?;
            }
        }
        self.at += n;
        Ok(())
    }
    /// A metadata string: whole up to [`STRING_KEPT`] bytes while the
    /// header's budget lasts, else its first bytes and its length.
    fn meta_string(&mut self) -> Result<MetaValue, GgufError> {
        let len = self.string_len("a string of")?;
        let room = STRINGS_KEPT_IN_ALL.saturating_sub(self.kept);
        let keep = len.min(STRING_KEPT as u64).min(room);
        let mut buf = vec![0u8; usize::try_from(keep).unwrap_or(0)];
        if let Some(ready) = self.take_buffered(buf.len()) {
            buf.copy_from_slice(ready);
        } else {
            self.fill(&mut buf)?;
        }
        self.kept += keep;
        self.skip(len - keep)?;
        if keep == len {
            return Ok(MetaValue::Str(String::from_utf8(buf).unwrap_or_else(
                |bad| String::from_utf8_lossy(bad.as_bytes()).into_owned(),
            )));
        }
        // Cut at a character's start, never inside one.
        let text = match std::str::from_utf8(&buf) {
            Ok(text) => text.to_owned(),
            Err(e) if e.error_len().is_none() => {
                String::from_utf8_lossy(&buf[..e.valid_up_to()]).into_owned()
            }
            Err(_) => String::from_utf8_lossy(&buf).into_owned(),
        };
        Ok(MetaValue::Cut {
            prefix: text,
            bytes: len,
        })
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len = usize::try_from(self.string_len(what)?).unwrap_or(0);
        let buf = if let Some(ready) = self.take_buffered(len) {
            ready.to_vec()
        } else {
            let mut buf = vec![0u8; len];
            self.fill(&mut buf)?;
            buf
        };
        // Valid text (nearly always) is kept as read, without a copy.
        Ok(String::from_utf8(buf)
            .unwrap_or_else(|bad| String::from_utf8_lossy(bad.as_bytes()).into_owned()))
    }
}

/// A metadata value type's name and, for fixed-size ones, its size.
fn value_type(kind: u32) -> Option<(&'static str, Option<u64>)> {
    Some(match kind {
        0 => ("u8", Some(1)),
        1 => ("i8", Some(1)),
        2 => ("u16", Some(2)),
        3 => ("i16", Some(2)),
        4 => ("u32", Some(4)),
        5 => ("i32", Some(4)),
        6 => ("f32", Some(4)),
        7 => ("bool", Some(1)),
        8 => ("string", None),
        9 => ("array", None),
        10 => ("u64", Some(8)),
        11 => ("i64", Some(8)),
        12 => ("f64", Some(8)),
        _ => return None,
    })
}

fn scalar<R: Read + Seek>(r: &mut Counted<R>, kind: u32) -> Result<MetaValue, GgufError> {
    Ok(match kind {
        0 => MetaValue::Int(i128::from(r.bytes::<1>()?[0])),
        1 => MetaValue::Int(i128::from(i8::from_le_bytes(r.bytes()?))),
        2 => MetaValue::Int(i128::from(u16::from_le_bytes(r.bytes()?))),
        3 => MetaValue::Int(i128::from(i16::from_le_bytes(r.bytes()?))),
        4 => MetaValue::Int(i128::from(r.u32()?)),
        5 => MetaValue::Int(i128::from(i32::from_le_bytes(r.bytes()?))),
        6 => MetaValue::F32(f32::from_le_bytes(r.bytes()?)),
        7 => MetaValue::Bool(r.bytes::<1>()?[0] != 0),
        8 => r.meta_string()?,
        10 => MetaValue::Int(i128::from(r.u64()?)),
        11 => MetaValue::Int(i128::from(i64::from_le_bytes(r.bytes()?))),
        12 => MetaValue::Float(f64::from_le_bytes(r.bytes()?)),
        other => {
            return Err(GgufError::Invalid(format!(
                "unknown metadata value type {other} at byte {}",
                r.at
            )));
        }
    })
}

fn value<R: Read + Seek>(r: &mut Counted<R>, kind: u32) -> Result<MetaValue, GgufError> {
    if kind != 9 {
        return scalar(r, kind);
    }
    let element = r.u32()?;
    let len = r.u64()?;
    let Some((name, size)) = value_type(element) else {
        return Err(GgufError::Invalid(format!(
            "unknown array element type {element} at byte {}",
            r.at
        )));
    };
    if element == 9 {
        return Err(GgufError::Invalid(
            "an array of arrays (gguf-py writes none)".to_owned(),
        ));
    }
    let mut first = Vec::new();
    let shown = usize::try_from(len)
        .unwrap_or(usize::MAX)
        .min(ARRAY_PREVIEW);
    for _ in 0..shown {
        first.push(scalar(r, element)?);
    }
    let rest = len - shown as u64;
    match size {
        Some(bytes) => r.skip(rest.checked_mul(bytes).ok_or(GgufError::TooLarge {
            what: "an array of",
            value: len,
            limit: u64::MAX / bytes,
        })?)?,
        None => {
            // Strings: each one's length, then its bytes.
            for _ in 0..rest {
                let n = r.string_len("a string of")?;
                r.skip(n)?;
            }
        }
    }
    Ok(MetaValue::Array {
        element: name,
        len,
        first,
    })
}

/// Whether reading `data` through a read-ahead buffer of `read_ahead`
/// bytes (as local files are read) gives what reading each field as asked
/// gives (as remote files are read): the same header or the same error.
/// For the `gguf` fuzz target and the tests.
#[doc(hidden)]
#[must_use]
pub fn read_ahead_agrees(data: &[u8], read_ahead: usize) -> bool {
    let asked = GgufHeader::from_reader(std::io::Cursor::new(data));
    let ahead = GgufHeader::from_counted(Counted::new(std::io::Cursor::new(data), read_ahead));
    match (asked, ahead) {
        // Compared as printed: a NaN read from the same bytes is not `==`.
        (Ok(a), Ok(b)) => format!("{a:?}") == format!("{b:?}"),
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

impl GgufHeader {
    /// Reads the header of the GGUF file at `path`.
    ///
    /// # Errors
    /// When the file cannot be read or is not a GGUF file this reader
    /// understands (one line).
    pub fn read(path: &Path) -> Result<Self, GgufError> {
        // A FIFO or a device is refused before it is opened: never a hang.
        let (file, meta) =
            crate::files::open_regular(path).map_err(|e| GgufError::Invalid(e.reason()))?;
        let header = Self::from_counted(Counted::new(file, 1 << 16))?;
        header.fits(meta.len())?;
        Ok(header)
    }

    /// Checks that every tensor ends within a file of `file_bytes` bytes.
    ///
    /// # Errors
    /// The first tensor past the end (a truncated file), in one line.
    pub fn fits(&self, file_bytes: u64) -> Result<(), GgufError> {
        match self
            .tensors
            .iter()
            .find(|t| t.offset.saturating_add(t.bytes) > file_bytes)
        {
            Some(t) => Err(GgufError::Invalid(format!(
                "tensor `{}` ends at byte {}, past the end of the file ({file_bytes} bytes): truncated",
                t.name,
                t.offset.saturating_add(t.bytes)
            ))),
            None => Ok(()),
        }
    }

    /// Reads a header from `reader`, positioned at the file's start.
    ///
    /// # Errors
    /// As [`Self::read`].
    pub fn from_reader<R: Read + Seek>(reader: R) -> Result<Self, GgufError> {
        Self::from_counted(Counted::new(reader, 0))
    }

    /// [`Self::from_reader`] through `r`.
    fn from_counted<R: Read + Seek>(mut r: Counted<R>) -> Result<Self, GgufError> {
        if &r.bytes::<4>()? != MAGIC {
            return Err(GgufError::NotGguf);
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version(version));
        }
        let tensor_count = r.u64()?;
        let key_count = r.u64()?;
        for (what, value, limit) in [
            ("tensors:", tensor_count, MAX_TENSORS),
            ("metadata keys:", key_count, MAX_KEYS),
        ] {
            if value > limit {
                return Err(GgufError::TooLarge { what, value, limit });
            }
        }
        let metadata = read_metadata(&mut r, key_count)?;
        let alignment = metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| match v {
                MetaValue::Int(n) => u64::try_from(*n).ok(),
                _ => None,
            })
            .unwrap_or(32);
        let aligned = alignment != 0 && alignment.is_power_of_two();
        // Room for the count claimed, up to a bound a damaged count cannot
        // turn into a large allocation.
        let mut tensors =
            Vec::with_capacity(usize::try_from(tensor_count).unwrap_or(0).min(1 << 17));
        // Each entry is checked as it is read, but a bad one is reported
        // only once the whole list has been read (a file cut short says so
        // first) and the alignment found good.
        let mut first_bad = None;
        let mut names = foldhash::HashSet::default();
        for _ in 0..tensor_count {
            let name = r.string("a tensor name of")?;
            if !names.insert(name.clone()) && first_bad.is_none() {
                first_bad = Some(GgufError::Invalid(format!(
                    "tensor `{name}` appears twice (llama.cpp refuses such a file)"
                )));
            }
            let dims = r.u32()?;
            if dims > MAX_DIMS {
                return Err(GgufError::Invalid(format!(
                    "tensor `{name}` has {dims} dimensions (at most {MAX_DIMS})"
                )));
            }
            let mut ne = GgufShape::new();
            for _ in 0..dims {
                ne.push(r.u64()?);
            }
            let type_id = r.u32()?;
            let offset = r.u64()?;
            ne.reverse();
            if !aligned || first_bad.is_some() {
                continue;
            }
            match tensor_entry(name, type_id, ne, offset, alignment) {
                Ok(tensor) => tensors.push(tensor),
                Err(err) => first_bad = Some(err),
            }
        }
        if !aligned {
            return Err(GgufError::Invalid(format!(
                "general.alignment {alignment} is not a power of two"
            )));
        }
        if let Some(err) = first_bad {
            return Err(err);
        }
        let header_bytes = r.at;
        let data_start = header_bytes.next_multiple_of(alignment);
        // Offsets were read from the data section's start.
        for t in &mut tensors {
            t.offset = data_start.saturating_add(t.offset);
        }
        Ok(Self {
            version,
            metadata,
            tensors,
            data_start,
            alignment,
            header_bytes,
        })
    }
}

/// The key-values of a header: each key once, `general.alignment` a u32
/// (as llama.cpp's reader requires), strings bounded ([`STRING_KEPT`]).
fn read_metadata<R: Read + Seek>(
    r: &mut Counted<R>,
    key_count: u64,
) -> Result<Vec<(String, MetaValue)>, GgufError> {
    let mut metadata = Vec::new();
    let mut keys = foldhash::HashSet::default();
    for _ in 0..key_count {
        let key = r.string("a key of")?;
        let kind = r.u32()?;
        let Some((type_name, _)) = value_type(kind) else {
            return Err(GgufError::Invalid(format!(
                "key `{key}`: unknown value type {kind}"
            )));
        };
        // As llama.cpp's reader: the alignment is a u32 or the file is
        // refused (taken as 32, every offset would be read wrong).
        if key == "general.alignment" && kind != 4 {
            return Err(GgufError::Invalid(format!(
                "general.alignment must be of type u32, it is {type_name}"
            )));
        }
        if !keys.insert(key.clone()) {
            return Err(GgufError::Invalid(format!(
                "key `{key}` appears twice (llama.cpp and gguf-py refuse such a file)"
            )));
        }
        metadata.push((key, value(r, kind)?));
    }
    Ok(metadata)
}

/// A tensor's entry from its header fields: its bytes from its type's
/// blocks, its offset still from the data section's start; a row that is
/// not whole blocks, a misaligned offset or an overflowing shape is an
/// error.
fn tensor_entry(
    name: String,
    type_id: u32,
    shape: GgufShape,
    offset: u64,
    alignment: u64,
) -> Result<GgufTensor, GgufError> {
    let values = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| GgufError::Invalid(format!("tensor `{name}`: its shape overflows")))?;
    let bytes = match GgmlType::from_id(type_id) {
        Some(t) => {
            let row = shape.last().copied().unwrap_or(1);
            if !row.is_multiple_of(t.block_values) {
                return Err(GgufError::Invalid(format!(
                    "tensor `{name}`: a row of {row} values is not whole {} blocks of {}",
                    t.name, t.block_values
                )));
            }
            // Checked: an F32 tensor of 2^62+1 values must not "fit" in
            // 4 bytes.
            (values / t.block_values)
                .checked_mul(t.block_bytes)
                .ok_or_else(|| {
                    GgufError::Invalid(format!(
                        "tensor `{name}`: {values} values of {} take more bytes than a file can hold",
                        t.name
                    ))
                })?
        }
        None => 0,
    };
    if !offset.is_multiple_of(alignment) {
        return Err(GgufError::Invalid(format!(
            "tensor `{name}` starts at {offset}, not a multiple of the alignment {alignment}"
        )));
    }
    Ok(GgufTensor {
        name,
        type_id,
        shape,
        offset,
        bytes,
    })
}

impl GgufHeader {
    /// The metadata value of `key`, if present.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensors' logical values and stored bytes, all added.
    #[must_use]
    pub fn totals(&self) -> (u64, u64) {
        self.tensors.iter().fold((0, 0), |(values, bytes), t| {
            (
                values.saturating_add(t.values()),
                bytes.saturating_add(t.bytes),
            )
        })
    }

    /// What `mx.load` does with the whole file: the first tensor that makes
    /// it refuse the file, if any.
    #[must_use]
    pub fn refused_by(&self) -> Option<&GgufTensor> {
        self.tensors.iter().find(|t| {
            t.ggml_type()
                .is_none_or(|g| g.mlx_load() == MlxLoad::Refuses)
        })
    }
}

/// Whether the file at `path` is a regular file that starts with GGUF's
/// magic (a FIFO or a device is not opened: never a hang).
#[must_use]
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    crate::files::open_regular(path).is_ok_and(|(mut f, _)| f.read_exact(&mut magic).is_ok())
        && &magic == MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF v3 header's start: the magic, the version, the counts of
    /// tensors and keys.
    fn start(tensors: u64, keys: u64) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&tensors.to_le_bytes());
        b.extend_from_slice(&keys.to_le_bytes());
        b
    }

    /// A GGUF string: its length, then its bytes.
    fn string(b: &mut Vec<u8>, s: &str) {
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    }

    /// A GGUF v3 header: a string, an array of strings longer than what is
    /// shown (skipped one by one), an array of numbers (skipped whole), and
    /// tensors with names of every length up to 40.
    fn sample() -> Vec<u8> {
        let mut b = start(41, 3);
        string(&mut b, "general.name");
        b.extend_from_slice(&8u32.to_le_bytes());
        string(&mut b, "ünï \u{1F600}");
        string(&mut b, "tokenizer.ggml.tokens");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&100u64.to_le_bytes());
        for i in 0..100 {
            string(&mut b, &"t".repeat(i % 13));
        }
        string(&mut b, "tokenizer.ggml.token_type");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&5u32.to_le_bytes());
        b.extend_from_slice(&300u64.to_le_bytes());
        b.extend(std::iter::repeat_n(7u8, 4 * 300));
        for i in 0..41u64 {
            string(&mut b, &"n".repeat(usize::try_from(i).expect("small")));
            b.extend_from_slice(&2u32.to_le_bytes());
            b.extend_from_slice(&32u64.to_le_bytes());
            b.extend_from_slice(&(i + 1).to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&(i * 32 * 41 * 4).to_le_bytes());
        }
        b
    }

    /// A GGUF v3 header of `keys` (key, type id, value bytes) and tensors
    /// named `names` (one F32 value each, 32 bytes apart).
    fn handmade(keys: &[(&str, u32, Vec<u8>)], names: &[&str]) -> Vec<u8> {
        let mut b = start(names.len() as u64, keys.len() as u64);
        for (key, kind, value) in keys {
            string(&mut b, key);
            b.extend_from_slice(&kind.to_le_bytes());
            b.extend_from_slice(value);
        }
        for (i, name) in names.iter().enumerate() {
            string(&mut b, name);
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&1u64.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&(i as u64 * 32).to_le_bytes());
        }
        b
    }

    fn string_value(text: &[u8]) -> Vec<u8> {
        let mut v = (text.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(text);
        v
    }

    fn read(data: &[u8]) -> Result<GgufHeader, GgufError> {
        for read_ahead in [0, 7, 4096] {
            assert!(
                read_ahead_agrees(data, read_ahead),
                "read ahead {read_ahead}"
            );
        }
        GgufHeader::from_reader(std::io::Cursor::new(data))
    }

    #[test]
    fn a_tensor_or_a_key_named_twice_is_refused() {
        let err = read(&handmade(&[], &["a", "b", "a"])).expect_err("twice");
        assert!(
            err.to_string().contains("tensor `a` appears twice"),
            "{err}"
        );
        let one = 7u32.to_le_bytes().to_vec();
        let err =
            read(&handmade(&[("k", 4, one.clone()), ("k", 4, one)], &["a"])).expect_err("twice");
        assert!(err.to_string().contains("key `k` appears twice"), "{err}");
    }

    #[test]
    fn an_alignment_that_is_not_a_u32_is_refused_as_llama_cpp_refuses_it() {
        for (kind, value, named) in [
            (5, 64i32.to_le_bytes().to_vec(), "i32"),
            (10, 64u64.to_le_bytes().to_vec(), "u64"),
            (8, string_value(b"64"), "string"),
        ] {
            let err = read(&handmade(&[("general.alignment", kind, value)], &["a"]))
                .expect_err("not u32");
            assert!(
                err.to_string().contains(&format!(
                    "general.alignment must be of type u32, it is {named}"
                )),
                "{err}"
            );
        }
        let header = read(&handmade(
            &[("general.alignment", 4, 64u32.to_le_bytes().to_vec())],
            &["a"],
        ))
        .expect("a u32");
        assert_eq!(header.alignment, 64);
    }

    #[test]
    fn long_strings_keep_their_first_bytes_and_say_their_length() {
        let long = "é".repeat(STRING_KEPT); // twice STRING_KEPT bytes
        let header = read(&handmade(
            &[("tokenizer.chat_template", 8, string_value(long.as_bytes()))],
            &["a"],
        ))
        .expect("valid");
        match &header.metadata[0].1 {
            MetaValue::Cut { prefix, bytes } => {
                assert_eq!(*bytes, 2 * STRING_KEPT as u64);
                assert_eq!(prefix.len(), STRING_KEPT, "whole characters, to the limit");
                assert!(prefix.chars().all(|c| c == 'é'));
            }
            other => panic!("{other:?}"),
        }
        // Past the budget for the whole header, strings keep no text: 1,100
        // strings of 16 KiB keep 16 MiB, not 17.
        let big = vec![b'x'; STRING_KEPT];
        let keys: Vec<(String, u32, Vec<u8>)> = (0..1100)
            .map(|i| (format!("k{i}"), 8, string_value(&big)))
            .collect();
        let keys: Vec<(&str, u32, Vec<u8>)> = keys
            .iter()
            .map(|(k, t, v)| (k.as_str(), *t, v.clone()))
            .collect();
        let header = read(&handmade(&keys, &["a"])).expect("valid");
        let kept: usize = header
            .metadata
            .iter()
            .map(|(_, v)| match v {
                MetaValue::Str(s) => s.len(),
                MetaValue::Cut { prefix, .. } => prefix.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(kept as u64, STRINGS_KEPT_IN_ALL);
        assert!(matches!(
            &header.metadata[1099].1,
            MetaValue::Cut { prefix, bytes } if prefix.is_empty() && *bytes == STRING_KEPT as u64
        ));
    }

    #[test]
    fn reading_ahead_reads_what_reading_as_asked_reads() {
        let data = sample();
        let header = GgufHeader::from_reader(std::io::Cursor::new(&data[..])).expect("valid");
        assert_eq!(header.tensors.len(), 41);
        assert_eq!(header.tensors[40].name, "n".repeat(40));
        assert_eq!(header.tensors[40].shape[..], [41, 32]);
        for read_ahead in [1, 2, 3, 5, 8, 13, 64, 4096] {
            assert!(
                read_ahead_agrees(&data, read_ahead),
                "read ahead {read_ahead}"
            );
            // Cut anywhere: the same error.
            for end in (0..data.len()).step_by(7) {
                assert!(
                    read_ahead_agrees(&data[..end], read_ahead),
                    "{read_ahead}, cut at {end}"
                );
            }
        }
    }
}
