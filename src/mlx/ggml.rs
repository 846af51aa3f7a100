//! ggml's tensor types (GGUF files) decoded on the MLX device: the stored
//! bytes copied into an MLX-owned `uint8` array, then bit-cast, sliced and
//! combined by MLX ops into `float32` values, as ggml's reference
//! dequantization defines them (llama.cpp's `ggml-quants.c`, and gguf-py's
//! `dequantize`, which the tests compare against).
//!
//! Decoded here: `F32`, `F16`, `BF16`, the K-quants `Q2_K` to `Q6_K`,
//! `IQ4_NL`, `IQ4_XS`, the ternary `TQ1_0` and `TQ2_0`, the FP4 `MXFP4`
//! and `NVFP4`, and the 32-value block types `Q4_0`,
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
pub const DECODED: &[&str] = &[
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
];

/// `x` (integers) divided by `by`, rounded down, then its remainder modulo
/// `modulo`: the bits `(x >> log2(by)) & (modulo - 1)`.
fn bits(x: &Array, by: i32, modulo: i32) -> Result<Array, MlxError> {
    let shifted = op("floor divide", x.floor_divide(Array::from_int(by)))?;
    op("remainder", shifted.remainder(Array::from_int(modulo)))
}

/// Columns `from..to` of `blocks` as `int32`.
fn ints(blocks: &Array, from: i32, to: i32) -> Result<Array, MlxError> {
    let bytes = op("slice", blocks.try_index((.., from..to)))?;
    op("cast", bytes.as_dtype(Dtype::Int32))
}

/// `Q4_K` blocks (`[n, 144]`): `f16` `d` and `dmin`, twelve bytes of 6-bit
/// scales and minimums for eight runs of 32 values, then 128 bytes of 4-bit
/// values (each 32 bytes: a run's values in the low nibbles, the next run's
/// in the high ones). A value is `d * scale * q - dmin * min`.
fn q4_k(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let (d1, m1) = k4_scales(raw, 4, n)?;
    let q = low_high_runs(raw, 16, n)?;
    op("subtract", op("multiply", q.multiply(&d1))?.subtract(&m1))
}

/// The eight runs' `d * scale` and `dmin * min` (`[n, 8, 1]` each) of a
/// `Q4_K` or `Q5_K` block: `f16` `d` and `dmin` at bytes 0 and 2, then
/// twelve bytes at `at` holding eight 6-bit scales and eight 6-bit
/// minimums (runs 0-3: the low six bits of bytes 0-3 and 4-7; runs 4-7:
/// four bits from bytes 8-11 and the top two of bytes 0-3 and 4-7).
fn k4_scales(raw: &Array, at: i32, n: i32) -> Result<(Array, Array), MlxError> {
    let d = field(raw, 0, 2, Dtype::Float16)?;
    let dmin = field(raw, 2, 4, Dtype::Float16)?;
    let (first, middle, last) = (
        ints(raw, at, at + 4)?,
        ints(raw, at + 4, at + 8)?,
        ints(raw, at + 8, at + 12)?,
    );
    let sixteen = Array::from_int(16);
    let scale_high = op(
        "add",
        bits(&last, 1, 16)?.add(op("multiply", bits(&first, 64, 4)?.multiply(&sixteen))?),
    )?;
    let min_high = op(
        "add",
        bits(&last, 16, 16)?.add(op("multiply", bits(&middle, 64, 4)?.multiply(&sixteen))?),
    )?;
    let scales = op(
        "concatenate",
        mlx_rs::ops::concatenate(&[bits(&first, 1, 64)?, scale_high], 1),
    )?;
    let mins = op(
        "concatenate",
        mlx_rs::ops::concatenate(&[bits(&middle, 1, 64)?, min_high], 1),
    )?;
    let scales = op("cast", scales.as_dtype(Dtype::Float32))?;
    let mins = op("cast", mins.as_dtype(Dtype::Float32))?;
    // d * scale and dmin * min first, as ggml computes them.
    let d1 = op("multiply", d.multiply(&scales))?;
    let m1 = op("multiply", dmin.multiply(&mins))?;
    Ok((
        op("reshape", d1.reshape(&[n, 8, 1]))?,
        op("reshape", m1.reshape(&[n, 8, 1]))?,
    ))
}

