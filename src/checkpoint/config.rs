//! The parts of `config.json` the checkpoint layer uses: the model type, MLX
//! quantization settings (every mode mlx-lm writes) and block-scaled FP8.
//!
//! The rules follow mlx-lm's `load_model` and MLX's `nn.quantize`: the
//! `quantization` block wins; without it `quantization_config` (top level, or
//! under `text_config`) is read; a block or per-layer entry without `mode` is
//! affine; missing `group_size`/`bits` take the mode's defaults; a per-layer
//! entry is a dict keyed by module path (`false`: left unquantized).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::error::CheckpointError;

/// An MLX quantization mode (`mx.quantize(..., mode=)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuantMode {
    /// Integer codes with a float scale and bias per group (2-8 bits).
    Affine,
    /// FP4 (E2M1) codes, groups of 32, one E8M0 (power of two) scale per group.
    Mxfp4,
    /// FP8 (E4M3) codes, groups of 32, one E8M0 scale per group.
    Mxfp8,
    /// FP4 (E2M1) codes, groups of 16, one E4M3 scale per group.
    Nvfp4,
}

/// How a quantized layer's per-group scales are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleFormat {
    /// Floats in the model's dtype (affine).
    Float,
    /// uint8 bytes holding an E8M0 exponent: 2^(byte - 127) (mxfp4, mxfp8).
    E8M0,
    /// uint8 bytes holding an FP8 E4M3 value (nvfp4).
    E4M3,
}

impl QuantMode {
    /// Every mode, in the order docs list them.
    pub const ALL: [QuantMode; 4] = [Self::Affine, Self::Mxfp4, Self::Mxfp8, Self::Nvfp4];

    /// The name MLX and mlx-lm use (`"affine"`, `"mxfp4"`, …).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Affine => "affine",
            Self::Mxfp4 => "mxfp4",
            Self::Mxfp8 => "mxfp8",
            Self::Nvfp4 => "nvfp4",
        }
    }

    /// The mode called `name`, if MLX knows it.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// MLX's default (group size, bits) for the mode.
    #[must_use]
    pub fn defaults(self) -> (u64, u64) {
        match self {
            Self::Affine => (64, 4),
            Self::Mxfp4 => (32, 4),
            Self::Nvfp4 => (16, 4),
            Self::Mxfp8 => (32, 8),
        }
    }

    /// Whether the layout stores `biases` beside `scales` (affine only).
    #[must_use]
    pub fn has_biases(self) -> bool {
        self == Self::Affine
    }

    /// How the scales are encoded.
    #[must_use]
    pub fn scale_format(self) -> ScaleFormat {
        match self {
            Self::Affine => ScaleFormat::Float,
            Self::Mxfp4 | Self::Mxfp8 => ScaleFormat::E8M0,
            Self::Nvfp4 => ScaleFormat::E4M3,
        }
    }

    /// Whether (group size, bits) is a combination MLX accepts for the mode.
    #[must_use]
    pub fn accepts(self, group_size: u64, bits: u64) -> bool {
        match self {
            Self::Affine => {
                matches!(group_size, 32 | 64 | 128) && matches!(bits, 2 | 3 | 4 | 5 | 6 | 8)
            }
            _ => (group_size, bits) == self.defaults(),
        }
    }
}

impl std::fmt::Display for QuantMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// MLX quantization parameters of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantParams {
    /// The mode (affine unless the config says otherwise).
    pub mode: QuantMode,
    /// Weights per scale (and bias) group.
    pub group_size: u64,
    /// Bits per quantized weight.
    pub bits: u64,
}

impl QuantParams {
    /// Affine parameters (the mode mlx-lm assumes when none is written).
    #[must_use]
    pub fn affine(group_size: u64, bits: u64) -> Self {
        Self {
            mode: QuantMode::Affine,
            group_size,
            bits,
        }
    }

    /// Whether packed `words` per row and `groups` scales per row fit these
    /// parameters: `words * 32 / bits` inputs in `groups` groups.
    #[must_use]
    pub fn fits(&self, words: u64, groups: u64) -> bool {
        // Every figure here may come from a hostile config.json or header:
        // a product that overflows fits nothing (never wraps into a fit).
        let (Some(inputs), Some(grouped)) =
            (words.checked_mul(32), groups.checked_mul(self.group_size))
        else {
            return false;
        };
        self.bits > 0
            && self.group_size > 0
            && inputs.is_multiple_of(self.bits)
            && inputs / self.bits == grouped
    }
}

/// `config.json` `quantization` (or `quantization_config`) as mlx-lm writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantConfig {
    /// The default for every quantized layer.
    pub default: QuantParams,
    /// Per-layer entries: a layer path to its own parameters, or `None` when
    /// the config says that layer is not quantized.
    pub overrides: BTreeMap<String, Option<QuantParams>>,
    /// The key it was read from (`quantization`, `quantization_config`,
    /// `text_config.quantization_config`).
    pub source: &'static str,
}

