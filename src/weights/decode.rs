//! A tensor's values as people mean them: MLX-quantized weights dequantized
//! (every mode), FP8 decoded and multiplied by its block scale, the uint8
//! scales of the fp modes decoded. No byte code is ever passed off as a
//! value: a stored dtype that cannot be decoded is an error.

use crate::checkpoint::{
    AuxRole, Dtype, Encoding, Fp8Format, Fp8Tensor, QuantMode, QuantParams, QuantizedTensor,
    ScaleFormat, TensorInfo,
};
use crate::mlx::{self, Array, ByteFloat};

use super::bands::{i32_shape, rows_cols};
use super::{ShardLoader, Weights, WeightsError};

/// How the values shown were obtained from the stored bytes, when that is
/// more than reading them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoding {
    /// An MLX-quantized weight, dequantized by MLX.
    Quantized {
        /// Mode, group size, bits.
        params: QuantParams,
        /// The dequantized (logical) shape.
        shape: Vec<u64>,
    },
    /// FP8 codes decoded, times the block scale when there is one.
    Fp8 {
        /// E4M3 or E5M2.
        format: Fp8Format,
        /// Rows and columns per scale block (`None`: no scale).
        block: Option<[u64; 2]>,
        /// Whether the block was inferred from the shapes (no
        /// `weight_block_size` in config.json that fits).
        block_inferred: bool,
        /// The shape (as stored).
        shape: Vec<u64>,
    },
    /// The uint8 scales of an fp-mode weight, decoded.
    Scales {
        /// The mode whose scales these are.
        mode: QuantMode,
    },
    /// A GGUF tensor of a ggml block type, decoded as gguf-py's
    /// `dequantize` does.
    Ggml {
        /// The ggml type.
        kind: crate::checkpoint::gguf::GgmlType,
        /// The logical shape.
        shape: Vec<u64>,
    },
}

impl Decoding {
    /// One line for people: what the values are.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Quantized { params, shape } => match params.mode {
                QuantMode::Affine => format!(
                    "MLX affine {}-bit, group {} (scales and biases): values are MLX's dequantization, shape {shape:?}",
                    params.bits, params.group_size
                ),
                mode => format!(
                    "MLX {mode} ({}-bit, group {}, {} scales, no biases): values are MLX's dequantization, shape {shape:?}",
                    params.bits,
                    params.group_size,
                    match mode.scale_format() {
                        ScaleFormat::E4M3 => "E4M3",
                        _ => "E8M0",
                    }
                ),
            },
            Self::Fp8 {
                format,
                block: Some([r, c]),
                block_inferred,
                shape,
            } => format!(
                "FP8 {} decoded and multiplied by its {r}x{c} block scale (weight_scale_inv{}), shape {shape:?}",
                format.name().to_uppercase(),
                if *block_inferred {
                    "; block inferred from the shapes: no weight_block_size in config.json"
                } else {
                    ""
                }
            ),
            Self::Fp8 {
                format,
                block: None,
                shape,
                ..
            } => format!(
                "FP8 {} decoded (no block scale), shape {shape:?}",
                format.name().to_uppercase()
            ),
            Self::Scales { mode } => format!(
                "{mode} scales decoded from {} bytes",
                match mode.scale_format() {
                    ScaleFormat::E4M3 => "E4M3",
                    _ => "E8M0 (2^(byte-127))",
                }
            ),
            Self::Ggml { kind, shape } => format!(
                "GGUF {} ({:.4} bits per weight) decoded on the device as gguf-py's dequantize does, shape {shape:?}",
                kind.name,
                kind.bits_per_value()
            ),
        }
    }

    /// The logical shape of the values.
    #[must_use]
    pub fn shape(&self) -> Option<&[u64]> {
        match self {
            Self::Quantized { shape, .. } | Self::Fp8 { shape, .. } | Self::Ggml { shape, .. } => {
                Some(shape)
            }
            Self::Scales { .. } => None,
        }
    }
}

/// The values of one tensor, lazy, with what they were decoded from.
pub struct Values {
    /// The values (not yet evaluated).
    pub array: Array,
    /// How they were decoded, when they were.
    pub decoding: Option<Decoding>,
    /// A quantized weight's scales, decoded to floats (for heatmaps); an FP8
    /// weight's block scale.
    pub scales: Option<Array>,
    /// An affine weight's biases.
    pub biases: Option<Array>,
    /// The stored tensors read (the tensor and its scales, biases or block
    /// scale), for residency bookkeeping.
    pub stored: Vec<String>,
}

/// The stored arrays of one packed weight, lazy, and what they are called.
pub(super) struct PackedParts {
    /// The packed words.
    pub(super) packed: Array,
    /// The scales as stored.
    pub(super) scales: Array,
    /// The biases (affine only).
    pub(super) biases: Option<Array>,
    /// The tensor scale (nvfp4 with one).
    pub(super) global: Option<Array>,
    /// The scales as values (E8M0 or E4M3 bytes decoded).
    pub(super) shown_scales: Array,
    /// The stored names read, the weight first.
    pub(super) stored: Vec<String>,
}

