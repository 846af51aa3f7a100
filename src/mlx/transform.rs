//! Array transforms the layers above need by name: view fix-ups (add a
//! constant, move or swap axes, cast) and the per-tensor comparison of a diff.

use mlx_rs::ops::indexing::TryIndexOp;
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

/// Rows `r0..r1` of `array` (along its first axis), lazy.
///
/// # Errors
/// When the range is out of bounds.
pub fn slice_rows(array: &Array, r0: i32, r1: i32) -> Result<Array, MlxError> {
    array
        .try_index(r0..r1)
        .map_err(|e| MlxError::op("slice", e))
}

/// `array` with `shape` (same number of elements), lazy.
///
/// # Errors
/// When the element counts differ.
pub fn reshape(array: &Array, shape: &[i32]) -> Result<Array, MlxError> {
    array.reshape(shape).map_err(|e| MlxError::op("reshape", e))
}

/// Entry `index` of `array` along its first axis (that axis removed), lazy.
///
/// # Errors
/// When the index is out of bounds.
pub fn take_row(array: &Array, index: i32) -> Result<Array, MlxError> {
    array
        .take_axis(Array::from_int(index), 0)
        .map_err(|e| MlxError::op("take", e))
}

/// `parts` joined along their first axis, lazy.
///
/// # Errors
/// When their other axes differ.
pub fn concat_rows(parts: &[Array]) -> Result<Array, MlxError> {
    mlx_rs::ops::concatenate(parts, 0).map_err(|e| MlxError::op("concatenate", e))
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

/// Fewest elements per chunk of [`difference`]'s passes (256 KiB of f32).
const DIFF_CHUNK_MIN: u64 = 1 << 16;

/// Elements per chunk for a tensor of `elements` values: at least
/// [`DIFF_CHUNK_MIN`], at most 64 chunks per tensor (so a large tensor costs
/// few evaluations and its temporaries stay an eighth of its f32 size).
fn diff_chunk(elements: u64) -> u64 {
    DIFF_CHUNK_MIN
        .max(elements.div_ceil(64))
        .min(elements.max(1))
}

/// Compares `a` with `b` (same shape, any dtypes) in f32. Both are evaluated
/// as f32 once; then every figure is computed chunk by chunk over the
/// flattened values, so beyond the two f32 tensors only chunk-sized
/// temporaries exist. Each
/// chunk's sums come back as scalars and are combined in f64.
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
    let a = a.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
    let b = b.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
    evaluate_all([&a, &b])?;
    let n = i32::try_from(a.size()).map_err(|_| MlxError::Op {
        operation: "compare",
        message: "more than 2^31 elements".into(),
    })?;
    let flat_a = a.reshape(&[-1]).map_err(op("flatten"))?;
    let flat_b = b.reshape(&[-1]).map_err(op("flatten"))?;
    let chunk = i32::try_from(diff_chunk(u64::try_from(n).unwrap_or(0))).unwrap_or(i32::MAX);
    let mut sums = DiffSums::default();
    let mut start = 0;
    while start < n {
        let end = start.saturating_add(chunk).min(n);
        let ca = flat_a.try_index(start..end).map_err(op("slice"))?;
        let cb = flat_b.try_index(start..end).map_err(op("slice"))?;
        sums.add(&ca, &cb)?;
        start = end;
    }
    Ok(sums.difference())
}

/// Running sums of a comparison, band by band: what [`Difference`] is
/// computed from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DiffSums {
    /// Largest `|a - b|` so far (NaN once a side had a NaN).
    pub max_abs: f64,
    /// `Σ (a - b)²`.
    pub delta_sq: f64,
    /// `Σ a²`.
    pub a_sq: f64,
    /// `Σ b²`.
    pub b_sq: f64,
    /// `Σ a b`.
    pub dot: f64,
    /// Whether either side had a NaN.
    pub nan: bool,
    /// Whether either side had an infinity.
    pub inf: bool,
}

