//! Human-readable numbers for people (never for machine-readable output).

/// `1536` → `"1.50 KiB"`; exact bytes below 1 KiB.
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
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

#[cfg(test)]
mod tests {
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

/// `text` safe to print on one line: control characters (NUL, line breaks,
/// escape sequences) and bidirectional formatting characters (which can make
/// `evil\u{202e}gnp.exe` read as `evilexe.png`) are written as escapes.
/// Names and messages from files go through this before reaching a terminal
/// or a label.
#[must_use]
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let hostile = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(hostile) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod printable_tests {
    use super::printable;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(printable("model.layers.0.weight"), "model.layers.0.weight");
        assert_eq!(printable("a\u{0}b"), "a\\u{0}b");
        assert_eq!(printable("line\nbreak"), "line\\nbreak");
        assert_eq!(printable("evil\u{202e}gnp.exe"), "evil\\u{202e}gnp.exe");
        assert_eq!(printable("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(printable("日本語 ok"), "日本語 ok");
    }
}
