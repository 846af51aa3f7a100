"""Per-group error of one weight between an unquantized checkpoint (A) and
its mlx-lm conversion (B), computed with MLX's own dequantize and numpy, for
tests/mlx/mlx_lm_writer.rs to check `weightscope diff --tensor` against.

For each group of `group_size` values along a row: sqrt(sum((a-b)^2) /
sum(a^2)), in float32. Prints one JSON object: the group count, the median,
99th-percentile and worst group errors (rank round((1 - q) * (n - 1)) from
the worst), and the worst groups as [row, group, rel_error].

Usage: python group_errors.py A_DIR B_DIR NAME
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np


def tensors(folder):
    out = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        out.update(mx.load(str(f)))
    return out


def main():
    a_dir, b_dir, name = sys.argv[1], sys.argv[2], sys.argv[3]
    a = np.array(tensors(a_dir)[name].astype(mx.float32))
    b_all = tensors(b_dir)
    config = json.loads((Path(b_dir) / "config.json").read_text())["quantization"]
    module = name.removesuffix(".weight")
    params = config.get(module, config)
    b = mx.dequantize(
        b_all[name],
        b_all[module + ".scales"],
        b_all.get(module + ".biases"),
        group_size=params["group_size"],
        bits=params["bits"],
        mode=params.get("mode", "affine"),
    )
    b = np.array(b.astype(mx.float32))
    size = params["group_size"]
    rows = a.reshape(-1, a.shape[-1]).shape[0]
    ga = a.reshape(rows, -1, size)
    gb = b.reshape(rows, -1, size)
    delta_sq = ((ga - gb) ** 2).sum(axis=-1, dtype=np.float32)
    a_sq = (ga**2).sum(axis=-1, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(delta_sq == 0, 0.0, np.sqrt(delta_sq / a_sq)).astype(np.float32).ravel()
    order = np.argsort(-rel, kind="stable")
    n = rel.size

    def at(q):
        return float(rel[order[min(int(round((1 - q) * (n - 1))), n - 1)]])

    per_row = ga.shape[1]
    print(json.dumps({
        "groups": n,
        "group_size": size,
        "median": at(0.5),
        "p99": at(0.99),
        "max": at(1.0),
        "worst": [[int(i) // per_row, int(i) % per_row, float(rel[i])] for i in order[:12]],
    }))


main()
