//! The affine kernel's host side: an affine-packed weight's words, scales
//! and biases, summarized or binned on the device.

use mlx_rs::Array;

use super::dense::parameters;
use super::launch::{AFFINE_CONSTANTS, Ahead, Launch, apply, kernel_name};
use super::{Backend, MAX_BLOCKS, MAX_SLOTS};
use crate::mlx::MlxError;

/// Helpers of [`AFFINE_SOURCE`]: one value of an affine-packed weight,
/// computed as MLX's CUDA dequantization computes it (`scale * q + bias`
/// in the scales' own 16-bit type, then widened), so that statistics and
/// bins are those of the values MLX would give.
pub(super) const AFFINE_HEADER: &str = include_str!("../../../assets/kernels/affine_header.cuh");

/// Summaries of an affine-packed weight read straight from its words: job 0
/// computes, for each row of heatmap cells (one thread block each), the
/// minimum, maximum, sum and sum of squared distances to the centre of the
/// finite values (sums in `f64`, written as two `f32` halves), the NaN and
/// Inf counts, and the cells' sums; job 1 counts histogram slots as
/// [`histogram_counts`] does. Nothing is dequantized into memory.
///
/// `ip`: job, bits, group size, rows per cell, columns per cell, cells per
/// row, scales are bf16 (else f16), slots. `fp`: centre, lowest value,
/// scale of the bins.
pub(super) const AFFINE_SOURCE: &str = include_str!("../../../assets/kernels/affine_body.cu");

/// Largest row of heatmap cells [`AFFINE_SOURCE`] keeps in shared memory.
pub const MAX_CELLS: usize = 1024;

/// An affine-packed weight as [`affine_stats`] and [`affine_counts`] read
/// it: words `[rows, words]` (`u32`), scales and biases `[rows, groups]`
/// (`f16` or `bf16`).
pub struct AffineWords<'a> {
    /// The packed words.
    pub weight: &'a Array,
    /// Per-group scales.
    pub scales: &'a Array,
    /// Per-group biases.
    pub biases: &'a Array,
    /// Values per group.
    pub group_size: i32,
    /// Bits per value: 2, 4 or 8 (values never straddle words).
    pub bits: i32,
}

impl AffineWords<'_> {
    /// Whether the kernel reads this layout: bits of 2, 4 or 8, groups
    /// whole in words, 16-bit float scales and biases of the same type, and
    /// two-axis arrays of matching rows.
    #[must_use]
    pub fn supported(&self) -> bool {
        let half =
            |a: &Array| matches!(a.dtype(), mlx_rs::Dtype::Float16 | mlx_rs::Dtype::Bfloat16);
        let (w, s, b) = (
            self.weight.shape(),
            self.scales.shape(),
            self.biases.shape(),
        );
        matches!(self.bits, 2 | 4 | 8)
            && self.group_size > 0
            && self.group_size % (32 / self.bits) == 0
            && half(self.scales)
            && self.scales.dtype() == self.biases.dtype()
            && self.weight.dtype() == mlx_rs::Dtype::Uint32
            && w.len() == 2
            && s.len() == 2
            && s == b
            && w[0] == s[0]
            && i64::from(w[1]) * i64::from(32 / self.bits)
                == i64::from(s[1]) * i64::from(self.group_size)
    }

    fn inputs(&self) -> Result<(Array, Array), MlxError> {
        let as_u16 = |a: &Array| {
            a.view_dtype(mlx_rs::Dtype::Uint16)
                .map_err(|e| MlxError::op("view as u16", e))
        };
        Ok((as_u16(self.scales)?, as_u16(self.biases)?))
    }

    /// One launch of [`AFFINE_SOURCE`] with float parameters `fp` and
    /// integer parameters `ip`: its `f32` and `u32` outputs, of the lengths
    /// given, lazy.
    fn launch(
        &self,
        fp: [f32; 3],
        ip: &Array,
        lengths: [i32; 2],
        blocks: i64,
    ) -> Result<(Array, Array), MlxError> {
        let (scales, biases) = self.inputs()?;
        let fp = parameters(Array::from_slice(&fp, &[3]));
        let name = kernel_name("weightscope_affine", AFFINE_SOURCE, AFFINE_HEADER)?;
        // The words' and scales' shapes, which MLX hands the source-compiled
        // kernel as `w_shape` and `scales_shape`.
        let (w, g) = (self.weight.shape(), self.scales.shape());
        let shape = [w[0], w[1], g[1]];
        let mut out = apply(
            &Launch {
                name: &name,
                source: AFFINE_SOURCE,
                header: AFFINE_HEADER,
                inputs: &[
                    (c"w", self.weight),
                    (c"scales", &scales),
                    (c"biases", &biases),
                    (c"fp", &fp),
                    (c"ip", ip),
                ],
                outputs: &[
                    (c"fout", lengths[0], mlx_sys::mlx_dtype__MLX_FLOAT32),
                    (c"uout", lengths[1], mlx_sys::mlx_dtype__MLX_UINT32),
                ],
                blocks,
                template_ints: &AFFINE_CONSTANTS,
                ahead: Some(Ahead {
                    which: crate::mlx::cuda::Which::Affine,
                    scalars: &shape,
                    zeroed: true,
                }),
            },
            Backend::Cuda,
        )?;
        let refused = || MlxError::op("summary kernel", "no output");
        let uints = out.pop().ok_or_else(refused)?;
        let floats = out.pop().ok_or_else(refused)?;
        Ok((floats, uints))
    }

    fn int_params(&self, job: i32, cells: [i32; 3], slots: i32) -> Array {
        let bf16 = i32::from(self.scales.dtype() == mlx_rs::Dtype::Bfloat16);
        let [row_step, col_step, out_cols] = cells;
        parameters(Array::from_slice(
            &[
                job,
                self.bits,
                self.group_size,
                row_step,
                col_step,
                out_cols,
                bf16,
                slots,
            ],
            &[8],
        ))
    }
}

