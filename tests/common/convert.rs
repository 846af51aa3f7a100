//! Checkpoints as today's tools write them, shared by the tests of real
//! layouts and of `check`: a small float model, its conversion the way
//! `mlx_lm.convert` does it (MLX packs every layer; `config.json` as mlx-lm
//! writes it), and a DeepSeek-style block-scaled FP8 release.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::Dtype as StDtype;
use serde_json::{Value, json};
use weightscope::checkpoint::QuantMode;
use weightscope::mlx::{self, Array, ByteFloat};

use super::{Tensor, write_safetensors};

/// Deterministic weights of about ±0.1, different per tensor.
pub fn weights(shape: &[i32], seed: u64) -> Array {
    let n: i32 = shape.iter().product();
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let values: Vec<f32> = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = ((state >> 40) as f32) / ((1u64 << 24) as f32);
            (unit - 0.5) * 0.2
        })
        .collect();
    mlx::array_f32(&values, shape)
}

/// The float model: (name, shape). Linear weights, a stacked-experts weight
/// with a leading axis, norms (never quantized) and a head.
pub const MODEL: &[(&str, &[i32])] = &[
    ("model.embed_tokens.weight", &[64, 128]),
    ("model.layers.0.input_layernorm.weight", &[128]),
    ("model.layers.0.self_attn.q_proj.weight", &[128, 128]),
    ("model.layers.0.mlp.down_proj.weight", &[128, 256]),
    ("model.layers.0.mlp.up_proj.weight", &[256, 128]),
    ("model.layers.1.input_layernorm.weight", &[128]),
    ("model.layers.1.self_attn.q_proj.weight", &[128, 128]),
    (
        "model.layers.1.mlp.switch_mlp.gate_proj.weight",
        &[4, 64, 128],
    ),
    ("model.norm.weight", &[128]),
    ("lm_head.weight", &[64, 128]),
];

pub fn float_model() -> Vec<(String, Array)> {
    MODEL
        .iter()
        .enumerate()
        .map(|(i, (name, shape))| ((*name).to_owned(), weights(shape, i as u64 + 1)))
        .collect()
}

pub fn save(path: &Path, tensors: &[(String, Array)]) {
    let pairs: Vec<(&str, &Array)> = tensors.iter().map(|(n, a)| (n.as_str(), a)).collect();
    mlx::save_safetensors(path, &pairs).expect("MLX writes the file");
}

pub fn write_config(dir: &Path, config: &Value) {
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(config).expect("json"),
    )
    .expect("write config.json");
}

/// One layer's quantization: mode, group size, bits.
#[derive(Clone, Copy, Debug)]
pub struct Recipe {
    pub mode: QuantMode,
    pub group: u64,
    pub bits: u64,
}

impl Recipe {
    pub fn of(mode: QuantMode, bits: u64) -> Self {
        let (group, default_bits) = mode.defaults();
        Self {
            mode,
            group,
            bits: if mode == QuantMode::Affine {
                bits
            } else {
                default_bits
            },
        }
    }

    pub fn json(self, with_mode: bool) -> Value {
        let mut v = json!({"group_size": self.group, "bits": self.bits});
        if with_mode {
            v["mode"] = json!(self.mode.name());
        }
        v
    }
}

/// What a converted model should show, computed from the arrays as written.
pub struct Written {
    /// Logical parameters (every float element of the source model).
    pub params: u64,
    /// Every stored byte.
    pub bytes: u64,
    /// Dequantized values of each quantized weight, computed by MLX on the
    /// in-memory arrays before they were written.
    pub dequantized: BTreeMap<String, Vec<f32>>,
}

/// Converts the float model the way mlx-lm's `quantize_model` and
/// `save_model` do: every weight whose module is quantizable (not norms) is
/// packed with `recipe_for(module)` (`None`: left as is), written with MLX's
/// writer into two shards with an index; `config.json` gets `quantization`
/// and the same `quantization_config`.
pub fn convert(
    dir: &Path,
    default: Recipe,
    recipe_for: impl Fn(&str) -> Option<Recipe>,
    write_modes: bool,
) -> Written {
    convert_with(dir, default, recipe_for, write_modes, |_, _| {})
}

