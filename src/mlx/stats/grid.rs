//! The heatmap's grid: cells of `row_step` x `col_step` values, their sums
//! reduced on the device part by part.

use mlx_rs::Array;
use mlx_rs::ops::{self, PadWidth};

use super::{Heatmap, MlxError, Part, op};

/// The heatmap's grid for `shape`, when it has one: `[lead.., cols]` with
/// the leading axes stacked into rows.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grid {
    pub(super) rows: i32,
    pub(super) cols: i32,
    pub(super) row_step: i32,
    pub(super) col_step: i32,
    pub(super) out_rows: i32,
    pub(super) out_cols: i32,
}

impl Grid {
    pub(super) fn new(shape: &[i32], limit: usize) -> Option<Self> {
        let [lead @ .., cols] = shape else {
            return None;
        };
        if lead.is_empty() || *cols <= 0 || lead.iter().any(|d| *d <= 0) {
            return None;
        }
        let rows = lead.iter().product::<i32>();
        let cols = *cols;
        let limit = i32::try_from(limit.max(1)).unwrap_or(512);
        let row_step = (rows + limit - 1) / limit;
        let col_step = (cols + limit - 1) / limit;
        Some(Self {
            rows,
            cols,
            row_step,
            col_step,
            out_rows: (rows + row_step - 1) / row_step,
            out_cols: (cols + col_step - 1) / col_step,
        })
    }

    /// Elements per row of cells: parts start on multiples of it.
    pub(super) fn granule(self) -> i64 {
        i64::from(self.cols) * i64::from(self.row_step)
    }

    /// The cells of `x`, the flat values of `part` (whole rows starting on
    /// a cell row), `[cell rows, 2 * out_cols]`: each row of cells' sums,
    /// then its largest |values|; non-finite values count as 0 when
    /// `masked`. Single-axis reductions, innermost first: MLX's CPU backend
    /// is much faster at these than at one reduction over two strided axes.
    pub(super) fn band_cells(self, x: &Array, part: Part, masked: bool) -> Result<Array, MlxError> {
        let blocks = self.blocks(x, part, masked)?;
        let sums = op(
            "sum",
            op("sum", blocks.sum_axis(3, None))?.sum_axis(1, None),
        )?;
        let largest = Self::block_max_abs(&blocks)?;
        op("concatenate", ops::concatenate(&[sums, largest], 1))
    }

    fn block_max_abs(blocks: &Array) -> Result<Array, MlxError> {
        let magnitude = op("abs", blocks.abs())?;
        op(
            "max",
            op("max", magnitude.max_axis(3, None))?.max_axis(1, None),
        )
    }

    /// `x` as `[cell rows, row_step, out_cols, col_step]`, padded with 0.
    fn blocks(self, x: &Array, part: Part, masked: bool) -> Result<Array, MlxError> {
        let cols = i64::from(self.cols);
        let r0 = i32::try_from(part.start / cols).unwrap_or(0);
        let r1 = r0 + i32::try_from(i64::from(part.len) / cols).unwrap_or(0);
        let cell_rows = (r1 - r0 + self.row_step - 1) / self.row_step;
        let x = if masked {
            let finite = op("isfinite", x.is_finite())?;
            op("where", ops::select(&finite, x, Array::from_f32(0.0)))?
        } else {
            x.clone()
        };
        let x = op("reshape", x.reshape(&[r1 - r0, self.cols]))?;
        let (pad_rows, pad_cols) = (
            cell_rows * self.row_step - (r1 - r0),
            self.out_cols * self.col_step - self.cols,
        );
        let padded = if pad_rows == 0 && pad_cols == 0 {
            x
        } else {
            let widths = [(0, pad_rows), (0, pad_cols)];
            op("pad", ops::pad(&x, PadWidth::from(&widths), None, None))?
        };
        op(
            "reshape",
            padded.reshape(&[cell_rows, self.row_step, self.out_cols, self.col_step]),
        )
    }

    /// The heatmaps (means, largest |values|) from the cells of every
    /// part, in order, as [`Self::band_cells`] lays them out.
    pub(super) fn finish(self, cells: &[f32]) -> (Heatmap, Heatmap) {
        let cols = usize::try_from(self.out_cols).unwrap_or(0).max(1);
        let (mut sums, mut largest) = (Vec::with_capacity(cells.len() / 2), Vec::new());
        for row in cells.chunks_exact(2 * cols) {
            let (s, m) = row.split_at(cols);
            sums.extend_from_slice(s);
            largest.extend_from_slice(m);
        }
        (self.means(&sums), self.heatmap(largest))
    }

    /// The heatmap of means from the cell sums of every part, in order.
    pub(super) fn means(self, sums: &[f32]) -> Heatmap {
        let mut values = vec![0.0; sums.len()];
        self.means_into(sums, &mut values);
        self.heatmap(values)
    }

