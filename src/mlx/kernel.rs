//! Histogram bins, and whole summaries of affine-packed weights and of
//! dense `f32`, `f16` and `bf16` arrays, computed by two kernels of our own
//! on CUDA, through MLX's custom-kernel interface (`mlx_fast_cuda_kernel`):
//! blocks count and sum in shared memory and add to the output once, so
//! the device's global atomics see one add per bin per block instead of
//! one per value (MLX's scatter-add). No bin numbers and no converted
//! values are written anywhere.

use std::ffi::CString;

use mlx_rs::{Array, Stream};

use super::MlxError;

/// Threads per block.
const THREADS: i32 = 256;

/// Blocks at most: enough to fill any current GPU several times over; each
/// thread strides over the rest.
const MAX_BLOCKS: i64 = 4096;

/// Largest histogram (bins + 2 slots) the kernel keeps in shared memory.
pub const MAX_SLOTS: usize = 4096;

/// Which of MLX's custom-kernel interfaces a dense launch goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// [`DENSE_SOURCE`], compiled ahead (`mlx::cuda`).
    Cuda,
    /// `mlx_fast_metal_kernel`: [`METAL_DENSE_SOURCE`] (never
    /// run on a device: used only where `stats::fused::metal_agrees`).
    Metal,
}

impl Backend {
    /// The GPU backend of this build's MLX (Metal on macOS, else CUDA).
    pub const BUILD: Self = if cfg!(target_os = "macos") {
        Self::Metal
    } else {
        Self::Cuda
    };
}

/// Threadgroups the Metal bin job writes counts for (each its own row of
/// `slots`, summed by MLX afterwards).
const METAL_BIN_BLOCKS: i64 = 512;

/// The counts of `slots` histogram slots of the flat `f32` array `x`,
/// `[slots]` as `u32`, lazy: the lowest value and the scale map a finite
/// value `v` to slot `(v - lo) * scale` (the maximum lands on `slots - 2`),
/// non-finite values go to `slots - 1`. Counted by job 1 of
/// [`DENSE_SOURCE`].
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device); a kernel that does not
/// compile fails when evaluated.
pub fn histogram_counts(x: &Array, lo: f32, scale: f32, slots: usize) -> Result<Array, MlxError> {
    let n =
        i32::try_from(x.size()).map_err(|_| MlxError::op("histogram kernel", "too many values"))?;
    let values = DenseValues {
        flat: x,
        rows: 1,
        cols: n,
        backend: Backend::BUILD,
    };
    dense_counts(&values, lo, scale, slots)
}

/// Helpers of [`AFFINE_SOURCE`]: one value of an affine-packed weight,
/// computed as MLX's CUDA dequantization computes it (`scale * q + bias`
/// in the scales' own 16-bit type, then widened), so that statistics and
/// bins are those of the values MLX would give.
const AFFINE_HEADER: &str = include_str!("../../assets/kernels/affine_header.cuh");

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
const AFFINE_SOURCE: &str = include_str!("../../assets/kernels/affine_body.cu");

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
                    which: super::cuda::Which::Affine,
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

/// Helpers of [`DENSE_SOURCE`]: value `i` of an array of dtype `dt` (0:
/// `f32`, 1: `f16`, 2: `bf16`) handed over as 16-bit words, widened to
/// `f32` as MLX's cast widens it (exactly: every `f16` and `bf16` is an
/// `f32`). One compiled kernel reads all three.
const DENSE_HEADER: &str = include_str!("../../assets/kernels/dense_header.cuh");

/// Summaries of a dense `f32`, `f16` or `bf16` array read in its own
/// dtype (as 16-bit words, `ip[10]` saying which), `[rows, cols]` (a flat
/// array is one row).
///
/// Job 0: each block takes `row_split` of the rows of one row of heatmap
/// cells and `col_split` of its columns; its threads are a `tx` by
/// `THREADS / tx` tile, each going down a column at a time (loads of a
/// warp are neighbouring values of a row). It writes its minimum, maximum,
/// sum and sum of squared distances to the centre of the finite values
/// (sums in `f64`, as two `f32` halves) and its NaN and Inf counts; each
/// column's run of finite values is added to its cell's sum and its
/// largest |value| to the cell's (in shared memory, then once per block to
/// the output). Job 1 counts histogram slots, each thread in 16-bit
/// counters of its own where they fit (no atomics), else in one block
/// histogram; each block adds its counts to the output once. Nothing is
/// written per value. Job 2 (one block) works out the centre for job 0
/// from the first `slots` values.
///
/// `ip`: job, rows, cols, row step, column step, cells per row (0: no
/// heatmap), row split, column split, tx, slots (job 2: values sampled),
/// dtype. `fp`: centre, lowest value, scale of the bins.
const DENSE_SOURCE: &str = include_str!("../../assets/kernels/dense_body.cu");