pub(super) fn byte_float(format: ScaleFormat) -> Option<ByteFloat> {
    match format {
        ScaleFormat::Float => None,
        ScaleFormat::E8M0 => Some(ByteFloat::E8M0),
        ScaleFormat::E4M3 => Some(ByteFloat::E4M3),
    }
}

pub(super) fn fp8_codes(format: Fp8Format) -> ByteFloat {
    match format {
        Fp8Format::E4M3 => ByteFloat::E4M3,
        Fp8Format::E5M2 => ByteFloat::E5M2,
    }
}

impl<N: ShardLoader> Weights<N> {
    /// How the stored tensor behind canonical `name` is encoded.
    #[must_use]
    pub fn encoding(&self, name: &str) -> Option<Encoding> {
        let info = self.info(name)?;
        self.checkpoint.encoding(info.name())
    }

    /// Whether canonical `name` is overhead of another tensor (scales,
    /// biases, an FP8 block scale): compared and counted with its owner.
    #[must_use]
    pub fn is_auxiliary(&self, name: &str) -> bool {
        matches!(self.encoding(name), Some(Encoding::Aux { .. }))
    }

    /// Canonical names of the tensors that hold parameters, in walk order
    /// (no scales, biases or block scales).
    #[must_use]
    pub fn parameter_names(&self) -> Vec<String> {
        let names = self.walk_order();
        if !self.checkpoint.may_have_encodings() {
            return names;
        }
        names
            .into_iter()
            .filter(|n| !self.is_auxiliary(n))
            .collect()
    }

    /// The header entry of canonical `name` and how its stored tensor is encoded.
    pub(super) fn info_and_encoding(
        &self,
        name: &str,
    ) -> Result<(TensorInfo, Encoding), WeightsError> {
        let info = self
            .info(name)
            .ok_or_else(|| WeightsError::NoTensor(name.to_owned()))?
            .to_info();
        let encoding = self
            .checkpoint
            .encoding(info.name())
            .unwrap_or(Encoding::Plain);
        Ok((info, encoding))
    }

    /// Stored names whose bytes the values of canonical `name` need.
    #[must_use]
    pub fn stored_parts(&self, name: &str) -> Vec<String> {
        let Some(info) = self.info(name) else {
            return Vec::new();
        };
        let tensors = self.checkpoint.tensors();
        let mut parts = vec![info.name().to_owned()];
        match self.checkpoint.encoding(info.name()) {
            Some(Encoding::Packed(q)) => {
                parts.extend(
                    q.parts()
                        .into_iter()
                        .skip(1)
                        .map(|i| tensors.at(i).name().to_owned()),
                );
            }
            Some(Encoding::Fp8(f)) => {
                parts.extend(f.scale.map(|i| tensors.at(i).name().to_owned()));
            }
            _ => {}
        }
        parts
    }

    /// The values of canonical `name` as people mean them, lazy (see the
    /// module doc); the view's fix-up applies to plain tensors.
    ///
    /// # Errors
    /// No such tensor, an undecodable dtype, scales that do not fit, or MLX.
    pub fn values(&mut self, name: &str) -> Result<Values, WeightsError> {
        let (info, encoding) = self.info_and_encoding(name)?;
        let tensors = self.checkpoint.tensors();
        match encoding {
            Encoding::Packed(q) => self.packed_values(name, info.name(), q),
            Encoding::Fp8(f) => self.fp8_values(name, &info, &f),
            Encoding::Ggml(kind) => {
                let raw = self.stored(info.name())?;
                let shape = info.shape().to_vec();
                let dims = i32_shape(&shape);
                let (rows, cols) = rows_cols(&dims);
                let decoded = mlx::ggml::decode_array(&raw, kind.name, rows, cols)?;
                let array = self.fixed_up(name, mlx::reshape(&decoded, &dims)?)?;
                Ok(Values {
                    array,
                    decoding: Some(Decoding::Ggml { kind, shape }),
                    scales: None,
                    biases: None,
                    stored: vec![info.name().to_owned()],
                })
            }
            Encoding::Aux {
                owner,
                role: AuxRole::Scales,
            } => {
                let mode = self
                    .checkpoint
                    .quantized_weight(tensors.at(owner).name())
                    .map_or(QuantMode::Affine, |q| q.params.mode);
                let raw = self.tensor(name)?;
                match byte_float(mode.scale_format()) {
                    Some(format) => Ok(Values {
                        array: mlx::decode_bytes(&raw, format)?,
                        decoding: Some(Decoding::Scales { mode }),
                        scales: None,
                        biases: None,
                        stored: vec![info.name().to_owned()],
                    }),
                    None => Ok(plain(raw, info.name().to_owned())),
                }
            }
            Encoding::Plain | Encoding::Aux { .. } => {
                match info.dtype() {
                    Dtype::F8_E8M0 => {
                        let raw = self.tensor(name)?;
                        return Ok(Values {
                            array: mlx::decode_bytes(&raw, ByteFloat::E8M0)?,
                            decoding: None,
                            scales: None,
                            biases: None,
                            stored: vec![info.name().to_owned()],
                        });
                    }
                    Dtype::F8_E4M3FNUZ
                    | Dtype::F8_E5M2FNUZ
                    | Dtype::F4
                    | Dtype::F6_E2M3
                    | Dtype::F6_E3M2 => {
                        return Err(WeightsError::Undecodable {
                            name: name.to_owned(),
                            reason: format!(
                                "weightscope cannot decode {} values yet, and will not show their byte codes",
                                info.dtype()
                            ),
                        });
                    }
                    _ => {}
                }
                let raw = self.tensor(name)?;
                Ok(plain(raw, info.name().to_owned()))
            }
        }
    }