/// 128 bytes at `at` as eight runs of 32 4-bit values (`[n, 8, 32]`,
/// `float32`): each 32 bytes hold a run in their low nibbles and the next
/// run in their high nibbles.
fn low_high_runs(raw: &Array, at: i32, n: i32) -> Result<Array, MlxError> {
    let qs = ints(raw, at, at + 128)?;
    let qs = op("reshape", qs.reshape(&[n, 4, 1, 32]))?;
    let q = op(
        "concatenate",
        mlx_rs::ops::concatenate(&[bits(&qs, 1, 16)?, bits(&qs, 16, 16)?], 2),
    )?;
    let q = op("reshape", q.reshape(&[n, 8, 32]))?;
    op("cast", q.as_dtype(Dtype::Float32))
}

/// `Q5_K` blocks (`[n, 176]`): as `Q4_K`, with a fifth bit per value from
/// 32 bytes at 16 (run `s` takes bit `s` of byte `l`); the 4-bit values
/// at 48.
fn q5_k(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let (d1, m1) = k4_scales(raw, 4, n)?;
    let q = low_high_runs(raw, 48, n)?;
    let qh = op("reshape", ints(raw, 16, 48)?.reshape(&[n, 1, 32]))?;
    let fifth: Vec<Array> = (0..8)
        .map(|run| bits(&qh, 1 << run, 2))
        .collect::<Result<_, _>>()?;
    let fifth = op("concatenate", mlx_rs::ops::concatenate(&fifth, 1))?;
    let fifth = op("multiply", fifth.multiply(Array::from_int(16)))?;
    let fifth = op("cast", fifth.as_dtype(Dtype::Float32))?;
    let q = op("add", q.add(&fifth))?;
    op("subtract", op("multiply", q.multiply(&d1))?.subtract(&m1))
}

/// `Q2_K` blocks (`[n, 84]`): sixteen bytes of 4-bit scale and 4-bit
/// minimum (one per 16 values), 64 bytes of 2-bit values, `f16` `d` and
/// `dmin`. Each half of 128 values reads 32 bytes four times, two bits
/// further each time: values `16 k ..` from bytes 0-15 and 16-31 in turn.
/// A value is `d * scale * q - dmin * min`.
fn q2_k(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let d = field(raw, 80, 82, Dtype::Float16)?;
    let dmin = field(raw, 82, 84, Dtype::Float16)?;
    let sc = ints(raw, 0, 16)?;
    let scale = op("cast", bits(&sc, 1, 16)?.as_dtype(Dtype::Float32))?;
    let min = op("cast", bits(&sc, 16, 16)?.as_dtype(Dtype::Float32))?;
    let dl = op(
        "reshape",
        op("multiply", d.multiply(&scale))?.reshape(&[n, 2, 4, 2, 1]),
    )?;
    let ml = op(
        "reshape",
        op("multiply", dmin.multiply(&min))?.reshape(&[n, 2, 4, 2, 1]),
    )?;
    let qs = op("reshape", ints(raw, 16, 80)?.reshape(&[n, 2, 1, 2, 16]))?;
    let q: Vec<Array> = (0..4)
        .map(|j| bits(&qs, 1 << (2 * j), 4))
        .collect::<Result<_, _>>()?;
    let q = op("concatenate", mlx_rs::ops::concatenate(&q, 2))?;
    let q = op("cast", q.as_dtype(Dtype::Float32))?;
    op("subtract", op("multiply", q.multiply(&dl))?.subtract(&ml))
}

