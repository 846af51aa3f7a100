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
pub(super) fn scan(text: &str) -> Option<ScannedHeader<'_>> {
    let mut s = Scanner {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
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
                tensors.push(s.tensor(key, &mut dims)?);
            }
            if s.eat(b'}') {
                break;
            }
            s.expect(b',')?;
        }
    }
    s.skip_space();
    (s.at == s.bytes.len()).then_some(ScannedHeader {
        metadata,
        tensors,
        dims,
    })
}

/// A value of an index's `metadata`, as scanned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum MetaValue {
    Text(String),
    Nat(u64),
}

/// What an index scan returns besides the pairs: `metadata`, if present.
pub(super) struct ScannedIndex {
    pub metadata: Option<BTreeMap<String, MetaValue>>,
}

/// Scans an index `{"metadata": {..}, "weight_map": {"tensor": "file", ..}}`
/// (either order, each at most once, `weight_map` required), handing each
/// `weight_map` pair to `pair` in file order (90k pairs are not collected
/// twice) and returning `metadata` (a repeated key keeps its last value).
/// `None` when the text is not in that shape; `pair` may have been called.
pub(super) fn scan_index<'a>(
    text: &'a str,
    mut pair: impl FnMut(&'a str, &'a str),
) -> Option<ScannedIndex> {
    let mut s = Scanner {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let mut metadata = None;
    let mut weight_map = false;
    s.expect(b'{')?;
    loop {
        let key = s.string()?;
        s.expect(b':')?;
        match key {
            "metadata" if metadata.is_none() => {
                let mut map = BTreeMap::new();
                s.expect(b'{')?;
                if !s.eat(b'}') {
                    loop {
                        let key = s.string()?;
                        s.expect(b':')?;
                        s.skip_space();
                        let value = if s.bytes.get(s.at) == Some(&b'"') {
                            MetaValue::Text(s.string()?.to_owned())
                        } else {
                            MetaValue::Nat(s.natural()?)
                        };
                        map.insert(key.to_owned(), value);
                        if s.eat(b'}') {
                            break;
                        }
                        s.expect(b',')?;
                    }
                }
                metadata = Some(map);
            }
            "weight_map" if !weight_map => {
                s.expect(b'{')?;
                if !s.eat(b'}') {
                    loop {
                        let name = s.string()?;
                        s.expect(b':')?;
                        pair(name, s.string()?);
                        if s.eat(b'}') {
                            break;
                        }
                        s.expect(b',')?;
                    }
                }
                weight_map = true;
            }
            _ => return None,
        }
        if s.eat(b'}') {
            break;
        }
        s.expect(b',')?;
    }
    s.skip_space();
    (s.at == s.bytes.len() && weight_map).then_some(ScannedIndex { metadata })
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Skips white space, then consumes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        let found = self.bytes.get(self.at) == Some(&byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        let len = crate::units::json_plain_run(self.bytes.get(start..)?);
        let end = start + len;
        if self.bytes.get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        // Both ends sit next to ASCII bytes, so they are char boundaries.
        self.text.get(start..end)
    }

    /// A JSON integer in `0..=u64::MAX` written without sign, fraction or
    /// exponent.
    fn natural(&mut self) -> Option<u64> {
        self.skip_space();
        let rest = self.bytes.get(self.at..)?;
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

    /// `[start, end]` with `start <= end`, without a heap list.
    fn offsets(&mut self) -> Option<(u64, u64)> {
        self.expect(b'[')?;
        let start = self.natural()?;
        self.expect(b',')?;
        let end = self.natural()?;
        self.expect(b']')?;
        (start <= end).then_some((start, end))
    }

    /// Consumes `literal` if the input continues with exactly it.
    fn literal(&mut self, literal: &[u8]) -> bool {
        let found = self
            .bytes
            .get(self.at..)
            .is_some_and(|rest| rest.starts_with(literal));
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

    /// `{"dtype": .., "shape": [..], "data_offsets": [..]}` in any order,
    /// each field exactly once and no other.
    fn tensor(&mut self, name: &'a str, dims: &mut Vec<u64>) -> Option<ScannedTensor<'a>> {
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
                "data_offsets" if data_offsets.is_none() => data_offsets = Some(self.offsets()?),
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
            r#" { "__metadata__" : {"format":"pt","format":"mlx"},
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
        let empty = scan("{}").expect("scanned");
        assert!(empty.tensors.is_empty() && empty.metadata.is_empty());
    }

    #[test]
    fn an_unknown_dtype_is_kept_for_the_error() {
        let header =
            scan(r#"{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#).expect("scanned");
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
            assert_eq!(scan(text), None, "{text}");
        }
    }
}
