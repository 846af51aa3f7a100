//! The tensor filter's language, one for the window's table, the palette
//! and `inspect --filter`: words match names, and terms match what the
//! headers say.
//!
//! ```text
//! q_proj layers.3            names holding both words (any case)
//! shape:2048x7168            that shape, stored or logical (`*` any size)
//! dtype:f32  dtype:q4_k      that stored dtype or GGUF block type
//! mode:nvfp4                 quantized (or FP8-scaled) that way
//! size>100M  size<=4KiB      bytes (with a packed weight's scales)
//! ```

use std::fmt;

/// A comparison of `size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    Less,
    LessOrEqual,
    Equal,
    GreaterOrEqual,
    Greater,
}

impl Compare {
    fn holds(self, value: u64, bound: u64) -> bool {
        match self {
            Self::Less => value < bound,
            Self::LessOrEqual => value <= bound,
            Self::Equal => value == bound,
            Self::GreaterOrEqual => value >= bound,
            Self::Greater => value > bound,
        }
    }
}

/// One term besides the name's words.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    /// Each axis's size, `None` for `*`.
    Shape(Vec<Option<u64>>),
    /// A dtype or GGUF block type name, lower case.
    Dtype(String),
    /// A quantization mode (`affine`, `mxfp4`, `nvfp4`, `mxfp8`, `fp8`…),
    /// lower case.
    Mode(String),
    /// Bytes compared with a bound.
    Size(Compare, u64),
}

/// Why a filter cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// `shape:` followed by something that is not sizes joined by `x`.
    #[error("`{0}`: a shape is sizes joined by x, as shape:2048x7168 (* for any)")]
    Shape(String),
    /// `size` with no comparison or a size that cannot be read.
    #[error("`{0}`: a size is compared as size>100M, size<=4KiB or size=1024")]
    Size(String),
    /// A term with nothing after its colon.
    #[error("`{0}` needs a value after the colon")]
    Empty(String),
}

/// A parsed filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TensorQuery {
    words: Vec<String>,
    terms: Vec<Term>,
}

/// What the filter reads of one tensor.
#[derive(Debug, Clone, Copy, Default)]
pub struct TensorFacts<'a> {
    /// Its names: the stored one and, under a view, the canonical one.
    pub names: [Option<&'a str>; 2],
    /// Its stored dtype's name (`F32`, `BF16`, `Q4_K`).
    pub dtype: &'a str,
    /// Its stored shape, and its logical one when it is packed.
    pub shapes: [Option<&'a [u64]>; 2],
    /// Its bytes (a packed weight's with its scales and biases).
    pub bytes: u64,
    /// How it is quantized or scaled (`affine`, `nvfp4`, `fp8`), if it is.
    pub mode: Option<&'a str>,
}

impl TensorQuery {
    /// Reads `text`: whitespace-separated words and terms.
    ///
    /// # Errors
    /// A term that cannot be read, named.
    pub fn parse(text: &str) -> Result<Self, QueryError> {
        let mut query = Self::default();
        for token in text.split_whitespace() {
            let lower = token.to_lowercase();
            // `size` followed by a comparison ("sizes" stays a word).
            if let Some(rest) = lower
                .strip_prefix("size")
                .filter(|rest| rest.starts_with(['>', '<', '=', ':']))
            {
                query.terms.push(size_term(token, rest)?);
            } else if let Some(rest) = lower.strip_prefix("shape:") {
                query.terms.push(shape_term(token, rest)?);
            } else if let Some(rest) = lower.strip_prefix("dtype:") {
                query
                    .terms
                    .push(Term::Dtype(nonempty(token, rest)?.to_owned()));
            } else if let Some(rest) = lower.strip_prefix("mode:") {
                query
                    .terms
                    .push(Term::Mode(nonempty(token, rest)?.to_owned()));
            } else {
                query.words.push(lower);
            }
        }
        Ok(query)
    }

    /// Whether it keeps everything.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.terms.is_empty()
    }

    /// Whether it has terms besides words (the palette ranks by the words
    /// the tensors the terms keep).
    #[must_use]
    pub fn has_terms(&self) -> bool {
        !self.terms.is_empty()
    }

    /// The words, lower case, joined by a space (what a name is ranked by).
    #[must_use]
    pub fn words_text(&self) -> String {
        self.words.join(" ")
    }

    /// Whether the tensor passes every term and holds every word in one of
    /// its names.
    #[must_use]
    pub fn matches(&self, facts: &TensorFacts<'_>) -> bool {
        self.matches_terms(facts)
            && self.words.iter().all(|word| {
                facts
                    .names
                    .iter()
                    .flatten()
                    .any(|name| contains_ignoring_case(name, word))
            })
    }

    /// Whether the tensor passes every term (its name aside).
    #[must_use]
    pub fn matches_terms(&self, facts: &TensorFacts<'_>) -> bool {
        self.terms.iter().all(|term| match term {
            Term::Shape(axes) => facts.shapes.iter().flatten().any(|shape| {
                shape.len() == axes.len()
                    && shape
                        .iter()
                        .zip(axes)
                        .all(|(&d, want)| want.is_none_or(|w| w == d))
            }),
            Term::Dtype(dtype) => facts.dtype.eq_ignore_ascii_case(dtype),
            Term::Mode(mode) => facts.mode.is_some_and(|m| {
                m.split_whitespace().next().is_some_and(|first| {
                    first.eq_ignore_ascii_case(mode)
                        // FP8 weights say their format ("e4m3 128x128").
                        || (mode == "fp8" && (first.starts_with("e4m3") || first.starts_with("e5m2")))
                })
            }),
            Term::Size(compare, bound) => compare.holds(facts.bytes, *bound),
        })
    }
}