/// The Metal twin of [`DENSE_HEADER`]. **Never run on a device**: used
/// only with the `metal-kernel` feature and where it agrees with MLX's ops
/// at first use (`stats::fused::metal_agrees`); assets/kernels/README.md
/// says how it differs from the CUDA kernel and why.
const METAL_DENSE_HEADER: &str = include_str!("../../assets/kernels/dense_header.metal");

/// The Metal twin of [`DENSE_SOURCE`]: jobs 0, 1 and 2 with the same `ip`
/// and `fp` and the same outputs, except that job 1 writes each
/// threadgroup's `slots` counts at `uout[block * slots]`.
const METAL_DENSE_SOURCE: &str = include_str!("../../assets/kernels/dense_body.metal");

/// A kernel's parameters, their pages sent to the device before the
/// launch (the host wrote them: see `mlx::cuda`).
fn parameters(array: Array) -> Array {
    super::cuda::array_to_device(&array);
    array
}

/// A dense array as [`dense_stats`] and [`dense_counts`] read it: its
/// values flat, in their own dtype, seen as `[rows, cols]`.
pub struct DenseValues<'a> {
    /// The values, flat and row-contiguous.
    pub flat: &'a Array,
    /// Rows (the product of every axis but the last; 1 for a flat array).
    pub rows: i32,
    /// Values per row.
    pub cols: i32,
    /// The kernel interface to launch through ([`Backend::BUILD`] but in
    /// tests).
    pub backend: Backend,
}

