"""Small models written by mlx-lm's own writer, for tests/mlx_lm_writer.rs.

Each case builds a tiny model from mlx-lm's own architectures (llama,
qwen3_moe), casts it to bfloat16 and quantizes and saves it the way
`mlx_lm.convert` does (`quantize_model`, `save_model`, `save_config`), then
prints one JSON line per case with what mlx-lm itself says of it: the index's
`total_parameters` (its `get_total_parameters`), `compute_bits_per_weight`,
and the statistics of a few weights dequantized by MLX from the modules.

Also writes the unquantized bf16 source of the Llama cases to
OUT_DIR/llama-bf16 (the same seed), for diffs against its conversions.

Usage: python write_models.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.convert import mixed_quant_predicate_builder
from mlx_lm.models import llama, qwen3_moe
from mlx_lm.utils import compute_bits_per_weight, quantize_model, save_config, save_model

LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": 256,
    "tie_word_embeddings": False,
}

QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "moe_intermediate_size": 128,
    "rms_norm_eps": 1e-6,
    "vocab_size": 256,
    "head_dim": 32,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "max_position_embeddings": 512,
    "norm_topk_prob": True,
}

# name, architecture, mode, group size, bits, mixed recipe, global scale
CASES = [
    ("affine4", LLAMA, "affine", None, None, None, False),
    ("affine8-g32", LLAMA, "affine", 32, 8, None, False),
    ("affine3", LLAMA, "affine", None, 3, None, False),
    ("mixed_3_6", LLAMA, "affine", None, None, "mixed_3_6", False),
    ("mxfp4", LLAMA, "mxfp4", None, None, None, False),
    ("mxfp8", LLAMA, "mxfp8", None, None, None, False),
    ("nvfp4", LLAMA, "nvfp4", None, None, None, False),
    ("moe-mxfp4", QWEN3_MOE, "mxfp4", None, None, None, False),
    ("moe-nvfp4-global", QWEN3_MOE, "nvfp4", None, None, None, True),
]

# Weights whose dequantized statistics the test compares with its own.
PROBES = [
    "model.layers.0.mlp.down_proj",
    "model.layers.1.self_attn.v_proj",
    "model.layers.1.mlp.switch_mlp.down_proj",
    "lm_head",
]


def dequantized(module):
    gs = module.get("global_scale")
    kwargs = dict(group_size=module.group_size, bits=module.bits, mode=module.mode)
    if gs is not None:
        return mx.stack(
            [
                mx.dequantize(module.weight[e], module.scales[e], None, global_scale=gs[e], **kwargs)
                for e in range(module.weight.shape[0])
            ]
        )
    return mx.dequantize(module.weight, module.scales, module.get("biases"), **kwargs)


def main():
    out = Path(sys.argv[1])
    # The unquantized source of the Llama cases (bf16, the same seed), for
    # diffs against its conversions; no case line.
    mx.random.seed(7)
    source = llama.Model(llama.ModelArgs.from_dict(dict(LLAMA)))
    source.update(tree_map(lambda p: p.astype(mx.bfloat16), source.parameters()))
    save_model(out / "llama-bf16", source)
    save_config(dict(LLAMA), out / "llama-bf16" / "config.json")
    for name, arch, mode, group_size, bits, recipe, global_scale in CASES:
        mx.random.seed(7)
        module = llama if arch is LLAMA else qwen3_moe
        config = dict(arch)
        model = module.Model(module.ModelArgs.from_dict(config))
        model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
        predicate = None
        if recipe is not None:
            predicate = mixed_quant_predicate_builder(recipe, model, group_size or 64)
        model, config = quantize_model(
            model,
            config,
            group_size,
            bits,
            mode=mode,
            global_scale=global_scale,
            quant_predicate=predicate,
        )
        path = out / name
        save_model(path, model)
        save_config(config, path / "config.json")
        index = json.loads((path / "model.safetensors.index.json").read_text())
        modules = dict(model.named_modules())
        stats = {}
        for probe in PROBES:
            m = modules.get(probe)
            if m is None or not hasattr(m, "bits"):
                continue
            w = dequantized(m).astype(mx.float32)
            stats[probe + ".weight"] = {
                "min": w.min().item(),
                "max": w.max().item(),
                "mean": w.mean().item(),
                "shape": list(w.shape),
                "mode": m.mode,
                "bits": m.bits,
                "group_size": m.group_size,
            }
        print(
            json.dumps(
                {
                    "case": name,
                    "path": str(path),
                    "total_parameters": index["metadata"]["total_parameters"],
                    "total_size": index["metadata"]["total_size"],
                    "bits_per_weight": compute_bits_per_weight(model),
                    "dequantized": stats,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
