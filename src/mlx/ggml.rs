//! ggml's tensor types (GGUF files) decoded on the MLX device: the stored
//! bytes copied into an MLX-owned `uint8` array, then bit-cast, sliced and
//! combined by MLX ops into `float32` values, as ggml's reference
//! dequantization defines them (llama.cpp's `ggml-quants.c`, and gguf-py's
//! `dequantize`, which the tests compare against).
//!
//! Decoded here: `F32`, `F16`, `BF16` and the 32-value block types `Q4_0`,
//! `Q4_1`, `Q5_0`, `Q5_1` and `Q8_0`. A block starts with its `f16` scale
//! `d` (and `m` for the `_1` types); its values are `d * (q - offset)` or
//! `d * q + m`, with `q` the 4-bit nibbles (element `j` in byte `j`'s low
//! nibble, element `j + 16` in its high nibble), a fifth bit from a `u32`
//! for `Q5`, or a signed byte for `Q8_0`.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Dtype};

use super::MlxError;

fn op<T>(operation: &'static str, r: Result<T, mlx_rs::error::Exception>) -> Result<T, MlxError> {
    r.map_err(|e| MlxError::op(operation, e))
}

/// The ggml types [`decode`] reads, by gguf-py's name.
pub const DECODED: &[&str] = &["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"];

/// Columns `from..to` of `blocks` (`[n, bytes]` `uint8`) as one value per
/// block of `dtype` (2 or 4 bytes, little-endian), `[n, 1]` in `float32`.
fn field(blocks: &Array, from: i32, to: i32, dtype: Dtype) -> Result<Array, MlxError> {
    let bytes = op("slice", blocks.try_index((.., from..to)))?;
    let flat = op("reshape", bytes.reshape(&[-1]))?;
    let value = op("view", flat.view_dtype(dtype))?;
    let value = op("cast", value.as_dtype(Dtype::Float32))?;
    op("reshape", value.reshape(&[-1, 1]))
}

/// Columns `from..to` of `blocks` as 4-bit values: each byte's low nibbles,
/// then its high nibbles (`[n, 2 * (to - from)]`, `float32`).
fn nibbles(blocks: &Array, from: i32, to: i32) -> Result<Array, MlxError> {
    let bytes = op("slice", blocks.try_index((.., from..to)))?;
    let bytes = op("cast", bytes.as_dtype(Dtype::Int32))?;
    let sixteen = Array::from_int(16);
    let low = op("remainder", bytes.remainder(&sixteen))?;
    let high = op("floor divide", bytes.floor_divide(&sixteen))?;
    let both = op("concatenate", mlx_rs::ops::concatenate(&[low, high], 1))?;
    op("cast", both.as_dtype(Dtype::Float32))
}

/// The 32 fifth bits of Q5 blocks from the `u32` at `from..from + 4`
/// (`[n, 32]`, 0 or 16, `float32`).
fn fifth_bits(blocks: &Array, from: i32) -> Result<Array, MlxError> {
    let bytes = op("slice", blocks.try_index((.., from..from + 4)))?;
    let flat = op("reshape", bytes.reshape(&[-1]))?;
    let qh = op("view", flat.view_dtype(Dtype::Uint32))?;
    let qh = op("cast", qh.as_dtype(Dtype::Int64))?;
    let qh = op("reshape", qh.reshape(&[-1, 1]))?;
    let powers: Vec<i64> = (0..32).map(|j| 1_i64 << j).collect();
    let powers = Array::from_slice(&powers, &[1, 32]);
    let bits = op("floor divide", qh.floor_divide(&powers))?;
    let bits = op("remainder", bits.remainder(Array::from_int(2)))?;
    let sixteen = op("multiply", bits.multiply(Array::from_int(16)))?;
    op("cast", sixteen.as_dtype(Dtype::Float32))
}

