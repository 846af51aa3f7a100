//! The parts of `config.json` the checkpoint layer uses: the model type and
//! MLX quantization settings.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::error::CheckpointError;

/// MLX quantization parameters of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantParams {
    /// Weights per scale/bias group.
    pub group_size: u64,
    /// Bits per quantized weight.
    pub bits: u64,
}

/// `config.json` `quantization` (or `quantization_config`) as mlx-lm writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantConfig {
    /// The default for every quantized layer.
    pub default: QuantParams,
    /// `mode` when given (`"affine"`, `"mxfp4"`, …).
    pub mode: Option<String>,
    /// Per-layer entries: a layer path to its own parameters, or `None` when
    /// the config says that layer is not quantized.
    pub overrides: BTreeMap<String, Option<QuantParams>>,
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

/// What weightscope reads from `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelConfig {
    /// `model_type`, e.g. `"llama"`.
    pub model_type: Option<String>,
    /// MLX quantization, when the model is quantized.
    pub quantization: Option<QuantConfig>,
}

/// Reads `config.json` at `path`.
///
/// # Errors
/// [`CheckpointError::BadConfig`] when it is not JSON or its `quantization`
/// entry is malformed.
pub fn read_config(path: &Path) -> Result<ModelConfig, CheckpointError> {
    let bytes = std::fs::read(path).map_err(|e| CheckpointError::unreadable(path, &e))?;
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
    let model_type = top
        .get("model_type")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let quantization = match (top.get("quantization"), top.get("quantization_config")) {
        (Some(q), _) => parse_quant(q).map_err(bad)?,
        // Hugging Face also uses this key for other schemes (fp8 blocks, GPTQ…);
        // only an MLX-shaped entry counts.
        (None, Some(q)) => parse_quant(q).ok().flatten(),
        (None, None) => None,
    };
    Ok(ModelConfig {
        model_type,
        quantization,
    })
}

fn parse_quant(quant: &Value) -> Result<Option<QuantConfig>, String> {
    let q = match quant {
        Value::Null => return Ok(None),
        Value::Object(q) => q,
        _ => return Err("quantization is not an object".into()),
    };
    let default = params(q).ok_or("quantization needs integer `group_size` and `bits`")?;
    let mut overrides = BTreeMap::new();
    for (key, entry) in q {
        match entry {
            Value::Object(layer) => {
                let p = params(layer).ok_or_else(|| {
                    format!("quantization entry `{key}` needs `group_size` and `bits`")
                })?;
                overrides.insert(key.clone(), Some(p));
            }
            Value::Bool(false) => {
                overrides.insert(key.clone(), None);
            }
            _ => {}
        }
    }
    Ok(Some(QuantConfig {
        default,
        mode: q.get("mode").and_then(Value::as_str).map(str::to_owned),
        overrides,
    }))
}

fn params(q: &serde_json::Map<String, Value>) -> Option<QuantParams> {
    let group_size = q.get("group_size")?.as_u64()?;
    let bits = q.get("bits")?.as_u64()?;
    (group_size > 0 && (1..=32).contains(&bits)).then_some(QuantParams { group_size, bits })
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
            Some(QuantParams {
                group_size: 64,
                bits: 4
            })
        );
        assert_eq!(
            q.for_module("model.layers.0.mlp.gate"),
            Some(QuantParams {
                group_size: 64,
                bits: 8
            })
        );
        assert_eq!(q.for_module("lm_head"), None);
    }

    #[test]
    fn other_schemes_under_quantization_config_are_not_mlx() {
        let config = parse(
            r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}"#,
        )
        .expect("valid");
        assert_eq!(config.quantization, None);
    }

    #[test]
    fn bad_configs() {
        for json in [
            "{",
            "[]",
            r#"{"quantization":{"bits":4}}"#,
            r#"{"quantization":3}"#,
        ] {
            let err = parse(json).expect_err(json);
            assert!(
                matches!(err, CheckpointError::BadConfig { .. }),
                "{json}: {err}"
            );
        }
    }
}
