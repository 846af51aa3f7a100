"""PyTorch files written by torch.save itself (Debian's torch 1.13), for
tests/mlx/pytorch_files.rs.

OUT_DIR gets:
- dtypes.bin: one tensor of every dtype torch 1.13 stores (f32, f16, bf16,
  f64, int8..int64, uint8, bool), each with a view of it: a transposed
  matrix, a column slice (strided), a slice at an offset, and a tied name
  (the same tensor under two names);
- legacy.bin: the same state dict in the legacy format
  (_use_new_zipfile_serialization=False);
- sharded/: a small Llama-shaped state dict split in two
  pytorch_model-0000N-of-00002.bin files with pytorch_model.bin.index.json
  and config.json (the layout save_pretrained(safe_serialization=False)
  writes; made by hand: transformers is not installed), with lm_head tied to
  embed_tokens in the same file;
- sharded.safetensors: the same tensors as one safetensors file (written by
  hand from each tensor's bytes: the `safetensors` package is not here), to
  diff against;
- both/: model.safetensors and pytorch_model.bin side by side;
- checkpoint.pth: a training checkpoint {model, optimizer (Adam, one step),
  epoch, lr};
- evil.bin: a state dict with one value whose __reduce__ runs
  `touch OUT_DIR/PWNED`.

Prints one JSON object a line: for each file, each tensor's name, dtype,
shape and its values (flattened, as float64; bool and int as numbers) as
torch.load(weights_only=False on the files we wrote, never on evil.bin)
reads them, and picklescan's verdict (the worst class of any global it
reports) for every file.

Usage: python write_torch.py OUT_DIR
"""

import collections
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import torch

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
torch.manual_seed(7)

DTYPES = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f64": torch.float64,
    "i8": torch.int8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "u8": torch.uint8,
    "bool": torch.bool,
}


def sample(dtype, shape):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape) * 3).to(dtype)
    return torch.randint(0, 100, shape).to(dtype)


def dtypes_dict():
    sd = collections.OrderedDict()
    for name, dtype in DTYPES.items():
        w = sample(dtype, (6, 10))
        sd[f"{name}.weight"] = w
        sd[f"{name}.transposed"] = w.t()
        sd[f"{name}.columns"] = w[:, 2:7]
        sd[f"{name}.offset"] = w[3:]
        sd[f"{name}.tied"] = w
    return sd


def llama_dict():
    vocab, hidden, ffn = 64, 32, 48
    sd = collections.OrderedDict()
    embed = torch.randn(vocab, hidden).to(torch.bfloat16)
    sd["model.embed_tokens.weight"] = embed
    for i in range(2):
        p = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{proj}.weight"] = torch.randn(hidden, hidden).to(torch.bfloat16)
        sd[p + "mlp.gate_proj.weight"] = torch.randn(ffn, hidden).to(torch.bfloat16)
        sd[p + "mlp.up_proj.weight"] = torch.randn(ffn, hidden).to(torch.bfloat16)
        sd[p + "mlp.down_proj.weight"] = torch.randn(hidden, ffn).to(torch.bfloat16)
        sd[p + "input_layernorm.weight"] = torch.ones(hidden).to(torch.bfloat16)
    sd["model.norm.weight"] = torch.ones(hidden).to(torch.bfloat16)
    sd["lm_head.weight"] = embed
    return sd


ST_NAMES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float64: "F64", torch.int8: "I8", torch.int16: "I16",
    torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8", torch.bool: "BOOL",
}


def write_safetensors(path, sd):
    header, blobs, at = {}, [], 0
    for name, t in sd.items():
        data = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.bool \
            else t.contiguous().numpy().tobytes()
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def values(t):
    return t.detach().to(torch.float64).flatten().tolist() if t.dtype != torch.bool \
        else [float(v) for v in t.flatten().tolist()]


def report(path, sd):
    for name, t in sd.items():
        if isinstance(t, torch.Tensor):
            print(json.dumps({"file": str(path), "name": name, "dtype": ST_NAMES[t.dtype],
                              "shape": list(t.shape), "values": values(t)}))


def flatten(prefix, value, out):
    if isinstance(value, torch.Tensor):
        out[prefix] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            flatten(f"{prefix}.{i}" if prefix else str(i), v, out)
    return out


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {OUT / 'PWNED'}",))


def main():
    sd = dtypes_dict()
    torch.save(sd, OUT / "dtypes.bin")
    torch.save(sd, OUT / "legacy.bin", _use_new_zipfile_serialization=False)
    for f in ("dtypes.bin", "legacy.bin"):
        report(OUT / f, torch.load(OUT / f))

    llama = llama_dict()
    shards = OUT / "sharded"
    shards.mkdir(exist_ok=True)
    names = list(llama)
    half = len(names) // 2
    # lm_head stays in the first file with embed_tokens (tied: one storage).
    first = [n for n in names[:half]] + ["lm_head.weight"]
    second = [n for n in names[half:] if n != "lm_head.weight"]
    weight_map = {}
    for k, part in enumerate((first, second), start=1):
        file = f"pytorch_model-{k:05d}-of-00002.bin"
        torch.save(collections.OrderedDict((n, llama[n]) for n in part), shards / file)
        weight_map.update({n: file for n in part})
        report(shards / file, torch.load(shards / file))
    total = sum(t.numel() * t.element_size() for n, t in llama.items() if n != "lm_head.weight")
    (shards / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (shards / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
        "vocab_size": 64, "tie_word_embeddings": True}))
    write_safetensors(OUT / "sharded.safetensors", llama)

    both = OUT / "both"
    both.mkdir(exist_ok=True)
    small = collections.OrderedDict([("w", torch.randn(4, 4))])
    torch.save(small, both / "pytorch_model.bin")
    write_safetensors(both / "model.safetensors", small)

    model = torch.nn.Linear(8, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 5, "lr": 0.01}
    torch.save(ckpt, OUT / "checkpoint.pth")
    loaded = torch.load(OUT / "checkpoint.pth")
    report(OUT / "checkpoint.pth", flatten("", loaded, collections.OrderedDict()))

    torch.save(collections.OrderedDict([("w", torch.ones(3, 3)), ("evil", Evil())]),
               OUT / "evil.bin")

    scan = Path(sys.executable).with_name("picklescan")
    for f in ("dtypes.bin", "legacy.bin", "sharded/pytorch_model-00001-of-00002.bin",
              "checkpoint.pth", "evil.bin"):
        out = subprocess.run([str(scan), "--path", str(OUT / f)], capture_output=True, text=True)
        text = out.stdout
        verdict = "innocuous"
        if "Suspicious globals: 0" not in text:
            verdict = "suspicious"
        if "Dangerous globals: 0" not in text:
            verdict = "dangerous"
        print(json.dumps({"file": str(OUT / f), "picklescan": verdict}))


main()
