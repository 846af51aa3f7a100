//! [`Shown`]: text that reaches a person (a terminal line, a label, a
//! message in the window, a finding), made once from a name, a path, a
//! location or a message.
//!
//! Making it escapes every character that can hide, reorder or break text
//! on a screen, and masks every credential in an address:
//! - control characters (NUL, line breaks, escape sequences, C1);
//! - bidirectional formatting (`evil\u{202e}gnp.exe` reads `evilexe.png`);
//! - invisible format characters: zero-width spaces and joiners, the word
//!   joiner, the byte order mark, the soft hyphen, tag characters (two
//!   tensors named `q_proj` and `q\u{200b}_proj` must not look the same);
//! - the line and paragraph separators U+2028 and U+2029;
//! - a password or a token in an address (`https://user:PASSWORD@host`
//!   becomes `https://user:***@host`), wherever it appears in the text.
//!
//! Escapes read as Rust writes them (`\u{200b}`, `\n`) and are plain
//! ASCII, so making text shown twice changes nothing more.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

/// Text as it may be shown to a person: see the module's documentation.
/// It borrows the text it was made from when nothing had to change (the
/// 90k plain names of a large listing cost no copy).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shown<'a>(Cow<'a, str>);

impl<'a> Shown<'a> {
    /// A name, a message or any text from a file, a job or a person.
    #[must_use]
    pub fn new(text: &'a str) -> Self {
        Self(match masked(text) {
            Cow::Borrowed(text) => escaped(text),
            Cow::Owned(text) => Cow::Owned(escaped(&text).into_owned()),
        })
    }

    /// The text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    #[must_use]
    pub fn into_string(self) -> String {
        self.0.into_owned()
    }
}

impl Shown<'static> {
    /// A path or an address (`hf://`, `https://`), as it is shown.
    #[must_use]
    pub fn path(path: &Path) -> Self {
        Self(Cow::Owned(
            Shown::new(&path.to_string_lossy()).into_string(),
        ))
    }

    /// A value read from a file, in quotes (`"llama"`), its first
    /// `max_chars` characters at most, and whether it was cut there. Inside
    /// the quotes `"` and `\` are escaped as well as every character that
    /// is not shown as itself, so where the value ends is never in doubt
    /// (`"say \"hi\"\n"`); credentials in an address are masked over the
    /// whole text before it is cut.
    #[must_use]
    pub fn quoted(text: &str, max_chars: usize) -> (Self, bool) {
        let masked = masked(text);
        let mut out = String::with_capacity(masked.len().min(max_chars * 4) + 2);
        out.push('"');
        let mut cut = false;
        for (i, c) in masked.chars().enumerate() {
            if i == max_chars {
                cut = true;
                break;
            }
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                c if hostile(c) => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        out.push('"');
        (Self(Cow::Owned(out)), cut)
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`: widths and alignment (`{:<40}`) apply as to a `str`.
        f.pad(&self.0)
    }
}

impl std::ops::Deref for Shown<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Shown<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<Shown<'_>> for String {
    fn from(shown: Shown<'_>) -> Self {
        shown.0.into_owned()
    }
}

/// A writer of text for a terminal: each line passes through [`Shown`]
/// whole before it reaches `inner` (a line is where an address's
/// credentials end, so they are masked even when written in pieces). Every
/// text report of the CLI is written through one, so a call site that
/// forgets to make a name shown still prints nothing raw. Not for JSON,
/// whose writer escapes what JSON needs.
#[derive(Debug)]
pub struct ShownLines<W: std::io::Write> {
    inner: W,
    line: Vec<u8>,
}

impl<W: std::io::Write> ShownLines<W> {
    /// Text lines shown into `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            line: Vec::new(),
        }
    }

    fn emit(&mut self, newline: bool) -> std::io::Result<()> {
        let text = String::from_utf8_lossy(&self.line);
        let shown = Shown::new(&text);
        self.inner.write_all(shown.as_bytes())?;
        if newline {
            self.inner.write_all(b"\n")?;
        }
        self.line.clear();
        Ok(())
    }

    /// Writes the last line (one without a line break), flushes, and
    /// gives the inner writer back.
    ///
    /// # Errors
    /// The inner writer's.
    pub fn finish(mut self) -> std::io::Result<W> {
        if !self.line.is_empty() {
            self.emit(false)?;
        }
        self.inner.flush()?;
        Ok(self.inner)
    }
}

