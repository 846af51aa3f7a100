//! Every MLX quantization mode and FP8, through MLX itself.
//!
//! mlx-rs 0.33 hard-codes the affine mode in `quantize` and `dequantize`, so
//! this module calls mlx-c's `mlx_quantize` / `mlx_dequantize` with the mode
//! (the one place outside mlx-rs that calls mlx-sys). FP8 and the uint8
//! scales of the fp modes are decoded on the device through a 256-entry
//! table of each format's exact values (a gather). Not MLX's `from_fp8`:
//! in MLX 0.32.2 it decodes the E4M3 NaN codes 0x7F/0xFF as ±480, which
//! would hide a NaN in a checkpoint behind a plausible weight; every other
//! code it decodes as the table does (a test checks both facts).

use std::ffi::CString;

use mlx_rs::{Array, Dtype, Stream};

use super::MlxError;

/// Floats stored one byte each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteFloat {
    /// FP8 E4M3 (OCP "FN": no infinities, 0x7F/0xFF are NaN, max 448).
    E4M3,
    /// FP8 E5M2 (the top byte of an IEEE f16).
    E5M2,
    /// E8M0: a power of two, 2^(byte - 127); 0xFF is NaN (MX scales).
    E8M0,
}

impl ByteFloat {
    /// The exact value of byte `code`, computed on the host (the reference
    /// for tests and the decoding table for E5M2 and E8M0).
    #[must_use]
    pub fn value(self, code: u8) -> f32 {
        match self {
            Self::E8M0 => {
                if code == 0xFF {
                    f32::NAN
                } else {
                    2f32.powi(i32::from(code) - 127)
                }
            }
            Self::E5M2 => half::f16::from_bits(u16::from(code) << 8).to_f32(),
            Self::E4M3 => {
                let sign = if code & 0x80 == 0 { 1.0 } else { -1.0 };
                let exponent = i32::from((code >> 3) & 0x0F);
                let mantissa = f32::from(code & 0x07);
                if code & 0x7F == 0x7F {
                    f32::NAN
                } else if exponent == 0 {
                    sign * mantissa / 8.0 * 2f32.powi(-6)
                } else {
                    sign * (1.0 + mantissa / 8.0) * 2f32.powi(exponent - 7)
                }
            }
        }
    }
}

fn op<T>(operation: &'static str, r: Result<T, mlx_rs::error::Exception>) -> Result<T, MlxError> {
    r.map_err(|e| MlxError::op(operation, e))
}

/// Byte codes (`uint8`, as MLX loads FP8 tensors and fp-mode scales)
/// decoded to `f32`.
///
/// # Errors
/// When `codes` is not `uint8` or MLX fails.
pub fn decode_bytes(codes: &Array, format: ByteFloat) -> Result<Array, MlxError> {
    if codes.dtype() != Dtype::Uint8 {
        return Err(MlxError::Op {
            operation: "decode byte floats",
            message: format!("expected uint8 codes, got {:?}", codes.dtype()),
        });
    }
    let table: Vec<f32> = (0..=255u8).map(|c| format.value(c)).collect();
    let table = Array::from_slice(&table, &[256]);
    let index = op("widen codes", codes.as_dtype(Dtype::Uint32))?;
    op("decode byte floats", table.take(&index))
}

/// The MLX mode string for `mode`, checked.
fn mode_cstr(mode: &str) -> Result<CString, MlxError> {
    CString::new(mode).map_err(|_| MlxError::Op {
        operation: "quantization mode",
        message: format!("bad mode name `{mode}`"),
    })
}

/// Makes sure mlx-rs has installed its error handler (mlx-c's default one
/// exits the process): any fallible mlx-rs operation does it.
fn ensure_error_handler() -> Result<(), MlxError> {
    op("cast", Array::from_f32(0.0).as_dtype(Dtype::Float32)).map(drop)
}

fn optional_int(value: u64) -> mlx_sys::mlx_optional_int {
    mlx_sys::mlx_optional_int {
        value: i32::try_from(value).unwrap_or(i32::MAX),
        has_value: true,
    }
}

