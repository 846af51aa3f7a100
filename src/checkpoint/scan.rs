//! A direct scanner for the common shape of safetensors headers.
//!
//! Nearly every header is a flat object of tensor entries written by a
//! program: `{"name":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},..}`
//! with plain strings, non-negative integers and perhaps a `__metadata__`
//! object of strings. This scanner reads exactly that into the same raw form
//! the `serde_json` path builds, a few times faster. It never decides that a
//! header is bad: on anything else (an escape in a string, a float, a
//! negative number, an unknown or repeated field, `null` metadata, a syntax
//! error) it gives up and the caller parses with `serde_json`, which then
//! produces the result or the precise error. So the scanner only has to be
//! right about what it accepts; the `header` fuzz target checks that it
//! agrees with the `serde_json` path on every input it accepts.

use std::collections::BTreeMap;

use super::dtype::Dtype;

/// One tensor entry as scanned (not yet validated), borrowing the text.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ScannedTensor<'a> {
    pub name: &'a str,
    pub dtype: Result<Dtype, &'a str>,
    /// Where its dimensions are in [`ScannedHeader::dims`].
    pub shape: std::ops::Range<usize>,
    /// Exactly two, ascending (anything else is left to `serde_json`).
    pub data_offsets: (u64, u64),
}

/// A header as scanned: `__metadata__` and the tensor entries in file order,
/// with every shape's dimensions in one list (no allocation per tensor).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ScannedHeader<'a> {
    pub metadata: BTreeMap<String, String>,
    pub tensors: Vec<ScannedTensor<'a>>,
    pub dims: Vec<u64>,
}

impl ScannedHeader<'_> {
    /// The dimensions of `tensor`.
    pub fn shape(&self, tensor: &ScannedTensor<'_>) -> &[u64] {
        self.dims.get(tensor.shape.clone()).unwrap_or_default()
    }
}

/// Scans `text`; `None` when it is not in the common shape.
pub(super) fn scan(text: &[u8]) -> Option<ScannedHeader<'_>> {
    // Checked whole, once: a header is mostly ASCII, which the check passes
    // a word at a time, where checking each name took a call per string.
    let text = std::str::from_utf8(text).ok()?;
    let mut s = Scanner { text, at: 0 };
    let mut seen = SeenFields::default();
    let mut metadata = BTreeMap::new();
    // A typical entry takes 80-120 bytes of JSON (the first guess is capped:
    // a header of padding alone must not reserve much).
    let mut tensors = Vec::with_capacity((text.len() / 96).min(1 << 12));
    let mut dims = Vec::with_capacity((text.len() / 48).min(1 << 13));
    s.expect(b'{')?;
    if !s.eat(b'}') {
        loop {
            let key = s.string()?;
            s.expect(b':')?;
            if key == "__metadata__" {
                metadata = s.string_map()?;
            } else {
                tensors.push(s.tensor(key, &mut dims, &mut seen)?);
            }
            if s.eat(b'}') {
                break;
            }
            s.expect(b',')?;
        }
    }
    s.skip_space();
    (s.at == s.text.len()).then_some(ScannedHeader {
        metadata,
        tensors,
        dims,
    })
}

/// The text of recent entries up to their offsets,
/// `{"dtype":"F8_E4M3","shape":[2048,7168],"data_offsets":`, with what it
/// scanned to. A header repeats a few of these thousands of times (every
/// expert's projections, every layer's norms), so an entry that starts with
/// one of them byte for byte is the same dtype and shape without scanning
/// them again: only its name and offsets are new.
#[derive(Default)]
struct SeenFields<'a> {
    recent: [Option<Seen<'a>>; SeenFields::KEPT],
    /// Where the next new one goes (oldest first out).
    next: usize,
    /// The last entry's end offset, as written and as read: in a header in
    /// data order, the next entry starts there.
    last_end: Option<(&'a [u8], u64)>,
}

/// See [`SeenFields`].
struct Seen<'a> {
    text: &'a [u8],
    dtype: Result<Dtype, &'a str>,
    shape: std::ops::Range<usize>,
}

impl<'a> SeenFields<'a> {
    /// Enough for a block of experts (three projections and their scales
    /// in two shapes) and a layer's attention.
    const KEPT: usize = 8;

