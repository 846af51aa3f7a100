"""Jobs that try to break the probe, for tests/reliability.rs.

    python hostile_jobs.py forkpool FOLDER ROUNDS  fork-mode pools whose workers call mx.load
    python hostile_jobs.py identity                what the job sees of the probe, as JSON
    python hostile_jobs.py junk                    bad bytes and an over-long line on the pipe
    python hostile_jobs.py forkshare N             64 MiB touched, N forked children sharing it;
                                                   "ready", then waits for stdin's end

No job imports anything but the standard library and MLX.
"""

import glob
import json
import multiprocessing
import os
import sys


def _load_one(path):
    import mlx.core as mx
    import weightscope_probe

    weightscope_probe.mark(f"worker {os.getpid()} loads")
    arrays = mx.load(path)
    return sum(int(a.size) for a in arrays.values())


def forkpool(folder, rounds):
    import mlx.core as mx

    paths = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    # The parent's MLX is in use (its probe samples it) while it forks.
    x = mx.ones((256, 256))
    mx.eval(x)
    context = multiprocessing.get_context("fork")
    total = 0
    for _ in range(rounds):
        with context.Pool(2) as pool:
            total += sum(pool.map(_load_one, paths[:2]))
    print("forkpool done", rounds, total, flush=True)


def identity():
    import mlx.core as mx
    import sitecustomize

    report = {
        "sitecustomize_mark": getattr(sitecustomize, "MARK", None),
        "load_name": mx.load.__name__,
        "load_wrapped": hasattr(mx.load, "__wrapped__"),
        "load_doc": bool(mx.load.__doc__),
        "probe_on_path": any("probe-" in p for p in sys.path),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }
    print(json.dumps(report), flush=True)


def junk():
    fd = int(os.environ["WEIGHTSCOPE_PROBE_FD"])
    os.write(fd, b"\xff\xfe not utf-8\n")
    # Two megabytes with no newline until the end.
    os.write(fd, b"x" * (2 << 20) + b"\n")
    import weightscope_probe

    weightscope_probe.mark("after the junk")
    # A mark of a million characters is shortened to fit one atomic write.
    weightscope_probe.mark("y" * 1_000_000)
    print("junk done", flush=True)


def forkshare(children):
    data = bytearray(64 << 20)
    for i in range(0, len(data), 4096):
        data[i] = 1
    r, w = os.pipe()
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)  # until the parent closes its end
            os._exit(0)
        pids.append(pid)
    os.close(r)
    print("ready", flush=True)
    sys.stdin.read()
    os.close(w)
    for pid in pids:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "forkpool":
        forkpool(sys.argv[2], int(sys.argv[3]))
    elif mode == "identity":
        identity()
    elif mode == "junk":
        junk()
    elif mode == "forkshare":
        forkshare(int(sys.argv[2]))
    else:
        sys.exit(f"unknown mode {mode}")
