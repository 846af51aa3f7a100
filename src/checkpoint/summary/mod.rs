//! Totals, parameter counts per dtype, MLX quantization (every mode),
//! block-scaled FP8 and layer grouping, all from the headers.
//!
//! Counting follows mlx-lm (`get_total_parameters`, `compute_bits_per_weight`):
//! a packed weight holds `words * 32 / bits` parameters, its scales and
//! biases are overhead, and bits per weight is every stored byte over the
//! logical parameters. FP8 block scales (`*_scale_inv`) are overhead too.

use std::collections::BTreeMap;

mod encoding;
mod layers;

pub use encoding::{AuxRole, Encoding, Fp8Format, Fp8ShapeBlocks, Fp8Tensor, QuantizedTensor};
pub use layers::layer_of;

use encoding::most_common;
use layers::LayerOfRun;

use super::config::{QuantMode, QuantParams};
use super::{Checkpoint, Dtype, PartnerGuess};

/// Quantization of the whole checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantSummary {
    /// Every quantized weight.
    pub tensors: Vec<QuantizedTensor>,
    /// The default parameters from `config.json` (or the most common inferred ones).
    pub default: QuantParams,
    /// Quantized weights per mode.
    pub modes: BTreeMap<QuantMode, usize>,
    /// Logical weights in quantized layers.
    pub logical_elements: u64,
    /// Bytes of packed weights, scales and biases together.
    pub stored_bytes: u64,
    /// Stored bits per logical weight in quantized layers, scales and biases included.
    pub bits_per_weight: f64,
}

impl QuantSummary {
    /// The recipe as written: each (mode, bits, group size) with how many
    /// weights use it, most used first.
    #[must_use]
    pub fn recipe(&self) -> Vec<(QuantParams, usize)> {
        let mut recipe: Vec<(QuantParams, usize)> = Vec::new();
        for t in &self.tensors {
            match recipe.iter_mut().find(|(p, _)| *p == t.params) {
                Some((_, n)) => *n += 1,
                None => recipe.push((t.params, 1)),
            }
        }
        recipe.sort_by(|a, b| {
            b.1.cmp(&a.1)
                .then(a.0.bits.cmp(&b.0.bits))
                .then(a.0.group_size.cmp(&b.0.group_size))
        });
        recipe
    }

    /// The recipe in words: "affine 4-bit g64" when every weight uses one
    /// setting, else each with its count, "affine 3-bit g64 x25, affine
    /// 6-bit g64 x5" (a mixed recipe).
    #[must_use]
    pub fn recipe_text(&self) -> String {
        let recipe = self.recipe();
        let name = |p: &QuantParams| format!("{} {}-bit g{}", p.mode, p.bits, p.group_size);
        match recipe.as_slice() {
            [(p, _)] => name(p),
            many => many
                .iter()
                .map(|(p, n)| format!("{} x{n}", name(p)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The recipe of the weights in numbered layer `layer` (`None`: outside
    /// numbered layers), as [`Self::recipe`] gives it.
    #[must_use]
    pub fn recipe_of_layer(&self, layer: Option<u64>) -> Vec<(QuantParams, usize)> {
        let mut recipe: Vec<(QuantParams, usize)> = Vec::new();
        for t in self.tensors.iter().filter(|t| layer_of(&t.module) == layer) {
            match recipe.iter_mut().find(|(p, _)| *p == t.params) {
                Some((_, n)) => *n += 1,
                None => recipe.push((t.params, 1)),
            }
        }
        recipe.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.bits.cmp(&b.0.bits)));
        recipe
    }

    /// Whether the default (from `config.json`) is the setting of no weight.
    #[must_use]
    pub fn default_unused(&self) -> bool {
        !self.tensors.iter().any(|t| t.params == self.default)
    }
}

/// Block-scaled (or plain) FP8 tensors of the checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Summary {
    /// Every FP8 tensor.
    pub tensors: Vec<Fp8Tensor>,
    /// Bytes of their block scales (overhead, not parameters).
    pub scale_bytes: u64,
    /// The block size most of them use, when they have scales.
    pub block: Option<[u64; 2]>,
}

/// Parameters and bytes of one numbered layer (or of everything outside
/// numbered layers, `layer: None`).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerFigures {
    /// The layer number (see [`layer_of`]).
    pub layer: Option<u64>,
    /// Logical parameters, counted as mlx-lm counts them.
    pub params: u64,
    /// Stored bytes, overhead included.
    pub bytes: u64,
}

impl LayerFigures {
    /// Stored bits per logical parameter.
    #[must_use]
    pub fn bits_per_weight(&self) -> f64 {
        ratio_bits(self.bytes, self.params)
    }
}

/// Checkpoint totals from the headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Tensors in shards that opened.
    pub tensor_count: usize,
    /// Sum of tensor bytes.
    pub total_bytes: u64,
    /// Sum of shard file sizes (headers included).
    pub file_bytes: u64,
    /// Stored elements per stored dtype (packed words count as words; a
    /// GGUF file's block-typed tensors are in `params_by_ggml` instead).
    pub params_by_dtype: BTreeMap<Dtype, u64>,
    /// A GGUF file's parameters per ggml block type (`Q4_K`…).
    pub params_by_ggml: BTreeMap<&'static str, u64>,
    /// The model's parameters as mlx-lm counts them: packed weights as the
    /// weights they hold; scales, biases and FP8 block scales not counted.
    pub logical_params: u64,
    /// Every stored bit over [`Summary::logical_params`] (mlx-lm's
    /// `compute_bits_per_weight`).
    pub bits_per_weight: f64,
    /// MLX quantization, when the checkpoint has quantized weights.
    pub quantization: Option<QuantSummary>,
    /// FP8 tensors, when there are any.
    pub fp8: Option<Fp8Summary>,
    /// Parameters and bytes per numbered layer, in layer order.
    pub layers: Vec<LayerFigures>,
}