    /// The one `rest` starts with.
    fn find(&self, rest: &[u8]) -> Option<&Seen<'a>> {
        self.recent
            .iter()
            .flatten()
            .find(|seen| starts_with(rest, seen.text))
    }

    fn keep(&mut self, seen: Seen<'a>) {
        self.recent[self.next] = Some(seen);
        self.next = (self.next + 1) % Self::KEPT;
    }
}

/// Whether `rest` starts with `text`, compared a word at a time in line:
/// the scanner asks this of a few short texts per entry, where a call to
/// `memcmp` costs more than the comparison.
#[inline]
fn starts_with(rest: &[u8], text: &[u8]) -> bool {
    let Some(head) = rest.get(..text.len()) else {
        return false;
    };
    let word = |bytes: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(bytes);
        u64::from_ne_bytes(w)
    };
    let mut ours = head.chunks_exact(8);
    let mut theirs = text.chunks_exact(8);
    if !(&mut ours)
        .zip(&mut theirs)
        .all(|(a, b)| word(a) == word(b))
    {
        return false;
    }
    ours.remainder()
        .iter()
        .zip(theirs.remainder())
        .all(|(a, b)| a == b)
}

/// A value of an index's `metadata`, as scanned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum IndexMetaValue {
    Text(String),
    Nat(u64),
}

/// What an index scan returns besides the pairs: `metadata`, if present.
pub(super) struct ScannedIndex {
    pub metadata: Option<BTreeMap<String, IndexMetaValue>>,
}

/// Scans an index `{"metadata": {..}, "weight_map": {"tensor": "file", ..}}`
/// (either order, each at most once, `weight_map` required) from `reader`,
/// holding at most about `piece` bytes of it at a time (more only when one
/// entry is longer): a 90k-entry index is 8 MB of text, and reading it
/// whole into fresh memory took longer than scanning it. Each `weight_map`
/// pair goes to `pair` in file order once the separator after it is read;
/// `metadata` is returned (a repeated key keeps its last value). `Ok(None)`
/// when the text is not in that shape; `pair` may have been called.
///
/// # Errors
/// When `reader` fails.
pub(super) fn scan_index(
    reader: impl std::io::Read,
    piece: usize,
    mut pair: impl FnMut(&str, &str),
) -> std::io::Result<Option<ScannedIndex>> {
    let mut text = Pieces::new(reader, piece);
    let mut metadata = None;
    let mut weight_map = false;
    if text.unit(|s| s.expect(b'{'))?.is_none() {
        return Ok(None);
    }
    loop {
        // The key is copied out of the piece it was read from.
        let key = text.unit(|s| {
            let key = s.string()?;
            s.expect(b':')?;
            Some(match key {
                "metadata" => IndexKey::Metadata,
                "weight_map" => IndexKey::WeightMap,
                _ => IndexKey::Other,
            })
        })?;
        match key {
            Some(IndexKey::Metadata) if metadata.is_none() => {
                // A closure: the method path would fix the scanner's lifetime.
                #[allow(clippy::redundant_closure_for_method_calls)]
                let Some(map) = text.unit(|s| s.index_metadata())? else {
                    return Ok(None);
                };
                metadata = Some(map);
            }
            Some(IndexKey::WeightMap) if !weight_map => {
                if text.unit(|s| s.expect(b'{'))?.is_none() {
                    return Ok(None);
                }
                let mut first = true;
                loop {
                    let step = text.unit(|s| {
                        let step = s.map_step(first)?;
                        if let MapStep::Pair { name, file, .. } = step {
                            pair(name, file);
                        }
                        Some(matches!(
                            step,
                            MapStep::End | MapStep::Pair { last: true, .. }
                        ))
                    })?;
                    match step {
                        None => return Ok(None),
                        Some(true) => break,
                        Some(false) => first = false,
                    }
                }
                weight_map = true;
            }
            _ => return Ok(None),
        }
        let end = text.unit(|s| {
            if s.eat(b'}') {
                Some(true)
            } else {
                s.expect(b',').map(|()| false)
            }
        })?;
        match end {
            None => return Ok(None),
            Some(true) => break,
            Some(false) => {}
        }
    }
    let done = text.only_space_left()? && weight_map;
    Ok(done.then_some(ScannedIndex { metadata }))
}