impl QuantConfig {
    /// Parameters for the layer at `module` (e.g. `model.layers.0.mlp.gate`).
    #[must_use]
    pub fn for_module(&self, module: &str) -> Option<QuantParams> {
        match self.overrides.get(module) {
            Some(entry) => *entry,
            None => Some(self.default),
        }
    }
}

/// Block-scaled FP8 (`quantization_config.quant_method == "fp8"`), as
/// DeepSeek-V3/R1, Qwen3-FP8 and Kimi ship it: `F8_E4M3` weights, one F32
/// `<weight>_scale_inv` per weight with one value per block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fp8Config {
    /// `weight_block_size` [rows, cols], when given.
    pub block: Option<[u64; 2]>,
    /// `fmt` (`"e4m3"`), when given.
    pub fmt: Option<String>,
}

/// What weightscope reads from `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelConfig {
    /// `model_type`, e.g. `"llama"`.
    pub model_type: Option<String>,
    /// MLX quantization, when the model is quantized.
    pub quantization: Option<QuantConfig>,
    /// Block-scaled FP8, when the config declares it.
    pub fp8: Option<Fp8Config>,
    /// `tie_word_embeddings` (top level or under `text_config`), when given.
    pub tie_word_embeddings: Option<bool>,
}

/// The largest `config.json` read (real ones are a few KB; multimodal ones
/// with vocabularies inline stay under 1 MB).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Reads `config.json` at `path`.
///
/// # Errors
/// [`CheckpointError::BadConfig`] when it is not JSON or its `quantization`
/// entry is malformed; [`CheckpointError::Unreadable`] when it is not a
/// regular file (a FIFO would block the read forever).
pub fn read_config(path: &Path) -> Result<ModelConfig, CheckpointError> {
    let bytes = crate::files::read_bounded(path, MAX_CONFIG_BYTES, "config.json")
        .map_err(|e| CheckpointError::unreadable_for(path, e.reason()))?;
    parse_config(path, &bytes)
}