pub(super) fn ratio_bits(bytes: u64, params: u64) -> f64 {
    if params == 0 {
        0.0
    } else {
        (bytes * 8) as f64 / params as f64
    }
}

impl Summary {
    /// Computes the summary of `checkpoint`. The per-tensor pass (an
    /// encoding and two name look-ups per FP8 or packed tensor) is split
    /// over the machine's cores in runs of tensors, merged in order.
    #[must_use]
    pub fn of(checkpoint: &Checkpoint) -> Self {
        let tensors = checkpoint.tensors();
        // Packed weights are U32 and FP8 weights F8: without either, every
        // tensor is plain and no name needs looking up.
        let may_encode = checkpoint.may_have_encodings();
        let count = |range: std::ops::Range<usize>| Counts::of(checkpoint, range, may_encode);
        let mut parts = crate::par::on_cores(tensors.len(), 1 << 13, "summary", &count).into_iter();
        // The first run's lists have room for the others' (see
        // `push_reserving`): they are appended, never moved.
        let mut all = parts.next().unwrap_or_default();
        for part in parts {
            all.merge(part);
        }
        // Torch files hold whole storages (a slice's storage whole): their
        // bytes are the storages', each once.
        let total_bytes = if checkpoint.is_torch() {
            checkpoint.shards().iter().map(|s| s.data_bytes).sum()
        } else {
            all.total_bytes
        };
        let params_by_dtype: BTreeMap<Dtype, u64> = Dtype::ALL
            .into_iter()
            .filter(|&d| all.per_dtype[d as usize] > 0)
            .map(|d| (d, all.per_dtype[d as usize]))
            .collect();
        Self {
            tensor_count: tensors.len(),
            total_bytes,
            file_bytes: checkpoint.shards().iter().map(|s| s.file_bytes).sum(),
            params_by_dtype,
            params_by_ggml: all.per_ggml,
            logical_params: all.logical_params,
            bits_per_weight: ratio_bits(total_bytes, all.logical_params),
            quantization: quant_summary(checkpoint, all.packed),
            fp8: fp8_summary(all.fp8, all.fp8_scale_bytes, all.fp8_blocks),
            layers: all.layers.into_values().collect(),
        }
    }
}

/// What the summary counts over a run of tensors.
#[derive(Default)]
pub(super) struct Counts {
    /// Stored elements, a slot per dtype.
    per_dtype: [u64; Dtype::ALL.len()],
    /// Parameters per ggml block type (GGUF files).
    per_ggml: BTreeMap<&'static str, u64>,
    total_bytes: u64,
    logical_params: u64,
    layers: BTreeMap<Option<u64>, LayerFigures>,
    /// The figures of the layer being counted, not yet in `layers`.
    current: Option<LayerFigures>,
    layer_of: LayerOfRun,
    packed: Vec<QuantizedTensor>,
    fp8: Vec<Fp8Tensor>,
    /// Bytes of the FP8 weights' block scales.
    fp8_scale_bytes: u64,
    fp8_blocks: BlockCounts,
}

