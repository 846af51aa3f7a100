//! Array transforms the layers above need by name: view fix-ups (add a
//! constant, move or swap axes, cast) and the per-tensor comparison of a diff.

use mlx_rs::{Array, Dtype};

use super::{MlxError, evaluate_all};

/// `array + value`, keeping `array`'s dtype (the constant is cast first).
///
/// # Errors
/// When MLX rejects the operation.
pub fn add_scalar(array: &Array, value: f32) -> Result<Array, MlxError> {
    let constant = Array::from_f32(value)
        .as_dtype(array.dtype())
        .map_err(|e| MlxError::op("cast a constant", e))?;
    array.add(&constant).map_err(|e| MlxError::op("add", e))
}

/// `array` with axis `from` moved to position `to` (negative counts from the end).
///
/// # Errors
/// When an axis is out of range.
pub fn move_axis(array: &Array, from: i32, to: i32) -> Result<Array, MlxError> {
    array
        .move_axis(from, to)
        .map_err(|e| MlxError::op("move axis", e))
}

/// `array` with two axes swapped.
///
/// # Errors
/// When an axis is out of range.
pub fn swap_axes(array: &Array, first: i32, second: i32) -> Result<Array, MlxError> {
    array
        .swap_axes(first, second)
        .map_err(|e| MlxError::op("swap axes", e))
}

/// MLX's dtype for a safetensors dtype name (`F16`, `BF16`, `F32`, `I8`, …).
#[must_use]
pub fn dtype_named(name: &str) -> Option<Dtype> {
    Some(match name.to_ascii_uppercase().as_str() {
        "BOOL" => Dtype::Bool,
        "U8" => Dtype::Uint8,
        "I8" => Dtype::Int8,
        "U16" => Dtype::Uint16,
        "I16" => Dtype::Int16,
        "U32" => Dtype::Uint32,
        "I32" => Dtype::Int32,
        "U64" => Dtype::Uint64,
        "I64" => Dtype::Int64,
        "F16" => Dtype::Float16,
        "BF16" => Dtype::Bfloat16,
        "F32" => Dtype::Float32,
        _ => return None,
    })
}

/// How two same-shaped tensors differ, computed on the device; only four
/// scalars come back to the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Difference {
    /// Largest `|a - b|` (NaN when either side has a NaN).
    pub max_abs_diff: f64,
    /// `‖a - b‖ / ‖b‖` (Frobenius norms; `‖a - b‖` alone when `b` is all zeros).
    pub rel_error: f64,
    /// Whether either side has a NaN.
    pub nan: bool,
    /// Whether either side has an infinity.
    pub inf: bool,
}

/// Compares `a` with `b` (same shape) in f32, in stages so that at most two
/// tensor-sized temporaries are alive at once (a diff's memory bound).
///
/// # Errors
/// When the shapes differ or MLX fails.
pub fn difference(a: &Array, b: &Array) -> Result<Difference, MlxError> {
    let op = |what: &'static str| move |e: mlx_rs::error::Exception| MlxError::op(what, e);
    let f32_of = |x: &Array| {
        x.try_item_cast::<f32>()
            .map(f64::from)
            .map_err(|e| MlxError::op("read a scalar", e))
    };
    let bool_of = |x: &Array| {
        x.try_item_cast::<bool>()
            .map_err(|e| MlxError::op("read a scalar", e))
    };
    let a = a.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
    let b = b.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
    let (max_abs, delta_sq) = {
        let delta = a.subtract(&b).map_err(op("subtract"))?;
        let max_abs = delta
            .abs()
            .map_err(op("abs"))?
            .max(None)
            .map_err(op("max"))?;
        evaluate_all([&max_abs])?;
        let delta_sq = delta
            .square()
            .map_err(op("square"))?
            .sum(None)
            .map_err(op("sum"))?;
        evaluate_all([&delta_sq])?;
        (f32_of(&max_abs)?, f32_of(&delta_sq)?)
    };
    let b_sq = b
        .square()
        .map_err(op("square"))?
        .sum(None)
        .map_err(op("sum"))?;
    evaluate_all([&b_sq])?;
    let b_sq = f32_of(&b_sq)?;
    let any =
        |x: &Array, test: fn(&Array) -> mlx_rs::error::Result<Array>| -> Result<bool, MlxError> {
            let flag = test(x)
                .and_then(|t| t.any(None))
                .map_err(op("find NaN or Inf"))?;
            evaluate_all([&flag])?;
            bool_of(&flag)
        };
    let is_nan = |x: &Array| mlx_rs::ops::is_nan(x);
    let is_inf = |x: &Array| x.is_inf();
    let nan = any(&a, is_nan)? || any(&b, is_nan)?;
    let inf = any(&a, is_inf)? || any(&b, is_inf)?;
    let (norm_delta, norm_b) = (delta_sq.sqrt(), b_sq.sqrt());
    Ok(Difference {
        max_abs_diff: max_abs,
        rel_error: if norm_b > 0.0 {
            norm_delta / norm_b
        } else {
            norm_delta
        },
        nan,
        inf,
    })
}
