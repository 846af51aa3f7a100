//! The dense kernel's host side: a dense `f32`, `f16` or `bf16` array
//! centred, summarized (statistics and heatmaps) or binned on the device.

use mlx_rs::Array;

use super::affine::MAX_CELLS;
use super::launch::{Ahead, Launch, ahead_parts, apply, kernel_name};
use super::{Backend, MAX_BLOCKS, MAX_SLOTS, THREADS};
use crate::mlx::MlxError;

/// Threadgroups the Metal bin job writes counts for (each its own row of
/// `slots`, summed by MLX afterwards).
const METAL_BIN_BLOCKS: i64 = 512;

/// Helpers of [`DENSE_SOURCE`]: value `i` of an array of dtype `dt` (0:
/// `f32`, 1: `f16`, 2: `bf16`) handed over as 16-bit words, widened to
/// `f32` as MLX's cast widens it (exactly: every `f16` and `bf16` is an
/// `f32`). One compiled kernel reads all three.
pub(super) const DENSE_HEADER: &str = include_str!("../../../assets/kernels/dense_header.cuh");

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
pub(super) const DENSE_SOURCE: &str = include_str!("../../../assets/kernels/dense_body.cu");

/// The Metal twin of [`DENSE_HEADER`]. **Never run on a device**: used
/// only with the `metal-kernel` feature and where it agrees with MLX's ops
/// at first use (`stats::fused::metal_agrees`); assets/kernels/README.md
/// says how it differs from the CUDA kernel and why.
pub(super) const METAL_DENSE_HEADER: &str =
    include_str!("../../../assets/kernels/dense_header.metal");

/// The Metal twin of [`DENSE_SOURCE`]: jobs 0, 1 and 2 with the same `ip`
/// and `fp` and the same outputs, except that job 1 writes each
/// threadgroup's `slots` counts at `uout[block * slots]`.
pub(super) const METAL_DENSE_SOURCE: &str =
    include_str!("../../../assets/kernels/dense_body.metal");

/// A kernel's parameters, their pages sent to the device before the
/// launch (the host wrote them: see `mlx::cuda`).
pub(super) fn parameters(array: Array) -> Array {
    crate::mlx::cuda::array_to_device(&array);
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
                    which: crate::mlx::cuda::Which::Dense,
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
pub(in crate::mlx) fn dense_image() -> Option<&'static crate::mlx::cuda::Image> {
    crate::mlx::cuda::image(crate::mlx::cuda::Which::Dense, || {
        ahead_parts(crate::mlx::cuda::Which::Dense)
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
pub(super) const DENSE_CONSTANTS: [(&std::ffi::CStr, i32); 3] = [
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