impl fmt::Display for TensorQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.words_text())
    }
}

fn nonempty<'a>(token: &str, rest: &'a str) -> Result<&'a str, QueryError> {
    if rest.is_empty() {
        Err(QueryError::Empty(token.to_owned()))
    } else {
        Ok(rest)
    }
}

fn shape_term(token: &str, rest: &str) -> Result<Term, QueryError> {
    let axes: Option<Vec<Option<u64>>> = nonempty(token, rest)?
        .split('x')
        .map(|axis| match axis {
            "*" => Some(None),
            digits => digits.parse::<u64>().ok().map(Some),
        })
        .collect();
    axes.map(Term::Shape)
        .ok_or_else(|| QueryError::Shape(token.to_owned()))
}

fn size_term(token: &str, rest: &str) -> Result<Term, QueryError> {
    let (compare, bound) = if let Some(b) = rest.strip_prefix(">=") {
        (Compare::GreaterOrEqual, b)
    } else if let Some(b) = rest.strip_prefix("<=") {
        (Compare::LessOrEqual, b)
    } else if let Some(b) = rest.strip_prefix('>') {
        (Compare::Greater, b)
    } else if let Some(b) = rest.strip_prefix('<') {
        (Compare::Less, b)
    } else if let Some(b) = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':')) {
        (Compare::Equal, b)
    } else {
        return Err(QueryError::Size(token.to_owned()));
    };
    crate::units::parse_size(bound)
        .map(|bytes| Term::Size(compare, bytes))
        .ok_or_else(|| QueryError::Size(token.to_owned()))
}

/// Whether `text` holds `lower` (already lower case) ignoring case,
/// without a lower-case copy of a name that has no capital letter (most
/// tensor names: a keystroke filters 90k of them).
fn contains_ignoring_case(text: &str, lower: &str) -> bool {
    if text.is_ascii() && !text.bytes().any(|b| b.is_ascii_uppercase()) {
        text.contains(lower)
    } else {
        text.to_lowercase().contains(lower)
    }
}

#[cfg(test)]
mod tests {
    use super::{QueryError, TensorFacts, TensorQuery};

    fn facts<'a>(name: &'a str, dtype: &'a str, shape: &'a [u64], bytes: u64) -> TensorFacts<'a> {
        TensorFacts {
            names: [Some(name), None],
            dtype,
            shapes: [Some(shape), None],
            bytes,
            mode: None,
        }
    }

    #[test]
    fn words_and_terms_together() {
        let q = TensorQuery::parse("q_proj shape:2048x7168 dtype:BF16 size>10M").expect("reads");
        let hit = facts(
            "model.layers.3.self_attn.q_proj.weight",
            "BF16",
            &[2048, 7168],
            29_360_128,
        );
        assert!(q.matches(&hit));
        assert!(!q.matches(&facts(
            "model.layers.3.k_proj.weight",
            "BF16",
            &[2048, 7168],
            29_360_128
        )));
        assert!(!q.matches(&facts("q_proj", "F32", &[2048, 7168], 58_720_256)));
        assert!(!q.matches(&facts("q_proj", "BF16", &[7168, 2048], 29_360_128)));
        assert!(!q.matches(&facts("q_proj", "BF16", &[2048, 7168], 1024)));
    }

    #[test]
    fn shapes_have_wildcards_and_match_the_logical_shape_too() {
        let q = TensorQuery::parse("shape:*x7168").expect("reads");
        assert!(q.matches(&facts("w", "F32", &[5, 7168], 4)));
        assert!(!q.matches(&facts("w", "F32", &[7168], 4)));
        let packed = TensorFacts {
            shapes: [Some(&[2048, 896]), Some(&[2048, 7168])],
            mode: Some("nvfp4 4-bit g16"),
            ..facts("w", "U32", &[], 4)
        };
        assert!(q.matches(&packed));
        assert!(
            TensorQuery::parse("mode:nvfp4")
                .expect("reads")
                .matches(&packed)
        );
        assert!(
            !TensorQuery::parse("mode:affine")
                .expect("reads")
                .matches(&packed)
        );
    }

    #[test]
    fn sizes_read_units_and_every_comparison() {
        let kib = facts("w", "F32", &[256], 1024);
        for (text, holds) in [
            ("size>1000", true),
            ("size>=1KiB", true),
            ("size<1K", false),
            ("size<=1KiB", true),
            ("size=1024", true),
            ("size:1024", true),
            ("size>1M", false),
        ] {
            let q = TensorQuery::parse(text).expect("reads");
            assert_eq!(q.matches(&kib), holds, "{text}");
        }
    }

    #[test]
    fn a_term_that_cannot_be_read_is_named() {
        assert!(
            matches!(TensorQuery::parse("shape:2048by7168"), Err(QueryError::Shape(t)) if t == "shape:2048by7168")
        );
        assert!(TensorQuery::parse("size=5 apples").is_ok());
        assert!(matches!(
            TensorQuery::parse("size=5Q"),
            Err(QueryError::Size(_))
        ));
        assert!(matches!(
            TensorQuery::parse("size>lots"),
            Err(QueryError::Size(_))
        ));
        assert!(matches!(
            TensorQuery::parse("dtype:"),
            Err(QueryError::Empty(_))
        ));
        assert!(TensorQuery::parse("").expect("empty").is_empty());
    }
}
