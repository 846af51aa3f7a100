//! The user view file (JSON) parsed into checked rules, in pure Rust (no MLX),
//! so the fuzzer compiles it on its own. `rules.rs` turns it into a view.

use std::path::{Path, PathBuf};

use regex::Regex;

/// What a fix-up does to a value.
#[derive(Debug, Clone, PartialEq)]
pub enum FixupOp {
    /// Add a constant (keeping the dtype).
    Add(f32),
    /// Move axis `from` to position `to`.
    MoveAxis(i32, i32),
    /// Swap two axes.
    SwapAxes(i32, i32),
    /// Cast to a dtype (safetensors name: `F16`, `BF16`, `F32`, …).
    Cast(String),
    /// Undo llama.cpp's rotary reordering of Q or K rows for this many
    /// heads (built-in views only: `convert_hf_to_gguf.py` permutes Llama's
    /// `q_proj` and `k_proj` rows within each head).
    Unpermute(i32),
}

/// Dtypes a `cast` fix-up accepts (those MLX arrays have).
pub const CAST_DTYPES: [&str; 12] = [
    "BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "BF16", "F32",
];

/// A checked rename rule.
#[derive(Debug, Clone)]
pub struct FileRename {
    /// Regex on stored names.
    pub pattern: Regex,
    /// Replacement (`$1` for captures).
    pub to: String,
    /// "rename[0], line 3 of v.json".
    pub origin: String,
}

/// A checked drop rule.
#[derive(Debug, Clone)]
pub struct FileDrop {
    /// Regex on stored names.
    pub pattern: Regex,
    /// Why.
    pub reason: String,
    /// Where it came from.
    pub origin: String,
}

/// A checked fix-up rule.
#[derive(Debug, Clone)]
pub struct FileFixup {
    /// Regex on canonical names.
    pub pattern: Regex,
    /// The one fix-up.
    pub op: FixupOp,
    /// Only arrays with this many dimensions.
    pub if_ndim: Option<usize>,
    /// Why.
    pub reason: String,
    /// Where it came from.
    pub origin: String,
}

/// A view file, every rule checked.
#[derive(Debug, Clone)]
pub struct ViewFile {
    /// Its name (or the file's path).
    pub name: String,
    /// Renames, in order.
    pub renames: Vec<FileRename>,
    /// Drops.
    pub drops: Vec<FileDrop>,
    /// Fix-ups, in order.
    pub fixups: Vec<FileFixup>,
}

/// Why a view could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// No built-in view of that name.
    #[error("no built-in view named `{0}` (there are: qwen3-next, llama-cpp)")]
    UnknownBuiltin(String),
    /// The view file cannot be read.
    #[error(
        "cannot read the view file {}: {source}",
        crate::units::Shown::path(path)
    )]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The view file is not JSON of the right shape.
    #[error(
        "view file {}: line {line}: {message}",
        crate::units::Shown::path(path)
    )]
    Json {
        /// The file.
        path: PathBuf,
        /// Where.
        line: usize,
        /// What serde says.
        message: String,
    },
    /// One rule of the view file is bad.
    #[error(
        "view file {}: line {line}: rule {rule}: {message}",
        crate::units::Shown::path(path)
    )]
    Rule {
        /// The file.
        path: PathBuf,
        /// Where the rule is.
        line: usize,
        /// Which rule ("rename[1]").
        rule: String,
        /// What is wrong.
        message: String,
    },
    /// Two stored names map to one canonical name.
    #[error("view {view}: `{first}` and `{second}` both become `{canonical}`")]
    Collision {
        /// The view.
        view: String,
        /// The canonical name.
        canonical: String,
        /// The first stored name.
        first: String,
        /// The second.
        second: String,
    },
}

/// Regexes from a file are capped: a view rule is a name pattern, not a program.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// The most rules a view file may have (every tensor is tried against each).
pub const MAX_RULES: usize = 1000;
/// The longest new name of a rename rule.
const MAX_RENAME_BYTES: usize = 1024;
/// The most `$` group references in a new name: with the length cap, a
/// canonical name is at most a few times its stored name.
const MAX_RENAME_REFERENCES: usize = 8;
/// The largest view file read.
pub const MAX_VIEW_FILE_BYTES: u64 = 4 << 20;

