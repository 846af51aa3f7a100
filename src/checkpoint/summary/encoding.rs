//! How each stored tensor is encoded (plain, MLX-packed in every mode,
//! FP8 with its block scales, ggml blocks, or overhead of another), found
//! from the headers and `config.json`: the one copy of these rules.

use super::super::config::{QuantMode, QuantParams};
use std::collections::BTreeMap;

use super::super::{Checkpoint, Dtype, TensorRef};
use super::{BlockCounts, Partners, ratio_bits};

/// One MLX-quantized weight: the packed `weight` with its `scales` (and
/// `biases`, for affine quantization).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantizedTensor {
    /// The layer path (`model.layers.0.mlp.up_proj`).
    pub module: String,
    /// Position of `<module>.weight` in [`Checkpoint::tensors`].
    pub weight: usize,
    /// Position of `<module>.scales`.
    pub scales: usize,
    /// Position of `<module>.biases`, when present.
    pub biases: Option<usize>,
    /// Position of `<module>.global_scale`, when present (nvfp4 weights that
    /// mlx-lm quantized with one tensor scale, one per expert).
    pub global_scale: Option<usize>,
    /// Mode, group size and bits.
    pub params: QuantParams,
    /// Whether `params` were inferred from shapes (no usable `config.json`
    /// entry, or one the packed shapes contradict).
    pub inferred: bool,
    /// The parameters `config.json` gives this layer when the packed shapes
    /// contradict them (the check command reports it).
    pub config_conflict: Option<QuantParams>,
    /// Weights the packed words hold: packed words x 32 / bits.
    pub logical_elements: u64,
    /// The dequantized shape: the stored shape with the last axis unpacked.
    pub logical_shape: Vec<u64>,
}

impl QuantizedTensor {
    /// Positions of the weight and everything stored with it.
    #[must_use]
    pub fn parts(&self) -> Vec<usize> {
        [
            Some(self.weight),
            Some(self.scales),
            self.biases,
            self.global_scale,
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Bytes of the packed weight, its scales, biases and global scale.
    #[must_use]
    pub fn stored_bytes(&self, checkpoint: &Checkpoint) -> u64 {
        let tensors = checkpoint.tensors();
        self.parts()
            .into_iter()
            .map(|i| tensors.at(i).bytes())
            .sum()
    }

    /// Stored bits per logical weight, scales and biases included.
    #[must_use]
    pub fn bits_per_weight(&self, checkpoint: &Checkpoint) -> f64 {
        ratio_bits(self.stored_bytes(checkpoint), self.logical_elements)
    }
}

/// FP8 element formats that safetensors names and MLX can decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Format {
    /// `F8_E4M3` (OCP E4M3FN: no infinities, max 448).
    E4M3,
    /// `F8_E5M2` (IEEE-like, the top byte of an f16).
    E5M2,
}

impl Fp8Format {
    /// The format of a stored dtype, when it is one of these.
    #[must_use]
    pub fn of(dtype: Dtype) -> Option<Self> {
        match dtype {
            Dtype::F8_E4M3 => Some(Self::E4M3),
            Dtype::F8_E5M2 => Some(Self::E5M2),
            _ => None,
        }
    }

    /// Lower-case name (`e4m3`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::E4M3 => "e4m3",
            Self::E5M2 => "e5m2",
        }
    }
}

/// An FP8 tensor: decoded from its byte codes, and multiplied by its block
/// scale when the checkpoint has one (`<name>_scale_inv`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fp8Tensor {
    /// Position of the FP8 tensor.
    pub weight: usize,
    /// Its element format.
    pub format: Fp8Format,
    /// Position of `<name>_scale_inv`, when present.
    pub scale: Option<usize>,
    /// Rows and columns per scale block, when the scale's shape fits one
    /// (from `weight_block_size`, else inferred from the shapes). `None` with
    /// a scale present: the scale does not fit the weight and the values
    /// cannot be decoded.
    pub block: Option<[u64; 2]>,
    /// Whether [`Fp8Tensor::block`] was inferred from the shapes (no
    /// `weight_block_size` in `config.json` that fits).
    pub block_inferred: bool,
}

/// Which part of a layer an auxiliary tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuxRole {
    /// Per-group scales of a packed weight.
    Scales,
    /// Per-group biases of an affine-packed weight.
    Biases,
    /// The tensor scale of an nvfp4 weight (one per expert).
    GlobalScale,
    /// Per-block scale of an FP8 weight.
    Fp8Scale,
}