impl<W: std::io::Write> std::io::Write for ShownLines<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..at]);
            self.emit(true)?;
            rest = &rest[at + 1..];
        }
        self.line.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A writer of JSON: every character that is not [`shown_as_itself`]
/// reaches `inner` as a `\u` escape (surrogate pairs past U+FFFF), which
/// every JSON reader decodes to the same string. Outside strings JSON is
/// ASCII, so every character this changes is inside a string; the
/// controls below U+0020 are escaped by serde already, DEL here. Every
/// JSON output of the CLI (`--json`, JSON traces, journals, exports)
/// passes through one.
#[derive(Debug)]
pub struct ShownJson<W: std::io::Write> {
    inner: W,
    /// The first bytes of a character cut between two writes.
    pending: Vec<u8>,
}

impl<W: std::io::Write> ShownJson<W> {
    /// JSON shown into `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            pending: Vec::new(),
        }
    }

    /// Flushes and gives the inner writer back.
    ///
    /// # Errors
    /// The inner writer's.
    pub fn finish(mut self) -> std::io::Result<W> {
        if !self.pending.is_empty() {
            // Bytes that never became a character: not UTF-8.
            self.inner.write_all(b"\\ufffd")?;
            self.pending.clear();
        }
        self.inner.flush()?;
        Ok(self.inner)
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        // The 14 MB tensor list of a 90k-tensor checkpoint is plain ASCII:
        // two word-at-a-time scans, no character decoded.
        if plain_json(bytes) {
            return self.inner.write_all(bytes);
        }
        let mut plain = 0;
        let mut at = 0;
        while at < bytes.len() {
            let b = bytes[at];
            if b < 0x7f {
                at += 1;
                continue;
            }
            let width = match b {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => 1,
            };
            let Some(encoded) = bytes.get(at..at + width) else {
                // A character cut by the write: kept for the next one.
                self.inner.write_all(&bytes[plain..at])?;
                self.pending.extend_from_slice(&bytes[at..]);
                return Ok(());
            };
            let c = std::str::from_utf8(encoded)
                .ok()
                .and_then(|t| t.chars().next())
                .unwrap_or('\u{fffd}');
            if shown_as_itself(c) {
                at += width;
                continue;
            }
            self.inner.write_all(&bytes[plain..at])?;
            let mut units = [0_u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(self.inner, "\\u{unit:04x}")?;
            }
            at += width;
            plain = at;
        }
        self.inner.write_all(&bytes[plain..])
    }
}

impl<W: std::io::Write> std::io::Write for ShownJson<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.pending.is_empty() {
            self.put(buf)?;
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(buf);
            self.put(&joined)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// `json` (serde's text) with every character that is not
/// [`shown_as_itself`] written as a `\u` escape ([`ShownJson`]).
#[must_use]
pub fn json_shown(json: String) -> String {
    if plain_json(json.as_bytes()) {
        return json;
    }
    let mut out = ShownJson::new(Vec::with_capacity(json.len() + 16));
    let _ = std::io::Write::write_all(&mut out, json.as_bytes());
    out.finish()
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or(json)
}

/// Whether `bytes` need no escape in JSON: ASCII without DEL (serde
/// escapes the controls below the space).
fn plain_json(bytes: &[u8]) -> bool {
    bytes.is_ascii() && !bytes.contains(&0x7f)
}

/// A field of a CSV file as shown: [`Shown`], so that a name's escape
/// sequence or line break never reaches a terminal from `--csv
/// /dev/stdout` (the CSV writer quotes what CSV needs).
#[must_use]
pub fn csv_field(text: &str) -> Cow<'_, str> {
    Shown::new(text).0
}

