//! Totals, parameter counts per dtype, MLX quantization (every mode),
//! block-scaled FP8 and layer grouping, all from the headers.
//!
//! Counting follows mlx-lm (`get_total_parameters`, `compute_bits_per_weight`):
//! a packed weight holds `words * 32 / bits` parameters, its scales and
//! biases are overhead, and bits per weight is every stored byte over the
//! logical parameters. FP8 block scales (`*_scale_inv`) are overhead too.

use std::collections::BTreeMap;

use super::config::{QuantMode, QuantParams};
use super::{Checkpoint, Dtype, PartnerGuess, TensorRef};

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
    Ggml(super::gguf::GgmlType),
    /// Overhead of another tensor (its scales, biases or block scale): not a
    /// parameter, and compared as part of its owner in a diff.
    Aux {
        /// Position of the tensor it belongs to.
        owner: usize,
        /// What it is to the owner.
        role: AuxRole,
    },
}

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

fn ratio_bits(bytes: u64, params: u64) -> f64 {
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
struct Counts {
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
fn push_reserving<T>(list: &mut Vec<T>, value: T, at_most: usize) {
    if list.capacity() == 0 {
        list.reserve(at_most);
    }
    list.push(value);
}

/// Where each kind of partner was last found from its owner (see
/// [`super::TensorTable::partner`]).
#[derive(Default)]
struct Partners {
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
struct BlockCounts(Vec<([u64; 2], usize)>);

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

fn quant_summary(checkpoint: &Checkpoint, found: Vec<QuantizedTensor>) -> Option<QuantSummary> {
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

fn fp8_summary(found: Vec<Fp8Tensor>, scale_bytes: u64, blocks: BlockCounts) -> Option<Fp8Summary> {
    if found.is_empty() {
        return None;
    }
    Some(Fp8Summary {
        tensors: found,
        scale_bytes,
        block: blocks.most_common(),
    })
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
    fn own_encoding(&self, t: TensorRef<'_>, partners: &mut Partners) -> Option<Encoding> {
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
fn detect(
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
fn infer(words: u64, groups: u64, fp_scales: bool) -> Option<QuantParams> {
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
fn fp8_block(shape: &[u64], scale_shape: &[u64], configured: Option<[u64; 2]>) -> Option<[u64; 2]> {
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

fn most_common(found: &[QuantizedTensor]) -> QuantParams {
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

/// The layer number of a tensor name: its first all-digit dot-separated
/// segment (`model.layers.12.mlp.up_proj.weight` is layer 12).
#[must_use]
pub fn layer_of(name: &str) -> Option<u64> {
    layer_and_end(name).map(|(layer, _)| layer)
}

/// [`layer_of`] and where its segment ends in `name`.
fn layer_and_end(name: &str) -> Option<(u64, usize)> {
    // One pass over the bytes (the summary asks this of every tensor).
    let mut start = 0;
    let mut digits = true;
    for (i, b) in name.bytes().chain([b'.']).enumerate() {
        if b == b'.' {
            if digits && i > start {
                return Some((name.get(start..i)?.parse().ok()?, i));
            }
            start = i + 1;
            digits = true;
        } else if !b.is_ascii_digit() {
            digits = false;
        }
    }
    None
}

/// [`layer_of`] for names that mostly come in runs of one layer: the last
/// name's text up to and including the dot after its layer number is kept,
/// and a name that starts with it is of that layer without a scan (its
/// segments up to there are the same, the number's included).
#[derive(Default)]
struct LayerOfRun {
    prefix: String,
    layer: u64,
}

impl LayerOfRun {
    fn layer_of(&mut self, name: &str) -> Option<u64> {
        if !self.prefix.is_empty() && name.starts_with(self.prefix.as_str()) {
            return Some(self.layer);
        }
        let (layer, end) = layer_and_end(name)?;
        self.prefix.clear();
        // Only a number followed by a dot: `x.1` must not claim `x.12`.
        if let Some(prefix) = name.get(..=end).filter(|p| p.ends_with('.')) {
            self.prefix.push_str(prefix);
            self.layer = layer;
        }
        Some(layer)
    }
}

impl Checkpoint {
    /// Tensor positions grouped by layer number (`None`: not in a numbered
    /// layer, such as embeddings), for tree views.
    #[must_use]
    pub fn layers(&self) -> BTreeMap<Option<u64>, Vec<usize>> {
        let mut groups: BTreeMap<Option<u64>, Vec<usize>> = BTreeMap::new();
        for (i, t) in self.tensors().iter().enumerate() {
            groups.entry(layer_of(t.name())).or_default().push(i);
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
    fn layers_of_a_run_of_names_are_those_of_each_name() {
        let names = [
            "model.layers.1.a",
            "model.layers.1.b.weight",
            "model.layers.12.a",
            "model.layers.1",
            "model.layers.12",
            "model.layers.1.x",
            "model.layers.1x.y",
            "model.norm.weight",
            "model.layers.1.z",
            "blocks.3.experts.7.w1",
            "blocks.3.",
            "blocks.3",
            "blocks.3.4",
            "99999999999999999999999.x",
            "99999999999999999999999.y",
            "",
            ".",
            "7.",
            "7.a",
        ];
        let mut run = LayerOfRun::default();
        for name in names {
            assert_eq!(run.layer_of(name), layer_of(name), "{name}");
        }
    }

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

#[cfg(test)]
mod runs {
    use super::*;
    use std::fmt::Write as _;

    /// One file of `layers` layers, each with an affine-packed projection
    /// (weight, scales, biases), an nvfp4-style packed one with a global
    /// scale, an FP8 weight with its block scale, an FP8 weight without one,
    /// a stray `.scales` stored as FP8 and a plain norm: more than one run
    /// of the summary's threads.
    fn write_mixed(dir: &std::path::Path, layers: usize) -> std::path::PathBuf {
        let mut json = String::from("{");
        let mut at = 0u64;
        let mut entry = |json: &mut String, name: &str, dtype: &str, shape: &[u64], bits: u64| {
            let bytes = shape.iter().product::<u64>() * bits / 8;
            if json.len() > 1 {
                json.push(',');
            }
            let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
            let _ = write!(
                json,
                r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{at},{}]}}"#,
                dims.join(","),
                at + bytes
            );
            at += bytes;
        };
        for l in 0..layers {
            let p = format!("model.layers.{l}");
            entry(&mut json, &format!("{p}.q.weight"), "U32", &[8, 8], 32);
            entry(&mut json, &format!("{p}.q.scales"), "BF16", &[8, 1], 16);
            entry(&mut json, &format!("{p}.q.biases"), "BF16", &[8, 1], 16);
            entry(&mut json, &format!("{p}.k.weight"), "U32", &[8, 8], 32);
            entry(&mut json, &format!("{p}.k.scales"), "U8", &[8, 4], 8);
            entry(&mut json, &format!("{p}.k.global_scale"), "F32", &[], 32);
            entry(
                &mut json,
                &format!("{p}.o.weight"),
                "F8_E4M3",
                &[256, 128],
                8,
            );
            entry(
                &mut json,
                &format!("{p}.o.weight_scale_inv"),
                "F32",
                &[2, 1],
                32,
            );
            entry(&mut json, &format!("{p}.v.weight"), "F8_E4M3", &[4, 4], 8);
            entry(&mut json, &format!("{p}.odd.weight"), "U32", &[4, 8], 32);
            entry(&mut json, &format!("{p}.odd.scales"), "F8_E4M3", &[4, 4], 8);
            entry(&mut json, &format!("{p}.norm"), "F16", &[8], 16);
        }
        json.push('}');
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json.as_bytes());
        bytes.resize(bytes.len() + usize::try_from(at).expect("small"), 0);
        let file = dir.join("model.safetensors");
        std::fs::write(&file, bytes).expect("write");
        file
    }

    #[test]
    fn the_summary_over_runs_counts_what_each_tensors_encoding_says() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 12 tensors a layer: 24k tensors, three runs of at least 8192.
        let file = write_mixed(dir.path(), 2000);
        let checkpoint = Checkpoint::open(&file).expect("open");
        assert!(
            checkpoint.problems().is_empty(),
            "{:?}",
            checkpoint.problems()
        );
        let summary = Summary::of(&checkpoint);
        let mut params = 0u64;
        let mut layers: BTreeMap<Option<u64>, (u64, u64)> = BTreeMap::new();
        let (mut packed, mut fp8) = (0, 0);
        let (mut scale_bytes, mut blocks) = (0, BTreeMap::new());
        for t in checkpoint.tensors() {
            let p = match checkpoint.encoding_at(t.position()) {
                Encoding::Plain | Encoding::Ggml(_) => t.elements(),
                Encoding::Fp8(f) => {
                    fp8 += 1;
                    scale_bytes += f.scale.map_or(0, |s| checkpoint.tensors().at(s).bytes());
                    if let Some(block) = f.block {
                        *blocks.entry(block).or_insert(0) += 1;
                    }
                    t.elements()
                }
                Encoding::Packed(q) => {
                    packed += 1;
                    q.logical_elements
                }
                Encoding::Aux { .. } => 0,
            };
            params += p;
            let figures = layers.entry(layer_of(t.name())).or_default();
            figures.0 += p;
            figures.1 += t.bytes();
        }
        assert_eq!(summary.logical_params, params);
        let theirs: BTreeMap<Option<u64>, (u64, u64)> = summary
            .layers
            .iter()
            .map(|f| (f.layer, (f.params, f.bytes)))
            .collect();
        assert_eq!(theirs, layers);
        assert_eq!(summary.quantization.map(|q| q.tensors.len()), Some(packed));
        // Both FP8 weights and the FP8 "scales" of each layer.
        let found = summary.fp8.expect("fp8");
        assert_eq!(found.tensors.len(), fp8);
        assert_eq!(found.scale_bytes, scale_bytes);
        assert_eq!(blocks, BTreeMap::from([([128, 128], 2000)]));
        assert_eq!(found.block, Some([128, 128]));
        assert_eq!(fp8, 3 * 2000);
        assert_eq!(packed, 3 * 2000);
    }
}
