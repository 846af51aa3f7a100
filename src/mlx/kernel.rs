//! Histogram bins (and whole summaries of affine-packed weights) counted
//! by kernels of our own on CUDA, through MLX's
//! custom-kernel interface (`mlx_fast_cuda_kernel`): each thread block
//! counts into a histogram in shared memory and adds it to the output once,
//! so the device's global atomics see one add per bin per block instead of
//! one per value (MLX's scatter-add). One pass over the values: no bin
//! numbers are written anywhere.

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

/// The kernel's body. `params` holds the lowest value and the scale; `SLOTS`
/// is the number of bins plus two: the maximum lands on `SLOTS - 2` and
/// non-finite values on `SLOTS - 1`.
const SOURCE: &str = r"
    __shared__ unsigned int local[SLOTS];
    for (int i = threadIdx.x; i < SLOTS; i += blockDim.x) {
        local[i] = 0;
    }
    __syncthreads();
    const float lo = params[0];
    const float scale = params[1];
    const long long n = x_shape[0];
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        int slot = SLOTS - 1;
        if (isfinite(v)) {
            slot = (int)fminf((v - lo) * scale, (float)(SLOTS - 2));
        }
        atomicAdd(&local[slot], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < SLOTS; i += blockDim.x) {
        if (local[i] != 0) {
            atomicAdd(&counts[i], local[i]);
        }
    }
";

/// The counts of `slots` histogram slots of the flat `f32` array `x` (see
/// [`SOURCE`]), `[slots]` as `u32`, lazy. `params` is `[lo, scale]` as
/// `f32`.
///
/// # Errors
/// When MLX refuses the kernel (not a CUDA device); a kernel that does not
/// compile fails when evaluated.
pub fn histogram_counts(x: &Array, params: &Array, slots: usize) -> Result<Array, MlxError> {
    let refused = |what: &str| MlxError::op("histogram kernel", what);
    let slots_i32 = i32::try_from(slots.min(MAX_SLOTS)).map_err(|_| refused("too many bins"))?;
    let n = i64::try_from(x.size()).map_err(|_| refused("too many values"))?;
    let blocks = ((n + i64::from(THREADS) - 1) / i64::from(THREADS)).clamp(1, MAX_BLOCKS);
    let mut out = apply(&Launch {
        name: c"weightscope_histogram",
        source: SOURCE,
        header: "",
        inputs: &[(c"x", x), (c"params", params)],
        outputs: &[(c"counts", slots_i32, mlx_sys::mlx_dtype__MLX_UINT32)],
        blocks,
        template_ints: &[(c"SLOTS", slots_i32)],
    })?;
    out.pop().ok_or_else(|| refused("no output"))
}

/// Helpers of [`AFFINE_SOURCE`]: one value of an affine-packed weight,
/// computed as MLX's CUDA dequantization computes it (`scale * q + bias`
/// in the scales' own 16-bit type, then widened), so that statistics and
/// bins are those of the values MLX would give.
const AFFINE_HEADER: &str = r"
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float ws_affine_value(
    unsigned int q, unsigned short s, unsigned short b, int bf16) {
  if (bf16) {
    const __nv_bfloat16 scale = __ushort_as_bfloat16(s);
    const __nv_bfloat16 bias = __ushort_as_bfloat16(b);
    return __bfloat162float(scale * __uint2bfloat16_rn(q) + bias);
  }
  const __half scale = __ushort_as_half(s);
  const __half bias = __ushort_as_half(b);
  return __half2float(scale * __uint2half_rn(q) + bias);
}
";