/// `Q3_K` blocks (`[n, 110]`): 32 bytes of high bits, 64 bytes of 2-bit
/// values, twelve bytes of sixteen 6-bit scales (offset by 32), `f16` `d`.
/// The values are read as in `Q2_K`; value `l` of step `s` (0-7, two bits
/// further each step, 32 bytes per half) loses 4 when bit `s` of high byte
/// `l` is clear. A value is `d * (scale - 32) * q`.
fn q3_k(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let d = field(raw, 108, 110, Dtype::Float16)?;
    let (low, high, extra) = (
        ints(raw, 96, 100)?,
        ints(raw, 100, 104)?,
        ints(raw, 104, 108)?,
    );
    let sixteen = Array::from_int(16);
    let scale = |nibble: Array, pair: i32| -> Result<Array, MlxError> {
        let top = op(
            "multiply",
            bits(&extra, 1 << (2 * pair), 4)?.multiply(&sixteen),
        )?;
        op("add", nibble.add(&top))
    };
    let scales = [
        scale(bits(&low, 1, 16)?, 0)?,
        scale(bits(&high, 1, 16)?, 1)?,
        scale(bits(&low, 16, 16)?, 2)?,
        scale(bits(&high, 16, 16)?, 3)?,
    ];
    let scales = op("concatenate", mlx_rs::ops::concatenate(&scales, 1))?;
    let scales = op("subtract", scales.subtract(Array::from_int(32)))?;
    let scales = op("cast", scales.as_dtype(Dtype::Float32))?;
    let dl = op(
        "reshape",
        op("multiply", d.multiply(&scales))?.reshape(&[n, 2, 4, 2, 1]),
    )?;
    let qs = op("reshape", ints(raw, 32, 96)?.reshape(&[n, 2, 1, 2, 16]))?;
    let hmask = op("reshape", ints(raw, 0, 32)?.reshape(&[n, 1, 1, 2, 16]))?;
    let mut steps = Vec::with_capacity(8);
    for half in 0..2 {
        let half_q = op("slice", qs.try_index((.., half..half + 1)))?;
        let mut per_j = Vec::with_capacity(4);
        for j in 0..4 {
            let q = bits(&half_q, 1 << (2 * j), 4)?;
            let set = bits(&hmask, 1 << (4 * half + j), 2)?;
            // 4 less when the high bit is clear: q - 4 * (1 - set).
            let minus = op(
                "multiply",
                op("subtract", Array::from_int(1).subtract(&set))?.multiply(Array::from_int(4)),
            )?;
            per_j.push(op("subtract", q.subtract(&minus))?);
        }
        steps.push(op("concatenate", mlx_rs::ops::concatenate(&per_j, 2))?);
    }
    let q = op("concatenate", mlx_rs::ops::concatenate(&steps, 1))?;
    let q = op("cast", q.as_dtype(Dtype::Float32))?;
    op("multiply", q.multiply(&dl))
}

/// `x` (integers, any shape `[.., 1, k]`) times each of `factors` along a
/// new axis: `[.., factors, k]`, as `int32`.
fn times_each(x: &Array, factors: &[i32]) -> Result<Array, MlxError> {
    let len = i32::try_from(factors.len()).unwrap_or(1);
    let f = Array::from_slice(factors, &[1, 1, len, 1]);
    op("multiply", x.multiply(&f))
}

/// `TQ2_0` blocks (`[n, 66]`): 64 bytes of 2-bit values (four per byte:
/// byte `m` of each 32 holds, in bit pairs 0, 2, 4 and 6, the values of
/// four runs of 32), then `f16` `d`. A value is `d * (q - 1)`.
fn tq2_0(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let d = field(raw, 64, 66, Dtype::Float16)?;
    let qs = op("reshape", ints(raw, 0, 64)?.reshape(&[n, 2, 1, 32]))?;
    let divisors = Array::from_slice(&[1, 4, 16, 64], &[1, 1, 4, 1]);
    let q = op("floor divide", qs.floor_divide(&divisors))?;
    let q = op("remainder", q.remainder(Array::from_int(4)))?;
    let q = op("reshape", q.reshape(&[n, 256]))?;
    let q = op("subtract", q.subtract(Array::from_int(1)))?;
    let q = op("cast", q.as_dtype(Dtype::Float32))?;
    op("multiply", q.multiply(&d))
}

