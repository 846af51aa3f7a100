//! The histogram's pass: bin numbers from the statistics' range, counted on
//! the device (our CUDA kernel or MLX's scatter-add) or, on MLX's CPU
//! backend, one byte per value on the host; the heatmap's cells from the
//! same chunks.

use mlx_rs::ops;
use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Dtype, Stream};

use super::grid::Grid;
use super::{
    BIN_BLOCK, BinsOn, Histogram, Input, MlxError, Part, Plan, Stats, evaluate, evaluate_all,
    kernel, on_stream, op, to_f32_vec,
};

/// The lowest value and the scale that make `(x - lo) * scale` a bin
/// number in `[0, bins]` over `[stats.min, stats.max]` (scale 0 when every
/// value is the same).
pub(super) fn bin_scale(stats: &Stats, bins: usize) -> (f32, f32) {
    let width = stats.max - stats.min;
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    (
        stats.min as f32,
        if width > 0.0 {
            (bins as f64 / width) as f32
        } else {
            0.0
        },
    )
}

/// How values become bin numbers: `(x - min) * scale` lies in `[0, bins]`
/// for finite `x` (the maximum lands on `bins` and belongs to the last
/// bin); non-finite values get `bins + 1` and are not counted.
struct Binning {
    bins: usize,
    lo: Array,
    scale: Array,
    /// `(lo, scale)` for the kernel.
    kernel_params: (f32, f32),
    /// Values may be large enough for `x - min` to overflow `f32`: clip
    /// before the cast (otherwise `x - min` lies in `[0, max - min]` and
    /// the scaled value in `[0, bins]` within a rounding, no clip needed).
    clip: bool,
}

impl Binning {
    /// `(x - min) * scale` for the flat `x` of one part, in `[0, bins]`
    /// (clipped when [`Binning::clip`] says so, so that no value overflows
    /// the cast that follows), with non-finite values at `bins + 1` unless
    /// the part is `clean`.
    fn scaled(&self, x: &Array, clean: bool) -> Result<Array, MlxError> {
        let scaled = op(
            "scale",
            op("subtract", x.subtract(&self.lo))?.multiply(&self.scale),
        )?;
        let scaled = if self.clip {
            #[allow(clippy::cast_precision_loss)]
            let top = Array::from_f32(self.bins as f32);
            op("clip", ops::minimum(&scaled, &top))?
        } else {
            scaled
        };
        if clean {
            return Ok(scaled);
        }
        let keep = op("isfinite", x.is_finite())?;
        #[allow(clippy::cast_precision_loss)]
        let skip = Array::from_f32((self.bins + 1) as f32);
        op("where", ops::select(&keep, &scaled, &skip))
    }

    /// One byte per value (the CPU path; `bins` < 255).
    fn bytes(&self, x: &Array, clean: bool) -> Result<Array, MlxError> {
        // The cast truncates, which is floor for these non-negative values.
        op("cast", self.scaled(x, clean)?.as_dtype(Dtype::Uint8))
    }

    /// The counts of `bins + 2` bin numbers of the flat `x` of `len`
    /// values, counted on the device in blocks of [`BIN_BLOCK`] values (see
    /// there), `[bins + 2]` as `u32`, lazy.
    fn device_counts(&self, x: &Array, len: i32, clean: bool) -> Result<Array, MlxError> {
        let idx = op("cast", self.scaled(x, clean)?.as_dtype(Dtype::Int32))?;
        let width = i32::try_from(self.bins + 2).unwrap_or(i32::MAX);
        let main = len - len % BIN_BLOCK;
        let mut counts: Option<Array> = None;
        let mut add = |rows: i32, block: i32, idx: Array| -> Result<(), MlxError> {
            let idx = op("reshape", idx.reshape(&[rows, block]))?;
            let zeros = op("zeros", Array::zeros::<u32>(&[rows, width]))?;
            let ones = op(
                "ones",
                ops::broadcast_to(Array::from_slice(&[1u32], &[1]), &[rows, block]),
            )?;
            let per_row = scatter_add_axis(&zeros, &idx, &ones, 1)?;
            let total = op("sum", per_row.sum_axis(0, None))?;
            counts = Some(match counts.take() {
                Some(c) => op("add", c.add(&total))?,
                None => total,
            });
            Ok(())
        };
        if main > 0 {
            let body = if main == len {
                idx.clone()
            } else {
                op("slice", idx.try_index(0..main))?
            };
            add(main / BIN_BLOCK, BIN_BLOCK, body)?;
        }
        if main < len {
            add(1, len - main, op("slice", idx.try_index(main..len))?)?;
        }
        counts.ok_or_else(|| MlxError::op("histogram", "an empty part"))
    }
}

