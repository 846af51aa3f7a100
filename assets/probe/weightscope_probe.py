"""MLX counters from inside a Python job, for `weightscope record`.

Started by weightscope's sitecustomize when weightscope runs the job. Once the
job imports `mlx.core`, a daemon thread sends MLX's active, cache and peak
memory every interval, and calls to `mx.load` and `mx.clear_cache` are marked.
The job's own code can mark moments:

    import weightscope_probe
    weightscope_probe.mark("layer 12 folded")

`mark` does nothing when the job was not started by weightscope. The probe
never changes what the job computes: the wrapped functions call the originals
with the same arguments and return what they return.

Each report is one JSON object on one line, written to the pipe whose
descriptor is in WEIGHTSCOPE_PROBE_FD (docs/record.md specifies the lines).
"""

import json
import os
import sys
import threading
import time

_lock = threading.Lock()
_fd = None
_interval = 0.05
_mlx = None
_started = None


def _send(obj):
    """Writes one line; a closed pipe (weightscope gone) turns the probe off."""
    if _fd is None:
        return
    obj["pid"] = os.getpid()
    _write((json.dumps(obj, separators=(",", ":")) + "\n").encode())


def _write(line):
    global _fd
    with _lock:
        if _fd is None:
            return
        try:
            os.write(_fd, line)
        except OSError:
            _fd = None


def mark(text):
    """Marks a moment of the job in weightscope's trace (no-op otherwise)."""
    _send({"kind": "mark", "text": str(text)})


def _file_name(file):
    """An absolute path (the recorder runs elsewhere), or a repr for a
    file object."""
    try:
        return os.path.abspath(os.fsdecode(os.fspath(file)))
    except TypeError:
        return repr(file)


def _wrap(mx):
    """Marks mx.load and mx.clear_cache, calling the originals unchanged."""
    load = getattr(mx, "load", None)
    if load is not None:

        def traced_load(file, *args, **kwargs):
            _send({"kind": "load", "file": _file_name(file)})
            return load(file, *args, **kwargs)

        traced_load.__doc__ = getattr(load, "__doc__", None)
        traced_load.__wrapped__ = load
        mx.load = traced_load
    clear_cache = getattr(mx, "clear_cache", None)
    if clear_cache is not None:

        def traced_clear_cache(*args, **kwargs):
            before = mx.get_cache_memory()
            result = clear_cache(*args, **kwargs)
            _send({"kind": "clear-cache", "cache_before": before})
            return result

        traced_clear_cache.__doc__ = getattr(clear_cache, "__doc__", None)
        traced_clear_cache.__wrapped__ = clear_cache
        mx.clear_cache = traced_clear_cache


class _MlxImportHook:
    """Finds `mlx.core` through the other finders and wraps it once loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "mlx.core":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            global _mlx
            try:
                _wrap(module)
            finally:
                _mlx = module
                _send({"kind": "mlx", "version": getattr(module, "__version__", "")})

        spec.loader.exec_module = exec_module
        return spec


def _sample():
    mx = _mlx
    if mx is None or _fd is None:
        return
    try:
        # Formatted by hand: json.dumps would be most of the probe's cost.
        line = '{"kind":"sample","pid":%d,"active":%d,"cache":%d,"peak":%d}\n' % (
            os.getpid(),
            mx.get_active_memory(),
            mx.get_cache_memory(),
            mx.get_peak_memory(),
        )
    except Exception:
        return
    _write(line.encode())


def _bye():
    # A last sample: MLX's peak counter covers the moments since the last.
    _sample()
    # The probe's own cost: the CPU time of its sampling thread, measured
    # by that thread (time.thread_time), over the job's wall time.
    _send(
        {
            "kind": "bye",
            "probe_cpu_secs": _probe_cpu[0],
            "wall_secs": time.monotonic() - _started,
        }
    )


_probe_cpu = [0.0]


def _sampler():
    start = time.thread_time()
    while _fd is not None:
        _sample()
        _probe_cpu[0] = time.thread_time() - start
        time.sleep(_interval)


def _start_from_environment():
    """Starts when the descriptor in WEIGHTSCOPE_PROBE_FD is weightscope's
    pipe (a process started with its descriptors closed may hold another
    file under that number: then the probe stays off)."""
    global _fd, _interval, _started
    try:
        fd = int(os.environ["WEIGHTSCOPE_PROBE_FD"])
        st = os.fstat(fd)
    except (ValueError, OSError):
        return
    expected = os.environ.get("WEIGHTSCOPE_PROBE_INO")
    import stat

    if not stat.S_ISFIFO(st.st_mode) or (expected and str(st.st_ino) != expected):
        return
    _fd = fd
    _interval = max(0.005, int(os.environ.get("WEIGHTSCOPE_PROBE_INTERVAL_MS", "50")) / 1000)
    _started = time.monotonic()
    _send({"v": 1, "kind": "hello", "client": "python"})
    if "mlx.core" in sys.modules:
        mx = sys.modules["mlx.core"]
        _wrap(mx)
        globals()["_mlx"] = mx
    else:
        sys.meta_path.insert(0, _MlxImportHook())
    import atexit

    atexit.register(_bye)
    threading.Thread(target=_sampler, name="weightscope-probe", daemon=True).start()
