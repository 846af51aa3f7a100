//! Histogram bins counted by one kernel of our own on CUDA, through MLX's
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
    let grid = i32::try_from(blocks * i64::from(THREADS)).map_err(|_| refused("grid"))?;
    let name = c"weightscope_histogram";
    let source = CString::new(SOURCE).map_err(|_| refused("source"))?;
    let (x_name, params_name, counts_name) = (c"x", c"params", c"counts");
    let slots_name = c"SLOTS";
    let stream = Stream::thread_local_or_default();
    let mut result = None;
    #[allow(unsafe_code)]
    // SAFETY: every C string outlives the calls that read it; `x`,
    // `params` and `stream` are live mlx-rs handles; every vector, kernel
    // and config made here is freed here; the output array taken out of
    // `outputs` is a new reference that `Array::from_ptr` owns.
    let status = unsafe {
        let inputs_names = mlx_sys::mlx_vector_string_new();
        let outputs_names = mlx_sys::mlx_vector_string_new();
        mlx_sys::mlx_vector_string_append_value(inputs_names, x_name.as_ptr());
        mlx_sys::mlx_vector_string_append_value(inputs_names, params_name.as_ptr());
        mlx_sys::mlx_vector_string_append_value(outputs_names, counts_name.as_ptr());
        let kernel = mlx_sys::mlx_fast_cuda_kernel_new(
            name.as_ptr(),
            inputs_names,
            outputs_names,
            source.as_ptr(),
            c"".as_ptr(),
            true,
            0,
        );
        let config = mlx_sys::mlx_fast_cuda_kernel_config_new();
        let shape = [slots_i32];
        let mut status = mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
            config,
            shape.as_ptr(),
            1,
            mlx_sys::mlx_dtype__MLX_UINT32,
        );
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config, grid, 1, 1);
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config, THREADS, 1, 1);
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_init_value(config, 0.0);
        status |= mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
            config,
            slots_name.as_ptr(),
            slots_i32,
        );
        let inputs = mlx_sys::mlx_vector_array_new();
        mlx_sys::mlx_vector_array_append_value(inputs, x.as_ptr());
        mlx_sys::mlx_vector_array_append_value(inputs, params.as_ptr());
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
        if status == 0 && mlx_sys::mlx_vector_array_size(outputs) == 1 {
            let mut out = mlx_sys::mlx_array_new();
            if mlx_sys::mlx_vector_array_get(&raw mut out, outputs, 0) == 0 {
                result = Some(Array::from_ptr(out));
            } else {
                mlx_sys::mlx_array_free(out);
            }
        }
        mlx_sys::mlx_vector_array_free(outputs);
        mlx_sys::mlx_vector_array_free(inputs);
        mlx_sys::mlx_fast_cuda_kernel_config_free(config);
        mlx_sys::mlx_fast_cuda_kernel_free(kernel);
        mlx_sys::mlx_vector_string_free(outputs_names);
        mlx_sys::mlx_vector_string_free(inputs_names);
        status
    };
    match result {
        Some(counts) if status == 0 => Ok(counts),
        _ => Err(refused(
            "MLX refused the custom kernel (not a CUDA device?)",
        )),
    }
}
