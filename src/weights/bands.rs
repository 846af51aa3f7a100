//! A tensor's values band by band ([`Bands`]): a diff or a value scan holds
//! only band-sized temporaries, never a whole tensor in f32.

use crate::checkpoint::{Encoding, QuantMode, QuantParams, QuantizedTensor, TensorInfo};
use crate::mlx::{self, Array, ByteFloat};

use super::decode::{Decoding, byte_float, fp8_codes};
use super::{ShardLoader, Weights, WeightsError};

/// Values per band, about this many (a multiple of the alignment in rows).
const BAND_ELEMENTS: i64 = 1 << 18;

/// A bound on the MLX memory one side's band takes while it is decoded and
/// compared or counted: sixteen f32 arrays of a band. MLX's CPU
/// dequantization alone makes about eight output-sized temporaries (seen:
/// 1.1 MB of peak for a 128 KiB 6-bit result); the comparison a few more.
/// Bands of very wide tensors hold at least one row, so this uses the band
/// size of a 128 Ki-column row when that is larger.
#[must_use]
pub fn band_bytes_bound() -> u64 {
    16 * 4 * (BAND_ELEMENTS as u64)
}

/// Rows per band for tensors of `cols` columns whose bands must start on
/// multiples of `align_a` and `align_b` rows (FP8 block rows): about
/// [`BAND_ELEMENTS`] values a band.
#[must_use]
pub fn band_rows(cols: i32, align_a: i32, align_b: i32) -> i32 {
    let align = lcm(align_a.max(1), align_b.max(1));
    let wanted = (BAND_ELEMENTS / i64::from(cols.max(1))).max(1);
    let units = (wanted / i64::from(align)).max(1);
    i32::try_from(units * i64::from(align)).unwrap_or(i32::MAX)
}

fn lcm(a: i32, b: i32) -> i32 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// A tensor's values, band by band: the logical shape seen as `[rows,
/// cols]` (leading axes folded into rows), each band decoded on its own, so
/// a diff or a value scan holds only band-sized temporaries, never a whole
/// tensor in f32 (nor MLX's dequantization temporaries of one).
pub struct Bands {
    /// Rows (every leading axis folded in).
    pub rows: i32,
    /// Values per row (the logical last axis).
    pub cols: i32,
    /// The logical shape.
    pub shape: Vec<i32>,
    /// Bands must start on multiples of this many rows (FP8 block rows).
    pub align: i32,
    /// How the values are decoded, when they are.
    pub decoding: Option<Decoding>,
    /// A quantized weight's scales, decoded; an FP8 weight's block scale.
    pub scales: Option<Array>,
    /// The stored tensors read.
    pub stored: Vec<String>,
    source: Source,
}

