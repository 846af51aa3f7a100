"""Python MLX jobs that tests/record.rs records with `weightscope record`.

    python jobs.py make FOLDER SHARDS [ROWS COLS]
                                        write a checkpoint with MLX's own writer
                                        (two ROWS x COLS float32 tensors a shard)
    python jobs.py keep FOLDER          keep every evaluated array (accumulates)
    python jobs.py sampled-then-freed FOLDER
                                        keep every output; each file's sources
                                        sampled, then let go of before the next load
    python jobs.py release FOLDER       one shard at a time, cache cleared
    python jobs.py load FOLDER          every shard loaded and evaluated, a sample
                                        asked for, then let go of (recorded with a
                                        long --interval-ms, the same text each run)
    python jobs.py fail FOLDER          like release, exits 3 half way
    python jobs.py wait                 print "ready", then read stdin to its end
    python jobs.py numpy MIB            hold one MLX array of 16 MiB, then also
                                        MIB MiB in a numpy array (touched)
    python jobs.py dist                 a rank of `mlx.launch -n 2`: rank r holds
                                        (r + 1) x 16 MiB, then an all_sum
    python jobs.py address-space        cap its own address space (as `ulimit -v`
                                        does) 256 MiB above what it uses, then
                                        keep allocating 64 MiB until it fails
    python jobs.py numpy-oom            cap its own address space 256 MiB above what
                                        it uses, then ask numpy for 1 GiB: MemoryError
    python jobs.py phases               mark "embed", hold 32 MiB in embed(); mark
                                        "layers", hold 64 MiB more in layers()
    python jobs.py thread [JOURNAL]     a worker thread holds 64 MiB in work()
                                        while the main thread joins it (0.3 s,
                                        or until JOURNAL shows a probe sample
                                        holding it)
    python jobs.py hold JOURNAL         hold 64 MiB in hold(), print "ready" once
                                        JOURNAL (a `record --trace x.jsonl`)
                                        has a probe sample of it, then sleep

Each shard holds two 1024x2048 float32 tensors (16 MiB). The jobs print a
checksum of what they computed, so a test can compare runs with and without
the probe.
"""

import glob
import json
import os
import sys
import time

import mlx.core as mx


def make(folder, shards, rows=1024, cols=2048):
    os.makedirs(folder, exist_ok=True)
    weight_map = {}
    mx.random.seed(7)
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        arrays = {
            f"model.layers.{2 * s + i}.mlp.weight": mx.random.normal((rows, cols))
            for i in range(2)
        }
        mx.save_safetensors(os.path.join(folder, name), arrays)
        weight_map.update({k: name for k in arrays})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def shards(folder):
    return sorted(glob.glob(os.path.join(folder, "*.safetensors")))


def keep(folder):
    kept = []
    for path in shards(folder):
        for name, w in mx.load(path).items():
            y = w * 2
            mx.eval(y)
            kept.append(y)
    import weightscope_probe

    weightscope_probe.mark("everything kept")
    print("checksum", float(sum(mx.sum(y).item() for y in kept)))


def sampled_then_freed(folder):
    # Each file's sources are seen by a sample (the job asks for one), then
    # let go of just before the next file is loaded: the next file's arrays
    # grow from what MLX holds at its load, not from that sample's level.
    import weightscope_probe as probe

    kept = []
    for path in shards(folder):
        weights = mx.load(path)
        outputs = [w * 2 for w in weights.values()]
        mx.eval(outputs)
        kept.extend(outputs)
        probe._sample()
        del weights, outputs
    print("checksum", float(sum(mx.sum(y).item() for y in kept)))


def release(folder, fail_half_way=False):
    paths = shards(folder)
    total = 0.0
    for i, path in enumerate(paths):
        if fail_half_way and i == len(paths) // 2:
            import weightscope_probe

            weightscope_probe.mark("half way: giving up")
            sys.exit(3)
        weights = mx.load(path)
        outputs = {k: w * 2 for k, w in weights.items()}
        mx.eval(outputs)
        total += sum(mx.sum(y).item() for y in outputs.values())
        del weights, outputs
        mx.clear_cache()
    print("checksum", total)


