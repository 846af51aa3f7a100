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

/// A location as data (a JSON field, a trace's label or checkpoint): the
/// credentials masked, nothing else changed (JSON and CSV writers escape
/// what their formats need).
#[must_use]
pub fn location_data(location: &str) -> String {
    masked(location).into_owned()
}

/// Whether `c` can hide, reorder or break text on a screen.
fn hostile(c: char) -> bool {
    c.is_control()
        || matches!(c,
            // Bidirectional marks, embeddings, overrides and isolates.
            '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            // Zero-width and other invisible format characters.
            | '\u{00ad}' | '\u{034f}' | '\u{180e}' | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2065}'
            | '\u{206a}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
            | '\u{0600}'..='\u{0605}' | '\u{06dd}' | '\u{070f}' | '\u{e0000}'..='\u{e007f}'
            // Line and paragraph separators.
            | '\u{2028}' | '\u{2029}')
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
