"""Helpers for mlx-glue/gpu-run on the NVIDIA machine (its own python3, which
holds PyTorch and safetensors; nothing is installed).

    python3 gpu_bench.py generate DIR        a ~3.4 GiB, 8-shard checkpoint (seeded)
    python3 gpu_bench.py generate-big DIR    two 1 GiB f32 tensors and their float64 statistics
    python3 gpu_bench.py torch-load DIR      best-of-3 GB/s of safetensors -> CUDA
    python3 gpu_bench.py generate-q4 DIR     a 1 GiB affine 4-bit weight (2^31 values) and its
                                             float64 statistics
    python3 gpu_bench.py torch-summary FILE NAME [q4]
                                             PyTorch's statistics and 64-bin histogram of one
                                             tensor on the GPU (aminmax, std_mean, histc), the
                                             first run and the best of 5 in ms
    python3 gpu_bench.py same-summary A B    whether two `tensor --json --cells` summaries of
                                             one tensor agree (fused against unfused)
    python3 gpu_bench.py generate-disk DIR SHARDS GIB
                                             SHARDS shards of GIB GiB each, every byte written
                                             (random, no holes), synced to disk
    python3 gpu_bench.py evict FILE...       drops FILEs from the page cache (fadvise), for
                                             machines where /proc/sys/vm/drop_caches is not ours
    python3 gpu_bench.py generate-dense DIR  dense tensors of every dtype the fused kernel reads
                                             (1 GiB f32, bf16, f16 with NaN/Inf, a 1-D one, a
                                             100 MB one, odd shapes) and their float64 statistics
    python3 gpu_bench.py versus-float64 JSON REF
                                             a `tensor --json` summary against float64 statistics
    python3 gpu_bench.py compare CPU GPU [REF]  `weightscope tensor --json` stats, CPU vs GPU
                                             (and both against float64 REF statistics)
"""
import json
import os
import sys
import time
from pathlib import Path

MIB = 1 << 20


def generate(root: Path) -> None:
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    weight_map = {}
    total = 0
    for shard in range(8):
        file = f"model-{shard + 1:05d}-of-00008.safetensors"
        tensors = {}
        for k in range(6 + shard % 3):
            name = f"model.layers.{shard}.w{k}.weight"
            if k % 2 == 0:
                t = torch.randn(4096, 8192, generator=gen).to(torch.bfloat16)
            else:
                t = torch.randn(4096, 4096, generator=gen)
            tensors[name] = t
            weight_map[name] = file
            total += t.numel() * t.element_size()
        if shard == 3:
            # Planted non-finite values: both backends must count them alike.
            bad = tensors["model.layers.3.w1.weight"]
            bad[0, 0] = float("nan")
            bad[1, 1] = float("inf")
            bad[2, 2] = float("-inf")
        save_file(tensors, str(root / file))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    print(f"generated {total / MIB:.0f} MiB in 8 shards at {root}")