/// `TQ1_0` blocks (`[n, 54]`): 48 bytes and 4 bytes of ternary digits
/// packed five (and four) to a byte as fixed-point base-3 fractions, then
/// `f16` `d`. Digit `k` of byte `b` is `(3 * (b * 3^k mod 256)) / 256`,
/// rounded down; a value is `d * (digit - 1)`. Bytes 0-31 give five runs
/// of 32, bytes 32-47 five runs of 16, the last four bytes four runs of 4.
fn tq1_0(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let d = field(raw, 52, 54, Dtype::Float16)?;
    let five = [1, 3, 9, 27, 81];
    let first = times_each(
        &op("reshape", ints(raw, 0, 32)?.reshape(&[n, 1, 1, 32]))?,
        &five,
    )?;
    let second = times_each(
        &op("reshape", ints(raw, 32, 48)?.reshape(&[n, 1, 1, 16]))?,
        &five,
    )?;
    let last = times_each(
        &op("reshape", ints(raw, 48, 52)?.reshape(&[n, 1, 1, 4]))?,
        &[1, 3, 9, 27],
    )?;
    let parts = [
        op("reshape", first.reshape(&[n, 160]))?,
        op("reshape", second.reshape(&[n, 80]))?,
        op("reshape", last.reshape(&[n, 16]))?,
    ];
    let q = op("concatenate", mlx_rs::ops::concatenate(&parts, 1))?;
    let q = op("remainder", q.remainder(Array::from_int(256)))?;
    let q = op("multiply", q.multiply(Array::from_int(3)))?;
    let q = op("floor divide", q.floor_divide(Array::from_int(256)))?;
    let q = op("subtract", q.subtract(Array::from_int(1)))?;
    let q = op("cast", q.as_dtype(Dtype::Float32))?;
    op("multiply", q.multiply(&d))
}

/// The FP4 (E2M1) values of a 4-bit code, doubled: `MXFP4`'s table, its
/// scale taken at half.
const MXFP4_VALUES: [f32; 16] = [
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0,
];

/// `MXFP4` blocks (`[n, 17]`): an E8M0 exponent byte `e`, then 16 bytes of
/// 4-bit codes (element `j` in byte `j`'s low nibble, `j + 16` in its high
/// one). A value is `2^(e - 128) * table[q]` (ggml's half-scale E8M0: for
/// `e < 2` the subnormal `2^-128` or `2^-127`, bit for bit as ggml builds
/// it).
fn mxfp4(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let e = ints(raw, 0, 1)?;
    // The scale's float bits: (e - 1) << 23, or 0x00200000 << e below 2.
    let normal = op(
        "multiply",
        op("subtract", e.subtract(Array::from_int(1)))?.multiply(Array::from_int(1 << 23)),
    )?;
    let small = op(
        "multiply",
        Array::from_int(0x0020_0000).multiply(op("add", e.add(Array::from_int(1)))?),
    )?;
    let below = op("less", e.lt(Array::from_int(2)))?;
    let scale_bits = op("select", mlx_rs::ops::select(&below, &small, &normal))?;
    let scale_bits = op("cast", scale_bits.as_dtype(Dtype::Uint32))?;
    let scale = op("view", scale_bits.view_dtype(Dtype::Float32))?;
    let scale = op("reshape", scale.reshape(&[n, 1]))?;
    let qs = ints(raw, 1, 17)?;
    let index = op(
        "concatenate",
        mlx_rs::ops::concatenate(&[bits(&qs, 1, 16)?, bits(&qs, 16, 16)?], 1),
    )?;
    let table = Array::from_slice(&MXFP4_VALUES, &[16]);
    let values = op("take", table.take(&index))?;
    op("multiply", values.multiply(&scale))
}