impl DenseValues<'_> {
    /// Whether the kernel reads this array: `f32`, `f16` or `bf16`, with
    /// `rows * cols` values.
    #[must_use]
    pub fn supported(&self) -> bool {
        // As 16-bit words the values must still be an MLX array (fewer
        // than 2^31 words: an `f32` array under 4 GiB).
        let words = self.flat.size() * self.flat.item_size() / 2;
        dense_type(self.flat.dtype()).is_some()
            && i32::try_from(words).is_ok()
            && self.rows > 0
            && self.cols > 0
            && i64::try_from(self.flat.size())
                .is_ok_and(|n| n == i64::from(self.rows) * i64::from(self.cols))
    }

    /// One launch of [`DENSE_SOURCE`] as `job` says, reading `fp`.
    fn launch(&self, fp: &Array, job: &DenseJob) -> Result<(Array, Array), MlxError> {
        let refused = |what: &str| MlxError::op("summary kernel", what);
        let words = self
            .flat
            .view_dtype(mlx_rs::Dtype::Uint16)
            .map_err(|e| MlxError::op("view as u16", e))?;
        let (base, source, header, constants) = match self.backend {
            Backend::Cuda => (
                "weightscope_dense",
                DENSE_SOURCE,
                DENSE_HEADER,
                &DENSE_CONSTANTS,
            ),
            Backend::Metal => (
                "weightscope_dense_metal",
                METAL_DENSE_SOURCE,
                METAL_DENSE_HEADER,
                &METAL_DENSE_CONSTANTS,
            ),
        };
        let name = kernel_name(base, source, header)?;
        let ip = parameters(Array::from_slice(&job.ip, &[11]));
        let mut out = apply(
            &Launch {
                name: &name,
                source,
                header,
                inputs: &[(c"x", &words), (c"fp", fp), (c"ip", &ip)],
                outputs: &[
                    (c"fout", job.lengths[0], mlx_sys::mlx_dtype__MLX_FLOAT32),
                    (c"uout", job.lengths[1], mlx_sys::mlx_dtype__MLX_UINT32),
                ],
                blocks: job.blocks,
                template_ints: constants,
                ahead: Some(Ahead {
                    which: super::cuda::Which::Dense,
                    scalars: &[],
                    zeroed: job.zeroed,
                }),
            },
            self.backend,
        )?;
        let uints = out.pop().ok_or_else(|| refused("no output"))?;
        let floats = out.pop().ok_or_else(|| refused("no output"))?;
        Ok((floats, uints))
    }

    /// The ints of a launch (`ip` as [`DENSE_SOURCE`] reads it, the dtype
    /// last).
    fn ints(&self, ip: [i32; 10]) -> Result<[i32; 11], MlxError> {
        let dt =
            dense_type(self.flat.dtype()).ok_or_else(|| MlxError::op("summary kernel", "dtype"))?;
        let mut all = [dt; 11];
        all[..10].copy_from_slice(&ip);
        Ok(all)
    }

    /// Job 2 (the centre from the first `sample` values): one block; its
    /// outputs `[centre, 0, 0]` and `[0]`, every one stored.
    ///
    /// # Errors
    /// For a dtype the kernel does not read.
    pub fn centre_job(&self, sample: i32) -> Result<DenseJob, MlxError> {
        Ok(DenseJob {
            ip: self.ints([2, self.rows, self.cols, 1, 1, 0, 1, 1, THREADS, sample])?,
            blocks: 1,
            lengths: [3, 1],
            zeroed: false,
        })
    }

    /// Job 0 (statistics and cells) split as `layout` says.
    ///
    /// # Errors
    /// For a dtype the kernel does not read, or a layout too large for one
    /// launch.
    pub fn stats_job(&self, layout: DenseLayout) -> Result<DenseJob, MlxError> {
        let refused = |what: &str| MlxError::op("summary kernel", what);
        if usize::try_from(layout.out_cols).map_or(true, |c| c > MAX_CELLS) {
            return Err(refused("too many heatmap cells"));
        }
        let blocks = layout.blocks();
        let cells = i64::from(layout.out_rows) * i64::from(layout.out_cols);
        let length = |per_block: i64| {
            i32::try_from(blocks * per_block + cells).map_err(|_| refused("too many blocks"))
        };
        Ok(DenseJob {
            ip: self.ints([
                0,
                self.rows,
                self.cols,
                layout.row_step,
                layout.col_step,
                layout.out_cols,
                layout.row_split,
                layout.col_split,
                layout.tx,
                0,
            ])?,
            blocks,
            lengths: [length(6)?, length(2)?],
            // Each block stores its own figures, and its row of cells
            // unless blocks share it (then they add into it).
            zeroed: layout.row_split * layout.col_split > 1,
        })
    }

    /// Job 1 (the counts of `slots` histogram slots, added into by every
    /// block).
    ///
    /// # Errors
    /// For a dtype the kernel does not read, or too many slots.
    pub fn counts_job(&self, slots: usize) -> Result<DenseJob, MlxError> {
        let refused = |what: &str| MlxError::op("histogram kernel", what);
        let slots = i32::try_from(slots.min(MAX_SLOTS)).map_err(|_| refused("too many bins"))?;
        let n = i64::from(self.rows) * i64::from(self.cols);
        let most = match self.backend {
            Backend::Cuda => MAX_BLOCKS,
            Backend::Metal => METAL_BIN_BLOCKS,
        };
        // Each thread at least 64 values: a block's fixed work (zeroing
        // and adding up its counters, adding them into the slots) is
        // larger than a few dozen values' counting.
        let blocks = (n / (i64::from(THREADS) * BIN_VALUES_PER_THREAD)).clamp(1, most);
        let length = match self.backend {
            Backend::Cuda => slots,
            Backend::Metal => {
                i32::try_from(blocks * i64::from(slots)).map_err(|_| refused("blocks"))?
            }
        };
        Ok(DenseJob {
            ip: self.ints([1, self.rows, self.cols, 1, 1, 0, 1, 1, THREADS, slots])?,
            blocks,
            lengths: [1, length],
            zeroed: true,
        })
    }
}

/// One launch of [`DENSE_SOURCE`], as MLX's custom kernel or
/// `mlx::cuda` makes it: its ints, blocks of [`THREADS`] threads, the
/// lengths of its two outputs (`f32`, `u32`), and whether they must start
/// at zero (the kernel adds into them) or the kernel stores every element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenseJob {
    /// `ip`: job, rows, cols, row step, column step, cells per row, row
    /// split, column split, tx, slots, dtype.
    pub ip: [i32; 11],
    /// Blocks of [`THREADS`] threads.
    pub blocks: i64,
    /// Elements of `fout` and `uout`.
    pub lengths: [i32; 2],
    /// Whether the outputs start at zero.
    pub zeroed: bool,
}

/// Threads in a block of our kernels.
pub const BLOCK_THREADS: i32 = THREADS;

/// The dense kernel compiled ahead (see `mlx::cuda`), where it is.
pub(super) fn dense_image() -> Option<&'static super::cuda::Image> {
    super::cuda::image(super::cuda::Which::Dense, || {
        ahead_parts(super::cuda::Which::Dense)
    })
}