/// How a stored tensor's values are encoded, and so how they are shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoding {
    /// Values as stored.
    Plain,
    /// An MLX-quantized weight: shown dequantized.
    Packed(QuantizedTensor),
    /// FP8 codes: shown decoded (and block-scaled).
    Fp8(Fp8Tensor),
    /// A GGUF tensor of a ggml block type (`Q4_K`, `IQ4_XS`…), stored as
    /// its bytes: shown as gguf-py's `dequantize` decodes it.
    Ggml(super::super::gguf::GgmlType),
    /// Overhead of another tensor (its scales, biases or block scale): not a
    /// parameter, and compared as part of its owner in a diff.
    Aux {
        /// Position of the tensor it belongs to.
        owner: usize,
        /// What it is to the owner.
        role: AuxRole,
    },
}

impl Checkpoint {
    /// When the stored tensor `weight_name` (`X.weight`) is an MLX-quantized
    /// weight, its layer: mode, scales, biases, group size and bits.
    #[must_use]
    pub fn quantized_weight(&self, weight_name: &str) -> Option<QuantizedTensor> {
        match self.encoding(weight_name) {
            Some(Encoding::Packed(q)) => Some(q),
            _ => None,
        }
    }

    /// How the stored tensor `name` is encoded (`None`: no such tensor).
    #[must_use]
    pub fn encoding(&self, name: &str) -> Option<Encoding> {
        let i = self.tensors().position(name)?;
        Some(self.encoding_at(i))
    }

    /// How the tensor at position `i` of [`Checkpoint::tensors`] is encoded.
    ///
    /// # Panics
    /// Never for `i` below the tensor count (positions come from this checkpoint).
    #[must_use]
    pub fn encoding_at(&self, i: usize) -> Encoding {
        let tensors = self.tensors();
        let t = tensors.at(i);
        if let Some(own) = self.own_encoding(t, &mut Partners::default()) {
            return own;
        }
        let find = |name: &str| tensors.position(name);
        let joined = |prefix: &str, suffix: &str| self.position_joined(prefix, suffix);
        for (suffix, role) in [
            (".scales", AuxRole::Scales),
            (".biases", AuxRole::Biases),
            (".global_scale", AuxRole::GlobalScale),
        ] {
            if let Some(module) = t.name().strip_suffix(suffix) {
                let weight = joined(module, ".weight");
                let scales = joined(module, ".scales");
                if let (Some(weight), Some(scales)) = (weight, scales)
                    && tensors.at(weight).dtype() == Dtype::U32
                    && detect(
                        self,
                        module,
                        tensors.at(weight),
                        scales,
                        &mut Partners::default(),
                    )
                    .is_some()
                {
                    return Encoding::Aux {
                        owner: weight,
                        role,
                    };
                }
            }
        }
        if let Some(owner) = t.name().strip_suffix("_scale_inv")
            && let Some(weight) = find(owner)
            && Fp8Format::of(tensors.at(weight).dtype()).is_some()
        {
            return Encoding::Aux {
                owner: weight,
                role: AuxRole::Fp8Scale,
            };
        }
        Encoding::Plain
    }

    /// The encoding `t` has by itself: [`Encoding::Packed`] or
    /// [`Encoding::Fp8`], which win over being another tensor's part.
    pub(super) fn own_encoding(
        &self,
        t: TensorRef<'_>,
        partners: &mut Partners,
    ) -> Option<Encoding> {
        if let Some(kind) = self.ggml_block_at(t.position()) {
            return Some(Encoding::Ggml(kind));
        }
        let tensors = self.tensors();
        if let Some(module) = t.name().strip_suffix(".weight")
            && t.dtype() == Dtype::U32
            && let Some(scales) = tensors.partner(t, module, ".scales", &mut partners.scales)
            && let Some(q) = detect(self, module, t, scales, partners)
        {
            return Some(Encoding::Packed(q));
        }
        let format = Fp8Format::of(t.dtype())?;
        let scale = tensors.partner(t, t.name(), "_scale_inv", &mut partners.fp8_scale);
        let mut block_inferred = false;
        let block = scale.and_then(|s| {
            let configured = self
                .config()
                .and_then(|c| c.fp8.as_ref())
                .and_then(|f| f.block);
            let scale = t.sibling(s).unwrap_or_else(|| tensors.at(s));
            // Without a configured block that fits, the model's own block
            // (from the weights whose shapes divide exactly) comes before
            // this tensor's shapes alone: a [576, 7168] weight with [5, 56]
            // scales is 128x128 in a 128x128 model, not 116x128.
            let fits_configured =
                configured.is_some_and(|b| fp8_block(t.shape(), scale.shape(), Some(b)) == Some(b));
            let candidate = if fits_configured {
                configured
            } else {
                self.fp8_shape_blocks().block.or(configured)
            };
            block_inferred = !fits_configured;
            fp8_block(t.shape(), scale.shape(), candidate)
        });
        Some(Encoding::Fp8(Fp8Tensor {
            weight: t.position(),
            format,
            scale,
            block,
            block_inferred: block_inferred && block.is_some(),
        }))
    }