enum Source {
    /// `[rows, cols]`, any dtype.
    Plain(Array),
    /// Byte floats `[rows, cols]`, decoded per band.
    Bytes(Array, ByteFloat),
    /// Packed `[rows, words]` with scales (and biases) `[rows, groups]`;
    /// with per-expert global scales, the scales `[experts]` and the rows of
    /// one expert.
    Packed {
        weight: Array,
        scales: Array,
        biases: Option<Array>,
        params: QuantParams,
        global: Option<(Array, i32)>,
    },
    /// A ggml block type's bytes, `[rows, bytes per row]`, decoded per band.
    Ggml { raw: Array, kind: &'static str },
    /// A plain tensor too large to hold, each band's rows read from its
    /// file when asked (`start`: its first byte; `row_bytes` a row).
    Read {
        bytes: crate::checkpoint::ShardBytes,
        start: u64,
        row_bytes: u64,
        dtype: crate::mlx::Dtype,
    },
    /// FP8 codes `[rows, cols]` with a block scale `[rows / r, cols / c]`.
    ScaledFp8 {
        codes: Array,
        format: ByteFloat,
        scale: Array,
        block: [u64; 2],
    },
}

pub(super) fn i32_shape(shape: &[u64]) -> Vec<i32> {
    shape
        .iter()
        .map(|&d| i32::try_from(d).unwrap_or(i32::MAX))
        .collect()
}

pub(super) fn rows_cols(shape: &[i32]) -> (i32, i32) {
    match shape {
        [] => (1, 1),
        [cols] => (1, *cols),
        [lead @ .., cols] => (lead.iter().product(), *cols),
    }
}

impl Bands {
    /// The decoded values of rows `r0..r1` (`r0` a multiple of
    /// [`Bands::align`]), `[r1 - r0, cols]`, lazy.
    ///
    /// # Errors
    /// When MLX fails.
    pub fn band(&self, r0: i32, r1: i32) -> Result<Array, crate::mlx::MlxError> {
        match &self.source {
            Source::Plain(a) => mlx::slice_rows(a, r0, r1),
            Source::Read {
                bytes,
                start,
                row_bytes,
                dtype,
            } => {
                let rows = |r: i32| u64::try_from(r).unwrap_or(0) * row_bytes;
                let read = bytes
                    .read(start + rows(r0)..start + rows(r1))
                    .map_err(|e| crate::mlx::MlxError::op("read a band", e))?;
                mlx::typed_array(&read, *dtype, &[r1 - r0, self.cols])
            }
            Source::Bytes(a, format) => mlx::decode_bytes(&mlx::slice_rows(a, r0, r1)?, *format),
            Source::Ggml { raw, kind } => {
                let cols = self.cols;
                mlx::ggml::decode_array(&mlx::slice_rows(raw, r0, r1)?, kind, r1 - r0, cols)
            }
            Source::Packed {
                weight,
                scales,
                biases,
                params,
                global,
            } => {
                let piece = |from: i32, to: i32, gs: Option<&Array>| {
                    let w = mlx::slice_rows(weight, from, to)?;
                    let s = mlx::slice_rows(scales, from, to)?;
                    let b = biases
                        .as_ref()
                        .map(|b| mlx::slice_rows(b, from, to))
                        .transpose()?;
                    mlx::dequantize(
                        &w,
                        &s,
                        b.as_ref().filter(|_| params.mode.has_biases()),
                        params.mode.name(),
                        params.group_size,
                        params.bits,
                        gs,
                    )
                };
                match global {
                    None => piece(r0, r1, None),
                    Some((gs, per_expert)) => {
                        // One piece per expert the band touches, each with
                        // its own scalar global scale.
                        let mut parts = Vec::new();
                        let mut from = r0;
                        while from < r1 {
                            let expert = from / per_expert;
                            let to = r1.min((expert + 1) * per_expert);
                            let g = mlx::take_row(gs, expert)?;
                            parts.push(piece(from, to, Some(&g))?);
                            from = to;
                        }
                        mlx::concat_rows(&parts)
                    }
                }
            }
            Source::ScaledFp8 {
                codes,
                format,
                scale,
                block,
            } => {
                let values = mlx::decode_bytes(&mlx::slice_rows(codes, r0, r1)?, *format)?;
                let br = i32::try_from(block[0]).unwrap_or(i32::MAX);
                let s = mlx::slice_rows(scale, r0 / br, (r1 + br - 1) / br)?;
                mlx::scale_blocks(&values, &s, *block)
            }
        }
    }
}

impl Bands {
    /// Whether each band is decoded from packed or block-scaled bytes (a
    /// summary then reads the stored bytes and never the whole tensor in
    /// `f32`).
    #[must_use]
    pub fn decodes_per_band(&self) -> bool {
        matches!(
            self.source,
            Source::Packed { .. } | Source::ScaledFp8 { .. } | Source::Ggml { .. }
        )
    }

    /// A quantized weight's biases, `[rows, groups]`, when it has them.
    #[must_use]
    pub fn biases(&self) -> Option<&Array> {
        match &self.source {
            Source::Packed {
                biases: Some(b),
                params,
                ..
            } if params.mode.has_biases() => Some(b),
            _ => None,
        }
    }

    /// Reads the stored bytes behind the bands (packed weight, scales,
    /// biases, codes) into MLX memory.
    ///
    /// # Errors
    /// When MLX cannot read them.
    pub fn materialize(&self) -> Result<(), crate::mlx::MlxError> {
        match &self.source {
            Source::Plain(a) | Source::Bytes(a, _) | Source::Ggml { raw: a, .. } => {
                mlx::evaluate(a)
            }
            Source::Packed {
                weight,
                scales,
                biases,
                global,
                ..
            } => mlx::evaluate_all(
                [weight, scales]
                    .into_iter()
                    .chain(biases.iter())
                    .chain(global.iter().map(|(g, _)| g)),
            ),
            Source::ScaledFp8 { codes, scale, .. } => mlx::evaluate_all([codes, scale]),
            // Read a band at a time when summarized: nothing to hold now.
            Source::Read { .. } => Ok(()),
        }
    }
}

impl mlx::RowBands for Bands {
    fn shape(&self) -> &[i32] {
        &self.shape
    }

    fn rows(&self) -> i32 {
        self.rows
    }

    fn cols(&self) -> i32 {
        self.cols
    }

    fn align(&self) -> i32 {
        self.align
    }

    fn band(&self, r0: i32, r1: i32) -> Result<Array, crate::mlx::MlxError> {
        Bands::band(self, r0, r1)
    }

