//! A DeepSeek-V3-shaped checkpoint layout for benchmarks: 163 sparse shards,
//! about 90k tensors (`F8_E4M3` weights with F32 `weight_scale_inv`, BF16
//! norms); real headers, data left as holes.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// The fastest of `runs` runs of `f`.
pub fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// Milliseconds, for printing.
/// Draws one frame of `app` as the window does, 1400 x 860: egui's layout
/// and tessellation, with no accessibility tree (eframe builds one only when
/// a screen reader asks) and no GPU.
pub fn draw_frame(ctx: &egui::Context, app: &mut weightscope::app::WeightscopeApp) {
    let input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1400.0, 860.0),
        )),
        ..Default::default()
    };
    let output = ctx.run_ui(input, |ui| app.ui(ui));
    let _ = ctx.tessellate(output.shapes, output.pixels_per_point);
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub const SHARDS: usize = 163;
const LAYERS: usize = 61;
const DENSE_LAYERS: usize = 3;
const EXPERTS: usize = 256;
const HIDDEN: u64 = 7168;
const MOE_INTER: u64 = 2048;
const DENSE_INTER: u64 = 18432;
const BLOCK: u64 = 128;

struct Spec {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
}

fn fp8_weight(specs: &mut Vec<Spec>, name: &str, rows: u64, cols: u64) {
    specs.push(Spec {
        name: format!("{name}.weight"),
        dtype: "F8_E4M3",
        shape: vec![rows, cols],
    });
    specs.push(Spec {
        name: format!("{name}.weight_scale_inv"),
        dtype: "F32",
        shape: vec![rows.div_ceil(BLOCK), cols.div_ceil(BLOCK)],
    });
}

// One flat list of every tensor reads better than helpers split by block.
#[allow(clippy::too_many_lines)]
fn layout() -> Vec<Spec> {
    let mut specs = vec![Spec {
        name: "model.embed_tokens.weight".into(),
        dtype: "BF16",
        shape: vec![129_280, HIDDEN],
    }];
    for layer in 0..LAYERS {
        let p = format!("model.layers.{layer}");
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            specs.push(Spec {
                name: format!("{p}.{norm}.weight"),
                dtype: "BF16",
                shape: vec![HIDDEN],
            });
        }
        fp8_weight(&mut specs, &format!("{p}.self_attn.q_a_proj"), 1536, HIDDEN);
        fp8_weight(&mut specs, &format!("{p}.self_attn.q_b_proj"), 24_576, 1536);
        fp8_weight(
            &mut specs,
            &format!("{p}.self_attn.kv_a_proj_with_mqa"),
            576,
            HIDDEN,
        );
        fp8_weight(&mut specs, &format!("{p}.self_attn.kv_b_proj"), 32_768, 512);
        fp8_weight(&mut specs, &format!("{p}.self_attn.o_proj"), HIDDEN, 16_384);
        for norm in ["q_a_layernorm", "kv_a_layernorm"] {
            specs.push(Spec {
                name: format!("{p}.self_attn.{norm}.weight"),
                dtype: "BF16",
                shape: vec![if norm == "q_a_layernorm" { 1536 } else { 512 }],
            });
        }
        if layer < DENSE_LAYERS {
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.gate_proj"),
                DENSE_INTER,
                HIDDEN,
            );
            fp8_weight(&mut specs, &format!("{p}.mlp.up_proj"), DENSE_INTER, HIDDEN);
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.down_proj"),
                HIDDEN,
                DENSE_INTER,
            );
            continue;
        }
        specs.push(Spec {
            name: format!("{p}.mlp.gate.weight"),
            dtype: "BF16",
            shape: vec![EXPERTS as u64, HIDDEN],
        });
        specs.push(Spec {
            name: format!("{p}.mlp.gate.e_score_correction_bias"),
            dtype: "F32",
            shape: vec![EXPERTS as u64],
        });
        for e in 0..EXPERTS {
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.experts.{e}.gate_proj"),
                MOE_INTER,
                HIDDEN,
            );
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.experts.{e}.up_proj"),
                MOE_INTER,
                HIDDEN,
            );
            fp8_weight(
                &mut specs,
                &format!("{p}.mlp.experts.{e}.down_proj"),
                HIDDEN,
                MOE_INTER,
            );
        }
        fp8_weight(
            &mut specs,
            &format!("{p}.mlp.shared_experts.gate_proj"),
            MOE_INTER,
            HIDDEN,
        );
        fp8_weight(
            &mut specs,
            &format!("{p}.mlp.shared_experts.up_proj"),
            MOE_INTER,
            HIDDEN,
        );
        fp8_weight(
            &mut specs,
            &format!("{p}.mlp.shared_experts.down_proj"),
            HIDDEN,
            MOE_INTER,
        );
    }
    specs.push(Spec {
        name: "model.norm.weight".into(),
        dtype: "BF16",
        shape: vec![HIDDEN],
    });
    specs.push(Spec {
        name: "lm_head.weight".into(),
        dtype: "BF16",
        shape: vec![129_280, HIDDEN],
    });
    specs
}

fn bytes_of(spec: &Spec) -> u64 {
    let per = match spec.dtype {
        "F8_E4M3" => 1,
        "BF16" => 2,
        _ => 4,
    };
    spec.shape.iter().product::<u64>() * per
}

/// Writes the shards as sparse files: real headers, holes for data; returns
/// the tensor count.
pub fn generate(dir: &Path) -> usize {
    let specs = layout();
    let per_shard = specs.len().div_ceil(SHARDS);
    let mut weight_map = String::new();
    for (i, chunk) in specs.chunks(per_shard).enumerate() {
        let file = format!("model-{:05}-of-{SHARDS:05}.safetensors", i + 1);
        let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
        let mut offset = 0u64;
        for spec in chunk {
            let end = offset + bytes_of(spec);
            let shape: Vec<String> = spec.shape.iter().map(u64::to_string).collect();
            let _ = write!(
                header,
                ",\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{offset},{end}]}}",
                spec.name,
                spec.dtype,
                shape.join(",")
            );
            let _ = write!(weight_map, "\"{}\":\"{file}\",", spec.name);
            offset = end;
        }
        header.push('}');
        while header.len() % 8 != 0 {
            header.push(' ');
        }
        let mut f = File::create(dir.join(&file)).expect("create shard");
        f.write_all(&(header.len() as u64).to_le_bytes())
            .expect("write");
        f.write_all(header.as_bytes()).expect("write");
        f.set_len(8 + header.len() as u64 + offset)
            .expect("sparse data");
    }
    weight_map.pop();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        format!("{{\"metadata\":{{}},\"weight_map\":{{{weight_map}}}}}"),
    )
    .expect("index");
    specs.len()
}