/// A location as data (a JSON field, a trace's label or checkpoint): the
/// credentials masked, nothing else changed (JSON and CSV writers escape
/// what their formats need).
#[must_use]
pub fn location_data(location: &str) -> String {
    masked(location).into_owned()
}

/// Whether `c` is shown as itself: it is in the safe set, which is named
/// by Unicode's own properties (an allow-list, so a character nobody
/// thought of is escaped, not shown):
/// - letters, marks, numbers, punctuation and symbols (general categories
///   L, M, N, P, S), and the plain space U+0020;
/// - minus every default-ignorable code point (variation selectors, Hangul
///   fillers, the Khmer and Mongolian invisibles, tag characters: what a
///   terminal draws as nothing);
/// - minus format characters (Cf) and bidirectional controls;
/// - minus U+2800 BRAILLE PATTERN BLANK, a symbol that is drawn blank.
///
/// Everything else (controls, other spaces, line and paragraph separators,
/// private use, surrogates, unassigned code points) is escaped.
/// `tests/plain/shown.rs` holds this against the Unicode character
/// database for every code point.
#[must_use]
pub fn shown_as_itself(c: char) -> bool {
    use icu_properties::props::GeneralCategoryGroup as Group;
    use icu_properties::props::{BidiControl, DefaultIgnorableCodePoint, GeneralCategory};
    use icu_properties::{CodePointMapData, CodePointSetData};
    if c.is_ascii() {
        return (' '..='~').contains(&c);
    }
    let category = CodePointMapData::<GeneralCategory>::new().get(c);
    let safe_group = [
        Group::Letter,
        Group::Mark,
        Group::Number,
        Group::Punctuation,
        Group::Symbol,
    ]
    .iter()
    .any(|group| group.contains(category));
    safe_group
        && category != GeneralCategory::Format
        && c != '\u{2800}'
        && !CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
        && !CodePointSetData::new::<BidiControl>().contains(c)
}

fn hostile(c: char) -> bool {
    !shown_as_itself(c)
}