/// An unsigned E4M3 scale byte (bias 7; `0` and `0x7F` read as zero) at
/// half its value, as ggml's `NVFP4` takes it with the doubled FP4 table.
fn ue4m3_half(byte: u8) -> f32 {
    if byte == 0 || byte == 0x7F {
        return 0.0;
    }
    let exp = i32::from((byte >> 3) & 0xF);
    let man = f32::from(byte & 7);
    let value = if exp == 0 {
        man * 2f32.powi(-9)
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    };
    value * 0.5
}

/// `NVFP4` blocks (`[n, 36]`): four unsigned E4M3 scale bytes, one per 16
/// values, then four runs of 8 bytes of 4-bit codes (a run's first 8
/// values in the low nibbles, the next 8 in the high ones). A value is
/// `scale / 2 * table[q]`.
fn nvfp4(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let scales: Vec<f32> = (0..=255u8).map(ue4m3_half).collect();
    let scales = Array::from_slice(&scales, &[256]);
    let d = op("take", scales.take(&ints(raw, 0, 4)?))?;
    let d = op("reshape", d.reshape(&[n, 4, 1]))?;
    let qs = op("reshape", ints(raw, 4, 36)?.reshape(&[n, 4, 8]))?;
    let index = op(
        "concatenate",
        mlx_rs::ops::concatenate(&[bits(&qs, 1, 16)?, bits(&qs, 16, 16)?], 2),
    )?;
    let table = Array::from_slice(&MXFP4_VALUES, &[16]);
    let values = op("take", table.take(&index))?;
    let values = op("multiply", values.multiply(&d))?;
    op("reshape", values.reshape(&[n, 64]))
}

/// The sixteen values a 4-bit index stands for in `IQ4_NL` and `IQ4_XS`
/// (the format's non-linear grid, as ggml and gguf-py define it).
const IQ4_GRID: [f32; 16] = [
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0,
    89.0, 113.0,
];

/// 16 bytes per run as 32 grid values (`[n, runs, 32]`, `float32`): the low
/// nibbles index the first 16, the high nibbles the next 16.
fn grid_runs(raw: &Array, at: i32, n: i32, runs: i32) -> Result<Array, MlxError> {
    let qs = ints(raw, at, at + 16 * runs)?;
    let qs = op("reshape", qs.reshape(&[n, runs, 1, 16]))?;
    let index = op(
        "concatenate",
        mlx_rs::ops::concatenate(&[bits(&qs, 1, 16)?, bits(&qs, 16, 16)?], 2),
    )?;
    let index = op("reshape", index.reshape(&[n, runs, 32]))?;
    let grid = Array::from_slice(&IQ4_GRID, &[16]);
    op("take", grid.take(&index))
}

/// `IQ4_NL` blocks (`[n, 18]`): `f16` `d`, then 16 bytes of 4-bit indices
/// into the grid. A value is `d * grid[q]`.
fn iq4_nl(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let d = op(
        "reshape",
        field(raw, 0, 2, Dtype::Float16)?.reshape(&[n, 1, 1]),
    )?;
    op("multiply", grid_runs(raw, 2, n, 1)?.multiply(&d))
}