impl DiffSums {
    /// Adds the comparison of one band `a` with `b` (same shape, any
    /// dtypes): one MLX evaluation of a few scalars.
    ///
    /// # Errors
    /// When the shapes differ or MLX fails.
    pub fn add(&mut self, a: &Array, b: &Array) -> Result<(), MlxError> {
        let op = |what: &'static str| move |e: mlx_rs::error::Exception| MlxError::op(what, e);
        if a.shape() != b.shape() {
            return Err(MlxError::Op {
                operation: "compare",
                message: format!("shapes differ: {:?} and {:?}", a.shape(), b.shape()),
            });
        }
        let scalar = |x: &Array| {
            x.try_item_cast::<f32>()
                .map(f64::from)
                .map_err(|e| MlxError::op("read a scalar", e))
        };
        let flag = |x: &Array| {
            x.try_item_cast::<bool>()
                .map_err(|e| MlxError::op("read a scalar", e))
        };
        let ca = a.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
        let cb = b.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
        let delta = ca.subtract(&cb).map_err(op("subtract"))?;
        let band_max = delta.abs().and_then(|d| d.max(None)).map_err(op("max"))?;
        let sum_sq = |x: &Array| x.square().and_then(|s| s.sum(None)).map_err(op("sum"));
        let band_delta_sq = sum_sq(&delta)?;
        let ref_energy = sum_sq(&ca)?;
        let other_energy = sum_sq(&cb)?;
        let band_dot = ca
            .multiply(&cb)
            .and_then(|x| x.sum(None))
            .map_err(op("sum"))?;
        let any_nan = mlx_rs::ops::is_nan(&ca)
            .and_then(|x| x.any(None))
            .and_then(|x| x.logical_or(mlx_rs::ops::is_nan(&cb)?.any(None)?))
            .map_err(op("find NaN"))?;
        let any_inf = ca
            .is_inf()
            .and_then(|x| x.any(None))
            .and_then(|x| x.logical_or(cb.is_inf()?.any(None)?))
            .map_err(op("find Inf"))?;
        evaluate_all([
            &band_max,
            &band_delta_sq,
            &ref_energy,
            &other_energy,
            &band_dot,
            &any_nan,
            &any_inf,
        ])?;
        let m = scalar(&band_max)?;
        // f64::max would drop a NaN: keep it, it means a side had one.
        self.max_abs = if m.is_nan() || self.max_abs.is_nan() {
            f64::NAN
        } else {
            self.max_abs.max(m)
        };
        self.delta_sq += scalar(&band_delta_sq)?;
        self.a_sq += scalar(&ref_energy)?;
        self.b_sq += scalar(&other_energy)?;
        self.dot += scalar(&band_dot)?;
        self.nan |= flag(&any_nan)?;
        self.inf |= flag(&any_inf)?;
        Ok(())
    }

    /// The figures.
    #[must_use]
    pub fn difference(&self) -> Difference {
        metrics(
            self.max_abs,
            self.delta_sq,
            self.a_sq,
            self.b_sq,
            self.dot,
            self.nan,
            self.inf,
        )
    }
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
        // A NaN or an infinity on a side: no angle (0 would read as
        // "orthogonal", a figure nobody computed).
        _ if !(a_sq.is_finite() && b_sq.is_finite() && dot.is_finite()) => f64::NAN,
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

/// Counts of special values in a tensor (a checkpoint doctor's questions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValueCounts {
    /// Elements.
    pub elements: u64,
    /// NaN elements.
    pub nan: u64,
    /// ±Inf elements.
    pub inf: u64,
    /// Elements exactly zero.
    pub zero: u64,
}

impl ValueCounts {
    /// Adds another band's counts.
    pub fn add(&mut self, other: ValueCounts) {
        self.elements += other.elements;
        self.nan += other.nan;
        self.inf += other.inf;
        self.zero += other.zero;
    }
}