/// `text` with each hostile character written as its escape.
fn escaped(text: &str) -> Cow<'_, str> {
    // Tensor and file names are printable ASCII: one byte test each, no
    // character tables (the 90k names of a large checkpoint's listing).
    if text.bytes().all(|b| (b' '..=b'~').contains(&b)) || !text.chars().any(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` with the credentials of every address in it replaced by `***`
/// (`user:***@`, or `***@` for a user name alone, which is a token).
fn masked(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        if let Some(user_end) = authority.rfind('@') {
            let userinfo = &authority[..user_end];
            if userinfo.contains(':') {
                out.push_str(userinfo.split(':').next().unwrap_or(""));
                out.push_str(":***");
            } else {
                out.push_str("***");
            }
            out.push_str(&authority[user_end..]);
            changed = true;
        } else {
            out.push_str(authority);
        }
        rest = &after[end..];
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hostile_character_class_is_escaped() {
        let shown = |t: &str| Shown::new(t).into_string();
        assert_eq!(shown("model.layers.0.weight"), "model.layers.0.weight");
        assert_eq!(shown("a\u{0}b"), "a\\u{0}b");
        assert_eq!(shown("line\nbreak"), "line\\nbreak");
        assert_eq!(shown("evil\u{202e}gnp.exe"), "evil\\u{202e}gnp.exe");
        assert_eq!(shown("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(shown("\u{9b}31m"), "\\u{9b}31m", "C1 CSI");
        assert_eq!(shown("q\u{200b}_proj"), "q\\u{200b}_proj");
        assert_eq!(shown("a\u{200d}b\u{feff}"), "a\\u{200d}b\\u{feff}");
        assert_eq!(shown("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
        assert_eq!(shown("soft\u{ad}hyphen"), "soft\\u{ad}hyphen");
        assert_eq!(shown("tag\u{e0041}"), "tag\\u{e0041}");
        assert_eq!(shown("日本語 ok é"), "日本語 ok é");
        // Twice is the same as once.
        let once = shown("x\u{202e}y\u{200b}");
        assert_eq!(shown(&once), once);
    }

    #[test]
    fn a_quoted_value_ends_where_its_text_does() {
        let quoted = |t: &str, n| {
            let (q, cut) = Shown::quoted(t, n);
            (q.into_string(), cut)
        };
        assert_eq!(quoted("llama", 80), ("\"llama\"".into(), false));
        assert_eq!(
            quoted("say \"hi\"\\n\n", 80),
            ("\"say \\\"hi\\\"\\\\n\\n\"".into(), false),
            "quotes, a backslash and a line break, each unambiguous"
        );
        assert_eq!(quoted("q\u{200b}x\u{1b}", 80).0, "\"q\\u{200b}x\\u{1b}\"");
        assert_eq!(quoted("日本語です", 3), ("\"日本語\"".into(), true));
        assert_eq!(quoted("abc", 3), ("\"abc\"".into(), false));
        // Masked over the whole text, then cut: no part of a password.
        let (q, cut) = quoted("see https://u:SECRET@host/x", 20);
        assert!(cut);
        assert!(!q.contains("SEC"), "{q}");
        assert_eq!(q, "\"see https://u:***@ho\"");
    }

    #[test]
    fn credentials_in_addresses_are_masked_wherever_they_are() {
        let shown = |t: &str| Shown::new(t).into_string();
        assert_eq!(
            shown("http://user:PASSWORD@127.0.0.1:9/x.safetensors"),
            "http://user:***@127.0.0.1:9/x.safetensors"
        );
        assert_eq!(shown("https://hf_TOKEN@host/a"), "https://***@host/a");
        assert_eq!(
            shown("https://host/org/repo@main/a"),
            "https://host/org/repo@main/a",
            "an @ in the path is not a user"
        );
        assert_eq!(shown("/local/model"), "/local/model");
        assert_eq!(shown("http://u:p:q@h"), "http://u:***@h");
        assert_eq!(
            shown("cannot read http://a:SECRET@h/x (timed out); also https://b:TOO@k"),
            "cannot read http://a:***@h/x (timed out); also https://b:***@k"
        );
        assert_eq!(
            location_data("http://u:SECRET@h/m\u{200b}"),
            "http://u:***@h/m\u{200b}",
            "data keeps its characters"
        );
    }
}

#[cfg(test)]
mod lines_tests {
    use super::ShownLines;
    use std::io::Write as _;

    #[test]
    fn each_line_is_shown_whole_even_when_written_in_pieces() {
        let mut lines = ShownLines::new(Vec::new());
        write!(lines, "a http://u:SEC").expect("write");
        write!(lines, "RET@h/x \u{200b}\nnext\u{202e}").expect("write");
        let out = lines.finish().expect("finish");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "a http://u:***@h/x \\u{200b}\nnext\\u{202e}"
        );
    }
}

#[cfg(test)]
mod json_tests {
    use super::{ShownJson, json_shown};
    use std::io::Write as _;

    #[test]
    fn json_escapes_what_is_not_shown_and_reads_back_the_same() {
        let name = "a\u{7f}b\u{9b}c\u{202e}d\u{e0100}é日\u{2800}";
        let json = serde_json::to_string(name).expect("json");
        let shown = json_shown(json.clone());
        assert_eq!(
            shown, "\"a\\u007fb\\u009bc\\u202ed\\udb40\\udd00é日\\u2800\"",
            "surrogate pairs past U+FFFF"
        );
        let back: String = serde_json::from_str(&shown).expect("reads");
        assert_eq!(back, name);
        // Written a byte at a time: characters cut between writes.
        let mut out = ShownJson::new(Vec::new());
        for b in json.as_bytes() {
            out.write_all(std::slice::from_ref(b)).expect("write");
        }
        assert_eq!(
            String::from_utf8(out.finish().expect("finish")).expect("utf8"),
            shown
        );
        // Plain ASCII passes as it is.
        assert_eq!(json_shown("{\"a\": 1}".into()), "{\"a\": 1}");
    }
}