/// The kernel's number for a dense dtype (see [`DENSE_HEADER`]).
fn dense_type(dtype: mlx_rs::Dtype) -> Option<i32> {
    match dtype {
        mlx_rs::Dtype::Float32 => Some(0),
        mlx_rs::Dtype::Float16 => Some(1),
        mlx_rs::Dtype::Bfloat16 => Some(2),
        _ => None,
    }
}

/// How job 0 of [`DENSE_SOURCE`] splits an array among blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenseLayout {
    /// Rows per row of cells (all rows when there is no heatmap).
    pub row_step: i32,
    /// Columns per cell (unused without a heatmap).
    pub col_step: i32,
    /// Rows of cells (1 without a heatmap).
    pub out_rows: i32,
    /// Cells per row (0: no heatmap).
    pub out_cols: i32,
    /// Blocks sharing a row of cells by rows.
    pub row_split: i32,
    /// Blocks sharing it by columns.
    pub col_split: i32,
    /// Threads of a block across columns (the rest go down rows).
    pub tx: i32,
}

impl DenseLayout {
    /// Blocks in all.
    #[must_use]
    pub fn blocks(&self) -> i64 {
        i64::from(self.out_rows) * i64::from(self.row_split) * i64::from(self.col_split)
    }

    /// The split of `[rows, cols]` with the heatmap grid `cells` (`row_step,
    /// col_step, out_rows, out_cols`) or none: about [`TARGET_BLOCKS`]
    /// blocks of at least a few thousand values each.
    #[must_use]
    pub fn new(rows: i32, cols: i32, cells: Option<[i32; 4]>) -> Self {
        let [row_step, col_step, out_rows, out_cols] = cells.unwrap_or([rows.max(1), 1, 1, 0]);
        // Threads across: the columns rounded up to a power of two (so
        // that the rows of threads tile the block), a warp at least.
        let tx = u32::try_from(cols.max(1))
            .unwrap_or(1)
            .next_power_of_two()
            .clamp(32, THREADS.unsigned_abs());
        let tx = i32::try_from(tx).unwrap_or(THREADS);
        let ty = THREADS / tx;
        let n = i64::from(rows.max(1)) * i64::from(cols.max(1));
        // Each block at least 16 values a thread.
        let most = (n / (i64::from(THREADS) * 16)).max(1);
        let target = if out_cols > 0 {
            TARGET_BLOCKS_CELLS
        } else {
            TARGET_BLOCKS
        };
        let wanted = target.min(most);
        let per_cell_row = (wanted / i64::from(out_rows.max(1))).max(1);
        // Rows first (each block keeps whole rows of its columns), as far
        // as a block keeps a row of threads' worth of rows; then columns.
        let row_split = per_cell_row.min(i64::from((row_step / ty).max(1)));
        let col_split =
            (per_cell_row / row_split).min((i64::from(cols.max(1)) / i64::from(tx * 16)).max(1));
        Self {
            row_step,
            col_step,
            out_rows,
            out_cols,
            row_split: i32::try_from(row_split).unwrap_or(1),
            col_split: i32::try_from(col_split).unwrap_or(1),
            tx,
        }
    }
}

impl DenseLayout {
    /// This layout as `backend` runs it: the Metal twin has no output
    /// atomics, so there a row of cells is always one block's.
    #[must_use]
    pub fn for_backend(self, backend: Backend) -> Self {
        match backend {
            Backend::Metal if self.out_cols > 0 => Self {
                row_split: 1,
                col_split: 1,
                ..self
            },
            _ => self,
        }
    }
}

/// Values each thread of the bins job counts, at least (see
/// [`DenseValues::counts_job`]).
const BIN_VALUES_PER_THREAD: i64 = 64;

/// Blocks a dense summary aims for without a heatmap: several per
/// multiprocessor of any current GPU.
const TARGET_BLOCKS: i64 = 2048;

/// With a heatmap: one block per row of cells where there are this many
/// (fewer blocks sharing no row of cells by atomics measured fastest:
/// docs/gpu.md).
const TARGET_BLOCKS_CELLS: i64 = 512;

/// The compile-time sizes of [`DENSE_SOURCE`]: its shared pool (44 KB:
/// per-thread 16-bit bin counters for up to 88 slots) and the sizes it
/// carves it by.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
const DENSE_CONSTANTS: [(&std::ffi::CStr, i32); 3] = [
    (c"POOL_DOUBLES", 5632),
    (c"MAX_CELLS", MAX_CELLS as i32),
    (c"THREADS", THREADS),
];