/// MLX's dequantization of a packed weight in any mode (`"affine"`,
/// `"mxfp4"`, `"mxfp8"`, `"nvfp4"`); `biases` only for affine;
/// `global_scale` for nvfp4 weights quantized with one (a scalar, or one per
/// expert of a stacked `[experts, out, in]` weight, as mlx-lm's switch layers
/// store it: MLX takes only scalars, so experts are dequantized one by one).
///
/// # Errors
/// When MLX rejects the shapes, dtypes or parameters (checked here first,
/// so the message says which).
pub fn dequantize(
    weight: &Array,
    scales: &Array,
    biases: Option<&Array>,
    mode: &str,
    group_size: u64,
    bits: u64,
    global_scale: Option<&Array>,
) -> Result<Array, MlxError> {
    match global_scale {
        Some(gs) if gs.size() > 1 => {
            let experts = weight.shape().first().copied().unwrap_or(0);
            if weight.ndim() < 3 || gs.shape() != [experts] {
                return Err(MlxError::Op {
                    operation: "dequantize",
                    message: format!(
                        "global scale {:?} does not give one scale per expert of {:?}",
                        gs.shape(),
                        weight.shape()
                    ),
                });
            }
            let mut parts = Vec::new();
            for e in 0..experts {
                let index = Array::from_int(e);
                let pick = |a: &Array| op("take expert", a.take_axis(&index, 0));
                parts.push(dequantize_one(
                    &pick(weight)?,
                    &pick(scales)?,
                    None,
                    mode,
                    group_size,
                    bits,
                    Some(&pick(gs)?),
                )?);
            }
            op("stack experts", mlx_rs::ops::stack(&parts, 0))
        }
        Some(gs) => {
            let scalar = op("reshape global scale", gs.reshape(&[]))?;
            dequantize_one(
                weight,
                scales,
                biases,
                mode,
                group_size,
                bits,
                Some(&scalar),
            )
        }
        None => dequantize_one(weight, scales, biases, mode, group_size, bits, None),
    }
}

fn dequantize_one(
    weight: &Array,
    scales: &Array,
    biases: Option<&Array>,
    mode: &str,
    group_size: u64,
    bits: u64,
    global_scale: Option<&Array>,
) -> Result<Array, MlxError> {
    let bad = |message: String| MlxError::Op {
        operation: "dequantize",
        message,
    };
    let (w, s) = (weight.shape(), scales.shape());
    let words = w.last().copied().unwrap_or(0);
    let groups = s.last().copied().unwrap_or(0);
    let inputs = i64::from(words) * 32 / i64::try_from(bits.max(1)).unwrap_or(1);
    if weight.dtype() != Dtype::Uint32
        || w.len() != s.len()
        || w[..w.len().saturating_sub(1)] != s[..s.len().saturating_sub(1)]
        || i64::try_from(group_size)
            .ok()
            .and_then(|g| i64::from(groups).checked_mul(g))
            != Some(inputs)
    {
        return Err(bad(format!(
            "{mode} {bits}-bit group {group_size}: packed {:?} {w:?} does not fit scales {s:?}",
            weight.dtype()
        )));
    }
    if mode != "affine" && (biases.is_some() || scales.dtype() != Dtype::Uint8) {
        return Err(bad(format!(
            "{mode} needs uint8 scales and no biases (scales are {:?})",
            scales.dtype()
        )));
    }
    if mode == "affine" && biases.is_none() {
        return Err(bad("affine quantization needs biases".into()));
    }
    ensure_error_handler()?;
    let mode_c = mode_cstr(mode)?;
    let stream = Stream::thread_local_or_default();
    let mut result = Array::from_f32(0.0);
    #[allow(unsafe_code)]
    // SAFETY: every handle passed is a live mlx-rs array or stream (or a
    // fresh empty array standing for "none"); `out` receives a new array that
    // `Array::from_ptr` takes ownership of only when the call succeeded, and
    // is freed here otherwise.
    let status = unsafe {
        let none = mlx_sys::mlx_array_new();
        let mut out = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_dequantize(
            &raw mut out,
            weight.as_ptr(),
            scales.as_ptr(),
            biases.map_or(none, Array::as_ptr),
            optional_int(group_size),
            optional_int(bits),
            mode_c.as_ptr(),
            global_scale.map_or(none, Array::as_ptr),
            mlx_sys::mlx_optional_dtype {
                value: mlx_sys::mlx_dtype__MLX_FLOAT32,
                has_value: true,
            },
            stream.as_ptr(),
        );
        mlx_sys::mlx_array_free(none);
        if status == 0 {
            result = Array::from_ptr(out);
        } else {
            mlx_sys::mlx_array_free(out);
        }
        status
    };
    if status != 0 {
        return Err(bad(format!(
            "MLX refused {mode} {bits}-bit group {group_size} for packed {w:?}, scales {s:?}"
        )));
    }
    Ok(result)
}