/// [`convert`], with `mutate` given the stored arrays and config before
/// they are written (how the check tests break a conversion).
pub fn convert_with(
    dir: &Path,
    default: Recipe,
    recipe_for: impl Fn(&str) -> Option<Recipe>,
    write_modes: bool,
    mutate: impl FnOnce(&mut Vec<(String, Array)>, &mut Value),
) -> Written {
    let mut stored: Vec<(String, Array)> = Vec::new();
    let mut quantization = default.json(write_modes);
    let mut written = Written {
        params: 0,
        bytes: 0,
        dequantized: BTreeMap::new(),
    };
    for (name, array) in float_model() {
        written.params += array.size() as u64;
        let module = name.strip_suffix(".weight").expect("weights only");
        let recipe = if module.ends_with("norm") {
            None
        } else {
            recipe_for(module)
        };
        match recipe {
            None => stored.push((name, array)),
            Some(r) => {
                let parts = mlx::quantize_mode(&array, r.mode.name(), r.group, r.bits)
                    .expect("MLX quantizes");
                let (biases, has_biases) = match parts.get(2) {
                    Some(b) => (Some(b), true),
                    None => (None, false),
                };
                assert_eq!(has_biases, r.mode.has_biases(), "{}", r.mode);
                let deq = mlx::dequantize(
                    &parts[0],
                    &parts[1],
                    biases,
                    r.mode.name(),
                    r.group,
                    r.bits,
                    None,
                )
                .expect("MLX dequantizes");
                written
                    .dequantized
                    .insert(name.clone(), mlx::to_f32_vec(&deq).expect("values"));
                if r.group != default.group || r.bits != default.bits || r.mode != default.mode {
                    // mlx-lm's predicate returned a dict: `to_quantized(**dict)`.
                    quantization[module] = r.json(r.mode != QuantMode::Affine);
                }
                let mut names = vec![
                    (format!("{module}.weight"), parts[0].clone()),
                    (format!("{module}.scales"), parts[1].clone()),
                ];
                if let Some(b) = biases {
                    names.push((format!("{module}.biases"), b.clone()));
                }
                stored.extend(names);
            }
        }
    }
    let mut config = json!({
        "model_type": "llama",
        "tie_word_embeddings": false,
        "quantization": quantization,
        "quantization_config": quantization,
    });
    mutate(&mut stored, &mut config);
    for (_, a) in &stored {
        mlx::evaluate(a).expect("evaluate");
        written.bytes += a.nbytes() as u64;
    }
    // Two shards: scales may land in another shard than their weight.
    let half = stored.len() / 2 + 1;
    let files = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let mut weight_map = serde_json::Map::new();
    for (file, part) in files.iter().zip([&stored[..half], &stored[half..]]) {
        save(&dir.join(file), part);
        for (name, _) in part {
            weight_map.insert(name.clone(), json!(file));
        }
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_vec(&json!({
            "metadata": {"total_size": written.bytes, "total_parameters": written.params},
            "weight_map": weight_map,
        }))
        .expect("json"),
    )
    .expect("index");
    write_config(dir, &config);
    written
}

/// The E4M3 code nearest to `value` (host reference encoder).
pub fn encode_e4m3(value: f32) -> u8 {
    (0..=255u8)
        .filter(|c| !ByteFloat::E4M3.value(*c).is_nan())
        .min_by(|a, b| {
            let da = (ByteFloat::E4M3.value(*a) - value).abs();
            let db = (ByteFloat::E4M3.value(*b) - value).abs();
            da.total_cmp(&db)
        })
        .unwrap_or(0)
}

/// A DeepSeek-V3-style release: `F8_E4M3` weights with F32 `weight_scale_inv`
/// per 128x128 block (the last blocks partial), bf16 norms.
pub fn write_fp8(dir: &Path) -> (Vec<f32>, u64) {
    let (rows, cols) = (300usize, 256usize);
    let scales = [0.001f32, 0.002, 0.0005, 0.004, 0.001, 0.003];
    let mut codes = Vec::with_capacity(rows * cols);
    let mut values = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        for j in 0..cols {
            let raw = ((i * 31 + j * 17) % 97) as f32 - 48.0;
            let code = encode_e4m3(raw * 4.0);
            codes.push(code);
            values.push(ByteFloat::E4M3.value(code) * scales[(i / 128) * 2 + j / 128]);
        }
    }
    let norm: Vec<u8> = (0..cols)
        .flat_map(|_| half::bf16::from_f32(1.0).to_le_bytes())
        .collect();
    write_safetensors(
        &dir.join("model.safetensors"),
        &[
            Tensor::new(
                "model.layers.0.mlp.down_proj.weight",
                StDtype::F8_E4M3,
                &[rows, cols],
                codes,
            ),
            Tensor::f32(
                "model.layers.0.mlp.down_proj.weight_scale_inv",
                &[3, 2],
                &scales,
            ),
            Tensor::new(
                "model.layers.0.input_layernorm.weight",
                StDtype::BF16,
                &[cols],
                norm,
            ),
        ],
    );
    write_config(
        dir,
        &json!({"model_type": "deepseek_v3", "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [128, 128]}}),
    );
    (values, (rows * cols + cols) as u64)
}