/// Pass 2: the histogram (bins over `[stats.min, stats.max]`) and the
/// heatmap's cell sums of every part, in order. `clean[i]`: part `i` holds
/// no NaN or Inf.
pub(super) fn second_pass(
    input: &Input<'_>,
    parts: &[Part],
    clean: &[bool],
    stats: &Stats,
    bins: usize,
    grid: Option<Grid>,
    plan: Plan,
) -> Result<(Histogram, Vec<f32>), MlxError> {
    let counting = stats.finite > 0 && bins > 0;
    let bins = match plan.bins {
        // Bytes: 255 and 254 are taken.
        BinsOn::Host => bins.min(usize::from(u8::MAX) - 1),
        BinsOn::Scatter => bins.min(1 << 16),
        BinsOn::Kernel => bins.min(kernel::MAX_SLOTS - 2),
    };
    let (lo, scale) = bin_scale(stats, bins);
    let binning = Binning {
        bins,
        lo: Array::from_f32(lo),
        scale: Array::from_f32(scale),
        kernel_params: (lo, scale),
        clip: stats.min.abs().max(stats.max.abs()) >= f64::from(f32::MAX) / 4.0,
    };
    let mut local = vec![0u64; bins + 2];
    let mut heat_sums = Vec::new();
    if plan.bins != BinsOn::Host || !counting {
        // Nothing to do on the host per chunk: counts add up on the device
        // and the cells are read once at the end.
        let mut total: Option<Array> = None;
        let mut cells = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            on_stream(i, || -> Result<(), MlxError> {
                let x = input.values(*part)?;
                if counting {
                    let counts = if plan.bins == BinsOn::Kernel {
                        kernel::histogram_counts(
                            &x,
                            binning.kernel_params.0,
                            binning.kernel_params.1,
                            bins + 2,
                        )?
                    } else {
                        binning.device_counts(&x, part.len, clean[i])?
                    };
                    total = Some(match total.take() {
                        Some(t) => op("add", t.add(&counts))?,
                        None => counts,
                    });
                }
                if let Some(g) = grid {
                    cells.push(g.band_cells(&x, *part, !clean[i])?);
                }
                op(
                    "evaluate",
                    mlx_rs::transforms::async_eval(total.iter().chain(cells.last())),
                )
            })?;
        }
        if let Some(total) = &total {
            evaluate(total)?;
            let counts = total
                .try_as_slice::<u32>()
                .map_err(|e| MlxError::op("read bin counts", e))?;
            for (sum, add) in local.iter_mut().zip(counts) {
                *sum += u64::from(*add);
            }
        }
        if !cells.is_empty() {
            heat_sums = to_f32_vec(&op("concatenate", ops::concatenate(&cells, 0))?)?;
        }
    } else {
        host_pass(
            input,
            parts,
            clean,
            &binning,
            grid,
            &mut local,
            &mut heat_sums,
        )?;
    }
    let mut counts = vec![0u64; bins];
    if counting {
        counts.copy_from_slice(&local[..bins]);
        // The maximum lands exactly on `bins`: it belongs to the last bin.
        if let Some(last) = counts.last_mut() {
            *last += local[bins];
        }
    }
    Ok((
        Histogram {
            min: stats.min,
            max: stats.max,
            counts,
        },
        heat_sums,
    ))
}

