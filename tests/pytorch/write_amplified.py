"""PyTorch files written by torch.save whose pickles are small but name one
long key from many places (the pickle's memo keeps one copy), for
tests/plain/bounded.rs: what is built from them must stay bounded.

OUT_DIR gets:
- long_key.pth: {K: {"0": t, ..., "199": t}} with K a 1 MB string: 200
  tensor names of 1 MB each if joined without a cut (200 MB);
- deep.pth: the same 64 KiB key at each of 60 nested levels, with five
  tensors at each level: names of up to 3.8 MB each (about 600 MB).

Usage: python write_amplified.py OUT_DIR
"""

import sys
from pathlib import Path

import torch

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
t = torch.zeros(1)

key = "k" * 1_000_000
torch.save({key: {str(i): t for i in range(200)}}, out / "long_key.pth")

key = "d" * 65536
root = {}
level = root
for depth in range(60):
    for i in range(5):
        level[f"t{i}"] = t
    level[key] = {}
    level = level[key]
torch.save(root, out / "deep.pth")
for name in ("long_key.pth", "deep.pth"):
    print(name, (out / name).stat().st_size)