    /// Whether any tensor may be packed or FP8 (U32 or F8 dtypes present):
    /// without, every tensor is plain and no names need looking up.
    #[must_use]
    pub fn may_have_encodings(&self) -> bool {
        self.is_gguf()
            || self
                .tensors()
                .iter()
                .any(|t| t.dtype() == Dtype::U32 || Fp8Format::of(t.dtype()).is_some())
    }

    /// Whether the stored tensor `name` is overhead of another (scales,
    /// biases, an FP8 block scale) rather than parameters.
    #[must_use]
    pub fn is_auxiliary(&self, name: &str) -> bool {
        matches!(self.encoding(name), Some(Encoding::Aux { .. }))
    }
}

/// The quantized layer `module` with packed weight `weight` and scales
/// `scales`, when its parameters are known or inferable from the shapes.
pub(super) fn detect(
    checkpoint: &Checkpoint,
    module: &str,
    w: TensorRef<'_>,
    scales: usize,
    partners: &mut Partners,
) -> Option<QuantizedTensor> {
    let tensors = checkpoint.tensors();
    let weight = w.position();
    let s = w.sibling(scales).unwrap_or_else(|| tensors.at(scales));
    let biases = tensors.partner(w, module, ".biases", &mut partners.biases);
    let global_scale = tensors.partner(w, module, ".global_scale", &mut partners.global_scale);
    let words = w.shape().last().copied().unwrap_or(0);
    let groups = s.shape().last().copied().unwrap_or(0);
    let fp_scales = s.dtype() == Dtype::U8 && biases.is_none();
    let configured = checkpoint
        .config()
        .and_then(|c| c.quantization.as_ref())
        .and_then(|c| c.for_module(module));
    let (params, inferred, config_conflict) = match configured {
        Some(p) if p.fits(words, groups) => (p, false, None),
        Some(p) => (infer(words, groups, fp_scales)?, true, Some(p)),
        None => (infer(words, groups, fp_scales)?, true, None),
    };
    let logical_cols = words * 32 / params.bits;
    let mut logical_shape = w.shape().to_vec();
    if let Some(last) = logical_shape.last_mut() {
        *last = logical_cols;
    }
    Some(QuantizedTensor {
        module: module.to_owned(),
        weight,
        scales,
        biases,
        global_scale,
        params,
        inferred,
        config_conflict,
        logical_elements: w.elements() * 32 / params.bits,
        logical_shape,
    })
}

/// Without a usable config: the packed row holds `in * bits / 32` words and
/// the scales row `in / group_size` groups, so `bits * group_size = 32 *
/// words / groups`. uint8 scales without biases are one of the fp modes,
/// which that product tells apart (mxfp4 128, nvfp4 64, mxfp8 256); else
/// affine, trying MLX's usual group sizes, the default (64) first.
pub(super) fn infer(words: u64, groups: u64, fp_scales: bool) -> Option<QuantParams> {
    if groups == 0 {
        return None;
    }
    let product = (words * 32).checked_div(groups)?;
    if product * groups != words * 32 {
        return None;
    }
    if fp_scales {
        return [QuantMode::Mxfp4, QuantMode::Nvfp4, QuantMode::Mxfp8]
            .into_iter()
            .find(|m| {
                let (g, b) = m.defaults();
                g * b == product
            })
            .map(|mode| {
                let (group_size, bits) = mode.defaults();
                QuantParams {
                    mode,
                    group_size,
                    bits,
                }
            });
    }
    [64, 32, 128].into_iter().find_map(|group_size| {
        let bits = product / group_size;
        (bits * group_size == product && matches!(bits, 2 | 3 | 4 | 5 | 6 | 8))
            .then_some(QuantParams::affine(group_size, bits))
    })
}