    /// The packed weight of canonical `name` and everything stored with it.
    pub(super) fn packed_parts(
        &mut self,
        name: &str,
        stored_name: &str,
        q: &QuantizedTensor,
    ) -> Result<PackedParts, WeightsError> {
        let tensors = self.checkpoint.tensors();
        let scales_name = tensors.at(q.scales).name().to_owned();
        let biases_name = q.biases.map(|b| tensors.at(b).name().to_owned());
        let global_name = q.global_scale.map(|g| tensors.at(g).name().to_owned());
        let packed = self.tensor(name)?;
        let scales = self.stored(&scales_name)?;
        let biases = biases_name.as_deref().map(|b| self.stored(b)).transpose()?;
        let global = global_name.as_deref().map(|g| self.stored(g)).transpose()?;
        let shown_scales = match byte_float(q.params.mode.scale_format()) {
            Some(format) => mlx::decode_bytes(&scales, format)?,
            None => scales.clone(),
        };
        let mut stored = vec![stored_name.to_owned(), scales_name];
        stored.extend(biases_name);
        stored.extend(global_name);
        Ok(PackedParts {
            packed,
            scales,
            biases,
            global,
            shown_scales,
            stored,
        })
    }

    fn packed_values(
        &mut self,
        name: &str,
        stored_name: &str,
        q: QuantizedTensor,
    ) -> Result<Values, WeightsError> {
        let parts = self.packed_parts(name, stored_name, &q)?;
        let p = q.params;
        let array = mlx::dequantize(
            &parts.packed,
            &parts.scales,
            parts.biases.as_ref().filter(|_| p.mode.has_biases()),
            p.mode.name(),
            p.group_size,
            p.bits,
            parts.global.as_ref(),
        )?;
        Ok(Values {
            array,
            decoding: Some(Decoding::Quantized {
                params: p,
                shape: q.logical_shape,
            }),
            scales: Some(parts.shown_scales),
            biases: parts.biases,
            stored: parts.stored,
        })
    }

    fn fp8_values(
        &mut self,
        name: &str,
        info: &TensorInfo,
        f: &Fp8Tensor,
    ) -> Result<Values, WeightsError> {
        let tensors = self.checkpoint.tensors();
        let scale_name = f.scale.map(|s| tensors.at(s).name().to_owned());
        let scale_shape = f.scale.map(|s| tensors.at(s).shape().to_vec());
        let codes = self.tensor(name)?;
        let decoded = mlx::decode_bytes(&codes, fp8_codes(f.format))?;
        let mut stored = vec![info.name().to_owned()];
        let (array, scale) = match (&scale_name, f.block) {
            (None, _) => (decoded, None),
            (Some(scale_name), Some(block)) => {
                let scale = self.stored(scale_name)?;
                stored.push(scale_name.clone());
                (mlx::scale_blocks(&decoded, &scale, block)?, Some(scale))
            }
            (Some(scale_name), None) => {
                return Err(WeightsError::Undecodable {
                    name: name.to_owned(),
                    reason: format!(
                        "its block scale `{scale_name}` {:?} does not fit its shape {:?} in any block size",
                        scale_shape.unwrap_or_default(),
                        info.shape()
                    ),
                });
            }
        };
        Ok(Values {
            array,
            decoding: Some(Decoding::Fp8 {
                format: f.format,
                block: f.block.filter(|_| scale.is_some()),
                block_inferred: f.block_inferred && scale.is_some(),
                shape: info.shape().to_vec(),
            }),
            scales: scale,
            biases: None,
            stored,
        })
    }
}

fn plain(array: Array, stored: String) -> Values {
    Values {
        array,
        decoding: None,
        scales: None,
        biases: None,
        stored: vec![stored],
    }
}