/// `IQ4_XS` blocks (`[n, 136]`): `f16` `d`, a `u16` of high scale bits
/// (two per run), four bytes of low scale bits (four per run), then eight
/// runs of 16 bytes of 4-bit grid indices. A run's scale is its six bits
/// minus 32; a value is `d * scale * grid[q]`.
fn iq4_xs(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let d = field(raw, 0, 2, Dtype::Float16)?;
    let high = op("slice", raw.try_index((.., 2..4)))?;
    let high = op("reshape", high.reshape(&[-1]))?;
    let high = op("view", high.view_dtype(Dtype::Uint16))?;
    let high = op("cast", high.as_dtype(Dtype::Int32))?;
    let high = op("reshape", high.reshape(&[n, 1]))?;
    let low = op("reshape", ints(raw, 4, 8)?.reshape(&[n, 4, 1]))?;
    let low = op(
        "concatenate",
        mlx_rs::ops::concatenate(&[bits(&low, 1, 16)?, bits(&low, 16, 16)?], 2),
    )?;
    let low = op("reshape", low.reshape(&[n, 8]))?;
    let high: Vec<Array> = (0..8)
        .map(|run| bits(&high, 1 << (2 * run), 4))
        .collect::<Result<_, _>>()?;
    let high = op("concatenate", mlx_rs::ops::concatenate(&high, 1))?;
    let scale = op(
        "add",
        low.add(op("multiply", high.multiply(Array::from_int(16)))?),
    )?;
    let scale = op("subtract", scale.subtract(Array::from_int(32)))?;
    let scale = op("cast", scale.as_dtype(Dtype::Float32))?;
    let dl = op("multiply", d.multiply(&scale))?;
    let dl = op("reshape", dl.reshape(&[n, 8, 1]))?;
    op("multiply", grid_runs(raw, 8, n, 8)?.multiply(&dl))
}

/// `Q6_K` blocks (`[n, 210]`): 128 bytes of low 4 bits, 64 bytes of high 2
/// bits, sixteen signed 8-bit scales (one per 16 values), then `f16` `d`.
/// Each half of 128 values takes 64 low bytes and 32 high bytes: values
/// `l`, `l + 32`, `l + 64`, `l + 96` are the low and high nibbles of low
/// bytes `l` and `l + 32` with bit pairs 0, 1, 2 and 3 of high byte `l`,
/// minus 32. A value is `d * scale * q`.
fn q6_k(raw: &Array, n: i32) -> Result<Array, MlxError> {
    let d = field(raw, 208, 210, Dtype::Float16)?;
    let low = op("reshape", ints(raw, 0, 128)?.reshape(&[n, 2, 64]))?;
    let high = op("reshape", ints(raw, 128, 192)?.reshape(&[n, 2, 32]))?;
    let front = op("slice", low.try_index((.., .., 0..32)))?;
    let back = op("slice", low.try_index((.., .., 32..64)))?;
    let sixteen = Array::from_int(16);
    let with_high = |nibble: Array, pair: i32| -> Result<Array, MlxError> {
        let top = op(
            "multiply",
            bits(&high, 1 << (2 * pair), 4)?.multiply(&sixteen),
        )?;
        op(
            "subtract",
            op("add", nibble.add(&top))?.subtract(Array::from_int(32)),
        )
    };
    let q = [
        with_high(bits(&front, 1, 16)?, 0)?,
        with_high(bits(&back, 1, 16)?, 1)?,
        with_high(bits(&front, 16, 16)?, 2)?,
        with_high(bits(&back, 16, 16)?, 3)?,
    ];
    let q = op("stack", mlx_rs::ops::stack(&q, 2))?;
    let q = op("reshape", q.reshape(&[n, 2, 4, 2, 16]))?;
    let q = op("cast", q.as_dtype(Dtype::Float32))?;
    let scales = op("slice", raw.try_index((.., 192..208)))?;
    let scales = op("reshape", scales.reshape(&[-1]))?;
    let scales = op("view", scales.view_dtype(Dtype::Int8))?;
    let scales = op("cast", scales.as_dtype(Dtype::Float32))?;
    let scales = op("reshape", scales.reshape(&[n, 16]))?;
    let d_scale = op("multiply", d.multiply(&scales))?;
    let d_scale = op("reshape", d_scale.reshape(&[n, 2, 4, 2, 1]))?;
    op("multiply", d_scale.multiply(&q))
}

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