/// The FP8 block sizes a checkpoint's shapes say: each FP8 weight's block
/// as its shapes give it ([`fp8_block`] with no configured block: a power
/// of two on each axis where one fits), the most common (the model's one
/// block size), and whether the weights disagree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fp8ShapeBlocks {
    /// The most common exact block (the largest of those tied).
    pub block: Option<[u64; 2]>,
    /// Every exact block seen, with how many weights have it, when there
    /// is more than one.
    pub disagreeing: Vec<([u64; 2], usize)>,
}

impl Checkpoint {
    /// The FP8 block sizes the shapes say ([`Fp8ShapeBlocks`]), found once.
    pub fn fp8_shape_blocks(&self) -> &Fp8ShapeBlocks {
        self.fp8_blocks.get_or_init(|| {
            let tensors = self.tensors();
            let mut counts = BlockCounts::default();
            let mut name = String::new();
            for t in tensors {
                if Fp8Format::of(t.dtype()).is_none() {
                    continue;
                }
                name.clear();
                name.push_str(t.name());
                name.push_str("_scale_inv");
                let Some(scale) = tensors.find(&name) else {
                    continue;
                };
                if let Some(block) = fp8_block(t.shape(), scale.shape(), None) {
                    counts.add(block);
                }
            }
            let disagreeing = if counts.0.len() > 1 {
                let mut all = counts.0.clone();
                all.sort_unstable();
                all
            } else {
                Vec::new()
            };
            Fp8ShapeBlocks {
                block: counts.most_common(),
                disagreeing,
            }
        })
    }
}

/// The FP8 block (rows, cols per scale) of a weight of `shape` with a scale
/// of `scale_shape`: the configured block when it fits, else on each axis
/// the power of two that gives the scale's shape (`ceil(dim / block) ==
/// scale dim`: a ragged [576, 256] weight with [5, 2] scales is 128x128, as
/// FP8 checkpoints are blocked), else the smallest block that does.
pub(super) fn fp8_block(
    shape: &[u64],
    scale_shape: &[u64],
    configured: Option<[u64; 2]>,
) -> Option<[u64; 2]> {
    let ([.., rows, cols], [.., s_rows, s_cols]) = (shape, scale_shape) else {
        return None;
    };
    let fits = |b: [u64; 2]| {
        b[0] > 0 && b[1] > 0 && rows.div_ceil(b[0]) == *s_rows && cols.div_ceil(b[1]) == *s_cols
    };
    if let Some(b) = configured.filter(|b| fits(*b)) {
        return Some(b);
    }
    if *s_rows == 0 || *s_cols == 0 {
        return None;
    }
    let axis = |dim: u64, scales: u64| {
        let smallest = dim.div_ceil(scales);
        // The powers of two from the smallest block that fits up: the
        // first whose grid is still `scales` long.
        let power = smallest.checked_next_power_of_two()?;
        Some(if dim.div_ceil(power) == scales {
            power
        } else {
            smallest
        })
    };
    let inferred = [axis(*rows, *s_rows)?, axis(*cols, *s_cols)?];
    fits(inferred).then_some(inferred)
}

pub(super) fn most_common(found: &[QuantizedTensor]) -> QuantParams {
    let mut counts: BTreeMap<(QuantMode, u64, u64), usize> = BTreeMap::new();
    for q in found {
        *counts
            .entry((q.params.mode, q.params.group_size, q.params.bits))
            .or_default() += 1;
    }
    let ((mode, group_size, bits), _) = counts
        .into_iter()
        .max_by_key(|&(_, n)| n)
        .unwrap_or(((QuantMode::Affine, 64, 4), 0));
    QuantParams {
        mode,
        group_size,
        bits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_inferred_from_packed_and_group_columns() {
        // 4096 inputs at 4 bits = 512 words; 64 groups of 64.
        assert_eq!(infer(512, 64, false), Some(QuantParams::affine(64, 4)));
        // 8 bits, group 64: 1024 words, 64 groups.
        assert_eq!(infer(1024, 64, false), Some(QuantParams::affine(64, 8)));
        // uint8 scales without biases: the fp modes, told apart by group x bits.
        let fp = |words, groups| infer(words, groups, true).map(|p| p.mode);
        assert_eq!(fp(512, 128), Some(QuantMode::Mxfp4));
        assert_eq!(fp(512, 256), Some(QuantMode::Nvfp4));
        assert_eq!(fp(1024, 128), Some(QuantMode::Mxfp8));
        assert_eq!(infer(7, 3, false), None);
        assert_eq!(infer(512, 0, false), None);
    }
}