/// Pass 2 on the CPU: bin numbers come to the host a byte per value, chunk
/// by chunk on both streams, and are counted there while the next chunks
/// are computed (MLX's CPU scatter-add is slower); the heatmap's cells of
/// each chunk come with them.
fn host_pass(
    input: &Input<'_>,
    parts: &[Part],
    clean: &[bool],
    binning: &Binning,
    grid: Option<Grid>,
    local: &mut [u64],
    heat_sums: &mut Vec<f32>,
) -> Result<(), MlxError> {
    type Pending = std::collections::VecDeque<(Array, Option<Array>)>;
    let mut byte_counts = [0u64; 256];
    let mut drain = |pending: &mut Pending, keep: usize| -> Result<(), MlxError> {
        while pending.len() > keep {
            let Some((bytes, cells)) = pending.pop_front() else {
                break;
            };
            evaluate_all(std::iter::once(&bytes).chain(cells.iter()))?;
            let chunk = bytes
                .try_as_slice::<u8>()
                .map_err(|e| MlxError::op("read bin numbers", e))?;
            count_bytes(chunk, &mut byte_counts);
            if let Some(c) = &cells {
                heat_sums.extend(to_f32_vec(c)?);
            }
        }
        Ok(())
    };
    let mut pending = Pending::new();
    for (i, part) in parts.iter().enumerate() {
        let out = on_stream(i, || -> Result<_, MlxError> {
            let x = input.values(*part)?;
            let bytes = binning.bytes(&x, clean[i])?;
            let cells = grid
                .map(|g| g.band_cells(&x, *part, !clean[i]))
                .transpose()?;
            op(
                "evaluate",
                mlx_rs::transforms::async_eval(std::iter::once(&bytes).chain(cells.iter())),
            )?;
            Ok((bytes, cells))
        })?;
        pending.push_back(out);
        // Two chunks in flight, one per stream, while the host counts.
        drain(&mut pending, 2)?;
    }
    drain(&mut pending, 0)?;
    for (total, add) in local.iter_mut().zip(byte_counts) {
        *total += add;
    }
    Ok(())
}

/// `a` with `values` added at `indices` along `axis` (MLX's
/// `scatter_add_axis`, which mlx-rs does not wrap), lazy.
fn scatter_add_axis(
    a: &Array,
    indices: &Array,
    values: &Array,
    axis: i32,
) -> Result<Array, MlxError> {
    let stream = Stream::thread_local_or_default();
    let mut result = None;
    #[allow(unsafe_code)]
    // SAFETY: `a`, `indices`, `values` and `stream` are live mlx-rs handles;
    // `out` receives a new array that `Array::from_ptr` owns only when the
    // call succeeded, and is freed here otherwise.
    let status = unsafe {
        let mut out = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_scatter_add_axis(
            &raw mut out,
            a.as_ptr(),
            indices.as_ptr(),
            values.as_ptr(),
            axis,
            stream.as_ptr(),
        );
        if status == 0 {
            result = Some(Array::from_ptr(out));
        } else {
            mlx_sys::mlx_array_free(out);
        }
        status
    };
    match result {
        Some(array) if status == 0 => Ok(array),
        _ => Err(MlxError::op("scatter-add", "MLX refused the bin counts")),
    }
}

/// Adds the number of times each byte value occurs in `bytes` to `counts`.
/// Four tables in turn: runs of one value (common: neighbouring weights
/// fall in the same bin) would otherwise make each increment wait for the
/// previous one to the same counter, four times slower.
pub(super) fn count_bytes(bytes: &[u8], counts: &mut [u64; 256]) {
    let mut tables = [[0u32; 256]; 4];
    // u32 counters cannot overflow within 2^32 bytes; chunks are far smaller.
    for chunk in bytes.chunks(u32::MAX as usize) {
        let mut quads = chunk.chunks_exact(4);
        for quad in &mut quads {
            tables[0][usize::from(quad[0])] += 1;
            tables[1][usize::from(quad[1])] += 1;
            tables[2][usize::from(quad[2])] += 1;
            tables[3][usize::from(quad[3])] += 1;
        }
        for &b in quads.remainder() {
            tables[0][usize::from(b)] += 1;
        }
        for table in &mut tables {
            for (count, add) in counts.iter_mut().zip(table.iter_mut()) {
                *count += u64::from(std::mem::take(add));
            }
        }
    }
}
