//! Two recordings compared by what each held at its peak, key by key (a
//! source line, a held-by root): the one comparison the window's "compare
//! two recordings" shows for lines and for roots.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::Hash;

/// One key's bytes at the peak in two recordings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference<K> {
    /// What is compared (a line, a root).
    pub key: K,
    /// Held at the peak in the first.
    pub a_bytes: u64,
    /// Held at the peak in the second.
    pub b_bytes: u64,
}

impl<K> Difference<K> {
    /// The second's bytes less the first's.
    #[must_use]
    pub fn change(&self) -> i128 {
        i128::from(self.b_bytes) - i128::from(self.a_bytes)
    }
}

/// `a`'s and `b`'s (key, bytes) summed by key: most changed first (ties in
/// `order`), keys that held nothing in either left out.
pub fn differences<K: Eq + Hash + Clone>(
    a: impl IntoIterator<Item = (K, u64)>,
    b: impl IntoIterator<Item = (K, u64)>,
    order: impl Fn(&K, &K) -> Ordering,
) -> Vec<Difference<K>> {
    let mut by: Vec<Difference<K>> = Vec::new();
    let mut at: HashMap<K, usize> = HashMap::new();
    let sides = a
        .into_iter()
        .map(|(k, bytes)| (k, bytes, true))
        .chain(b.into_iter().map(|(k, bytes)| (k, bytes, false)));
    for (key, bytes, first) in sides {
        let i = *at.entry(key.clone()).or_insert_with(|| {
            by.push(Difference {
                key,
                a_bytes: 0,
                b_bytes: 0,
            });
            by.len() - 1
        });
        let side = if first {
            &mut by[i].a_bytes
        } else {
            &mut by[i].b_bytes
        };
        *side = side.saturating_add(bytes);
    }
    by.retain(|d| d.a_bytes > 0 || d.b_bytes > 0);
    by.sort_by(|x, y| {
        y.change()
            .unsigned_abs()
            .cmp(&x.change().unsigned_abs())
            .then_with(|| order(&x.key, &y.key))
    });
    by
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_summed_and_the_most_changed_come_first() {
        let a = [("x", 10), ("y", 5), ("x", 5), ("z", 0)];
        let b = [("y", 50), ("w", 3), ("z", 0)];
        let d = differences(a, b, Ord::cmp);
        let got: Vec<(&str, u64, u64)> = d.iter().map(|d| (d.key, d.a_bytes, d.b_bytes)).collect();
        assert_eq!(got, [("y", 5, 50), ("x", 15, 0), ("w", 0, 3)]);
        assert_eq!(d[1].change(), -15);
    }
}