/// The compile-time sizes of the Metal twin: one threadgroup pool of
/// atomics for both rows of cells or one histogram.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
const METAL_DENSE_CONSTANTS: [(&std::ffi::CStr, i32); 3] = [
    (c"MAX_SHARED", MAX_SLOTS as i32),
    (c"MAX_CELLS", MAX_CELLS as i32),
    (c"THREADS", THREADS),
];

/// Job 2 of [`DENSE_SOURCE`]: `[centre, 0, 0]` (`f32`), the centre that
/// job 0 takes its sums around, from the first `sample` values as
/// `moments::centre_of` takes it on the host (their mean, or 0 where the
/// mean is small beside their spread), lazy: no trip to the host between
/// it and job 0.
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device).
pub fn dense_centre(values: &DenseValues<'_>, sample: i32) -> Result<Array, MlxError> {
    let (centre, _) = values.launch(
        &parameters(Array::from_slice(&[0.0f32, 0.0, 0.0], &[3])),
        &values.centre_job(sample)?,
    )?;
    Ok(centre)
}

/// Job 0 of [`DENSE_SOURCE`], around the centre `centre[0]` (as
/// [`dense_centre`] makes it): per block `[min, max, sum (2 halves),
/// squares (2 halves)]` then the cells' sums (`f32`, `blocks * 6 +
/// cells`), and per block `[nan, inf]` then the cells' largest |values| as
/// `f32` bits (`u32`, `blocks * 2 + cells`), lazy.
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device) or the layout is too
/// large for one launch.
pub fn dense_stats(
    values: &DenseValues<'_>,
    centre: &Array,
    layout: DenseLayout,
) -> Result<(Array, Array), MlxError> {
    values.launch(centre, &values.stats_job(layout)?)
}

/// Job 1 of [`DENSE_SOURCE`]: the counts of `slots` histogram slots,
/// `[slots]` as `u32`, lazy (`lo` and `scale` as in [`histogram_counts`]).
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device).
pub fn dense_counts(
    values: &DenseValues<'_>,
    lo: f32,
    scale: f32,
    slots: usize,
) -> Result<Array, MlxError> {
    let refused = |what: &str| MlxError::op("histogram kernel", what);
    let job = values.counts_job(slots)?;
    let (_, counts) = values.launch(
        &parameters(Array::from_slice(&[0.0, lo, scale], &[3])),
        &job,
    )?;
    match values.backend {
        Backend::Cuda => Ok(counts),
        // Each threadgroup's row of counts, summed.
        Backend::Metal => {
            let rows = i32::try_from(job.blocks).map_err(|_| refused("blocks"))?;
            let counts = counts
                .reshape(&[rows, job.ip[9]])
                .map_err(|e| MlxError::op("reshape bin counts", e))?;
            mlx_rs::ops::sum_axis(&counts, 0, false)
                .and_then(|sums| sums.as_dtype(mlx_rs::Dtype::Uint32))
                .map_err(|e| MlxError::op("sum bin counts", e))
        }
    }
}

/// A kernel's name for MLX: `base` and a hash of its code. MLX keeps
/// compiled kernels by name, in the process and in its on-disk cache, so a
/// changed kernel must never go by an old name.
fn kernel_name(base: &str, source: &str, header: &str) -> Result<CString, MlxError> {
    // FNV-1a, 64 bits: stable across builds and platforms.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in header.bytes().chain([0]).chain(source.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    CString::new(format!("{base}_{hash:016x}"))
        .map_err(|_| MlxError::op("custom kernel", "a name with a NUL"))
}

/// The compile-time sizes of [`AFFINE_SOURCE`] (one compiled kernel for
/// every weight: bits, groups and shapes are run-time values).
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
const AFFINE_CONSTANTS: [(&std::ffi::CStr, i32); 3] = [
    (c"MAX_SLOTS", MAX_SLOTS as i32),
    (c"MAX_CELLS", MAX_CELLS as i32),
    (c"THREADS", THREADS),
];

/// One custom-kernel launch: `blocks` blocks of [`THREADS`] threads.
struct Launch<'a> {
    name: &'a std::ffi::CStr,
    source: &'a str,
    header: &'a str,
    inputs: &'a [(&'a std::ffi::CStr, &'a Array)],
    /// Name, length (one axis) and dtype of each output, zero-filled.
    outputs: &'a [(&'a std::ffi::CStr, i32, mlx_sys::mlx_dtype)],
    blocks: i64,
    template_ints: &'a [(&'a std::ffi::CStr, i32)],
    /// The kernel compiled ahead of MLX (see `mlx::cuda`); `None`: MLX
    /// compiles it.
    ahead: Option<Ahead<'a>>,
}