/// Job 0 of [`AFFINE_SOURCE`] over `out_rows` rows of cells, each
/// `row_step` rows by `col_step` columns, `out_cols` to a row: per cell row
/// `[min, max, sum (2 halves), squares (2 halves)]` then the cells' sums
/// (`f32`, `out_rows * (6 + out_cols)`), and `[nan, inf]` per cell row then
/// the cells' largest finite |value| as `f32` bits (`u32`,
/// `out_rows * (2 + out_cols)`), lazy.
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device).
pub fn affine_stats(
    weights: &AffineWords<'_>,
    centre: f32,
    out_rows: i32,
    cells: [i32; 3],
) -> Result<(Array, Array), MlxError> {
    let refused = |what: &str| MlxError::op("summary kernel", what);
    let out_cols = cells[2];
    if usize::try_from(out_cols).map_or(true, |c| c > MAX_CELLS) || out_rows <= 0 {
        return Err(refused("too many heatmap cells"));
    }
    weights.launch(
        [centre, 0.0, 0.0],
        &weights.int_params(0, cells, 0),
        [out_rows * (6 + out_cols), out_rows * (2 + out_cols)],
        i64::from(out_rows),
    )
}

/// Job 1 of [`AFFINE_SOURCE`]: the counts of `slots` histogram slots of the
/// weight's values, `[slots]` as `u32`, lazy (`lo` and `scale` as in
/// [`histogram_counts`]).
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device).
pub fn affine_counts(
    weights: &AffineWords<'_>,
    lo: f32,
    scale: f32,
    slots: usize,
) -> Result<Array, MlxError> {
    let refused = |what: &str| MlxError::op("summary kernel", what);
    let slots = i32::try_from(slots.min(MAX_SLOTS)).map_err(|_| refused("too many bins"))?;
    // A block per row (each strides over further rows when there are more).
    let rows = weights.weight.shape().first().copied().unwrap_or(1);
    let blocks = i64::from(rows).clamp(1, MAX_BLOCKS);
    let (_, counts) = weights.launch(
        [0.0, lo, scale],
        &weights.int_params(1, [1, 1, 1], slots),
        [1, slots],
        blocks,
    )?;
    Ok(counts)
}