    fn affine_words(&self) -> Option<mlx::AffineWords<'_>> {
        match &self.source {
            Source::Packed {
                weight,
                scales,
                biases: Some(biases),
                params,
                global: None,
            } if params.mode == QuantMode::Affine => Some(mlx::AffineWords {
                weight,
                scales,
                biases,
                group_size: i32::try_from(params.group_size).ok()?,
                bits: i32::try_from(params.bits).ok()?,
            }),
            _ => None,
        }
    }
}

impl<N: ShardLoader> Weights<N> {
    /// The values of canonical `name` band by band (see [`Bands`]); the
    /// view's fix-up applies to plain tensors.
    ///
    /// # Errors
    /// As [`Weights::values`].
    pub fn bands(&mut self, name: &str) -> Result<Bands, WeightsError> {
        let (info, encoding) = self.info_and_encoding(name)?;
        let reshape = |a: &Array, rows: i32, cols: i32| mlx::reshape(a, &[rows, cols]);
        match encoding {
            Encoding::Packed(q) => self.packed_bands(name, &info, &q),
            Encoding::Ggml(kind) => self.ggml_bands(name, &info, kind),
            Encoding::Fp8(f) if f.scale.is_some() => {
                let tensors = self.checkpoint.tensors();
                let scale_name = f
                    .scale
                    .map(|s| tensors.at(s).name().to_owned())
                    .unwrap_or_default();
                let Some(block) = f.block.filter(|_| info.shape().len() == 2) else {
                    // `values` says why in one line.
                    return Err(self
                        .values(name)
                        .err()
                        .unwrap_or(WeightsError::Undecodable {
                            name: name.to_owned(),
                            reason: "its block scale fits only two-dimensional weights".into(),
                        }));
                };
                let codes = self.tensor(name)?;
                let scale = self.stored(&scale_name)?;
                let shape = codes.shape().to_vec();
                let (rows, cols) = rows_cols(&shape);
                Ok(Bands {
                    rows,
                    cols,
                    align: i32::try_from(block[0]).unwrap_or(1),
                    decoding: Some(Decoding::Fp8 {
                        format: f.format,
                        block: Some(block),
                        block_inferred: f.block_inferred,
                        shape: info.shape().to_vec(),
                    }),
                    scales: Some(scale.clone()),
                    stored: vec![info.name().to_owned(), scale_name],
                    source: Source::ScaledFp8 {
                        codes,
                        format: fp8_codes(f.format),
                        scale,
                        block,
                    },
                    shape,
                })
            }
            _ => {
                if let Some(read) = self.read_bands(name, &info) {
                    return Ok(read);
                }
                // Plain tensors, unscaled FP8, fp-mode scales, E8M0: what
                // `values` decodes element by element, cut into bands here.
                let values = self.values(name)?;
                let raw = self.tensor(name)?;
                let shape = values.array.shape().to_vec();
                let (rows, cols) = rows_cols(&shape);
                let source = if raw.dtype() == crate::mlx::Dtype::Uint8
                    && values.array.dtype() != raw.dtype()
                {
                    let format = match (&values.decoding, info.dtype()) {
                        (Some(Decoding::Fp8 { format, .. }), _) => fp8_codes(*format),
                        (Some(Decoding::Scales { mode }), _) => {
                            byte_float(mode.scale_format()).unwrap_or(ByteFloat::E8M0)
                        }
                        _ => ByteFloat::E8M0,
                    };
                    Source::Bytes(reshape(&raw, rows, cols)?, format)
                } else {
                    Source::Plain(reshape(&values.array, rows, cols)?)
                };
                Ok(Bands {
                    rows,
                    cols,
                    align: 1,
                    decoding: values.decoding,
                    scales: values.scales,
                    stored: values.stored,
                    source,
                    shape,
                })
            }
        }
    }