/// Values and bytes per block of ggml type `kind`, for the types decoded.
fn block_layout(kind: &str) -> Result<(i64, i64), MlxError> {
    Ok(match kind {
        "F32" => (1, 4),
        "F16" | "BF16" => (1, 2),
        "Q4_0" | "IQ4_NL" => (32, 18),
        "Q4_1" => (32, 20),
        "Q5_0" => (32, 22),
        "Q5_1" => (32, 24),
        "Q8_0" => (32, 34),
        "Q2_K" => (256, 84),
        "Q3_K" => (256, 110),
        "Q4_K" => (256, 144),
        "Q5_K" => (256, 176),
        "Q6_K" => (256, 210),
        "IQ4_XS" => (256, 136),
        "TQ1_0" => (256, 54),
        "TQ2_0" => (256, 66),
        "MXFP4" => (32, 17),
        "NVFP4" => (64, 36),
        other => {
            return Err(MlxError::op(
                "decode ggml",
                format!(
                    "type {other} is not decoded yet (decoded: {})",
                    DECODED.join(", ")
                ),
            ));
        }
    })
}

/// The blocks of `rows x cols` values of type `kind` held in `len` bytes,
/// and the bytes a block takes.
fn blocks_of(len: i64, kind: &str, rows: i32, cols: i32) -> Result<(i32, i32), MlxError> {
    let (block_values, block_bytes) = block_layout(kind)?;
    let values = i64::from(rows) * i64::from(cols);
    let blocks = values / block_values;
    if values % block_values != 0 || len != blocks * block_bytes {
        return Err(MlxError::op(
            "decode ggml",
            format!(
                "{len} bytes are not {rows} x {cols} {kind} values ({block_bytes} bytes per {block_values})"
            ),
        ));
    }
    let n =
        i32::try_from(blocks).map_err(|_| MlxError::op("decode ggml", "more than 2^31 blocks"))?;
    Ok((n, i32::try_from(block_bytes).unwrap_or(1)))
}

/// The values of a tensor of ggml type `kind` (gguf-py's name) stored as
/// `bytes`, `[rows, cols]` in `float32`, decoded on the MLX device.
///
/// # Errors
/// A type not in [`DECODED`], bytes that are not whole blocks of `rows x
/// cols` values, or an MLX failure.
pub fn decode(bytes: &[u8], kind: &str, rows: i32, cols: i32) -> Result<Array, MlxError> {
    let len = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
    let (n, width) = blocks_of(len, kind, rows, cols)?;
    decode_blocks(
        &super::bytes_array(bytes, &[n, width])?,
        kind,
        n,
        rows,
        cols,
    )
}

/// [`decode`] of bytes already in an MLX `uint8` array (any shape: a
/// tensor read through, or rows of one).
///
/// # Errors
/// As [`decode`].
pub fn decode_array(raw: &Array, kind: &str, rows: i32, cols: i32) -> Result<Array, MlxError> {
    let len = i64::try_from(raw.size()).unwrap_or(i64::MAX);
    let (n, width) = blocks_of(len, kind, rows, cols)?;
    let blocks = op("reshape", raw.reshape(&[n, width]))?;
    decode_blocks(&blocks, kind, n, rows, cols)
}

/// Decodes `raw`, `[n, block bytes]` `uint8`, to `[rows, cols]` `float32`.
fn decode_blocks(raw: &Array, kind: &str, n: i32, rows: i32, cols: i32) -> Result<Array, MlxError> {
    let raw = raw.clone();
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
        "Q2_K" => q2_k(&raw, n)?,
        "Q3_K" => q3_k(&raw, n)?,
        "Q4_K" => q4_k(&raw, n)?,
        "Q5_K" => q5_k(&raw, n)?,
        "Q6_K" => q6_k(&raw, n)?,
        "IQ4_NL" => iq4_nl(&raw, n)?,
        "IQ4_XS" => iq4_xs(&raw, n)?,
        "TQ1_0" => tq1_0(&raw, n)?,
        "TQ2_0" => tq2_0(&raw, n)?,
        "MXFP4" => mxfp4(&raw, n)?,
        "NVFP4" => nvfp4(&raw, n)?,
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