/// Summaries of an affine-packed weight read straight from its words: job 0
/// computes, for each row of heatmap cells (one thread block each), the
/// minimum, maximum, sum and sum of squared distances to the centre of the
/// finite values (sums in `f64`, written as two `f32` halves), the NaN and
/// Inf counts, and the cells' sums; job 1 counts histogram slots as
/// [`SOURCE`] does. Nothing is dequantized into memory.
///
/// `ip`: job, bits, group size, rows per cell, columns per cell, cells per
/// row, scales are bf16 (else f16), slots. `fp`: centre, lowest value,
/// scale of the bins.
const AFFINE_SOURCE: &str = r"
    const int job = ip[0], bits = ip[1], group = ip[2];
    const int row_step = ip[3], col_step = ip[4], out_cols = ip[5];
    const int bf16 = ip[6], slots = ip[7];
    const long long rows = w_shape[0], words = w_shape[1];
    const long long groups = scales_shape[1];
    const int pack = 32 / bits;
    const unsigned int mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1u);
    __shared__ unsigned int hist[MAX_SLOTS];
    __shared__ float cells[MAX_CELLS];
    __shared__ double red_d[2][THREADS];
    __shared__ float red_f[2][THREADS];
    __shared__ unsigned int red_u[2][THREADS];
    const int t = threadIdx.x;
    if (job == 1) {
        for (int i = t; i < slots; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        const float lo = fp[1], scale = fp[2];
        for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
            for (int wi = t; wi < words; wi += blockDim.x) {
                const unsigned int word = w[row * words + wi];
                const long long g = row * groups + (wi * pack) / group;
                const unsigned short s = scales[g], b = biases[g];
                for (int i = 0; i < pack; i++) {
                    const float v = ws_affine_value((word >> (bits * i)) & mask, s, b, bf16);
                    int slot = slots - 1;
                    if (isfinite(v)) slot = (int)fminf((v - lo) * scale, (float)(slots - 2));
                    atomicAdd(&hist[slot], 1u);
                }
            }
        }
        __syncthreads();
        for (int i = t; i < slots; i += blockDim.x) {
            if (hist[i] != 0) atomicAdd(&uout[i], hist[i]);
        }
        return;
    }
    for (int i = t; i < out_cols; i += blockDim.x) cells[i] = 0.0f;
    __syncthreads();
    const double centre = (double)fp[0];
    const long long r0 = (long long)blockIdx.x * row_step;
    const long long r1 = r0 + row_step < rows ? r0 + row_step : rows;
    float lo = __int_as_float(0x7f800000), hi = __int_as_float(0xff800000);
    double sum = 0.0, squares = 0.0;
    unsigned int nans = 0, infs = 0;
    for (long long row = r0; row < r1; row++) {
        for (int wi = t; wi < words; wi += blockDim.x) {
            const unsigned int word = w[row * words + wi];
            const int col0 = wi * pack;
            const long long g = row * groups + col0 / group;
            const unsigned short s = scales[g], b = biases[g];
            int cell = col0 / col_step;
            int next = (cell + 1) * col_step;
            float run = 0.0f;
            for (int i = 0; i < pack; i++) {
                const float v = ws_affine_value((word >> (bits * i)) & mask, s, b, bf16);
                while (col0 + i >= next) {
                    atomicAdd(&cells[cell], run);
                    cell++;
                    next += col_step;
                    run = 0.0f;
                }
                if (isfinite(v)) {
                    lo = fminf(lo, v);
                    hi = fmaxf(hi, v);
                    sum += (double)v;
                    const double d = (double)v - centre;
                    squares += d * d;
                    run += v;
                } else if (isnan(v)) {
                    nans++;
                } else {
                    infs++;
                }
            }
            atomicAdd(&cells[cell], run);
        }
    }
    red_d[0][t] = sum; red_d[1][t] = squares;
    red_f[0][t] = lo; red_f[1][t] = hi;
    red_u[0][t] = nans; red_u[1][t] = infs;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if (t < step) {
            red_d[0][t] += red_d[0][t + step];
            red_d[1][t] += red_d[1][t + step];
            red_f[0][t] = fminf(red_f[0][t], red_f[0][t + step]);
            red_f[1][t] = fmaxf(red_f[1][t], red_f[1][t + step]);
            red_u[0][t] += red_u[0][t + step];
            red_u[1][t] += red_u[1][t + step];
        }
        __syncthreads();
    }
    const long long out_rows = gridDim.x;
    if (t == 0) {
        float* mine = fout + blockIdx.x * 6;
        const float sum_hi = (float)red_d[0][0];
        const float sq_hi = (float)red_d[1][0];
        mine[0] = red_f[0][0];
        mine[1] = red_f[1][0];
        mine[2] = sum_hi;
        mine[3] = (float)(red_d[0][0] - (double)sum_hi);
        mine[4] = sq_hi;
        mine[5] = (float)(red_d[1][0] - (double)sq_hi);
        uout[blockIdx.x * 2] = red_u[0][0];
        uout[blockIdx.x * 2 + 1] = red_u[1][0];
    }
    for (int i = t; i < out_cols; i += blockDim.x) {
        fout[out_rows * 6 + (long long)blockIdx.x * out_cols + i] = cells[i];
    }
";

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
        let fp = Array::from_slice(&fp, &[3]);
        let mut out = apply(&Launch {
            name: c"weightscope_affine",
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
        })?;
        let refused = || MlxError::op("summary kernel", "no output");
        let uints = out.pop().ok_or_else(refused)?;
        let floats = out.pop().ok_or_else(refused)?;
        Ok((floats, uints))
    }

    fn int_params(&self, job: i32, cells: [i32; 3], slots: i32) -> Array {
        let bf16 = i32::from(self.scales.dtype() == mlx_rs::Dtype::Bfloat16);
        let [row_step, col_step, out_cols] = cells;
        Array::from_slice(
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
        )
    }
}

/// Job 0 of [`AFFINE_SOURCE`] over `out_rows` rows of cells, each
/// `row_step` rows by `col_step` columns, `out_cols` to a row: per cell row
/// `[min, max, sum (2 halves), squares (2 halves)]` then the cells' sums
/// (`f32`, `out_rows * (6 + out_cols)`), and `[nan, inf]` per cell row
/// (`u32`), lazy.
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
        [out_rows * (6 + out_cols), out_rows * 2],
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
}

/// Builds and applies `launch` through `mlx_fast_cuda_kernel` on the
/// current stream; the outputs, lazy.
fn apply(launch: &Launch<'_>) -> Result<Vec<Array>, MlxError> {
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
        let kernel = mlx_sys::mlx_fast_cuda_kernel_new(
            launch.name.as_ptr(),
            inputs_names,
            outputs_names,
            source.as_ptr(),
            header.as_ptr(),
            true,
            0,
        );
        let config = mlx_sys::mlx_fast_cuda_kernel_config_new();
        let mut status = 0;
        for (_, len, dtype) in launch.outputs {
            let shape = [*len];
            status |= mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                config,
                shape.as_ptr(),
                1,
                *dtype,
            );
        }
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config, grid, 1, 1);
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config, THREADS, 1, 1);
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_init_value(config, 0.0);
        for (name, value) in launch.template_ints {
            status |= mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
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
            status = mlx_sys::mlx_fast_cuda_kernel_apply(
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
        mlx_sys::mlx_fast_cuda_kernel_config_free(config);
        mlx_sys::mlx_fast_cuda_kernel_free(kernel);
        mlx_sys::mlx_vector_string_free(outputs_names);
        mlx_sys::mlx_vector_string_free(inputs_names);
        status
    };
    if status == 0 && results.len() == launch.outputs.len() {
        Ok(results)
    } else {
        Err(refused(
            "MLX refused the custom kernel (not a CUDA device?)",
        ))
    }
}
