"""GGUF files written by llama.cpp's own gguf-py (`GGUFWriter`), read back by
its `GGUFReader` and loaded by MLX's `mx.load`, for tests/mlx/gguf_files.rs.

Writes OUT_DIR/type_<NAME>.gguf, one tensor `w` [4, 256] of each ggml type
gguf-py knows (values quantized by gguf-py where it can, else blocks of zero
bytes, which every type decodes to finite values), and OUT_DIR/mixed.gguf
(several types, a tokenizer vocabulary as a string array). Prints one JSON
object per file: what GGUFReader reads (each tensor's name, type, row-major
shape, bytes, data offset), gguf-py's block sizes, and what mx.load did with
each tensor: "as_is", "affine", "expand_f16", "dropped", or "refuses" for
the whole file.

Usage: python write_gguf.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize


# The f16 scales of the blocks gguf-py decodes but does not write (the
# K-quants, IQ4): their byte offsets in a block (ggml's block structs).
K_SCALES = {
    T.Q2_K: (80, 82),
    T.Q3_K: (108,),
    T.Q4_K: (0, 2),
    T.Q5_K: (0, 2),
    T.Q6_K: (208,),
    T.IQ4_NL: (0,),
    T.IQ4_XS: (0,),
}


def block(rng, kind, rows, cols):
    values, size = GGML_QUANT_SIZES[kind]
    try:
        x = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
        return quantize(x, kind)
    except Exception:
        pass
    shape = (rows, cols // values * size)
    if kind == T.NVFP4:
        # Its scales are unsigned E4M3 bytes: any byte is a finite scale.
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    if kind not in K_SCALES:
        return np.zeros(shape, dtype=np.uint8)
    # Random bytes with finite, small scales: every bit pattern of the
    # quantized values and of the 6-bit or 8-bit sub-scales occurs.
    raw = rng.integers(0, 256, size=shape, dtype=np.uint8)
    blocks = raw.reshape(-1, size)
    for at in K_SCALES[kind]:
        scale = rng.uniform(1e-3, 2e-2, size=blocks.shape[0]).astype(np.float16)
        blocks[:, at : at + 2] = scale.view(np.uint8).reshape(-1, 2)
    return raw


def mlx_outcome(path, names, types):
    try:
        loaded = mx.load(str(path))
    except Exception as e:
        return {"refuses": str(e)}
    out = {}
    for name, kind in zip(names, types):
        # MLX names a quantized weight's scales as mlx-lm does:
        # `x.weight` -> `x.scales` (`w` -> `w.scales`).
        stem = name[: -len(".weight")] if name.endswith(".weight") else name
        if name not in loaded:
            out[name] = "dropped"
        elif stem + ".scales" in loaded:
            out[name] = "affine"
        elif loaded[name].dtype == mx.float16 and kind != T.F16:
            out[name] = "expand_f16"
        else:
            out[name] = "as_is"
    return out


def tensor_rows(reader):
    """Each tensor as GGUFReader reads it (shapes row-major, as MLX's)."""
    return [
        {
            "name": t.name,
            "type_id": int(t.tensor_type),
            "type": t.tensor_type.name,
            "shape": [int(d) for d in reversed(t.shape)],
            "bytes": int(t.n_bytes),
            "offset": int(t.data_offset),
        }
        for t in reader.tensors
    ]


def value_stats(v):
    """What weightscope's decoding must match: the first values, the
    extremes and the mean of V (flattened)."""
    v = v.ravel()
    return {
        "first": [float(x) for x in v[:64]],
        "min": float(v.min()),
        "max": float(v.max()),
        "mean": float(v.astype(np.float64).mean()),
    }


def describe(path):
    reader = GGUFReader(str(path))
    tensors = tensor_rows(reader)
    names = [t["name"] for t in tensors]
    kinds = [T(t["type_id"]) for t in tensors]
    # gguf-py's own dequantization of each tensor, where it has one: the
    # first values and the extremes, for weightscope's decoding to match.
    values = {}
    for t in reader.tensors:
        try:
            v = dequantize(t.data, t.tensor_type).astype(np.float32).ravel()
        except Exception:
            if t.tensor_type not in (T.I8, T.I16, T.I32, T.I64, T.F64):
                continue
            # Plain integer and F64 tensors: the reader's own numpy view.
            v = np.asarray(t.data).astype(np.float32).ravel()
        values[t.name] = value_stats(v)
    return {
        "file": str(path),
        "tensors": tensors,
        "mlx": mlx_outcome(path, names, kinds),
        "values": values,
    }


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    for kind in T:
        path = out / f"type_{kind.name}.gguf"
        writer = GGUFWriter(str(path), "llama")
        data = block(rng, kind, 4, 256)
        if kind in (T.F32, T.F16, T.BF16):
            writer.add_tensor("w", data if kind != T.F32 else data.astype(np.float32), raw_dtype=kind)
        else:
            writer.add_tensor("w", data, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        print(json.dumps(describe(path)))
    path = out / "mixed.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_context_length(128)
    writer.add_token_list([f"tok{i}" for i in range(1000)])
    writer.add_tensor("token_embd.weight", block(rng, T.Q8_0, 64, 256), raw_dtype=T.Q8_0)
    writer.add_tensor("blk.0.attn_q.weight", block(rng, T.Q4_0, 64, 256), raw_dtype=T.Q4_0)
    writer.add_tensor("blk.0.ffn_down.weight", block(rng, T.Q4_K, 64, 512), raw_dtype=T.Q4_K)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(256, dtype=np.float32))
    # More values than one band of a summary (2M): read and decoded in bands.
    writer.add_tensor("blk.1.ffn_up.weight", block(rng, T.Q8_0, 4096, 512), raw_dtype=T.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(json.dumps(describe(path)))
    print(json.dumps({"quant_sizes": {k.name: [int(k), *GGML_QUANT_SIZES[k]] for k in T}}))


if __name__ == "__main__":
    main()