    /// The means of the cells `sums` (whole rows of cells) into `out`.
    fn means_into(self, sums: &[f32], out: &mut [f32]) {
        let to = |v: i32| usize::try_from(v).unwrap_or(0);
        let (cols, rs, cs) = (
            to(self.out_cols).max(1),
            to(self.row_step).max(1),
            to(self.col_step).max(1),
        );
        let (total_rows, total_cols) = (to(self.rows), to(self.cols));
        // Row by row, each column's width worked out once (262,144 cells
        // took a millisecond with a division and a remainder per cell).
        // `in_rows * in_cols` in f32 is the integer product rounded once,
        // as the `as f32` of it would be.
        let widths: Vec<f32> = (0..cols)
            .map(|c| cs.min(total_cols.saturating_sub(c * cs)).max(1) as f32)
            .collect();
        for (r, (row, out)) in sums.chunks(cols).zip(out.chunks_mut(cols)).enumerate() {
            let in_rows = rs.min(total_rows.saturating_sub(r * rs)).max(1) as f32;
            for ((out, sum), w) in out.iter_mut().zip(row).zip(&widths) {
                *out = sum / (in_rows * w);
            }
        }
    }

    /// A buffer for [`Self::heatmaps_into`], one value per cell, its
    /// pages already touched: first touches of new memory were the longest
    /// part of a small tensor's summary (docs/gpu.md), so a summary makes
    /// its two while the device is still at work.
    pub(super) fn heatmap_buffer(self) -> Vec<f32> {
        let cells = usize::try_from(self.out_rows).unwrap_or(0)
            * usize::try_from(self.out_cols).unwrap_or(0);
        let mut values = Vec::with_capacity(cells);
        // Written, not `calloc`ed: the pages are mapped now, not at the
        // first store into them.
        values.resize(cells, 0.0);
        values
    }

    /// Both heatmaps from a kernel's cells, into `buffers` (see
    /// [`Self::heatmap_buffer`]): the means of the cell sums `sums` and
    /// the largest |values| from their `f32` bits `peaks`.
    pub(super) fn heatmaps_into(
        self,
        sums: &[f32],
        peaks: &[u32],
        buffers: [Vec<f32>; 2],
    ) -> (Heatmap, Heatmap) {
        let [mut means, mut largest] = buffers;
        let n = sums.len().min(peaks.len());
        means.resize(n, 0.0);
        largest.resize(n, 0.0);
        self.means_into(&sums[..n], &mut means);
        for (out, bits) in largest.iter_mut().zip(peaks) {
            *out = f32::from_bits(*bits);
        }
        (self.heatmap(means), self.heatmap(largest))
    }

    /// [`Self::heatmaps_into`] new buffers.
    pub(super) fn heatmaps(self, sums: &[f32], peaks: &[u32]) -> (Heatmap, Heatmap) {
        self.heatmaps_into(sums, peaks, [self.heatmap_buffer(), self.heatmap_buffer()])
    }

    /// A heatmap of this grid holding `values` (row-major cells).
    pub(super) fn heatmap(self, values: Vec<f32>) -> Heatmap {
        let to = |v: i32| usize::try_from(v).unwrap_or(0);
        Heatmap {
            rows: to(self.out_rows),
            cols: to(self.out_cols).max(1),
            row_step: to(self.row_step).max(1),
            col_step: to(self.col_step).max(1),
            values,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Grid;

    /// Both heatmaps made at once into touched buffers are the ones made
    /// apart: every mean divided by its own cell's size (the last row and
    /// column of cells are narrower), every peak its bits' float.
    #[test]
    fn both_heatmaps_at_once_are_the_ones_made_apart() {
        let grid = Grid::new(&[1001, 999], 512).expect("a 2-D grid");
        let cells = usize::try_from(grid.out_rows * grid.out_cols).expect("cells");
        let sums: Vec<f32> = (0..cells)
            .map(|i| (i % 1013) as f32 * 0.37 - 90.0)
            .collect();
        let peaks: Vec<u32> = (0..cells)
            .map(|i| ((i % 977) as f32 * 0.5).to_bits())
            .collect();
        let buffers = [grid.heatmap_buffer(), grid.heatmap_buffer()];
        assert!(buffers.iter().all(|b| b.len() == cells));
        let (means, largest) = grid.heatmaps_into(&sums, &peaks, buffers);
        assert_eq!(means, grid.means(&sums));
        let want: Vec<f32> = peaks.iter().map(|&b| f32::from_bits(b)).collect();
        assert_eq!(largest, grid.heatmap(want));
        // The corner cell holds one row by one column of values (1001 =
        // 500 x 2 + 1, 999 = 499 x 2 + 1), its mean its sum.
        assert_eq!(means.values[cells - 1].to_bits(), sums[cells - 1].to_bits());
        assert_eq!(means.values[0].to_bits(), (sums[0] / 4.0).to_bits());
    }
}
