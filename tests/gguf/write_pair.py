"""A Hugging Face-layout checkpoint (written by MLX's writer) beside the
GGUF file llama.cpp's converter would make of it, for the name mapping and
the rotary reordering in tests/mlx/gguf_files.rs.

For each of a Llama (4 heads, 2 KV heads) and a Qwen3 (with q_norm/k_norm):
OUT_DIR/<arch>-hf/model.safetensors + config.json, and OUT_DIR/<arch>.gguf
with the names gguf-py's own tensor-name map gives (get_tensor_name_map),
Llama's q_proj and k_proj rows reordered as convert_hf_to_gguf.py's
LlamaModel.permute does (Qwen's converter does not), every tensor F32
except the MLP up projections and layer 0's q_proj, quantized by gguf-py
to Q8_0.

Prints one JSON object per pair: the folder, the file, each HF name with
the GGUF name gguf-py maps it to, and each Q8_0 tensor's relative error
(||w - dequantize(quantize(w))|| / ||w||, numpy in float64).

Usage: python write_pair.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import MODEL_ARCH, GGMLQuantizationType as T, GGUFWriter, get_tensor_name_map
from gguf.quants import dequantize, quantize

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, FFN, LAYERS, VOCAB = 4, 2, 16, 64, 128, 2, 96


def reorder(w, heads):
    # convert_hf_to_gguf.py's LlamaModel.permute: rows (h, t, j) -> (h, j, t).
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def model(arch, rng):
    t = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (HIDDEN,)
        t[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        t[p + "self_attn.q_proj.weight"] = (HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = (HIDDEN, HEADS * HEAD_DIM)
        if arch == "qwen3":
            t[p + "self_attn.q_norm.weight"] = (HEAD_DIM,)
            t[p + "self_attn.k_norm.weight"] = (HEAD_DIM,)
        t[p + "mlp.gate_proj.weight"] = (FFN, HIDDEN)
        t[p + "mlp.up_proj.weight"] = (FFN, HIDDEN)
        t[p + "mlp.down_proj.weight"] = (HIDDEN, FFN)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in t.items()}


def write(out, arch, rng):
    tensors = model(arch, rng)
    hf = out / f"{arch}-hf"
    hf.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(hf / "model.safetensors"), {k: mx.array(v) for k, v in tensors.items()})
    (hf / "config.json").write_text(json.dumps({
        "model_type": arch, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "tie_word_embeddings": False,
    }))
    names = get_tensor_name_map(MODEL_ARCH.LLAMA if arch == "llama" else MODEL_ARCH.QWEN3, LAYERS)
    path = out / f"{arch}.gguf"
    writer = GGUFWriter(str(path), arch)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_block_count(LAYERS)
    mapping, rel = {}, {}
    for name, w in tensors.items():
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        mapping[name] = gguf_name
        if arch == "llama" and name.endswith("q_proj.weight"):
            w = reorder(w, HEADS)
        if arch == "llama" and name.endswith("k_proj.weight"):
            w = reorder(w, KV_HEADS)
        # The MLP up projections, and a reordered projection, in Q8_0: the
        # row order is undone on decoded blocks too.
        if name.endswith(("up_proj.weight", "layers.0.self_attn.q_proj.weight")):
            q = quantize(w, T.Q8_0)
            back = dequantize(q, T.Q8_0).astype(np.float64)
            source = w.astype(np.float64)
            rel[name] = float(np.linalg.norm(source - back) / np.linalg.norm(source))
            writer.add_tensor(gguf_name, q, raw_dtype=T.Q8_0)
        else:
            writer.add_tensor(gguf_name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"arch": arch, "hf": str(hf), "gguf": str(path), "names": mapping, "q8_0_rel_error": rel}


def main():
    out = Path(sys.argv[1])
    rng = np.random.default_rng(7)
    for arch in ("llama", "qwen3"):
        print(json.dumps(write(out, arch, rng)))


if __name__ == "__main__":
    main()