/// How a launch runs the kernel compiled ahead.
#[derive(Clone, Copy)]
struct Ahead<'a> {
    which: super::cuda::Which,
    /// The ints its function takes after the outputs.
    scalars: &'a [i32],
    /// Whether the outputs must start at zero (the kernel adds into
    /// them); else the kernel stores every element and MLX's fill is
    /// skipped (one kernel less in the evaluation).
    zeroed: bool,
}

/// Applies `launch` on the current stream; the outputs, lazy. On CUDA the
/// kernel compiled ahead (`mlx::cuda`), launched by MLX in its graph; on
/// Metal the source, compiled by MLX (`mlx_fast_metal_kernel`).
fn apply(launch: &Launch<'_>, backend: Backend) -> Result<Vec<Array>, MlxError> {
    match (backend, launch.ahead) {
        (Backend::Metal, _) => apply_source(launch),
        (Backend::Cuda, Some(ahead)) => {
            let image =
                super::cuda::image(ahead.which, || ahead_parts(ahead.which)).ok_or_else(|| {
                    MlxError::op("custom kernel", "our CUDA kernels are not compiled here")
                })?;
            apply_ahead(launch, image, ahead)
        }
        (Backend::Cuda, None) => Err(MlxError::op("custom kernel", "no kernel compiled ahead")),
    }
}

/// [`apply`] through MLX's own compile of the Metal source.
fn apply_source(launch: &Launch<'_>) -> Result<Vec<Array>, MlxError> {
    let refused = |what: &str| MlxError::op("custom kernel", what);
    let grid = i32::try_from(launch.blocks * i64::from(THREADS)).map_err(|_| refused("grid"))?;
    let source = CString::new(launch.source).map_err(|_| refused("source"))?;
    let header = CString::new(launch.header).map_err(|_| refused("header"))?;
    let stream = Stream::thread_local_or_default();
    let mut results = Vec::new();
    #[allow(unsafe_code)]
    // SAFETY: every C string outlives the calls that read it; the input
    // arrays and `stream` are live mlx-rs handles; every vector, kernel and
    // config made here is freed here; each output taken out of `outputs` is
    // a new reference that `Array::from_ptr` owns.
    let status = unsafe {
        let inputs_names = mlx_sys::mlx_vector_string_new();
        let outputs_names = mlx_sys::mlx_vector_string_new();
        for (name, _) in launch.inputs {
            mlx_sys::mlx_vector_string_append_value(inputs_names, name.as_ptr());
        }
        for (name, _, _) in launch.outputs {
            mlx_sys::mlx_vector_string_append_value(outputs_names, name.as_ptr());
        }
        // The last argument: whether outputs are atomic (ours are not).
        let kernel = mlx_sys::mlx_fast_metal_kernel_new(
            launch.name.as_ptr(),
            inputs_names,
            outputs_names,
            source.as_ptr(),
            header.as_ptr(),
            true,
            false,
        );
        let config = mlx_sys::mlx_fast_metal_kernel_config_new();
        let mut status = 0;
        for (_, len, dtype) in launch.outputs {
            let shape = [*len];
            status |= mlx_sys::mlx_fast_metal_kernel_config_add_output_arg(
                config,
                shape.as_ptr(),
                1,
                *dtype,
            );
        }
        status |= mlx_sys::mlx_fast_metal_kernel_config_set_grid(config, grid, 1, 1);
        status |= mlx_sys::mlx_fast_metal_kernel_config_set_thread_group(config, THREADS, 1, 1);
        status |= mlx_sys::mlx_fast_metal_kernel_config_set_init_value(config, 0.0);
        for (name, value) in launch.template_ints {
            status |= mlx_sys::mlx_fast_metal_kernel_config_add_template_arg_int(
                config,
                name.as_ptr(),
                *value,
            );
        }
        let inputs = mlx_sys::mlx_vector_array_new();
        for (_, array) in launch.inputs {
            mlx_sys::mlx_vector_array_append_value(inputs, array.as_ptr());
        }
        let mut outputs = mlx_sys::mlx_vector_array_new();
        if status == 0 {
            status = mlx_sys::mlx_fast_metal_kernel_apply(
                &raw mut outputs,
                kernel,
                inputs,
                config,
                stream.as_ptr(),
            );
        }
        if status == 0 {
            results = super::arrays_of(outputs);
        }
        mlx_sys::mlx_vector_array_free(outputs);
        mlx_sys::mlx_vector_array_free(inputs);
        mlx_sys::mlx_fast_metal_kernel_config_free(config);
        mlx_sys::mlx_fast_metal_kernel_free(kernel);
        mlx_sys::mlx_vector_string_free(outputs_names);
        mlx_sys::mlx_vector_string_free(inputs_names);
        status
    };
    if status == 0 && results.len() == launch.outputs.len() {
        Ok(results)
    } else {
        Err(refused(
            "MLX refused the custom kernel (not a Metal device?)",
        ))
    }
}

