"""Jobs that try to break the probe, for tests/reliability.rs.

    python hostile_jobs.py forkpool FOLDER ROUNDS  fork-mode pools whose workers call mx.load
    python hostile_jobs.py identity                what the job sees of the probe, as JSON
    python hostile_jobs.py junk                    bad bytes and an over-long line on the pipe
    python hostile_jobs.py forkshare N             64 MiB touched, N forked children sharing it;
                                                   "ready", then waits for stdin's end
    python hostile_jobs.py closefds OUT            closes every inherited descriptor, opens OUT
                                                   600 times (one lands on any number the probe
                                                   held), writes its lines and marks
    python hostile_jobs.py samples N STACKS        N probe samples (MLX rising and falling) over STACKS
                                                   stacks of 40 frames, sent straight on the pipe
    python hostile_jobs.py fillfifo                the recorder's old end line, then the named pipe
                                                   filled until it would block
    python hostile_jobs.py marks SECS              a child left behind that marks as fast as it
                                                   can for SECS seconds after the job ends

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
    import threading

    import weightscope_probe

    # The probe's thread writes its samples on the same pipe, and a pipe
    # keeps a write whole only up to PIPE_BUF: a sample written while the
    # two megabytes go through would cut them in two (one more bad line,
    # or more, by where the two 50 ms clocks fall). It is stopped first.
    own = weightscope_probe._fd
    weightscope_probe._fd = None
    for thread in threading.enumerate():
        if thread.name == "weightscope-probe":
            thread.join()
    fd = int(os.environ["WEIGHTSCOPE_PROBE_FD"])
    os.write(fd, b"\xff\xfe not utf-8\n")
    # Two megabytes with no newline until the end.
    os.write(fd, b"x" * (2 << 20) + b"\n")
    weightscope_probe._fd = own

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


def closefds(out):
    import mlx.core as mx
    import weightscope_probe

    mx.eval(mx.ones((64, 64)))
    weightscope_probe.mark("before close")
    # As daemon-style code does: every descriptor past stderr closed.
    os.closerange(3, 4096)
    fds = [os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) for _ in range(600)]
    for i in range(20):
        os.write(fds[0], b"job line %d\n" % i)
        weightscope_probe.mark(f"after close {i}")
        mx.eval(mx.ones((64, 64)) * i)
    for fd in fds:
        os.close(fd)
    print("closefds done", flush=True)


def samples(n, stacks):
    fd = int(os.environ["WEIGHTSCOPE_PROBE_FD"])
    pid = os.getpid()
    out = [b'{"kind":"hello","client":"python","pid":%d}\n' % pid]
    for f in range(stacks + 40):
        out.append(
            b'{"kind":"frame","id":%d,"file":"/job/deep.py","line":%d,"function":"f%d","pid":%d}\n'
            % (f, f + 1, f, pid)
        )
    for s in range(stacks):
        frames = ",".join(str(s + k) for k in range(40)).encode()
        out.append(b'{"kind":"stack-def","id":%d,"frames":[%s],"pid":%d}\n' % (s, frames, pid))
    active = 0
    for i in range(n):
        # Two steps up, one down: a new high every other sample.
        active += (2 << 20) if i % 3 != 2 else -(1 << 20)
        out.append(
            b'{"kind":"sample","pid":%d,"active":%d,"cache":0,"peak":%d,"stack":%d}\n'
            % (pid, active, active, i % stacks)
        )
    data = b"".join(out)
    while data:
        written = os.write(fd, data[:65536])
        data = data[written:]
    print("samples sent", n, flush=True)


def fillfifo():
    path = os.environ["WEIGHTSCOPE_PROBE_PATH"]
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b'{"kind":"weightscope-end"}\n')
    line = b'{"kind":"mark","text":"filler","pid":%d}\n' % os.getpid()
    try:
        while True:
            os.write(fd, line)
    except BlockingIOError:
        pass
    print("fifo full", flush=True)


def marks(secs):
    import time

    import weightscope_probe

    if os.fork() == 0:
        end = time.monotonic() + secs
        n = 0
        while time.monotonic() < end:
            weightscope_probe.mark(f"flood {n}")
            n += 1
        os._exit(0)
    print("marks parent done", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "forkpool":
        forkpool(sys.argv[2], int(sys.argv[3]))
    elif mode == "identity":
        identity()
    elif mode == "junk":
        junk()
    elif mode == "closefds":
        closefds(sys.argv[2])
    elif mode == "samples":
        samples(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "fillfifo":
        fillfifo()
    elif mode == "marks":
        marks(float(sys.argv[2]))
    elif mode == "forkshare":
        forkshare(int(sys.argv[2]))
    else:
        sys.exit(f"unknown mode {mode}")