/// A top-level key of an index.
enum IndexKey {
    Metadata,
    WeightMap,
    Other,
}

/// One step through a `weight_map` object.
enum MapStep<'a> {
    /// `}` right after `{`: an empty map.
    End,
    /// `"name":"file"` and the `,` after it (`last: false`) or the `}`.
    Pair {
        name: &'a str,
        file: &'a str,
        last: bool,
    },
}

/// Text read a piece at a time into one buffer. A unit of the grammar is
/// scanned from what is buffered; when it fails, more is read and it is
/// scanned again, until it succeeds or the text ends. Every unit ends with a
/// delimiter it checks, so one cut short by the end of a piece (a number, a
/// string) never scans as complete. Each piece is checked to be UTF-8 as it
/// is read (a character cut by the piece's end waits for the next); at
/// bytes that are not UTF-8 the text ends there, `bad`.
struct Pieces<R> {
    reader: R,
    /// Read and checked so far, less what was consumed before the last read.
    text: String,
    /// Scanned and consumed: `text[..start]`.
    start: usize,
    /// Where each read goes; its first `pending` bytes are the start of a
    /// character cut by the previous read's end.
    read_buf: Vec<u8>,
    pending: usize,
    eof: bool,
    /// The text has bytes that are not UTF-8 (or ends inside a character).
    bad: bool,
}

impl<R: std::io::Read> Pieces<R> {
    fn new(reader: R, piece: usize) -> Self {
        Self {
            reader,
            text: String::with_capacity(piece.max(1)),
            start: 0,
            read_buf: vec![0; piece.max(4)],
            pending: 0,
            eof: false,
            bad: false,
        }
    }

