//! Totals, parameter counts per dtype, MLX quantization and layer grouping,
//! all from the headers.

use std::collections::BTreeMap;

use super::config::QuantParams;
use super::{Checkpoint, Dtype};

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
    /// Group size and bits.
    pub params: QuantParams,
    /// Whether `params` were inferred from shapes (no usable `config.json`).
    pub inferred: bool,
    /// Weights the packed words hold: packed words x 32 / bits.
    pub logical_elements: u64,
}

/// Quantization of the whole checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantSummary {
    /// Every quantized weight.
    pub tensors: Vec<QuantizedTensor>,
    /// The default parameters from `config.json` (or the most common inferred ones).
    pub default: QuantParams,
    /// Logical weights in quantized layers.
    pub logical_elements: u64,
    /// Bytes of packed weights, scales and biases together.
    pub stored_bytes: u64,
    /// Stored bits per logical weight, scales and biases included.
    pub bits_per_weight: f64,
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
    /// Stored elements per stored dtype (packed words count as words).
    pub params_by_dtype: BTreeMap<Dtype, u64>,
    /// The model's parameters: quantized weights counted as the weights they
    /// hold, their scales and biases not counted.
    pub logical_params: u64,
    /// MLX quantization, when the checkpoint has quantized weights.
    pub quantization: Option<QuantSummary>,
}

impl Summary {
    /// Computes the summary of `checkpoint`.
    #[must_use]
    pub fn of(checkpoint: &Checkpoint) -> Self {
        let tensors = checkpoint.tensors();
        // One pass, counting into a slot per dtype (90k tensors).
        let mut per_dtype = [0u64; Dtype::ALL.len()];
        let mut total_bytes = 0u64;
        for t in tensors {
            per_dtype[t.dtype as usize] += t.elements();
            total_bytes += t.bytes();
        }
        let params_by_dtype: BTreeMap<Dtype, u64> = Dtype::ALL
            .into_iter()
            .filter(|&d| per_dtype[d as usize] > 0)
            .map(|d| (d, per_dtype[d as usize]))
            .collect();
        let stored_elements: u64 = per_dtype.iter().sum();
        // MLX packs quantized weights in U32 words: without any, there is
        // nothing to look for among the names.
        let quantization = if params_by_dtype.contains_key(&Dtype::U32) {
            quantization(checkpoint)
        } else {
            None
        };
        let logical_params = match &quantization {
            None => stored_elements,
            Some(q) => {
                let packed: u64 = q
                    .tensors
                    .iter()
                    .map(|qt| {
                        let aux = [Some(qt.weight), Some(qt.scales), qt.biases];
                        aux.into_iter()
                            .flatten()
                            .map(|i| tensors[i].elements())
                            .sum::<u64>()
                    })
                    .sum();
                stored_elements - packed + q.logical_elements
            }
        };
        Self {
            tensor_count: tensors.len(),
            total_bytes,
            file_bytes: checkpoint.shards().iter().map(|s| s.file_bytes).sum(),
            params_by_dtype,
            logical_params,
            quantization,
        }
    }
}

/// Finds `weight`/`scales`/`biases` triples with packed `U32` weights.
fn quantization(checkpoint: &Checkpoint) -> Option<QuantSummary> {
    let config = checkpoint.config().and_then(|c| c.quantization.as_ref());
    let found: Vec<QuantizedTensor> = checkpoint
        .tensors()
        .iter()
        .enumerate()
        .filter_map(|(scales, t)| detect(checkpoint, t.name.strip_suffix(".scales")?, scales))
        .collect();
    if found.is_empty() {
        return None;
    }
    let tensors = checkpoint.tensors();
    let logical_elements = found.iter().map(|q| q.logical_elements).sum();
    let stored_bytes = found
        .iter()
        .flat_map(|q| [Some(q.weight), Some(q.scales), q.biases])
        .flatten()
        .map(|i| tensors[i].bytes())
        .sum::<u64>();
    let default = config.map_or_else(|| most_common(&found), |c| c.default);
    Some(QuantSummary {
        default,
        logical_elements,
        stored_bytes,
        bits_per_weight: if logical_elements == 0 {
            0.0
        } else {
            (stored_bytes * 8) as f64 / logical_elements as f64
        },
        tensors: found,
    })
}

