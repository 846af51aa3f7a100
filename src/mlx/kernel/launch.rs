//! One custom-kernel launch: through the kernel compiled ahead (`mlx::cuda`)
//! or MLX's own compilation of the source, and the ahead compile itself.

use std::ffi::CString;

use mlx_rs::{Array, Stream};

use super::affine::{AFFINE_HEADER, AFFINE_SOURCE, MAX_CELLS};
use super::dense::{DENSE_CONSTANTS, DENSE_HEADER, DENSE_SOURCE};
use super::{Backend, MAX_SLOTS, THREADS};
use crate::mlx::MlxError;

/// A kernel's name for MLX: `base` and a hash of its code. MLX keeps
/// compiled kernels by name, in the process and in its on-disk cache, so a
/// changed kernel must never go by an old name.
pub(super) fn kernel_name(base: &str, source: &str, header: &str) -> Result<CString, MlxError> {
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
pub(super) const AFFINE_CONSTANTS: [(&std::ffi::CStr, i32); 3] = [
    (c"MAX_SLOTS", MAX_SLOTS as i32),
    (c"MAX_CELLS", MAX_CELLS as i32),
    (c"THREADS", THREADS),
];

/// One custom-kernel launch: `blocks` blocks of [`THREADS`] threads.
pub(super) struct Launch<'a> {
    pub(super) name: &'a std::ffi::CStr,
    pub(super) source: &'a str,
    pub(super) header: &'a str,
    pub(super) inputs: &'a [(&'a std::ffi::CStr, &'a Array)],
    /// Name, length (one axis) and dtype of each output, zero-filled.
    pub(super) outputs: &'a [(&'a std::ffi::CStr, i32, mlx_sys::mlx_dtype)],
    pub(super) blocks: i64,
    pub(super) template_ints: &'a [(&'a std::ffi::CStr, i32)],
    /// The kernel compiled ahead of MLX (see `mlx::cuda`); `None`: MLX
    /// compiles it.
    pub(super) ahead: Option<Ahead<'a>>,
}

/// How a launch runs the kernel compiled ahead.
#[derive(Clone, Copy)]
pub(super) struct Ahead<'a> {
    pub(super) which: crate::mlx::cuda::Which,
    /// The ints its function takes after the outputs.
    pub(super) scalars: &'a [i32],
    /// Whether the outputs must start at zero (the kernel adds into
    /// them); else the kernel stores every element and MLX's fill is
    /// skipped (one kernel less in the evaluation).
    pub(super) zeroed: bool,
}

/// Applies `launch` on the current stream; the outputs, lazy. On CUDA the
/// kernel compiled ahead (`mlx::cuda`), launched by MLX in its graph; on
/// Metal the source, compiled by MLX (`mlx_fast_metal_kernel`).
pub(super) fn apply(launch: &Launch<'_>, backend: Backend) -> Result<Vec<Array>, MlxError> {
    match (backend, launch.ahead) {
        (Backend::Metal, _) => apply_source(launch),
        (Backend::Cuda, Some(ahead)) => {
            let image = crate::mlx::cuda::image(ahead.which, || ahead_parts(ahead.which))
                .ok_or_else(|| {
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
            results = crate::mlx::arrays_of(outputs);
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
    crate::mlx::cuda::prepare_in_background(|| {
        for which in [
            crate::mlx::cuda::Which::Dense,
            crate::mlx::cuda::Which::Affine,
        ] {
            let _ = crate::mlx::cuda::image(which, || ahead_parts(which));
        }
    })
}

/// Whether no kernel is being compiled ahead off this thread.
pub fn kernels_settled() -> bool {
    crate::mlx::cuda::settled()
}

/// Whether both our CUDA kernels are compiled ahead for this process's
/// device (compiling them now where they were not asked for yet): the
/// condition of the kernel path on CUDA.
pub fn kernels_ready() -> bool {
    [
        crate::mlx::cuda::Which::Dense,
        crate::mlx::cuda::Which::Affine,
    ]
    .into_iter()
    .all(|which| crate::mlx::cuda::image(which, || ahead_parts(which)).is_some())
}

/// Our CUDA kernels as `mlx::cuda` compiles them: the same bodies, in a
/// function of their own with the parameters MLX would generate.
pub(super) fn ahead_parts(which: crate::mlx::cuda::Which) -> crate::mlx::cuda::Parts {
    match which {
        crate::mlx::cuda::Which::Dense => crate::mlx::cuda::Parts {
            base: "weightscope_dense",
            header: DENSE_HEADER,
            body: DENSE_SOURCE,
            constants: &DENSE_CONSTANTS,
            signature: "    const unsigned short* x,\n    const float* fp,\n    const int* ip,\n    \
                        float* fout,\n    unsigned int* uout",
            prologue: "",
        },
        crate::mlx::cuda::Which::Affine => crate::mlx::cuda::Parts {
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
    image: &crate::mlx::cuda::Image,
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
            results = crate::mlx::arrays_of(outputs);
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

#[cfg(test)]
mod ahead_tests {
    /// Both kernels as `mlx::cuda` compiles them, by a real NVRTC (no GPU
    /// needed to compile): `WEIGHTSCOPE_TEST_NVRTC` names its library (for
    /// instance from NVIDIA's `nvidia-cuda-nvrtc` wheel, with
    /// `nvidia-cuda-runtime` beside it for the headers). Skipped without.
    #[test]
    fn both_kernels_compile_ahead_with_nvrtc() {
        let Some(path) = crate::environment::started_with("WEIGHTSCOPE_TEST_NVRTC") else {
            eprintln!("skipped: WEIGHTSCOPE_TEST_NVRTC names no NVRTC library");
            return;
        };
        let path = std::ffi::CString::new(path.into_encoded_bytes()).expect("a path");
        #[allow(unsafe_code)]
        // SAFETY: loading a library the tester named.
        let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        assert!(!lib.is_null(), "NVRTC did not load");
        for which in [
            crate::mlx::cuda::Which::Dense,
            crate::mlx::cuda::Which::Affine,
        ] {
            let bytes = crate::mlx::cuda::compile_for_test(&super::ahead_parts(which), 9, 0)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(bytes.starts_with(b"\x7fELF"), "not a cubin");
            eprintln!("compiled ahead: {} bytes", bytes.len());
        }
    }
}