    /// A plain tensor of more values than an MLX axis holds (2^31-1), read
    /// from its file a band of rows at a time: only a band is ever in
    /// memory, never the whole tensor (MLX's loader reads a tensor whole).
    /// `None` for anything a band cannot be read of as bytes: a tensor a
    /// view fixes up, an encoded or strided one, a dtype MLX has not.
    fn read_bands(&self, name: &str, info: &TensorInfo) -> Option<Bands> {
        use crate::checkpoint::Dtype as D;
        use crate::mlx::Dtype as M;
        let elements: u64 = info.shape().iter().product();
        if i32::try_from(elements).is_ok() || self.has_fixup(name) {
            return None;
        }
        let checkpoint = &self.checkpoint;
        let position = checkpoint.tensors().position(info.name())?;
        if checkpoint.ggml_block_at(position).is_some()
            || checkpoint
                .torch_tensor_at(position)
                .is_some_and(|t| !t.contiguous)
        {
            return None;
        }
        let dtype = match info.dtype() {
            D::F32 => M::Float32,
            D::F16 => M::Float16,
            D::BF16 => M::Bfloat16,
            D::F64 => M::Float64,
            D::I8 => M::Int8,
            D::I16 => M::Int16,
            D::I32 => M::Int32,
            D::I64 => M::Int64,
            D::U8 => M::Uint8,
            D::U16 => M::Uint16,
            D::U32 => M::Uint32,
            D::U64 => M::Uint64,
            D::BOOL => M::Bool,
            _ => return None,
        };
        let shape = i32_shape(info.shape());
        if shape.contains(&i32::MAX) {
            return None;
        }
        let (rows, cols) = rows_cols(&shape);
        let shard = info.shard();
        let start = checkpoint.shard(shard).data_start()
            + checkpoint.tensors().at(position).data_offsets().0;
        Some(Bands {
            rows,
            cols,
            align: 1,
            decoding: None,
            scales: None,
            stored: Vec::new(),
            source: Source::Read {
                bytes: checkpoint.shard_bytes(shard),
                start,
                row_bytes: u64::try_from(cols).ok()? * info.dtype().bits() / 8,
                dtype,
            },
            shape,
        })
    }

    /// A GGUF block-typed tensor, decoded band by band (whole rows are
    /// whole blocks); rows a view reorders are decoded whole first.
    fn ggml_bands(
        &mut self,
        name: &str,
        info: &TensorInfo,
        kind: crate::checkpoint::gguf::GgmlType,
    ) -> Result<Bands, WeightsError> {
        let reshape = |a: &Array, rows: i32, cols: i32| mlx::reshape(a, &[rows, cols]);
        if self.has_fixup(name) {
            let values = self.values(name)?;
            let shape = values.array.shape().to_vec();
            let (rows, cols) = rows_cols(&shape);
            return Ok(Bands {
                rows,
                cols,
                align: 1,
                source: Source::Plain(reshape(&values.array, rows, cols)?),
                decoding: values.decoding,
                scales: None,
                stored: values.stored,
                shape,
            });
        }
        let raw = self.stored(info.name())?;
        let shape = i32_shape(info.shape());
        let (rows, cols) = rows_cols(&shape);
        let row_bytes = i32::try_from(raw.size() / usize::try_from(rows.max(1)).unwrap_or(1))
            .unwrap_or(i32::MAX);
        Ok(Bands {
            rows,
            cols,
            align: 1,
            decoding: Some(Decoding::Ggml {
                kind,
                shape: info.shape().to_vec(),
            }),
            scales: None,
            stored: vec![info.name().to_owned()],
            source: Source::Ggml {
                raw: reshape(&raw, rows, row_bytes)?,
                kind: kind.name,
            },
            shape,
        })
    }

    fn packed_bands(
        &mut self,
        name: &str,
        info: &TensorInfo,
        q: &QuantizedTensor,
    ) -> Result<Bands, WeightsError> {
        let reshape = |a: &Array, rows: i32, cols: i32| mlx::reshape(a, &[rows, cols]);
        let parts = self.packed_parts(name, info.name(), q)?;
        let shape: Vec<i32> = q
            .logical_shape
            .iter()
            .map(|d| i32::try_from(*d).unwrap_or(i32::MAX))
            .collect();
        let (rows, cols) = rows_cols(&shape);
        let words = parts.packed.shape().last().copied().unwrap_or(0);
        let groups = parts.scales.shape().last().copied().unwrap_or(0);
        let global = match parts.global {
            Some(gs) if gs.size() > 1 => {
                let experts = i32::try_from(gs.size()).unwrap_or(1);
                Some((gs, rows / experts.max(1)))
            }
            Some(gs) => Some((mlx::reshape(&gs, &[1])?, rows)),
            None => None,
        };
        Ok(Bands {
            rows,
            cols,
            align: 1,
            decoding: Some(Decoding::Quantized {
                params: q.params,
                shape: q.logical_shape.clone(),
            }),
            scales: Some(parts.shown_scales),
            stored: parts.stored,
            source: Source::Packed {
                weight: reshape(&parts.packed, rows, words)?,
                scales: reshape(&parts.scales, rows, groups)?,
                biases: parts
                    .biases
                    .map(|b| reshape(&b, rows, groups))
                    .transpose()?,
                params: q.params,
                global,
            },
            shape,
        })
    }
}