/// The values of a tensor of ggml type `kind` (gguf-py's name) stored as
/// `bytes`, `[rows, cols]` in `float32`, decoded on the MLX device.
///
/// # Errors
/// A type not in [`DECODED`], bytes that are not whole blocks of `rows x
/// cols` values, or an MLX failure.
pub fn decode(bytes: &[u8], kind: &str, rows: i32, cols: i32) -> Result<Array, MlxError> {
    let (block_values, block_bytes) = match kind {
        "F32" => (1, 4),
        "F16" | "BF16" => (1, 2),
        "Q4_0" => (32, 18),
        "Q4_1" => (32, 20),
        "Q5_0" => (32, 22),
        "Q5_1" => (32, 24),
        "Q8_0" => (32, 34),
        other => {
            return Err(MlxError::op(
                "decode ggml",
                format!(
                    "type {other} is not decoded yet (decoded: {})",
                    DECODED.join(", ")
                ),
            ));
        }
    };
    let values = i64::from(rows) * i64::from(cols);
    let blocks = values / block_values;
    if values % block_values != 0 || i64::try_from(bytes.len()).ok() != Some(blocks * block_bytes) {
        return Err(MlxError::op(
            "decode ggml",
            format!(
                "{} bytes are not {rows} x {cols} {kind} values ({block_bytes} bytes per {block_values})",
                bytes.len()
            ),
        ));
    }
    let n =
        i32::try_from(blocks).map_err(|_| MlxError::op("decode ggml", "more than 2^31 blocks"))?;
    let width = i32::try_from(block_bytes).unwrap_or(1);
    let raw = Array::from_slice(bytes, &[n, width]);
    let x = match kind {
        "F32" | "F16" | "BF16" => {
            let dtype = match kind {
                "F32" => Dtype::Float32,
                "F16" => Dtype::Float16,
                _ => Dtype::Bfloat16,
            };
            let flat = op("reshape", raw.reshape(&[-1]))?;
            let v = op("view", flat.view_dtype(dtype))?;
            op("cast", v.as_dtype(Dtype::Float32))?
        }
        "Q8_0" => {
            let d = field(&raw, 0, 2, Dtype::Float16)?;
            let q = op("slice", raw.try_index((.., 2..34)))?;
            let q = op("reshape", q.reshape(&[-1]))?;
            let q = op("view", q.view_dtype(Dtype::Int8))?;
            let q = op("cast", q.as_dtype(Dtype::Float32))?;
            let q = op("reshape", q.reshape(&[n, 32]))?;
            op("multiply", q.multiply(&d))?
        }
        "Q4_0" => {
            let d = field(&raw, 0, 2, Dtype::Float16)?;
            let q = nibbles(&raw, 2, 18)?;
            let q = op("subtract", q.subtract(Array::from_f32(8.0)))?;
            op("multiply", q.multiply(&d))?
        }
        "Q4_1" => {
            let d = field(&raw, 0, 2, Dtype::Float16)?;
            let m = field(&raw, 2, 4, Dtype::Float16)?;
            let q = nibbles(&raw, 4, 20)?;
            op("add", op("multiply", q.multiply(&d))?.add(&m))?
        }
        "Q5_0" => {
            let d = field(&raw, 0, 2, Dtype::Float16)?;
            let high = fifth_bits(&raw, 2)?;
            let q = op("add", nibbles(&raw, 6, 22)?.add(&high))?;
            let q = op("subtract", q.subtract(Array::from_f32(16.0)))?;
            op("multiply", q.multiply(&d))?
        }
        _ => {
            // Q5_1.
            let d = field(&raw, 0, 2, Dtype::Float16)?;
            let m = field(&raw, 2, 4, Dtype::Float16)?;
            let high = fifth_bits(&raw, 4)?;
            let q = op("add", nibbles(&raw, 8, 24)?.add(&high))?;
            op("add", op("multiply", q.multiply(&d))?.add(&m))?
        }
    };
    op("reshape", x.reshape(&[rows, cols]))
}
