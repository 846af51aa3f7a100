//! Human-readable numbers for people (never for machine-readable output),
//! the one byte-level text helper the layers share (JSON string runs), and
//! [`Shown`], the one type of text that reaches a person.
#![forbid(unsafe_code)]

mod natural;
mod shown;

pub use natural::Natural;
pub use shown::{
    Shown, ShownJson, ShownLines, csv_field, json_shown, location_data, shown_as_itself,
};

/// `1536` → `"1.50 KiB"`; exact bytes below 1 KiB.
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    let mut text = String::new();
    write_human_bytes(&mut text, bytes);
    text
}

/// [`human_bytes`] appended to `text` (for 90k table rows, no new string each).
pub fn write_human_bytes(text: &mut String, bytes: u64) {
    use std::fmt::Write as _;
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    // Writing into a String cannot fail.
    if bytes < 1024 {
        let _ = write!(text, "{bytes} B");
        return;
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    let _ = write!(text, "{value:.2} {}", UNITS[unit]);
}

/// A size like `8G`, `512MiB`, `1.5k`, `12 GB` or plain bytes (binary
/// units: K, M, G, T, each alone or with `B` or `iB`). Anything else, such as
/// `8BBB` or `3X`, is `None`.
#[must_use]
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let value: f64 = digits.parse().ok()?;
    let unit = unit.trim().to_ascii_uppercase();
    let scale: u64 = match unit.as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    let bytes = value * scale as f64;
    // Checked to fit: the cast neither truncates nor loses a sign.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (bytes.is_finite() && (0.0..1.8e19).contains(&bytes)).then_some(bytes as u64)
}