/// Pushes `value`, the first time reserving room for `at_most` values:
/// untouched room costs no memory, and the runs' lists are then appended
/// to the first without being moved again.
pub(super) fn push_reserving<T>(list: &mut Vec<T>, value: T, at_most: usize) {
    if list.capacity() == 0 {
        list.reserve(at_most);
    }
    list.push(value);
}

/// Where each kind of partner was last found from its owner (see
/// [`super::TensorTable::partner`]).
#[derive(Default)]
pub(super) struct Partners {
    scales: PartnerGuess,
    biases: PartnerGuess,
    global_scale: PartnerGuess,
    fp8_scale: PartnerGuess,
}

impl Counts {
    /// Counts the tensors at `range`. Each tensor's own encoding is looked
    /// up here; a part of another tensor (scales, biases, a block scale) is
    /// not: its owner, wherever it is, takes the part's elements back out of
    /// the parameters (so a run's figures may wrap below zero until merged).
    /// The same figures as [`Checkpoint::encoding_at`] per tensor, with half
    /// the name look-ups.
    fn of(checkpoint: &Checkpoint, range: std::ops::Range<usize>, may_encode: bool) -> Self {
        let tensors = checkpoint.tensors();
        let mut counts = Self::default();
        let mut partners = Partners::default();
        for t in tensors.iter_range(range) {
            // A torch tensor on another's storage (a tied weight, a view)
            // holds no bytes or parameters of its own: counted once.
            if checkpoint
                .torch_tensor_at(t.position())
                .is_some_and(|at| at.tied_to.is_some())
            {
                continue;
            }
            match checkpoint.ggml_block_at(t.position()) {
                Some(kind) => *counts.per_ggml.entry(kind.name).or_default() += t.elements(),
                None => counts.per_dtype[t.dtype() as usize] += t.elements(),
            }
            counts.total_bytes += t.bytes();
            let own = if may_encode {
                checkpoint.own_encoding(t, &mut partners)
            } else {
                None
            };
            let params = match &own {
                Some(Encoding::Packed(q)) => q.logical_elements,
                _ => t.elements(),
            };
            counts.add(t.name(), params, t.bytes());
            let parts = match own {
                Some(Encoding::Packed(q)) => {
                    let parts = [Some(q.scales), q.biases, q.global_scale];
                    push_reserving(&mut counts.packed, q, tensors.len() - t.position());
                    parts
                }
                Some(Encoding::Fp8(f)) => {
                    let parts = [f.scale, None, None];
                    if let Some(block) = f.block {
                        counts.fp8_blocks.add(block);
                    }
                    push_reserving(&mut counts.fp8, f, tensors.len() - t.position());
                    parts
                }
                _ => [None; 3],
            };
            let fp8 = Fp8Format::of(t.dtype()).is_some();
            // Parts are mostly in the weight's own shard: no search there.
            let near = |p: usize| t.sibling(p).or_else(|| tensors.get(p));
            for part in parts.into_iter().flatten().filter_map(near) {
                if fp8 {
                    counts.fp8_scale_bytes += part.bytes();
                }
                // An FP8 tensor is never a part: its own encoding wins.
                if Fp8Format::of(part.dtype()).is_none() {
                    counts.add(part.name(), part.elements().wrapping_neg(), 0);
                }
            }
        }
        counts.file_current();
        counts
    }

    /// Adds `params` (wrapping) and `bytes` to the totals and to the layer
    /// of tensor `name`.
    fn add(&mut self, name: &str, params: u64, bytes: u64) {
        self.logical_params = self.logical_params.wrapping_add(params);
        let layer = self.layer_of.layer_of(name);
        // Neighbouring tensors are mostly of one layer: its figures are
        // kept aside and filed in the map when another layer comes.
        if self.current.as_ref().is_none_or(|c| c.layer != layer) {
            self.file_current();
            self.current = Some(LayerFigures {
                layer,
                params: 0,
                bytes: 0,
            });
        }
        if let Some(figures) = &mut self.current {
            figures.params = figures.params.wrapping_add(params);
            figures.bytes += bytes;
        }
    }

    /// Files the current layer's figures in the map.
    fn file_current(&mut self) {
        if let Some(figures) = self.current.take() {
            let filed = self.layers.entry(figures.layer).or_insert(LayerFigures {
                layer: figures.layer,
                params: 0,
                bytes: 0,
            });
            filed.params = filed.params.wrapping_add(figures.params);
            filed.bytes += figures.bytes;
        }
    }

