//! Names in the order people count: `layers.2` before `layers.10`.

use std::cmp::Ordering;

/// A name ordered with its runs of digits compared as numbers (`layers.9`
/// before `layers.10`), the rest byte by byte; names equal that way (`01`
/// and `1`) fall back to their bytes, so the order is total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Natural<'a>(pub &'a str);

impl Ord for Natural<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let (mut a, mut b) = (self.0.as_bytes(), other.0.as_bytes());
        loop {
            match (a.first(), b.first()) {
                (None, None) => return self.0.cmp(other.0),
                (None, Some(_)) => return Ordering::Less,
                (Some(_), None) => return Ordering::Greater,
                (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                    let (da, ra) = split_digits(a);
                    let (db, rb) = split_digits(b);
                    // Leading zeros aside, a longer run is a larger number.
                    let (ta, tb) = (trim_zeros(da), trim_zeros(db));
                    let by_number = ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb));
                    if by_number != Ordering::Equal {
                        return by_number;
                    }
                    (a, b) = (ra, rb);
                }
                (Some(x), Some(y)) => {
                    if x != y {
                        return x.cmp(y);
                    }
                    (a, b) = (&a[1..], &b[1..]);
                }
            }
        }
    }
}

impl PartialOrd for Natural<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let end = s
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    s.split_at(end)
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let start = digits
        .iter()
        .position(|&c| c != b'0')
        .unwrap_or(digits.len());
    &digits[start..]
}

#[cfg(test)]
mod tests {
    use super::Natural;

    #[test]
    fn numbers_in_names_sort_as_numbers() {
        let mut names = vec![
            "layers.10.mlp",
            "layers.2.mlp",
            "layers.1.mlp",
            "layers.1.attn",
            "embed",
            "layers.02.mlp",
            "layers.100",
        ];
        names.sort_by_key(|n| Natural(n));
        assert_eq!(
            names,
            vec![
                "embed",
                "layers.1.attn",
                "layers.1.mlp",
                "layers.02.mlp",
                "layers.2.mlp",
                "layers.10.mlp",
                "layers.100"
            ]
        );
    }

    #[test]
    fn a_run_of_thousands_of_digits_compares_without_overflow() {
        let long = "9".repeat(5000);
        let longer = format!("1{}", "0".repeat(5000));
        assert!(Natural(&long) < Natural(&longer));
    }
}