impl ViewFile {
    /// Parses the text of a view file read from `path`.
    ///
    /// # Errors
    /// Not JSON of the right shape (with the line), or a bad rule (with its
    /// line and name: `fixup[1]`).
    pub fn parse(path: &Path, text: &str) -> Result<Self, ViewError> {
        let raw: RawView = serde_json::from_str(text).map_err(|e| ViewError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            message: strip_position(&e.to_string()),
        })?;
        let rules = raw.rename.len() + raw.drop.len() + raw.fixup.len();
        if rules > MAX_RULES {
            return Err(ViewError::Json {
                path: path.to_path_buf(),
                line: 1,
                message: format!("{rules} rules; a view file may have at most {MAX_RULES}"),
            });
        }
        let rule_error = |rule: &str, needle: &str, message: String| ViewError::Rule {
            path: path.to_path_buf(),
            line: line_of(text, needle),
            rule: rule.to_owned(),
            message,
        };
        let compile = |rule: &str, pattern: &str| {
            regex::RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| {
                    let message = e.to_string();
                    let message = message.lines().last().unwrap_or(&message).trim().to_owned();
                    rule_error(rule, pattern, format!("bad regex `{pattern}`: {message}"))
                })
        };
        // Rules of one kind appear in the file in their order: each is
        // looked for after the one before (one pass per kind, not one
        // search of the whole file per rule).
        let lines = Lines::new(text);
        let origin = |cursor: &mut usize, rule: &str, needle: &str| {
            format!(
                "{rule}, line {} of {}",
                lines.line_after(cursor, needle),
                path.display()
            )
        };
        let mut file = Self {
            name: raw.name.unwrap_or_else(|| path.display().to_string()),
            renames: Vec::new(),
            drops: Vec::new(),
            fixups: Vec::new(),
        };
        let mut cursor = 0;
        for (i, rename) in raw.rename.iter().enumerate() {
            let rule = format!("rename[{i}]");
            let references = rename.to.matches('$').count();
            if rename.to.len() > MAX_RENAME_BYTES || references > MAX_RENAME_REFERENCES {
                return Err(rule_error(
                    &rule,
                    &rename.from,
                    format!(
                        "the new name may have at most {MAX_RENAME_BYTES} bytes and {MAX_RENAME_REFERENCES} `$` references (it has {} and {references})",
                        rename.to.len()
                    ),
                ));
            }
            file.renames.push(FileRename {
                pattern: compile(&rule, &rename.from)?,
                to: rename.to.clone(),
                origin: origin(&mut cursor, &rule, &rename.from),
            });
        }
        let mut cursor = 0;
        for (i, drop) in raw.drop.iter().enumerate() {
            let rule = format!("drop[{i}]");
            let (pattern, reason) = match drop {
                RawDrop::Pattern(p) => (p.clone(), None),
                RawDrop::Rule { pattern, reason } => (pattern.clone(), reason.clone()),
            };
            file.drops.push(FileDrop {
                pattern: compile(&rule, &pattern)?,
                origin: origin(&mut cursor, &rule, &pattern),
                reason: reason.unwrap_or_else(|| "dropped by the view file".into()),
            });
        }
        let mut cursor = 0;
        for (i, fixup) in raw.fixup.iter().enumerate() {
            let rule = format!("fixup[{i}]");
            file.fixups.push(FileFixup {
                pattern: compile(&rule, &fixup.pattern)?,
                op: fixup_op(fixup)
                    .map_err(|m| rule_error(&rule, &fixup.pattern, m.to_string()))?,
                if_ndim: fixup.if_ndim,
                reason: fixup
                    .reason
                    .clone()
                    .unwrap_or_else(|| "fixed by the view file".into()),
                origin: origin(&mut cursor, &rule, &fixup.pattern),
            });
        }
        Ok(file)
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawView {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    rename: Vec<RawRename>,
    #[serde(default)]
    drop: Vec<RawDrop>,
    #[serde(default)]
    fixup: Vec<RawFixup>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRename {
    from: String,
    to: String,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum RawDrop {
    Pattern(String),
    Rule {
        pattern: String,
        #[serde(default)]
        reason: Option<String>,
    },
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFixup {
    #[serde(rename = "match")]
    pattern: String,
    #[serde(default)]
    add: Option<f32>,
    #[serde(default)]
    move_axis: Option<[i32; 2]>,
    #[serde(default)]
    swap_axes: Option<[i32; 2]>,
    #[serde(default)]
    cast: Option<String>,
    #[serde(default)]
    if_ndim: Option<usize>,
    #[serde(default)]
    reason: Option<String>,
}

/// What is wrong with a rule's fix-up (said in [`ViewError::Rule`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum FixupProblem {
    #[error("cannot cast to `{0}` (F16, BF16, F32, I8, U8, …)")]
    Cast(String),
    #[error("cannot add `{0}`")]
    Add(f32),
    #[error("names no fix-up (one of add, move_axis, swap_axes, cast)")]
    None,
    #[error("names more than one fix-up; write one rule per fix-up")]
    Several,
}

/// The one fix-up a rule names, or what is wrong with it.
fn fixup_op(fixup: &RawFixup) -> Result<FixupOp, FixupProblem> {
    let ops: Vec<FixupOp> = [
        fixup.add.map(FixupOp::Add),
        fixup.move_axis.map(|[a, b]| FixupOp::MoveAxis(a, b)),
        fixup.swap_axes.map(|[a, b]| FixupOp::SwapAxes(a, b)),
        fixup.cast.clone().map(FixupOp::Cast),
    ]
    .into_iter()
    .flatten()
    .collect();
    match ops.as_slice() {
        [FixupOp::Cast(dtype)] if !CAST_DTYPES.contains(&dtype.to_ascii_uppercase().as_str()) => {
            Err(FixupProblem::Cast(dtype.clone()))
        }
        [FixupOp::Add(v)] if !v.is_finite() => Err(FixupProblem::Add(*v)),
        [op] => Ok(op.clone()),
        [] => Err(FixupProblem::None),
        _ => Err(FixupProblem::Several),
    }
}

/// Line numbers of a text: where each line starts, found once.
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        Self { text, starts }
    }

    /// The 1-based line of `needle` (as JSON writes it) at or after
    /// `cursor`, which moves past it; from the start when it is not after
    /// the cursor (the cursor stays).
    fn line_after(&self, cursor: &mut usize, needle: &str) -> usize {
        let quoted = serde_json::to_string(needle).unwrap_or_default();
        let after = self
            .text
            .get(*cursor..)
            .and_then(|rest| rest.find(&quoted))
            .map(|at| at + *cursor);
        let at = match after {
            Some(at) => {
                *cursor = at + quoted.len();
                Some(at)
            }
            None => self.text.find(&quoted).or_else(|| self.text.find(needle)),
        };
        at.map_or(1, |at| self.starts.partition_point(|&s| s <= at))
    }
}