/// The quantized layer `module` whose scales are tensor `scales`, if its
/// weight is packed (`U32`) and its parameters are known or inferable.
fn detect(checkpoint: &Checkpoint, module: &str, scales: usize) -> Option<QuantizedTensor> {
    let config = checkpoint.config().and_then(|c| c.quantization.as_ref());
    let weight = checkpoint.tensor(&format!("{module}.weight"))?;
    if weight.dtype != Dtype::U32 {
        return None;
    }
    let biases = checkpoint.tensor(&format!("{module}.biases"));
    let packed_cols = weight.shape.last().copied().unwrap_or(0);
    let groups = checkpoint.tensors()[scales]
        .shape
        .last()
        .copied()
        .unwrap_or(0);
    let (params, inferred) = match config.and_then(|c| c.for_module(module)) {
        Some(p) => (p, false),
        None => (infer(packed_cols, groups)?, true),
    };
    Some(QuantizedTensor {
        module: module.to_owned(),
        weight: position(checkpoint, &weight.name),
        scales,
        biases: biases.map(|b| position(checkpoint, &b.name)),
        params,
        inferred,
        logical_elements: weight.elements() * 32 / params.bits,
    })
}

impl Checkpoint {
    /// When the stored tensor `weight_name` (`X.weight`) is an MLX-quantized
    /// weight, its layer: scales, biases, group size and bits.
    #[must_use]
    pub fn quantized_weight(&self, weight_name: &str) -> Option<QuantizedTensor> {
        let module = weight_name.strip_suffix(".weight")?;
        let scales = self
            .by_name
            .find(self.tensors(), &format!("{module}.scales"))?;
        detect(self, module, scales)
    }
}

fn position(checkpoint: &Checkpoint, name: &str) -> usize {
    checkpoint
        .by_name
        .find(checkpoint.tensors(), name)
        .unwrap_or_default()
}

/// Without a config: the packed row holds `in * bits / 32` words and the
/// scales row `in / group_size` groups, so `bits * group_size = 32 * words /
/// groups`. Try MLX's usual group sizes, the default (64) first.
fn infer(packed_cols: u64, groups: u64) -> Option<QuantParams> {
    if groups == 0 {
        return None;
    }
    let product = (packed_cols * 32).checked_div(groups)?;
    if product * groups != packed_cols * 32 {
        return None;
    }
    [64, 32, 128].into_iter().find_map(|group_size| {
        let bits = product / group_size;
        (bits * group_size == product && matches!(bits, 2 | 3 | 4 | 5 | 6 | 8))
            .then_some(QuantParams { group_size, bits })
    })
}

fn most_common(found: &[QuantizedTensor]) -> QuantParams {
    let mut counts: BTreeMap<(u64, u64), usize> = BTreeMap::new();
    for q in found {
        *counts
            .entry((q.params.group_size, q.params.bits))
            .or_default() += 1;
    }
    let ((group_size, bits), _) = counts
        .into_iter()
        .max_by_key(|&(_, n)| n)
        .unwrap_or(((64, 4), 0));
    QuantParams { group_size, bits }
}

/// The layer number of a tensor name: its first all-digit dot-separated
/// segment (`model.layers.12.mlp.up_proj.weight` is layer 12).
#[must_use]
pub fn layer_of(name: &str) -> Option<u64> {
    name.split('.')
        .find(|seg| !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|seg| seg.parse().ok())
}

impl Checkpoint {
    /// Tensor positions grouped by layer number (`None`: not in a numbered
    /// layer, such as embeddings), for tree views.
    #[must_use]
    pub fn layers(&self) -> BTreeMap<Option<u64>, Vec<usize>> {
        let mut groups: BTreeMap<Option<u64>, Vec<usize>> = BTreeMap::new();
        for (i, t) in self.tensors().iter().enumerate() {
            groups.entry(layer_of(&t.name)).or_default().push(i);
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_numbers_come_from_the_first_numeric_segment() {
        assert_eq!(layer_of("model.layers.12.mlp.up_proj.weight"), Some(12));
        assert_eq!(layer_of("model.embed_tokens.weight"), None);
        assert_eq!(layer_of("blocks.3.experts.7.w1"), Some(3));
        assert_eq!(layer_of("x.3a.y"), None);
    }

    #[test]
    fn bits_are_inferred_from_packed_and_group_columns() {
        // 4096 inputs at 4 bits = 512 words; 64 groups of 64.
        assert_eq!(
            infer(512, 64),
            Some(QuantParams {
                group_size: 64,
                bits: 4
            })
        );
        // 8 bits, group 64: 1024 words, 64 groups.
        assert_eq!(
            infer(1024, 64),
            Some(QuantParams {
                group_size: 64,
                bits: 8
            })
        );
        assert_eq!(infer(7, 3), None);
        assert_eq!(infer(512, 0), None);
    }
}