/// `1234567` → `"1,234,567"`.
#[must_use]
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` things in words: "1 shard", "163 shards" (`one` and `many` are the
/// singular and the plural).
#[must_use]
pub fn count_of(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `7_241_732_096` → `"7.24B"`: parameter counts as people say them.
#[must_use]
pub fn short_count(n: u64) -> String {
    let n_f = n as f64;
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.2}K", n_f / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}M", n_f / 1e6),
        1_000_000_000..1_000_000_000_000 => format!("{:.2}B", n_f / 1e9),
        _ => format!("{:.2}T", n_f / 1e12),
    }
}

/// Length of the leading run of `bytes` that a JSON string holds as is
/// (the header scanner reads names with it, the JSON writers copy them):
/// up to the first quote, backslash or control character. Eight bytes at a
/// time (names run to 30-100 bytes: too short for a SIMD search's set-up).
#[must_use]
pub fn json_plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    // Marks the zero bytes of `word`: exact up to and including the first
    // one (a borrow may also mark bytes after it, which are never looked at).
    let zeros = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let quote = word ^ u64::from_le_bytes([b'"'; 8]);
        let backslash = word ^ u64::from_le_bytes([b'\\'; 8]);
        // Bytes below 0x20 are the ones with none of the bits 0xE0 set.
        let control = word & u64::from_le_bytes([0xE0; 8]);
        let stops = zeros(quote) | zeros(backslash) | zeros(control);
        if stops != 0 {
            // Little-endian: the lowest marked byte is the first stop.
            return at + (stops.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + bytes
        .get(at..)
        .unwrap_or_default()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .unwrap_or(bytes.len() - at)
}

#[cfg(test)]
mod tests {
    #[test]
    fn plain_runs_stop_at_quotes_backslashes_and_controls() {
        assert_eq!(super::json_plain_run(b""), 0);
        assert_eq!(super::json_plain_run(b"abc"), 3);
        for stop in [b'"', b'\\', b'\n', 0x00, 0x1f] {
            for at in 0..20 {
                let mut bytes = vec![b'x'; 24];
                bytes[at] = stop;
                assert_eq!(super::json_plain_run(&bytes), at, "{stop} at {at}");
            }
        }
        // Bytes at or above 0x20 (UTF-8 included) are plain.
        let text = "model.layers.0.\u{e9}\u{7f} ~ \u{1F600}.weight";
        assert_eq!(super::json_plain_run(text.as_bytes()), text.len());
    }

    #[test]
    fn sizes_take_binary_units_strictly() {
        use super::parse_size;

        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("1.5k"), Some(1536));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12 GB"), Some(12 << 30));
        for bad in ["lots", "3X", "8BBB", "8GG", "G", "", "1.2.3M"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024), "3.00 GiB");
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(123_456), "123,456");
        assert_eq!(short_count(7_241_732_096), "7.24B");
        assert_eq!(short_count(999), "999");
    }
}

/// `text` in at most `max` characters, cut in the middle with an ellipsis:
/// the end of a tensor name (what tells `q_proj.weight` from
/// `q_proj.scales`) stays, and so does its start (which layer). A third of
/// the room goes to the start, the rest to the end.
#[must_use]
pub fn middle_ellipsis(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    let count = text.chars().count();
    if count <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    if max < 2 {
        return std::borrow::Cow::Borrowed("\u{2026}");
    }
    let head = (max - 1) / 3;
    let tail = max - 1 - head;
    let mut out: String = text.chars().take(head).collect();
    out.push('\u{2026}');
    out.extend(text.chars().skip(count - tail));
    std::borrow::Cow::Owned(out)
}

/// A tensor name in at most `max` characters, keeping what tells it from
/// its neighbours: its end, and its layer number (the first all-digit
/// segment). `model.layers.3.self_attn.o_proj.weight` drops `model.` first
/// (`…layers.3.self_attn.o_proj.weight`), then keeps the number and the end
/// (`…12.…proj_with_mqa.weight_scale_inv`); a name without a number is cut
/// in the middle ([`middle_ellipsis`]).
#[must_use]
pub fn fit_name(name: &str, max: usize) -> std::borrow::Cow<'_, str> {
    let count = |s: &str| s.chars().count();
    if count(name) <= max {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut offset = 0;
    let mut previous = None;
    for segment in name.split('.') {
        let start = offset;
        offset += segment.len() + 1;
        if segment.is_empty() || !segment.bytes().all(|b| b.is_ascii_digit()) {
            previous = Some(start);
            continue;
        }
        if let Some(from) = previous {
            let shorter = format!("\u{2026}{}", &name[from..]);
            if count(&shorter) <= max {
                return std::borrow::Cow::Owned(shorter);
            }
        }
        let rest = name.get(offset..).unwrap_or("");
        let prefix = format!("\u{2026}{segment}.");
        let room = max.saturating_sub(count(&prefix));
        if room < 8 {
            break;
        }
        let rest_count = count(rest);
        let mut out = prefix;
        if rest_count > room {
            out.push('\u{2026}');
            out.extend(rest.chars().skip(rest_count - (room - 1)));
        } else {
            out.push_str(rest);
        }
        return std::borrow::Cow::Owned(out);
    }
    middle_ellipsis(name, max)
}

#[cfg(test)]
mod middle_ellipsis_tests {
    use super::middle_ellipsis;

    #[test]
    fn the_end_of_a_long_name_stays_and_the_length_is_kept() {
        let name = "model.layers.12.self_attn.kv_a_proj_with_mqa.weight_scale_inv";
        assert_eq!(middle_ellipsis(name, 100), name, "fits: unchanged");
        let cut = middle_ellipsis(name, 31);
        assert_eq!(cut.chars().count(), 31);
        assert_eq!(cut, "model.laye\u{2026}mqa.weight_scale_inv");
        assert!(cut.ends_with("weight_scale_inv"));
        assert_eq!(middle_ellipsis("abc", 1), "\u{2026}");
        assert_eq!(
            middle_ellipsis("\u{e9}t\u{e9}-\u{e9}t\u{e9}", 4),
            "\u{e9}\u{2026}t\u{e9}"
        );
    }

    #[test]
    fn a_fitted_name_keeps_its_layer_number_and_its_end() {
        let name = "model.layers.3.self_attn.o_proj.weight";
        assert_eq!(super::fit_name(name, 40), name);
        assert_eq!(
            super::fit_name(name, 35),
            "\u{2026}layers.3.self_attn.o_proj.weight"
        );
        let long = "model.layers.12.self_attn.kv_a_proj_with_mqa.weight_scale_inv";
        let fitted = super::fit_name(long, 30);
        assert_eq!(fitted, "\u{2026}12.\u{2026}with_mqa.weight_scale_inv");
        assert_eq!(fitted.chars().count(), 30);
        assert!(
            fitted.starts_with("\u{2026}12.\u{2026}") && fitted.ends_with("mqa.weight_scale_inv")
        );
        // No number: cut in the middle.
        assert_eq!(
            super::fit_name("lm_head.weight_scale_inv", 12),
            middle_ellipsis("lm_head.weight_scale_inv", 12)
        );
    }
}

/// One line on stderr, `weightscope: ` first, with names and messages from
/// files made printable (the CLI's and the window's start-up messages).
pub fn stderr_line(message: std::fmt::Arguments<'_>) {
    eprintln!("weightscope: {}", Shown::new(&message.to_string()));
}