/// Parses `config.json` bytes (see [`read_config`]).
///
/// # Errors
/// As [`read_config`].
pub fn parse_config(path: &Path, bytes: &[u8]) -> Result<ModelConfig, CheckpointError> {
    let bad = |reason: String| CheckpointError::BadConfig {
        path: path.to_path_buf(),
        reason,
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let Value::Object(top) = value else {
        return Err(bad("not a JSON object".into()));
    };
    let text = top.get("text_config").and_then(Value::as_object);
    let model_type = top
        .get("model_type")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let tie_word_embeddings = top
        .get("tie_word_embeddings")
        .or_else(|| text.and_then(|t| t.get("tie_word_embeddings")))
        .and_then(Value::as_bool);
    let (legacy, legacy_source) = match top.get("quantization_config") {
        Some(q) => (Some(q), "quantization_config"),
        None => (
            text.and_then(|t| t.get("quantization_config")),
            "text_config.quantization_config",
        ),
    };
    let mut fp8 = None;
    let quantization = if let Some(q) = top.get("quantization") {
        parse_quant(q, "quantization").map_err(|e| bad(e.to_string()))?
    } else if let Some(q) = legacy {
        match q.get("quant_method").and_then(Value::as_str) {
            // mlx-lm's own writer never sets `quant_method`: its
            // `quantization_config` is a copy of `quantization`.
            None => parse_quant(q, legacy_source).map_err(|e| bad(e.to_string()))?,
            // mlx-lm loads these as MLX mxfp4 (gpt-oss style releases).
            Some("mxfp4") => Some(QuantConfig {
                default: QuantParams {
                    mode: QuantMode::Mxfp4,
                    group_size: 32,
                    bits: 4,
                },
                overrides: BTreeMap::new(),
                source: legacy_source,
            }),
            Some("fp8") => {
                fp8 = Some(parse_fp8(q).map_err(|e| bad(e.to_string()))?);
                None
            }
            // GPTQ, AWQ, bitnet, compressed-tensors…: not MLX's layout.
            Some(_) => None,
        }
    } else {
        None
    };
    Ok(ModelConfig {
        model_type,
        quantization,
        fp8,
        tie_word_embeddings,
    })
}

/// What is wrong with a `config.json`'s quantization block (said in
/// [`CheckpointError::BadConfig`] with the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ConfigProblem {
    /// `weight_block_size` is not two positive integers.
    #[error("`weight_block_size` needs two positive integers")]
    BlockSize,
    /// `weight_block_size` is not a list.
    #[error("`weight_block_size` is not a list")]
    BlockSizeNotList,
    /// The block is not a JSON object.
    #[error("`{0}` is not an object")]
    NotAnObject(&'static str),
    /// A problem inside the block named first.
    #[error("`{0}`: {1}")]
    In(&'static str, Box<ConfigProblem>),
    /// A problem inside one per-layer entry of the block.
    #[error("`{0}` entry `{1}`: {2}")]
    InEntry(&'static str, String, Box<ConfigProblem>),
    /// A mode MLX does not have.
    #[error("unknown mode `{0}`")]
    UnknownMode(String),
    /// `mode` is not a string.
    #[error("`mode` is not a string")]
    ModeNotString,
    /// `group_size` or `bits` is not a positive integer.
    #[error("`{0}` is not a positive integer")]
    NotPositive(&'static str),
    /// More than 32 bits.
    #[error("`bits` {0} is more than 32")]
    TooManyBits(u64),
}

fn parse_fp8(q: &Value) -> Result<Fp8Config, ConfigProblem> {
    let block = match q.get("weight_block_size") {
        None | Some(Value::Null) => None,
        Some(Value::Array(dims)) => match dims.as_slice() {
            [r, c] => match (r.as_u64(), c.as_u64()) {
                (Some(r), Some(c)) if r > 0 && c > 0 => Some([r, c]),
                _ => return Err(ConfigProblem::BlockSize),
            },
            _ => return Err(ConfigProblem::BlockSize),
        },
        Some(_) => return Err(ConfigProblem::BlockSizeNotList),
    };
    Ok(Fp8Config {
        block,
        fmt: q.get("fmt").and_then(Value::as_str).map(str::to_owned),
    })
}

fn parse_quant(quant: &Value, source: &'static str) -> Result<Option<QuantConfig>, ConfigProblem> {
    let q = match quant {
        Value::Null | Value::Bool(false) => return Ok(None),
        Value::Object(q) => q,
        _ => return Err(ConfigProblem::NotAnObject(source)),
    };
    let default =
        params(q, QuantMode::Affine).map_err(|e| ConfigProblem::In(source, Box::new(e)))?;
    let mut overrides = BTreeMap::new();
    for (key, entry) in q {
        match entry {
            // mlx-lm's per-layer entries: `to_quantized(**entry)`, so an
            // entry without `mode` is affine whatever the default mode is.
            Value::Object(layer) => {
                let p = params(layer, QuantMode::Affine)
                    .map_err(|e| ConfigProblem::InEntry(source, key.clone(), Box::new(e)))?;
                overrides.insert(key.clone(), Some(p));
            }
            Value::Bool(false) => {
                overrides.insert(key.clone(), None);
            }
            Value::Bool(true) => {
                overrides.insert(key.clone(), Some(default));
            }
            _ => {}
        }
    }
    Ok(Some(QuantConfig {
        default,
        overrides,
        source,
    }))
}

/// `mode`, `group_size` and `bits` of one block, the mode's defaults where
/// absent (MLX's `_defaults_for_mode`).
fn params(
    q: &serde_json::Map<String, Value>,
    fallback: QuantMode,
) -> Result<QuantParams, ConfigProblem> {
    let mode = match q.get("mode") {
        None | Some(Value::Null) => fallback,
        Some(Value::String(name)) => {
            QuantMode::from_name(name).ok_or_else(|| ConfigProblem::UnknownMode(name.clone()))?
        }
        Some(_) => return Err(ConfigProblem::ModeNotString),
    };
    let (default_group, default_bits) = mode.defaults();
    let number = |key: &'static str, default: u64| match q.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|n| *n > 0)
            .ok_or(ConfigProblem::NotPositive(key)),
    };
    let group_size = number("group_size", default_group)?;
    let bits = number("bits", default_bits)?;
    if bits > 32 {
        return Err(ConfigProblem::TooManyBits(bits));
    }
    Ok(QuantParams {
        mode,
        group_size,
        bits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<ModelConfig, CheckpointError> {
        parse_config(Path::new("/m/config.json"), json.as_bytes())
    }

    #[test]
    fn mlx_quantization_with_per_layer_overrides() {
        let config = parse(
            r#"{"model_type":"llama","quantization":{"group_size":64,"bits":4,
                "model.layers.0.mlp.gate":{"group_size":64,"bits":8},
                "lm_head":false}}"#,
        )
        .expect("valid");
        assert_eq!(config.model_type.as_deref(), Some("llama"));
        let q = config.quantization.expect("quantized");
        assert_eq!(
            q.for_module("model.layers.1.self_attn.q_proj"),
            Some(QuantParams::affine(64, 4))
        );
        assert_eq!(
            q.for_module("model.layers.0.mlp.gate"),
            Some(QuantParams::affine(64, 8))
        );
        assert_eq!(q.for_module("lm_head"), None);
    }

    #[test]
    fn an_override_without_mode_is_affine_inside_an_fp_model() {
        let config = parse(
            r#"{"quantization":{"group_size":32,"bits":4,"mode":"mxfp4",
                "model.layers.0.mlp.down_proj":{"group_size":64,"bits":8},
                "model.layers.1.mlp.down_proj":{"mode":"mxfp8"}}}"#,
        )
        .expect("valid");
        let q = config.quantization.expect("quantized");
        assert_eq!(q.default.mode, QuantMode::Mxfp4);
        assert_eq!(
            q.for_module("model.layers.0.mlp.down_proj"),
            Some(QuantParams::affine(64, 8))
        );
        assert_eq!(
            q.for_module("model.layers.1.mlp.down_proj"),
            Some(QuantParams {
                mode: QuantMode::Mxfp8,
                group_size: 32,
                bits: 8
            })
        );
    }

    #[test]
    fn overflowing_sizes_fit_nothing() {
        // 2^63 and u64::MAX overflowed `groups * group_size` (a panic in
        // debug builds); 64 + 2^62 wrapped into a false fit in release.
        for group_size in [1 << 63, u64::MAX, 64 + (1 << 62)] {
            let params = QuantParams::affine(group_size, 4);
            for (words, groups) in [(512, 64), (512, 4), (u64::MAX, 1), (1, u64::MAX)] {
                assert!(!params.fits(words, groups), "{group_size} {words} {groups}");
            }
        }
        assert!(QuantParams::affine(64, 4).fits(512, 64));
        assert!(
            !QuantParams::affine(64, 0).fits(512, 64),
            "no division by zero"
        );
    }

    #[test]
    fn missing_group_size_and_bits_take_the_mode_defaults() {
        for (mode, group, bits) in [
            ("nvfp4", 16, 4),
            ("mxfp8", 32, 8),
            ("mxfp4", 32, 4),
            ("affine", 64, 4),
        ] {
            let q = parse(&format!(r#"{{"quantization":{{"mode":"{mode}"}}}}"#))
                .expect("valid")
                .quantization
                .expect("quantized");
            assert_eq!(
                (q.default.mode.name(), q.default.group_size, q.default.bits),
                (mode, group, bits)
            );
        }
    }

    #[test]
    fn quantization_config_is_read_when_quantization_is_absent() {
        let top = parse(r#"{"quantization_config":{"group_size":32,"bits":8}}"#)
            .expect("valid")
            .quantization
            .expect("quantized");
        assert_eq!(top.default, QuantParams::affine(32, 8));
        assert_eq!(top.source, "quantization_config");
        let nested = parse(
            r#"{"text_config":{"quantization_config":{"group_size":16,"bits":4,"mode":"nvfp4"},
                "tie_word_embeddings":false}}"#,
        )
        .expect("valid");
        assert_eq!(nested.tie_word_embeddings, Some(false));
        let q = nested.quantization.expect("quantized");
        assert_eq!(q.default.mode, QuantMode::Nvfp4);
        assert_eq!(q.source, "text_config.quantization_config");
        // `quantization` wins over a differing `quantization_config`.
        let both = parse(
            r#"{"quantization":{"group_size":64,"bits":4},
                "quantization_config":{"group_size":32,"bits":8}}"#,
        )
        .expect("valid");
        assert_eq!(
            both.quantization.expect("quantized").default,
            QuantParams::affine(64, 4)
        );
    }

    #[test]
    fn block_fp8_and_other_schemes_under_quantization_config() {
        let config = parse(
            r#"{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128]}}"#,
        )
        .expect("valid");
        assert_eq!(config.quantization, None);
        assert_eq!(
            config.fp8,
            Some(Fp8Config {
                block: Some([128, 128]),
                fmt: Some("e4m3".into())
            })
        );
        let gptq =
            parse(r#"{"quantization_config":{"quant_method":"gptq","bits":4}}"#).expect("valid");
        assert_eq!((gptq.quantization, gptq.fp8), (None, None));
        let mxfp4 = parse(r#"{"quantization_config":{"quant_method":"mxfp4"}}"#)
            .expect("valid")
            .quantization
            .expect("quantized");
        assert_eq!(mxfp4.default.mode, QuantMode::Mxfp4);
    }

    #[test]
    fn bad_configs() {
        for json in [
            "{",
            "[]",
            r#"{"quantization":{"bits":"four"}}"#,
            r#"{"quantization":{"mode":"int3"}}"#,
            r#"{"quantization":3}"#,
            r#"{"quantization":{"group_size":64,"bits":4,"x":{"bits":0}}}"#,
            r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[128]}}"#,
        ] {
            let err = parse(json).expect_err(json);
            assert!(
                matches!(err, CheckpointError::BadConfig { .. }),
                "{json}: {err}"
            );
        }
    }
}