    /// Adds `later` (the run after this one's).
    fn merge(&mut self, later: Self) {
        for (mine, theirs) in self.per_dtype.iter_mut().zip(later.per_dtype) {
            *mine += theirs;
        }
        for (kind, n) in later.per_ggml {
            *self.per_ggml.entry(kind).or_default() += n;
        }
        self.total_bytes += later.total_bytes;
        self.logical_params = self.logical_params.wrapping_add(later.logical_params);
        for (layer, figures) in later.layers {
            let mine = self.layers.entry(layer).or_insert(LayerFigures {
                layer,
                params: 0,
                bytes: 0,
            });
            mine.params = mine.params.wrapping_add(figures.params);
            mine.bytes += figures.bytes;
        }
        self.packed.extend(later.packed);
        self.fp8.extend(later.fp8);
        self.fp8_scale_bytes += later.fp8_scale_bytes;
        for &(block, n) in &later.fp8_blocks.0 {
            self.fp8_blocks.add_n(block, n);
        }
    }
}

/// How many FP8 weights use each block size (a handful of sizes at most).
#[derive(Default)]
pub(super) struct BlockCounts(Vec<([u64; 2], usize)>);

impl BlockCounts {
    fn add(&mut self, block: [u64; 2]) {
        self.add_n(block, 1);
    }

    fn add_n(&mut self, block: [u64; 2], n: usize) {
        match self.0.iter_mut().find(|(b, _)| *b == block) {
            Some((_, count)) => *count += n,
            None => self.0.push((block, n)),
        }
    }

    /// The most common block size (the largest of those tied).
    fn most_common(mut self) -> Option<[u64; 2]> {
        self.0.sort_unstable();
        self.0.into_iter().max_by_key(|&(_, n)| n).map(|(b, _)| b)
    }
}

pub(super) fn quant_summary(
    checkpoint: &Checkpoint,
    found: Vec<QuantizedTensor>,
) -> Option<QuantSummary> {
    if found.is_empty() {
        return None;
    }
    let logical_elements = found.iter().map(|q| q.logical_elements).sum();
    let stored_bytes = found.iter().map(|q| q.stored_bytes(checkpoint)).sum();
    let mut modes = BTreeMap::new();
    for q in &found {
        *modes.entry(q.params.mode).or_insert(0) += 1;
    }
    let default = checkpoint
        .config()
        .and_then(|c| c.quantization.as_ref())
        .map_or_else(|| most_common(&found), |c| c.default);
    Some(QuantSummary {
        default,
        modes,
        logical_elements,
        stored_bytes,
        bits_per_weight: ratio_bits(stored_bytes, logical_elements),
        tensors: found,
    })
}

pub(super) fn fp8_summary(
    found: Vec<Fp8Tensor>,
    scale_bytes: u64,
    blocks: BlockCounts,
) -> Option<Fp8Summary> {
    if found.is_empty() {
        return None;
    }
    Some(Fp8Summary {
        tensors: found,
        scale_bytes,
        block: blocks.most_common(),
    })
}

#[cfg(test)]
mod tests {
    use super::encoding::fp8_block;
    use super::*;

    #[test]
    fn the_most_common_block_is_the_largest_of_those_tied() {
        let mut counts = BlockCounts::default();
        for block in [[128, 128], [64, 64], [1, 128], [64, 64], [128, 128]] {
            counts.add(block);
        }
        assert_eq!(counts.most_common(), Some([128, 128]));
        assert_eq!(BlockCounts::default().most_common(), None);
    }

    #[test]
    fn fp8_blocks_fit_or_are_inferred() {
        assert_eq!(
            fp8_block(&[300, 256], &[3, 2], Some([128, 128])),
            Some([128, 128])
        );
        // The config's block does not fit: the shapes decide.
        assert_eq!(
            fp8_block(&[300, 256], &[3, 2], Some([64, 64])),
            Some([128, 128])
        );
        // 128 rows make a grid of 3 too (300 / 128 = 2.3): the power of two.
        assert_eq!(fp8_block(&[300, 256], &[3, 2], None), Some([128, 128]));
        assert_eq!(fp8_block(&[576, 256], &[5, 2], None), Some([128, 128]));
        // No power of two gives 3 scales over 100 rows (32 gives 4, 64 2).
        assert_eq!(fp8_block(&[100, 256], &[3, 2], None), Some([34, 128]));
        assert_eq!(fp8_block(&[300, 256], &[0, 2], None), None);
        assert_eq!(fp8_block(&[300], &[3], None), None);
    }
}