/// Counts NaN, Inf and zero values of `array` (any dtype, cast to f32 chunk
/// by chunk), so beyond the array only chunk-sized temporaries exist.
///
/// # Errors
/// When MLX fails.
pub fn count_values(array: &Array) -> Result<ValueCounts, MlxError> {
    let op = |what: &'static str| move |e: mlx_rs::error::Exception| MlxError::op(what, e);
    let count = |x: &Array| {
        x.try_item_cast::<u32>()
            .map(u64::from)
            .map_err(|e| MlxError::op("read a scalar", e))
    };
    let elements = array.size() as u64;
    if elements == 0 {
        return Ok(ValueCounts::default());
    }
    let n = i32::try_from(elements).map_err(|_| MlxError::Op {
        operation: "count values",
        message: "more than 2^31 elements".into(),
    })?;
    let flat = array.reshape(&[-1]).map_err(op("flatten"))?;
    let chunk = i32::try_from(diff_chunk(elements)).unwrap_or(i32::MAX);
    let mut counts = ValueCounts {
        elements,
        ..ValueCounts::default()
    };
    let mut start = 0;
    while start < n {
        let end = start.saturating_add(chunk).min(n);
        let x = flat
            .try_index(start..end)
            .and_then(|x| x.as_dtype(Dtype::Float32))
            .map_err(op("slice"))?;
        let total = |mask: mlx_rs::error::Result<Array>| {
            mask.and_then(|m| m.as_dtype(Dtype::Uint32))
                .and_then(|m| m.sum(None))
                .map_err(op("count"))
        };
        let nan = total(mlx_rs::ops::is_nan(&x))?;
        let inf = total(x.is_inf())?;
        let zero = total(x.eq(Array::from_f32(0.0)))?;
        evaluate_all([&nan, &inf, &zero])?;
        counts.nan += count(&nan)?;
        counts.inf += count(&inf)?;
        counts.zero += count(&zero)?;
        start = end;
    }
    Ok(counts)
}

/// `|a - b|` in `f32`, lazily (both sides cast first).
///
/// # Errors
/// When the shapes differ or MLX fails.
pub fn abs_difference(a: &Array, b: &Array) -> Result<Array, MlxError> {
    let op = |what: &'static str| move |e: mlx_rs::error::Exception| MlxError::op(what, e);
    let ca = a.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
    let cb = b.as_dtype(Dtype::Float32).map_err(op("cast to f32"))?;
    ca.subtract(&cb)
        .and_then(|d| d.abs())
        .map_err(op("subtract"))
}

/// One band's groups compared: `a` and `b` are `[rows, cols]` with `cols` a
/// multiple of `group`, read as runs of `group` values along each row (a
/// quantized weight's groups). Row-major per group: `Σ (a - b)²`, `Σ a²`
/// and the largest `|a - b|` (each in `f32`).
///
/// # Errors
/// When the shapes differ, a row is not whole groups, or MLX fails.
pub fn group_sums(a: &Array, b: &Array, group: i32) -> Result<GroupSums, MlxError> {
    let op = |what: &'static str| move |e: mlx_rs::error::Exception| MlxError::op(what, e);
    let shape = a.shape().to_vec();
    let [rows, cols] = shape[..] else {
        return Err(MlxError::op("compare groups", "a band is not 2-D"));
    };
    if b.shape() != a.shape() || group <= 0 || cols % group != 0 {
        return Err(MlxError::op(
            "compare groups",
            format!("shapes {:?} and {:?}, group {group}", a.shape(), b.shape()),
        ));
    }
    let grouped = |x: &Array| {
        x.as_dtype(Dtype::Float32)
            .and_then(|x| x.reshape(&[rows, cols / group, group]))
            .map_err(op("reshape"))
    };
    let (ga, gb) = (grouped(a)?, grouped(b)?);
    let delta = ga.subtract(&gb).map_err(op("subtract"))?;
    let delta_sq = delta
        .square()
        .and_then(|x| x.sum_axis(2, None))
        .map_err(op("sum"))?;
    let a_sq = ga
        .square()
        .and_then(|x| x.sum_axis(2, None))
        .map_err(op("sum"))?;
    let largest = delta
        .abs()
        .and_then(|x| x.max_axis(2, None))
        .map_err(op("max"))?;
    evaluate_all([&delta_sq, &a_sq, &largest])?;
    let read = |x: &Array| {
        x.try_as_slice::<f32>()
            .map(<[f32]>::to_vec)
            .map_err(|e| MlxError::op("read group sums", e))
    };
    Ok(GroupSums {
        delta_sq: read(&delta_sq)?,
        a_sq: read(&a_sq)?,
        max_abs: read(&largest)?,
    })
}

/// One band's groups compared ([`group_sums`]), row-major per group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupSums {
    /// `Σ (a - b)²`.
    pub delta_sq: Vec<f32>,
    /// `Σ a²`.
    pub a_sq: Vec<f32>,
    /// The largest `|a - b|`.
    pub max_abs: Vec<f32>,
}