/// Starts compiling our CUDA kernels ahead (or reading them from the
/// cache) off this thread; until that ends, summaries use MLX's own ops
/// rather than wait (see [`kernels_settled`]). `false` where it cannot run
/// here (the kernels are then MLX's to compile, when first used).
pub fn prepare_kernels_in_background() -> bool {
    super::cuda::prepare_in_background(|| {
        for which in [super::cuda::Which::Dense, super::cuda::Which::Affine] {
            let _ = super::cuda::image(which, || ahead_parts(which));
        }
    })
}

/// Whether no kernel is being compiled ahead off this thread.
pub fn kernels_settled() -> bool {
    super::cuda::settled()
}

/// Whether both our CUDA kernels are compiled ahead for this process's
/// device (compiling them now where they were not asked for yet): the
/// condition of the kernel path on CUDA.
pub fn kernels_ready() -> bool {
    [super::cuda::Which::Dense, super::cuda::Which::Affine]
        .into_iter()
        .all(|which| super::cuda::image(which, || ahead_parts(which)).is_some())
}

/// Our CUDA kernels as `mlx::cuda` compiles them: the same bodies, in a
/// function of their own with the parameters MLX would generate.
fn ahead_parts(which: super::cuda::Which) -> super::cuda::Parts {
    match which {
        super::cuda::Which::Dense => super::cuda::Parts {
            base: "weightscope_dense",
            header: DENSE_HEADER,
            body: DENSE_SOURCE,
            constants: &DENSE_CONSTANTS,
            signature: "    const unsigned short* x,\n    const float* fp,\n    const int* ip,\n    \
                        float* fout,\n    unsigned int* uout",
            prologue: "",
        },
        super::cuda::Which::Affine => super::cuda::Parts {
            base: "weightscope_affine",
            header: AFFINE_HEADER,
            body: AFFINE_SOURCE,
            constants: &AFFINE_CONSTANTS,
            signature: "    const unsigned int* w,\n    const unsigned short* scales,\n    \
                        const unsigned short* biases,\n    const float* fp,\n    const int* ip,\n    \
                        float* fout,\n    unsigned int* uout,\n    int w_rows,\n    int w_words,\n    \
                        int s_groups",
            prologue: "  const int w_shape[2] = {w_rows, w_words};\n  \
                       const int scales_shape[2] = {w_rows, s_groups};\n",
        },
    }
}

/// [`apply`] for a kernel compiled ahead (`mlx::cuda`): MLX loads the
/// cubin (once a process) and launches it as it launches the others.
fn apply_ahead(
    launch: &Launch<'_>,
    image: &super::cuda::Image,
    ahead: Ahead<'_>,
) -> Result<Vec<Array>, MlxError> {
    let scalars = ahead.scalars;
    let refused = |what: &str| MlxError::op("custom kernel", what);
    let grid = i32::try_from(launch.blocks * i64::from(THREADS)).map_err(|_| refused("grid"))?;
    let stream = Stream::thread_local_or_default();
    let lengths: Vec<i32> = launch.outputs.iter().map(|(_, len, _)| *len).collect();
    let dtypes: Vec<mlx_sys::mlx_dtype> = launch.outputs.iter().map(|(_, _, d)| *d).collect();
    let mut results = Vec::new();
    #[allow(unsafe_code)]
    // SAFETY: the image's name and bytes, the lengths, dtypes and scalars
    // outlive the call (MLX copies what it keeps); the input arrays and
    // `stream` are live mlx-rs handles; both vectors made here are freed
    // here; each output taken out is a new reference `Array` owns.
    let status = unsafe {
        let inputs = mlx_sys::mlx_vector_array_new();
        for (_, array) in launch.inputs {
            mlx_sys::mlx_vector_array_append_value(inputs, array.as_ptr());
        }
        let mut outputs = mlx_sys::mlx_vector_array_new();
        let status = mlx_sys::mlx_fast_cuda_kernel_precompiled_apply(
            &raw mut outputs,
            image.name.as_ptr(),
            image.bytes.as_ptr().cast(),
            image.bytes.len(),
            inputs,
            lengths.as_ptr(),
            dtypes.as_ptr(),
            lengths.len(),
            scalars.as_ptr(),
            scalars.len(),
            grid,
            THREADS,
            0.0,
            ahead.zeroed,
            stream.as_ptr(),
        );
        if status == 0 {
            results = super::arrays_of(outputs);
        }
        mlx_sys::mlx_vector_array_free(outputs);
        mlx_sys::mlx_vector_array_free(inputs);
        status
    };
    if status == 0 && results.len() == launch.outputs.len() {
        Ok(results)
    } else {
        Err(refused("MLX refused the kernel compiled ahead"))
    }
}