/// The 1-based line where `needle` (as JSON writes it) first appears.
fn line_of(text: &str, needle: &str) -> usize {
    let quoted = serde_json::to_string(needle).unwrap_or_default();
    text.find(&quoted)
        .or_else(|| text.find(needle))
        .map_or(1, |at| text[..at].matches('\n').count() + 1)
}

/// serde's message without its " at line L column C" tail (the line is reported apart).
fn strip_position(message: &str) -> String {
    message
        .rfind(" at line ")
        .map_or(message, |at| &message[..at])
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_located_in_order_and_bounded() {
        let text = "{\"rename\": [\n  {\"from\": \"a\", \"to\": \"x\"},\n  {\"from\": \"a\", \"to\": \"y\"}\n],\n\"drop\": [\"c\",\n \"b\"]}";
        let file = ViewFile::parse(Path::new("v.json"), text).expect("parses");
        // The second rename has the same pattern: found after the first.
        assert_eq!(file.renames[0].origin, "rename[0], line 2 of v.json");
        assert_eq!(file.renames[1].origin, "rename[1], line 3 of v.json");
        assert_eq!(file.drops[0].origin, "drop[0], line 5 of v.json");
        assert_eq!(file.drops[1].origin, "drop[1], line 6 of v.json");

        let many: Vec<String> = (0..=MAX_RULES).map(|i| format!("\"r{i}\"")).collect();
        let text = format!("{{\"drop\": [{}]}}", many.join(","));
        let err = ViewFile::parse(Path::new("v.json"), &text).expect_err("too many");
        assert!(err.to_string().contains("at most 1000"), "{err}");

        let text = format!(
            "{{\"rename\": [{{\"from\": \"(.*)\", \"to\": \"{}\"}}]}}",
            "$1".repeat(9)
        );
        let err = ViewFile::parse(Path::new("v.json"), &text).expect_err("expands too much");
        assert!(err.to_string().contains("8 `$` references"), "{err}");
    }
}