def load(folder):
    import weightscope_probe as probe

    weights = {}
    for path in shards(folder):
        weights.update(mx.load(path))
    mx.eval(weights)
    # The peak's sample, taken on this line with everything held: the same
    # line, the same holder, every run.
    probe._sample()
    print("held", sum(w.nbytes for w in weights.values()), "bytes in", len(weights), "arrays")


def numpy_job(mib):
    import time

    import numpy as np

    # MLX's array first, held throughout: by the time numpy's is made, the
    # probe has reported it, so the recorder's figures at the peak agree.
    w = mx.ones((4 << 20,), dtype=mx.float32)
    mx.eval(w)
    time.sleep(0.2)
    held = np.ones(mib << 20, dtype=np.uint8) if mib else None
    time.sleep(0.3)
    print("held", 0 if held is None else held.nbytes, float(mx.sum(w).item()))


def dist():
    import time

    group = mx.distributed.init()
    held = mx.ones(((group.rank() + 1) * (4 << 20),), dtype=mx.float32)
    mx.eval(held)
    time.sleep(0.3)
    total = mx.distributed.all_sum(mx.sum(held))
    mx.eval(total)
    print("rank", group.rank(), float(total.item()), flush=True)


def address_space():
    import resource

    with open("/proc/self/status") as status:
        vm = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), hard))
    kept = []
    while True:
        kept.append(mx.ones((16 << 20,), dtype=mx.float32))
        mx.eval(kept[-1])


def too_big():
    import resource

    import numpy as np

    with open("/proc/self/status") as status:
        vm = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), hard))
    return np.ones(1 << 30, dtype=np.uint8)


# Each holder allocates and then waits on the same line (the job's own
# pace), so a sample taken during the wait names that holder too.


def embed():
    held = mx.ones((32 << 18,), dtype=mx.float32); mx.eval(held); time.sleep(0.3)
    return held


def layers():
    held = mx.ones((64 << 18,), dtype=mx.float32); mx.eval(held); time.sleep(0.3)
    return held


def phases():
    import weightscope_probe

    weightscope_probe.mark("embed")
    a = embed()
    weightscope_probe.mark("layers")
    b = layers()
    print("held", a.nbytes + b.nbytes)


def wait_for_probe_sample(journal, nbytes):
    """Returns once JOURNAL (a `record --trace x.jsonl`) holds a probe sample
    of at least NBYTES of MLX active memory."""
    while True:
        with open(journal) as f:
            rows = [json.loads(l) for l in f if l.endswith("\n")]
        if any(r["record"] == "probe" and (r["sample"][3] or 0) >= nbytes for r in rows):
            return
        time.sleep(0.01)


def work(out, journal=None):
    held = mx.ones((64 << 18,), dtype=mx.float32); mx.eval(held)
    # Held until the recorder's journal has a probe sample of it (the
    # wait runs in this function, so the sample's line is work()'s).
    if journal:
        wait_for_probe_sample(journal, held.nbytes)
    else:
        time.sleep(0.3)
    out.append(held)


def thread(journal=None):
    import threading

    out = []
    worker = threading.Thread(target=work, args=(out, journal))
    worker.start()
    worker.join()
    print("held", out[0].nbytes)


def hold(journal):
    import time

    held = mx.ones((16 << 20,), dtype=mx.float32)
    mx.eval(held)
    wait_for_probe_sample(journal, held.nbytes)
    print("ready", flush=True)
    time.sleep(60)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "make":
        make(sys.argv[2], int(sys.argv[3]), *(int(n) for n in sys.argv[4:6]))
    elif mode == "keep":
        keep(sys.argv[2])
    elif mode == "sampled-then-freed":
        sampled_then_freed(sys.argv[2])
    elif mode == "release":
        release(sys.argv[2])
    elif mode == "load":
        load(sys.argv[2])
    elif mode == "fail":
        release(sys.argv[2], fail_half_way=True)
    elif mode == "numpy":
        numpy_job(int(sys.argv[2]))
    elif mode == "dist":
        dist()
    elif mode == "address-space":
        address_space()
    elif mode == "numpy-oom":
        too_big()
    elif mode == "phases":
        phases()
    elif mode == "thread":
        thread(sys.argv[2] if len(sys.argv) > 2 else None)
    elif mode == "hold":
        hold(sys.argv[2])
    elif mode == "wait":
        print("ready", flush=True)
        sys.stdin.read()
    else:
        sys.exit(f"unknown mode {mode}")
