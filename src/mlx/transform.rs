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

/// How two same-shaped tensors differ, computed on the device in f32; only
/// a few scalars come back to the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Difference {
    /// Largest `|a - b|` (NaN when either side has a NaN).
    pub max_abs_diff: f64,
    /// `‖a - b‖ / ‖a‖` (Frobenius norms; A is the reference). `‖a - b‖`
    /// alone when A is all zeros.
    pub rel_error: f64,
    /// Signal to noise, `10 log10(‖a‖² / ‖a - b‖²)` in dB: infinite when the
    /// two are equal.
    pub snr_db: f64,
    /// `a·b / (‖a‖ ‖b‖)`; 1 when both are all zeros, 0 when one is.
    pub cosine: f64,
    /// Whether either side has a NaN.
    pub nan: bool,
    /// Whether either side has an infinity.
    pub inf: bool,
    /// `‖a - b‖²`, to combine tensors into an overall figure.
    pub diff_sq: f64,
    /// `‖a‖²`, likewise.
    pub a_sq: f64,
}

/// Compares `a` with `b` (same shape, any dtypes) in f32, in stages so that
/// at most two tensor-sized temporaries are alive at once (a diff's memory
/// bound). Sums are accumulated in f32 by MLX and combined in f64 here.
///
/// # Errors
/// When the shapes differ or MLX fails.
pub fn difference(a: &Array, b: &Array) -> Result<Difference, MlxError> {
    let op = |what: &'static str| move |e: mlx_rs::error::Exception| MlxError::op(what, e);
    if a.shape() != b.shape() {
        return Err(MlxError::Op {
            operation: "compare",
            message: format!("shapes differ: {:?} and {:?}", a.shape(), b.shape()),
        });
    }
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
    let sum_of = |x: Result<Array, mlx_rs::error::Exception>| -> Result<f64, MlxError> {
        let total = x.and_then(|x| x.sum(None)).map_err(op("sum"))?;
        evaluate_all([&total])?;
        f32_of(&total)
    };
    let a_sq = sum_of(a.square())?;
    let b_sq = sum_of(b.square())?;
    let dot = sum_of(a.multiply(&b))?;
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
    Ok(metrics(max_abs, delta_sq, a_sq, b_sq, dot, nan, inf))
}

/// The figures of a [`Difference`] from its sums (also the host reference
/// the tests compare with).
#[must_use]
pub fn metrics(
    max_abs: f64,
    delta_sq: f64,
    a_sq: f64,
    b_sq: f64,
    dot: f64,
    nan: bool,
    inf: bool,
) -> Difference {
    let (norm_delta, norm_a, norm_b) = (delta_sq.sqrt(), a_sq.sqrt(), b_sq.sqrt());
    let snr_db = if delta_sq == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (a_sq / delta_sq).log10()
    };
    let cosine = match (norm_a > 0.0, norm_b > 0.0) {
        // Equal tensors: exactly 1 (the norms' rounding would say 0.9999999).
        _ if delta_sq == 0.0 && !nan => 1.0,
        (true, true) => (dot / (norm_a * norm_b)).clamp(-1.0, 1.0),
        (false, false) => 1.0,
        _ => 0.0,
    };
    Difference {
        max_abs_diff: max_abs,
        rel_error: if norm_a > 0.0 {
            norm_delta / norm_a
        } else {
            norm_delta
        },
        snr_db,
        cosine,
        nan,
        inf,
        diff_sq: delta_sq,
        a_sq,
    }
}