/// MLX's quantization of `weight` in `mode`: the packed weight, the scales
/// and (affine only) the biases, exactly as `mx.quantize` returns them.
///
/// # Errors
/// When MLX rejects the shape or the parameters.
pub fn quantize_mode(
    weight: &Array,
    mode: &str,
    group_size: u64,
    bits: u64,
) -> Result<Vec<Array>, MlxError> {
    ensure_error_handler()?;
    let mode_c = mode_cstr(mode)?;
    let stream = Stream::thread_local_or_default();
    let mut arrays = Vec::new();
    #[allow(unsafe_code)]
    // SAFETY: `weight` and `stream` are live handles; the result vector is
    // created and freed here, and each element taken out of it is a new
    // reference that `Array::from_ptr` owns.
    let status = unsafe {
        let none = mlx_sys::mlx_array_new();
        let mut out = mlx_sys::mlx_vector_array_new();
        let status = mlx_sys::mlx_quantize(
            &raw mut out,
            weight.as_ptr(),
            optional_int(group_size),
            optional_int(bits),
            mode_c.as_ptr(),
            none,
            stream.as_ptr(),
        );
        mlx_sys::mlx_array_free(none);
        if status == 0 {
            arrays = super::arrays_of(out);
        }
        mlx_sys::mlx_vector_array_free(out);
        status
    };
    if status != 0 || arrays.len() < 2 {
        return Err(MlxError::Op {
            operation: "quantize",
            message: format!(
                "MLX refused {mode} {bits}-bit group {group_size} for shape {:?}",
                weight.shape()
            ),
        });
    }
    Ok(arrays)
}

/// FP8 values times their per-block scale: `values` (f32, `[.., rows,
/// cols]`) times `scale` (`[.., ceil(rows / block_rows), ceil(cols /
/// block_cols)]`), each value by its block's scale, as `DeepSeek`'s
/// `weight_dequant` does.
///
/// # Errors
/// When the shapes do not fit the block or MLX fails.
pub fn scale_blocks(values: &Array, scale: &Array, block: [u64; 2]) -> Result<Array, MlxError> {
    let bad = || MlxError::Op {
        operation: "block scale",
        message: format!(
            "scale {:?} does not fit values {:?} in blocks of {block:?}",
            scale.shape(),
            values.shape()
        ),
    };
    let (v, s) = (values.shape(), scale.shape());
    let (Some(&[rows, cols]), Some(&[s_rows, s_cols])) = (
        v.get(v.len().wrapping_sub(2)..),
        s.get(s.len().wrapping_sub(2)..),
    ) else {
        return Err(bad());
    };
    let br = i32::try_from(block[0]).map_err(|_| bad())?;
    let bc = i32::try_from(block[1]).map_err(|_| bad())?;
    if v.len() != s.len()
        || v[..v.len() - 2] != s[..s.len() - 2]
        || br <= 0
        || bc <= 0
        || (rows + br - 1) / br != s_rows
        || (cols + bc - 1) / bc != s_cols
    {
        return Err(bad());
    }
    let lead = &v[..v.len() - 2];
    let scale = op("cast scale", scale.as_dtype(Dtype::Float32))?;
    // [.., R, C] -> [.., R, 1, C, 1] -> [.., R, br, C, bc] -> [.., R*br, C*bc],
    // then cut to the values' shape (the last blocks may be partial).
    let mut expanded_shape: Vec<i32> = lead.to_vec();
    expanded_shape.extend([s_rows, 1, s_cols, 1]);
    let mut broadcast_shape: Vec<i32> = lead.to_vec();
    broadcast_shape.extend([s_rows, br, s_cols, bc]);
    let mut full_shape: Vec<i32> = lead.to_vec();
    full_shape.extend([s_rows * br, s_cols * bc]);
    let full = op("reshape scale", scale.reshape(&expanded_shape))
        .and_then(|x| {
            op(
                "broadcast scale",
                mlx_rs::ops::broadcast_to(&x, &broadcast_shape),
            )
        })
        .and_then(|x| op("reshape scale", x.reshape(&full_shape)))?;
    let full = if s_rows * br == rows && s_cols * bc == cols {
        full
    } else {
        let axis = i32::try_from(lead.len()).map_err(|_| bad())?;
        let keep_rows = Array::from_slice(&(0..rows).collect::<Vec<i32>>(), &[rows]);
        let keep_cols = Array::from_slice(&(0..cols).collect::<Vec<i32>>(), &[cols]);
        op("cut scale", full.take_axis(&keep_rows, axis))
            .and_then(|x| op("cut scale", x.take_axis(&keep_cols, axis + 1)))?
    };
    let values = op("cast values", values.as_dtype(Dtype::Float32))?;
    op("block scale", values.multiply(&full))
}

/// MLX's own E4M3 decoding (`from_fp8`), for the tests that compare it with
/// the table.
///
/// # Errors
/// When MLX fails.
pub fn mlx_from_fp8(codes: &Array) -> Result<Array, MlxError> {
    op("decode fp8", codes.from_fp8(Dtype::Float32))
}