def generate_big(root: Path) -> None:
    """Two [16384, 16384] f32 tensors: weights around 0 (`big`) and norm-like
    values far from 0 relative to their spread (`big_norm`), with float64
    statistics computed by PyTorch as the reference."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(99)
    tensors = {
        "big": torch.randn(16384, 16384, generator=gen) * 0.02,
        "big_norm": 1.0 + 0.05 * torch.randn(16384, 16384, generator=gen),
    }
    reference = {}
    for name, t in tensors.items():
        d = t.double()
        reference[name] = {
            "min": d.min().item(), "max": d.max().item(),
            "mean": d.mean().item(), "std": d.std(unbiased=False).item(),
        }
    save_file(tensors, str(root / "model.safetensors"))
    (root / "reference.json").write_text(json.dumps(reference))
    print(f"generated 2 GiB at {root}")


Q4_ROWS, Q4_COLS, Q4_GROUP = 32768, 65536, 64


def q4_dequantize(torch, words, scales, biases):
    """MLX's affine 4-bit layout: eight values per uint32 word, lowest bits
    first; value = scale * q + bias per group of 64."""
    shifts = torch.arange(0, 32, 4, device=words.device, dtype=torch.int32)
    q = (words.unsqueeze(-1) >> shifts) & 0xF
    q = q.reshape(words.shape[0], -1, Q4_GROUP).to(scales.dtype)
    return (q * scales.unsqueeze(-1) + biases.unsqueeze(-1)).reshape(words.shape[0], -1)


def generate_q4(root: Path) -> None:
    """`w.weight` [32768, 8192] uint32 (1 GiB of seeded random words),
    `w.scales` and `w.biases` [32768, 1024] f16, config.json saying affine
    4-bit group 64 (mlx-lm's keys), and float64 statistics of the
    dequantized values computed on the GPU by PyTorch."""
    import numpy as np
    import torch
    from safetensors.numpy import save_file

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    words = rng.integers(0, 1 << 32, size=(Q4_ROWS, Q4_COLS // 8), dtype=np.uint32)
    groups = Q4_COLS // Q4_GROUP
    scales = (0.002 + 0.001 * rng.random((Q4_ROWS, groups))).astype(np.float16)
    biases = (-7.5 * scales.astype(np.float32) + 0.0005 * rng.standard_normal((Q4_ROWS, groups))).astype(np.float16)
    save_file({"w.weight": words, "w.scales": scales, "w.biases": biases}, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps({"quantization": {"group_size": Q4_GROUP, "bits": 4}}))
    w = torch.from_numpy(words.view(np.int32)).cuda()
    d = q4_dequantize(torch, w, torch.from_numpy(scales).cuda().double(), torch.from_numpy(biases).cuda().double())
    reference = {"w.weight": {"min": d.min().item(), "max": d.max().item(),
                              "mean": d.mean().item(), "std": d.std(unbiased=False).item()}}
    (root / "reference.json").write_text(json.dumps(reference))
    print(f"generated a 1 GiB 4-bit weight at {root}")


def generate_dense(root: Path) -> None:
    """The tensors `gpu-run dense` summarizes, made on the GPU (seeded), with
    float64 statistics of their finite values and NaN/Inf counts computed by
    PyTorch as the reference."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(7)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    f16 = (1.0 + 0.05 * randn(16384, 32768)).half()
    flat = f16.view(-1)
    flat[12345] = float("nan")
    flat[777777] = float("inf")
    flat[-3] = float("-inf")
    tensors = {
        "f32": randn(16384, 16384) * 0.02,
        "bf16": (randn(16384, 32768) * 0.02).bfloat16(),
        "f16": f16,
        "flat": randn(1 << 28),
        "click": randn(5120, 5120) * 0.02,
        "odd": (randn(3, 1000, 4099) * 3.0).half(),
        "narrow": randn(1 << 20, 96).bfloat16(),
    }
    reference = {}
    for name, t in tensors.items():
        d = t.double()
        finite = torch.isfinite(d)
        v = d[finite]
        reference[name] = {
            "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "min": v.min().item(), "max": v.max().item(),
            "mean": v.mean().item(), "std": v.std(unbiased=False).item(),
            "nan": int(torch.isnan(d).sum().item()), "inf": int(torch.isinf(d).sum().item()),
        }
    save_file({k: v.cpu().contiguous() for k, v in tensors.items()}, str(root / "model.safetensors"))
    (root / "reference.json").write_text(json.dumps(reference))
    print(f"generated {len(tensors)} dense tensors at {root}")


def versus_float64(json_path: str, reference_path: str) -> int:
    """Whether a `tensor --json` summary's statistics are those of float64:
    min and max exact, mean within 1e-6 of the spread, std within 1e-6
    relative, NaN and Inf counts equal."""
    got = json.loads(Path(json_path).read_text())
    want = json.loads(Path(reference_path).read_text())[got["name"]]
    s = got["stats"]
    spread = max(abs(want["std"]), 1e-30)
    result = {
        "name": got["name"],
        "extremes_exact": (s["min"], s["max"]) == (want["min"], want["max"]),
        "mean_off_in_std": abs(s["mean"] - want["mean"]) / spread,
        "std_off_relative": abs(s["std"] - want["std"]) / spread,
        "nan_inf": [[s["nan"], s["inf"]], [want["nan"], want["inf"]]],
    }
    ok = (result["extremes_exact"] and result["mean_off_in_std"] <= 1e-6
          and result["std_off_relative"] <= 1e-6 and [s["nan"], s["inf"]] == [want["nan"], want["inf"]])
    result["as_float64"] = ok
    print(json.dumps(result))
    return 0 if ok else 1


def torch_summary(path: str, name: str, kind: str = "") -> None:
    import numpy as np
    import torch
    from safetensors import safe_open

    if kind == "q4":
        with safe_open(path, framework="np") as f:
            words = torch.from_numpy(f.get_tensor(name).view(np.int32)).cuda()
            stem = name.rsplit(".", 1)[0]
            scales = torch.from_numpy(f.get_tensor(stem + ".scales")).cuda()
            biases = torch.from_numpy(f.get_tensor(stem + ".biases")).cuda()
    else:
        # PyTorch's own reader: numpy has no bf16.
        with safe_open(path, framework="pt") as f:
            x_stored = f.get_tensor(name).cuda()
    torch.cuda.synchronize()
    upcast = []

    def run():
        x = q4_dequantize(torch, words, scales.float(), biases.float()) if kind == "q4" else x_stored
        lo, hi = torch.aminmax(x)
        if not (torch.isfinite(lo) and torch.isfinite(hi)):
            # NaN or Inf among the values: PyTorch's reductions take them
            # in; the finite values are what a summary describes.
            x = x[torch.isfinite(x)]
            lo, hi = torch.aminmax(x)
        std, mean = torch.std_mean(x, correction=0)
        try:
            hist = torch.histc(x, bins=64, min=lo.item(), max=hi.item())
        except RuntimeError:
            # histc does not take every dtype on CUDA: the values as f32.
            upcast.append(True)
            hist = torch.histc(x.float(), bins=64, min=lo.item(), max=hi.item())
        torch.cuda.synchronize()
        return lo.item(), hi.item(), mean.item(), std.item(), hist

    times = []
    for _ in range(6):
        start = time.perf_counter()
        lo, hi, mean, std, _hist = run()
        times.append((time.perf_counter() - start) * 1e3)
    # Each of PyTorch's three reductions alone (best of 5), to see what a
    # pass over these bytes costs on this card.
    x = x_stored if kind != "q4" else q4_dequantize(torch, words, scales.float(), biases.float())
    if not torch.isfinite(x).all():
        x = x[torch.isfinite(x)]
    h = x if not upcast else x.float()
    alone = {}
    for key, op in (("aminmax_ms", lambda: torch.aminmax(x)), ("std_mean_ms", lambda: torch.std_mean(x, correction=0)),
                    ("histc_ms", lambda: torch.histc(h, bins=64, min=lo, max=hi))):
        best = None
        for _ in range(6):
            torch.cuda.synchronize()
            start = time.perf_counter()
            op()
            torch.cuda.synchronize()
            dt = (time.perf_counter() - start) * 1e3
            best = dt if best is None else min(best, dt)
        alone[key] = best
    print(json.dumps({"name": name, "first_ms": times[0], "best_ms": min(times[1:]),
                      "min": lo, "max": hi, "mean": mean, "std": std, "histc_upcast": bool(upcast), **alone}))


def generate_disk(root: Path, shards: int, shard_gib: int) -> None:
    """Real bytes on disk for the walk-against-`cat` measure: bf16 tensors of
    256 MiB, random, written block by block (no holes, no file-system copy),
    so a read with an empty page cache goes to the disk."""
    root.mkdir(parents=True, exist_ok=True)
    block = os.urandom(64 * MIB)
    rows, cols = 8192, 16384  # 256 MiB of bf16
    tensor_bytes = rows * cols * 2
    weight_map = {}
    total = 0
    for shard in range(shards):
        file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        header = {"__metadata__": {"format": "pt"}}
        names = [f"model.layers.{shard}.w{k}.weight" for k in range(shard_gib * 4)]
        for k, name in enumerate(names):
            header[name] = {
                "dtype": "BF16",
                "shape": [rows, cols],
                "data_offsets": [k * tensor_bytes, (k + 1) * tensor_bytes],
            }
            weight_map[name] = file
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(root / file, "wb") as out:
            out.write(len(text).to_bytes(8, "little"))
            out.write(text)
            for k in range(len(names) * tensor_bytes // len(block)):
                # A different first word per block: nothing below can
                # share or compress equal blocks.
                out.write((shard * 1_000_003 + k).to_bytes(8, "little") + block[8:])
            out.flush()
            os.fsync(out.fileno())
        total += len(names) * tensor_bytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    print(f"generated {total / (1 << 30):.0f} GiB of real bytes in {shards} shards at {root}")


def evict(files: list) -> None:
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def torch_load(root: Path) -> None:
    import torch
    from safetensors.torch import load_file

    files = sorted(root.glob("*.safetensors"))
    total = sum(f.stat().st_size for f in files)
    torch.zeros(1, device="cuda")  # the CUDA context, outside the timing
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loaded = [load_file(str(f), device="cuda:0") for f in files]
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
        del loaded
        torch.cuda.empty_cache()
    print(json.dumps({"bytes": total, "best_secs": best, "gb_per_s": total / best / 1e9}))


def compare(cpu_path: str, gpu_path: str, reference_path: str = "") -> int:
    cpu = json.loads(Path(cpu_path).read_text())
    gpu = json.loads(Path(gpu_path).read_text())
    worst = 0.0
    ok = True
    for key in ("min", "max", "mean", "std"):
        a, b = cpu["stats"][key], gpu["stats"][key]
        # The mean relative to the spread (a mean near 0 has no scale of
        # its own: the 4-bit weight's is 6e-8 against a std of 0.012).
        scale = cpu["stats"]["std"] if key == "mean" else abs(a)
        rel = abs(a - b) / max(scale, 1e-30)
        worst = max(worst, rel)
        ok &= rel <= 1e-5
    for key in ("nan", "inf"):
        ok &= cpu["stats"][key] == gpu["stats"][key]
    ok &= cpu["first"] == gpu["first"]
    result = {
        "name": cpu["name"], "cpu_device": cpu["device"], "gpu_device": gpu["device"],
        "equal_within_1e-5": ok, "worst_relative_difference": worst,
        "nan": [cpu["stats"]["nan"], gpu["stats"]["nan"]],
        "inf": [cpu["stats"]["inf"], gpu["stats"]["inf"]],
        "cpu_millis": cpu["millis"], "gpu_millis": gpu["millis"],
        "cpu_stats_millis": cpu.get("stats_millis"), "gpu_stats_millis": gpu.get("stats_millis"),
    }
    if reference_path:
        # Relative to the spread for the mean (a mean near 0 has no scale of its own).
        want = json.loads(Path(reference_path).read_text())[cpu["name"]]
        for side, got in (("cpu", cpu), ("gpu", gpu)):
            errors = {
                key: abs(got["stats"][key] - want[key])
                / (want["std"] if key == "mean" else max(abs(want[key]), 1e-30))
                for key in ("min", "max", "mean", "std")
            }
            result[f"{side}_vs_float64"] = errors
            ok &= max(errors.values()) <= 1e-5
        result["within_1e-5_of_float64"] = ok
    print(json.dumps(result))
    return 0 if ok else 1


def same_summary(a_path: str, b_path: str) -> int:
    """Whether two `tensor --json --cells` summaries of one tensor agree:
    histograms and first values equal, extremes equal, mean and std within
    1e-6 of the spread, heatmap cells within 1e-5."""
    a = json.loads(Path(a_path).read_text())
    b = json.loads(Path(b_path).read_text())
    sa, sb = a["stats"], b["stats"]
    spread = max(abs(sa["std"]), 1e-30)
    cells_a = (a.get("heatmap") or {}).get("values") or []
    cells_b = (b.get("heatmap") or {}).get("values") or []
    worst_cell = max((abs(x - y) / (1.0 + abs(y)) for x, y in zip(cells_a, cells_b)
                      if x is not None and y is not None), default=0.0)
    peaks_a = (a.get("heatmap") or {}).get("max_abs") or []
    peaks_b = (b.get("heatmap") or {}).get("max_abs") or []
    result = {
        "name": a["name"],
        "histograms_equal": a["histogram"]["counts"] == b["histogram"]["counts"],
        "bins_differing": sum(x != y for x, y in zip(a["histogram"]["counts"], b["histogram"]["counts"])),
        "first_equal": a["first"] == b["first"],
        "extremes_equal": (sa["min"], sa["max"]) == (sb["min"], sb["max"]),
        "mean_off_in_std": abs(sa["mean"] - sb["mean"]) / spread,
        "std_off_relative": abs(sa["std"] - sb["std"]) / spread,
        "nan_inf_equal": (sa["nan"], sa["inf"]) == (sb["nan"], sb["inf"]),
        "cells": [len(cells_a), len(cells_b)],
        "worst_cell_difference": worst_cell,
        "max_abs_cells_equal": peaks_a == peaks_b,
        "millis": [a.get("stats_millis"), b.get("stats_millis")],
    }
    ok = (result["histograms_equal"] and result["first_equal"] and result["extremes_equal"]
          and result["mean_off_in_std"] <= 1e-6 and result["std_off_relative"] <= 1e-6
          and result["nan_inf_equal"] and len(cells_a) == len(cells_b) and worst_cell <= 1e-5
          and peaks_a == peaks_b)
    result["same"] = ok
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "generate":
        generate(Path(sys.argv[2]))
    elif command == "generate-disk":
        generate_disk(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif command == "evict":
        evict(sys.argv[2:])
    elif command == "torch-load":
        torch_load(Path(sys.argv[2]))
    elif command == "same-summary":
        sys.exit(same_summary(sys.argv[2], sys.argv[3]))
    elif command == "generate-q4":
        generate_q4(Path(sys.argv[2]))
    elif command == "torch-summary":
        torch_summary(*sys.argv[2:5])
    elif command == "generate-big":
        generate_big(Path(sys.argv[2]))
    elif command == "generate-dense":
        generate_dense(Path(sys.argv[2]))
    elif command == "versus-float64":
        sys.exit(versus_float64(sys.argv[2], sys.argv[3]))
    elif command == "compare":
        sys.exit(compare(*sys.argv[2:5]))
    else:
        print(__doc__)
        sys.exit(2)
