//! A tensor's bytes gathered through its strides from its storage.

/// A strided view of bytes: where each element of a tensor is, from the
/// first byte of the span its elements reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strided {
    /// Bytes an element.
    pub item_bytes: u64,
    /// The tensor's shape.
    pub shape: Vec<u64>,
    /// Its strides, in elements.
    pub stride: Vec<u64>,
}

impl Strided {
    /// The storage elements a view from element `offset` reaches: its
    /// first, and one past its last (`None` when that overflows).
    #[must_use]
    pub fn reach(&self, offset: u64) -> Option<(u64, u64)> {
        if self.shape.contains(&0) {
            return Some((offset, offset));
        }
        let last = self
            .shape
            .iter()
            .zip(&self.stride)
            .try_fold(0_u64, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            })?;
        Some((offset, offset.checked_add(last)?.checked_add(1)?))
    }

    /// The elements of the view, in row-major order, gathered from `span`
    /// (whose first byte is the view's first element); `None` when a
    /// stride reaches past `span`.
    #[must_use]
    pub fn gather(&self, span: &[u8]) -> Option<Vec<u8>> {
        let item = usize::try_from(self.item_bytes).ok()?;
        let elements: u64 = self.shape.iter().product();
        let mut out = Vec::with_capacity(usize::try_from(elements).ok()?.checked_mul(item)?);
        if elements == 0 {
            return Some(out);
        }
        // The reach is checked once: every offset below is inside `span`.
        let (_, end) = self.reach(0)?;
        if usize::try_from(end).ok()?.checked_mul(item)? > span.len() {
            return None;
        }
        let dims = self.shape.len();
        let (inner, inner_stride) = match (self.shape.last(), self.stride.last()) {
            (Some(&d), Some(&s)) => (usize::try_from(d).ok()?, usize::try_from(s).ok()?),
            _ => (1, 1),
        };
        let strides: Vec<usize> = self
            .stride
            .iter()
            .map(|&s| usize::try_from(s).ok())
            .collect::<Option<_>>()?;
        let outer = dims.saturating_sub(1);
        let mut index = vec![0_u64; outer];
        let mut at = 0_usize;
        loop {
            // One run along the last axis: a slice when its elements are
            // adjacent, else element by element.
            let start = at * item;
            if inner_stride == 1 {
                out.extend_from_slice(span.get(start..start + inner * item)?);
            } else {
                let step = inner_stride * item;
                for k in 0..inner {
                    let from = start + k * step;
                    out.extend_from_slice(span.get(from..from + item)?);
                }
            }
            // The next run: the outer index, last outer axis fastest, the
            // offset kept as it goes.
            let mut axis = outer;
            loop {
                if axis == 0 {
                    return Some(out);
                }
                axis -= 1;
                index[axis] += 1;
                at += strides[axis];
                if index[axis] < self.shape[axis] {
                    break;
                }
                at -= strides[axis] * usize::try_from(self.shape[axis]).ok()?;
                index[axis] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Strided;

    /// Element `i` of a storage of 2-byte items: `[i, 0x80]`.
    pub(super) fn storage(n: u8) -> Vec<u8> {
        (0..n).flat_map(|i| [i, 0x80]).collect()
    }

    pub(super) fn gathered(
        shape: &[u64],
        stride: &[u64],
        offset: u64,
        span: &[u8],
    ) -> Option<Vec<u8>> {
        let view = Strided {
            item_bytes: 2,
            shape: shape.to_vec(),
            stride: stride.to_vec(),
        };
        let (first, _) = view.reach(offset)?;
        view.gather(span.get(usize::try_from(first * 2).ok()?..)?)
            .map(|b| b.chunks(2).map(|c| c[0]).collect())
    }

    #[test]
    pub(super) fn views_gather_in_row_major_order() {
        let s = storage(12);
        // A 3x4 matrix, its transpose, a column slice, a 3-D view, a scalar.
        assert_eq!(gathered(&[3, 4], &[4, 1], 0, &s), Some((0..12).collect()));
        assert_eq!(
            gathered(&[4, 3], &[1, 4], 0, &s),
            Some(vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11])
        );
        assert_eq!(
            gathered(&[3, 2], &[4, 1], 1, &s),
            Some(vec![1, 2, 5, 6, 9, 10])
        );
        assert_eq!(
            gathered(&[2, 2, 2], &[6, 1, 3], 0, &s),
            Some(vec![0, 3, 1, 4, 6, 9, 7, 10])
        );
        assert_eq!(gathered(&[], &[], 5, &s), Some(vec![5]));
        assert_eq!(gathered(&[0, 4], &[4, 1], 0, &s), Some(vec![]));
        // Strides past the bytes: refused, never a panic.
        assert_eq!(gathered(&[4, 4], &[4, 1], 0, &s), None);
    }
}