/// The variable MLX reads, once, for the folder where it keeps compiled
/// CUDA kernels between processes.
const KERNEL_CACHE_VAR: &str = "MLX_PTX_CACHE_DIR";

/// Set when this process chose MLX's kernel cache folder itself.
static CHOSE_KERNEL_CACHE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// MLX's version, as the library says it.
fn mlx_version() -> String {
    let mut text = String::new();
    #[allow(unsafe_code)]
    // SAFETY: the string is made, read while alive and freed here.
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        if mlx_sys::mlx_version(&raw mut s) == 0 {
            let data = mlx_sys::mlx_string_data(s);
            if !data.is_null() {
                text = std::ffi::CStr::from_ptr(data)
                    .to_string_lossy()
                    .into_owned();
            }
        }
        mlx_sys::mlx_string_free(s);
    }
    text
}

/// Where MLX may keep compiled CUDA kernels between processes: by default
/// a shared temporary folder (`/tmp/mlx/VERSION/ptx`), where another user
/// of the machine could leave a kernel of theirs under one of our kernels'
/// names for MLX to load unchecked. Unless `MLX_PTX_CACHE_DIR` is set
/// already, it is pointed at `kernels/mlx-VERSION` in weightscope's cache
/// folder, made this user's alone, or, where that cannot be had, at a path
/// that cannot be made (no cache at all). MLX 0.32.2 writes nothing there
/// (docs/gpu.md); the folder is ready for a version that does.
///
/// # Safety
/// Sets an environment variable: call it before the process has any other
/// thread.
#[allow(unsafe_code)]
pub unsafe fn keep_kernel_cache_private() {
    if std::env::var_os(KERNEL_CACHE_VAR).is_some() {
        return;
    }
    let version = mlx_version();
    let own = crate::files::cache_dir()
        .map(|d| d.join("kernels").join(format!("mlx-{version}")))
        .filter(|d| !version.is_empty() && crate::files::private_dir(d).is_ok());
    let folder = own.map_or_else(
        || std::ffi::OsString::from("/dev/null/no-kernel-cache"),
        std::path::PathBuf::into_os_string,
    );
    // SAFETY: the caller runs this before any other thread exists.
    unsafe { std::env::set_var(KERNEL_CACHE_VAR, folder) };
    CHOSE_KERNEL_CACHE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Leaves weightscope's choice of kernel cache (see
/// [`keep_kernel_cache_private`]) out of a child's environment: a recorded
/// job runs with the environment it was given.
pub fn leave_kernel_cache_out(command: &mut std::process::Command) {
    if CHOSE_KERNEL_CACHE.load(std::sync::atomic::Ordering::Relaxed) {
        command.env_remove(KERNEL_CACHE_VAR);
    }
}

#[cfg(test)]
mod ahead_tests {
    /// Both kernels as `mlx::cuda` compiles them, by a real NVRTC (no GPU
    /// needed to compile): `WEIGHTSCOPE_TEST_NVRTC` names its library (for
    /// instance from NVIDIA's `nvidia-cuda-nvrtc` wheel, with
    /// `nvidia-cuda-runtime` beside it for the headers). Skipped without.
    #[test]
    fn both_kernels_compile_ahead_with_nvrtc() {
        let Some(path) = std::env::var_os("WEIGHTSCOPE_TEST_NVRTC") else {
            eprintln!("skipped: WEIGHTSCOPE_TEST_NVRTC names no NVRTC library");
            return;
        };
        let path = std::ffi::CString::new(path.into_encoded_bytes()).expect("a path");
        #[allow(unsafe_code)]
        // SAFETY: loading a library the tester named.
        let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        assert!(!lib.is_null(), "NVRTC did not load");
        for which in [
            super::super::cuda::Which::Dense,
            super::super::cuda::Which::Affine,
        ] {
            let bytes = super::super::cuda::compile_for_test(&super::ahead_parts(which), 9, 0)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(bytes.starts_with(b"\x7fELF"), "not a cubin");
            eprintln!("compiled ahead: {} bytes", bytes.len());
        }
    }
}