    /// Runs `unit` on the text not yet consumed and consumes what it
    /// scanned; `None` when it fails on all the rest of the text.
    fn unit<T>(
        &mut self,
        mut unit: impl FnMut(&mut Scanner<'_>) -> Option<T>,
    ) -> std::io::Result<Option<T>> {
        loop {
            let mut s = Scanner {
                text: self.text.get(self.start..).unwrap_or_default(),
                at: 0,
            };
            if let Some(value) = unit(&mut s) {
                self.start += s.at;
                return Ok(Some(value));
            }
            if self.eof {
                return Ok(None);
            }
            self.read_more()?;
        }
    }

    /// Whether nothing but white space is left (reading to the end).
    fn only_space_left(&mut self) -> std::io::Result<bool> {
        loop {
            let rest = self.text.get(self.start..).unwrap_or_default();
            if !rest
                .bytes()
                .all(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
            {
                return Ok(false);
            }
            self.start = self.text.len();
            if self.eof {
                return Ok(!self.bad);
            }
            self.read_more()?;
        }
    }

    /// Drops the consumed text and appends the next piece's characters.
    fn read_more(&mut self) -> std::io::Result<()> {
        self.text.drain(..self.start);
        self.start = 0;
        let n = loop {
            match self
                .reader
                .read(self.read_buf.get_mut(self.pending..).unwrap_or_default())
            {
                Ok(n) => break n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        };
        if n == 0 {
            self.eof = true;
            // The text ended inside a character.
            self.bad |= self.pending > 0;
            return Ok(());
        }
        let read = self.read_buf.get(..self.pending + n).unwrap_or_default();
        let (good, cut) = match std::str::from_utf8(read) {
            Ok(text) => (text, 0),
            Err(err) => {
                let good = std::str::from_utf8(read.get(..err.valid_up_to()).unwrap_or_default())
                    .unwrap_or_default();
                if err.error_len().is_some() {
                    // Not UTF-8: the text ends before it.
                    self.eof = true;
                    self.bad = true;
                }
                (good, read.len() - good.len())
            }
        };
        self.text.push_str(good);
        let (from, to) = (good.len(), good.len() + cut);
        self.read_buf.copy_within(from..to, 0);
        self.pending = cut;
        Ok(())
    }
}

/// Scans text already checked to be UTF-8.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// Skips white space, then consumes `byte` if it is next.
    #[inline]
    fn eat(&mut self, byte: u8) -> bool {
        // Programs write headers without white space: `byte` is mostly next.
        if self.bytes().get(self.at) == Some(&byte) {
            self.at += 1;
            return true;
        }
        self.skip_space();
        let found = self.bytes().get(self.at) == Some(&byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// A string without escapes or control characters.
    #[inline]
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        let len = crate::units::json_plain_run(self.bytes().get(start..)?);
        let end = start + len;
        if self.bytes().get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        // Between two quotes: both ends are character boundaries.
        self.text.get(start..end)
    }

    /// A JSON integer in `0..=u64::MAX` written without sign, fraction or
    /// exponent.
    fn natural(&mut self) -> Option<u64> {
        self.skip_space();
        let rest = self.bytes().get(self.at..)?;
        let mut value = 0u64;
        let mut digits = 0;
        while let Some(digit) = rest.get(digits).map(|b| b.wrapping_sub(b'0')) {
            if digit > 9 {
                break;
            }
            value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
            digits += 1;
        }
        self.at += digits;
        // JSON forbids leading zeros; a fraction or an exponent makes a float.
        let leading_zero = digits > 1 && rest.first() == Some(&b'0');
        let float = matches!(rest.get(digits), Some(b'.' | b'e' | b'E'));
        // Nineteen digits always fit in a u64; a longer number may not.
        if digits == 0 || digits > 19 || leading_zero || float {
            return None;
        }
        Some(value)
    }

    /// `[n, n, ...]` of naturals, appended to `values`; returns where.
    fn naturals(&mut self, values: &mut Vec<u64>) -> Option<std::ops::Range<usize>> {
        self.expect(b'[')?;
        let start = values.len();
        if self.eat(b']') {
            return Some(start..start);
        }
        loop {
            values.push(self.natural()?);
            if self.eat(b']') {
                return Some(start..values.len());
            }
            self.expect(b',')?;
        }
    }

    /// `[start, end]` with `start <= end`, without a heap list. A start
    /// written as the last entry's end was (then a comma) is that number
    /// without reading it again.
    fn offsets(&mut self, seen: &mut SeenFields<'a>) -> Option<(u64, u64)> {
        self.expect(b'[')?;
        let rest = self.bytes().get(self.at..)?;
        let start = match seen.last_end {
            Some((text, value))
                if starts_with(rest, text) && rest.get(text.len()) == Some(&b',') =>
            {
                self.at += text.len();
                value
            }
            _ => self.natural()?,
        };
        self.expect(b',')?;
        self.skip_space();
        let from = self.at;
        let end = self.natural()?;
        seen.last_end = self.bytes().get(from..self.at).map(|text| (text, end));
        self.expect(b']')?;
        (start <= end).then_some((start, end))
    }

    /// Consumes `literal` if the text goes on with it (its length known at
    /// compile time: compared as a few words, not by a call to `memcmp`).
    fn literal<const N: usize>(&mut self, literal: &[u8; N]) -> bool {
        let found = self
            .bytes()
            .get(self.at..self.at + N)
            .is_some_and(|rest| rest == literal);
        if found {
            self.at += literal.len();
        }
        found
    }

    /// `{"k": "v", ...}`; a repeated key keeps its last value, as a map does.
    fn string_map(&mut self) -> Option<BTreeMap<String, String>> {
        self.expect(b'{')?;
        let mut map = BTreeMap::new();
        if self.eat(b'}') {
            return Some(map);
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            let value = self.string()?;
            map.insert(key.to_owned(), value.to_owned());
            if self.eat(b'}') {
                return Some(map);
            }
            self.expect(b',')?;
        }
    }

    /// An index's `metadata` object of strings and naturals.
    fn index_metadata(&mut self) -> Option<BTreeMap<String, IndexMetaValue>> {
        let mut map = BTreeMap::new();
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Some(map);
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            self.skip_space();
            let value = if self.bytes().get(self.at) == Some(&b'"') {
                IndexMetaValue::Text(self.string()?.to_owned())
            } else {
                IndexMetaValue::Nat(self.natural()?)
            };
            map.insert(key.to_owned(), value);
            if self.eat(b'}') {
                return Some(map);
            }
            self.expect(b',')?;
        }
    }

    /// The next step through a `weight_map` (`first`: right after its `{`).
    fn map_step(&mut self, first: bool) -> Option<MapStep<'a>> {
        if first && self.eat(b'}') {
            return Some(MapStep::End);
        }
        let name = self.string()?;
        self.expect(b':')?;
        let file = self.string()?;
        let last = if self.eat(b'}') {
            true
        } else {
            self.expect(b',')?;
            false
        };
        Some(MapStep::Pair { name, file, last })
    }

    /// `{"dtype": .., "shape": [..], "data_offsets": [..]}` in any order,
    /// each field exactly once and no other. An entry whose text up to its
    /// offsets repeats one in `seen` takes that one's dtype and shape (the
    /// same text scans to the same values, `shape` shares its dimensions);
    /// one with its offsets last is kept there.
    fn tensor(
        &mut self,
        name: &'a str,
        dims: &mut Vec<u64>,
        seen: &mut SeenFields<'a>,
    ) -> Option<ScannedTensor<'a>> {
        self.skip_space();
        let entry = self.at;
        let rest = self.bytes().get(entry..)?;
        if let Some(known) = seen.find(rest) {
            let (dtype, shape) = (known.dtype, known.shape.clone());
            self.at += known.text.len();
            let data_offsets = self.offsets(seen)?;
            self.expect(b'}')?;
            return Some(ScannedTensor {
                name,
                dtype,
                shape,
                data_offsets,
            });
        }
        self.expect(b'{')?;
        let mut dtype = None;
        let mut shape = None;
        let mut data_offsets = None;
        loop {
            // Field names as writers spell them are matched whole; any other
            // spelling (white space, escapes) goes through `string`.
            self.skip_space();
            let field = if self.literal(b"\"dtype\":") {
                "dtype"
            } else if self.literal(b"\"shape\":") {
                "shape"
            } else if self.literal(b"\"data_offsets\":") {
                "data_offsets"
            } else {
                let field = self.string()?;
                self.expect(b':')?;
                field
            };
            match field {
                "dtype" if dtype.is_none() => {
                    let text = self.string()?;
                    dtype = Some(text.parse::<Dtype>().map_err(|_| text));
                }
                "shape" if shape.is_none() => shape = Some(self.naturals(dims)?),
                "data_offsets" if data_offsets.is_none() => {
                    // The text before the offsets, once dtype and shape are
                    // read: a later entry that repeats it is read from here.
                    let before = self.bytes().get(entry..self.at);
                    if let (Some(text), Some(dtype), Some(shape)) = (before, dtype, &shape) {
                        seen.keep(Seen {
                            text,
                            dtype,
                            shape: std::ops::Range::clone(shape),
                        });
                    }
                    data_offsets = Some(self.offsets(seen)?);
                }
                _ => return None,
            }
            if self.eat(b'}') {
                break;
            }
            self.expect(b',')?;
        }
        Some(ScannedTensor {
            name,
            dtype: dtype?,
            shape: shape?,
            data_offsets: data_offsets?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_shape_is_scanned() {
        let header = scan(
            br#" { "__metadata__" : {"format":"pt","format":"mlx"},
                "a.weight":{"shape":[2, 3],"dtype":"F16","data_offsets":[0,12]},
                "b":{"dtype":"F8_E4M3","shape":[],"data_offsets":[12,13]} }   "#,
        )
        .expect("scanned");
        assert_eq!(header.metadata["format"], "mlx");
        assert_eq!(header.tensors.len(), 2);
        assert_eq!(header.tensors[0].name, "a.weight");
        assert_eq!(header.tensors[0].dtype, Ok(Dtype::F16));
        assert_eq!(header.shape(&header.tensors[0]), [2, 3]);
        assert_eq!(header.tensors[0].data_offsets, (0, 12));
        assert_eq!(header.tensors[1].dtype, Ok(Dtype::F8_E4M3));
        assert!(header.shape(&header.tensors[1]).is_empty());
        let empty = scan(b"{}").expect("scanned");
        assert!(empty.tensors.is_empty() && empty.metadata.is_empty());
    }

    #[test]
    fn naturals_are_read_as_str_parse_reads_them() {
        // Every length up to past u64's digits, each followed by what may
        // follow a number; those the scanner leaves to serde give `None`.
        let mut numbers: Vec<String> = ["0", "00", "01", "18446744073709551616"]
            .map(String::from)
            .to_vec();
        for len in 1..=21 {
            numbers.push("9".repeat(len));
            numbers.push(format!("1{}", "0".repeat(len - 1)));
            numbers.push("1234567890".chars().cycle().take(len).collect());
        }
        for end in ["", "]", ",1", ".5", "e3", "E3", "/", ":", "\u{ff}", " "] {
            for number in &numbers {
                let text = format!("{number}{end}");
                let mut s = Scanner { text: &text, at: 0 };
                let ours = s.natural();
                let digits = number.len();
                let plain = digits <= 19
                    && !(digits > 1 && number.starts_with('0'))
                    && !matches!(end.bytes().next(), Some(b'.' | b'e' | b'E'));
                let want = plain.then(|| number.parse::<u64>().ok()).flatten();
                assert_eq!(ours, want, "{text:?}");
                if ours.is_some() {
                    assert_eq!(s.at, digits, "{text:?}");
                }
            }
        }
    }

    #[test]
    fn repeated_fields_and_offsets_read_as_the_first_time() {
        // Entries that repeat an earlier entry's text up to its offsets, a
        // start written as the last end was, and ones that only look alike
        // (a longer number, another shape, white space, the fields in
        // another order): each as a scan of it alone reads it.
        let entries = [
            r#""a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}"#,
            r#""b":{"dtype":"F16","shape":[2,3],"data_offsets":[12,24]}"#,
            r#""c":{"dtype":"F16","shape":[2,3],"data_offsets":[245,257]}"#,
            r#""d":{"dtype":"F16","shape":[2,33],"data_offsets":[257,389]}"#,
            r#""e":{"dtype":"F16","shape":[2,3] ,"data_offsets":[ 389 , 401 ]}"#,
            r#""f":{"dtype":"F16","shape":[2,3],"data_offsets":[401,413] }"#,
            r#""g":{"shape":[2,3],"dtype":"F16","data_offsets":[413,425]}"#,
            r#""h":{"dtype":"F16","shape":[2,3],"data_offsets":[4130,4142]}"#,
            r#""i":{"dtype":"Q9","shape":[2,3],"data_offsets":[4142,4154]}"#,
            r#""j":{"dtype":"Q9","shape":[2,3],"data_offsets":[4154,4166]}"#,
        ];
        let whole = format!("{{{}}}", entries.join(","));
        let header = scan(whole.as_bytes()).expect("scanned");
        assert_eq!(header.tensors.len(), entries.len());
        for (entry, tensor) in entries.iter().zip(&header.tensors) {
            let alone = format!("{{{entry}}}");
            let one = scan(alone.as_bytes()).expect("scanned alone");
            let expected = &one.tensors[0];
            assert_eq!(tensor.name, expected.name);
            assert_eq!(tensor.dtype, expected.dtype, "{entry}");
            assert_eq!(header.shape(tensor), one.shape(expected), "{entry}");
            assert_eq!(tensor.data_offsets, expected.data_offsets, "{entry}");
        }
        // One that repeats a kept text and then goes wrong is declined.
        let bad = r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"b":{"dtype":"F16","shape":[1],"data_offsets":[2,4],"x":1}}"#;
        assert_eq!(scan(bad.as_bytes()), None);
    }

    #[test]
    fn an_unknown_dtype_is_kept_for_the_error() {
        let header =
            scan(br#"{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#).expect("scanned");
        assert_eq!(header.tensors[0].dtype, Err("Q4"));
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        for text in [
            "",
            "[]",
            "{",
            r#"{"a\u0062":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1.0],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1e0],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[01],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[-1],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[18446744073709551616],"data_offsets":[0,2]}}"#,
            // Twenty digits that would fit are left to serde too.
            r#"{"a":{"dtype":"F16","shape":[10000000000000000000],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2],"extra":1}}"#,
            r#"{"a":{"dtype":"F16","dtype":"F16","shape":[1],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[2,0]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2,4]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},}"#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}} x"#,
            r#"{"__metadata__":null}"#,
            r#"{"__metadata__":{"n":1}}"#,
            "{\"a\t\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}",
        ] {
            assert_eq!(scan(text.as_bytes()), None, "{text}");
        }
    }
}
