"""MLX counters and source lines from inside a Python job, for `weightscope
record`.

Started by weightscope's sitecustomize when weightscope runs the job. A daemon
thread sends, every interval, the main thread's Python stack (the line that
asked MLX for its work: MLX lets go of the GIL while it evaluates, loads and
saves) and, once the job imports `mlx.core`, MLX's active, cache and peak
memory; calls to `mx.load` and `mx.clear_cache` are marked. Frames and stacks
are sent once each (`frame`, `stack-def`) and named by number after that.
The job's own code can mark moments:

    import weightscope_probe
    weightscope_probe.mark("layer 12 folded")

`mark` does nothing when the job was not started by weightscope. The probe
never changes what the job computes: the wrapped functions call the originals
with the same arguments and return what they return.

Each report is one JSON object on one line, written to the pipe whose
descriptor is in WEIGHTSCOPE_PROBE_FD (docs/record.md specifies the lines).
"""

import functools
import io
import os
import sys
import threading
import time

# The probe's own clocks and sleep, bound here at import, before the job's
# code runs: a job that freezes or mocks time (freezegun, a test's patch of
# time.monotonic or time.sleep) changes its own clocks, never the probe's,
# whose budgets and intervals stay true.
_monotonic = time.monotonic
_perf_counter = time.perf_counter
_thread_time = time.thread_time
_clock_gettime = time.clock_gettime
_thread_cpu_clock = getattr(time, "pthread_getcpuclockid", None)
_wall = time.time
_sleep = time.sleep
# Bound here too: the count by buffer prints MLX's graphs into one.
_StringIO = io.StringIO

_fd = None
# Whether stacks are sampled (WEIGHTSCOPE_PROBE_STACKS=0: not, for a
# measure of what they cost).
_stacks = os.environ.get("WEIGHTSCOPE_PROBE_STACKS", "1") != "0"
# Whether the held-by walks run (WEIGHTSCOPE_PROBE_HELD=0: not).
_held_on = os.environ.get("WEIGHTSCOPE_PROBE_HELD", "1") != "0"
_main_ident = threading.main_thread().ident
_interval = 0.05
_mlx = None
_started = None
# Held by the sampling thread while it reads MLX's counters (which take
# MLX's own locks), and by a forking thread across fork(), so a child is
# never born with MLX's allocator locked by a thread it does not have.
# Writes take no lock: each line is one write(2) of at most PIPE_BUF bytes,
# which a pipe never interleaves.
_reading = threading.Lock()
# A line's most bytes: under PIPE_BUF (4096 on Linux, 512 by POSIX's floor
# that Linux exceeds), so every write is atomic.
_MAX_LINE = 4000


try:
    # CPython's own JSON string quoting, in C: importing the `json` package
    # (and `re`, which it pulls in) would be a third of the probe's start.
    from _json import encode_basestring_ascii as _quoted
except ImportError:  # a Python built without its accelerator module
    from json.encoder import encode_basestring_ascii as _quoted

_INFINITY = float("inf")


def _json(value):
    """`value` (the probe's own dicts, lists and scalars) as compact JSON,
    as json.dumps(value, separators=(",", ":")) writes it. Types are read
    with issubclass(type(x), ...) and formatted by the built-in types' own
    methods, never the value's."""
    kind = type(value)
    if value is None:
        return "null"
    if issubclass(kind, bool):
        return "true" if value else "false"
    if issubclass(kind, str):
        return _quoted(value)
    if issubclass(kind, int):
        return int.__repr__(value)
    if issubclass(kind, float):
        if value != value:
            return "NaN"
        if value == _INFINITY or value == -_INFINITY:
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if issubclass(kind, dict):
        return "{" + ",".join(_quoted(str.__str__(k)) + ":" + _json(v) for k, v in dict.items(value)) + "}"
    if issubclass(kind, list):
        return "[" + ",".join(_json(v) for v in list.__iter__(value)) + "]"
    if issubclass(kind, tuple):
        return "[" + ",".join(_json(v) for v in tuple.__iter__(value)) + "]"
    raise TypeError("not sent as JSON: %s" % kind.__name__)


def _send(obj):
    """Writes one line; a closed pipe (weightscope gone) turns the probe off.
    Long strings (a mark's text, a file name) are shortened to fit a line."""
    if _fd is None:
        return
    obj["pid"] = os.getpid()
    line = _json(obj)
    for key in ("text", "file"):
        while len(line) > _MAX_LINE and len(obj.get(key) or "") > 0:
            obj[key] = obj[key][: len(obj[key]) // 2]
            obj["truncated"] = True
            line = _json(obj)
    if len(line) <= _MAX_LINE:
        _write((line + "\n").encode())


# What the descriptor in _fd must still be (device and inode of weightscope's
# pipe), and the named pipe to move to when it is not.
_identity = None
_fallback_path = None


def _own_copy(fd):
    """A private, close-on-exec copy of `fd` above the numbers jobs use,
    and the identity of what it is. Taken at start, numbered at the top of
    what the job may open (32,767 at most): the kernel then sizes the job's
    descriptor table once, now, while the job has one thread. Grown later,
    beside the probe's thread, the table waits for an RCU grace period at
    each doubling (a job opening 18,000 descriptors took 90-100 ms instead
    of 42). Else numbered from 512; else the lowest free number."""
    import fcntl

    copy = None
    for low in (_top_descriptor(), 512, 3):
        if low < 3:
            continue
        try:
            copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
            break
        except OSError:
            if low == 3:
                raise
    st = os.fstat(copy)
    return copy, (st.st_dev, st.st_ino)


def _top_descriptor():
    """The highest descriptor number the job may open, up to 32,767 (a
    table of 32,768 takes 256 KiB of the kernel's memory); 0 when unknown."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except Exception:
        return 0
    if soft == resource.RLIM_INFINITY or soft > 32768:
        soft = 32768
    return soft - 1


def _write(line):
    """Writes to weightscope's pipe, and only there: a job may close every
    descriptor and open its own files, one of which can take our number.
    Before each write the descriptor is checked to be the pipe it was (same
    device and inode); when it is not, the probe moves to the named pipe
    (checked the same way) or goes quiet. It never writes to a descriptor it
    cannot prove is its own."""
    global _fd
    fd = _fd
    if fd is None:
        return
    try:
        st = os.fstat(fd)
        ours = (st.st_dev, st.st_ino) == _identity
    except OSError:
        ours = False
    if not ours:
        fd = _moved()
        if fd is None:
            return
    try:
        os.write(fd, line)
    except OSError:
        _fd = None


def _moved():
    """Our descriptor is no longer our pipe: the named pipe instead (once),
    or nothing. The number that was ours is not closed: it is the job's
    file now. Nothing is closed here at all: this runs beside the job's
    threads, which may close any number at any moment and open their own
    file on it (daemon-style code closes every descriptor past stderr), so
    a number the probe closed could be the job's by the time it closed it.
    The named pipe's first descriptor is left open (close-on-exec), as is a
    copy that did not prove to be the pipe."""
    import fcntl

    global _fd, _identity, _fallback_path
    _fd = None
    path, _fallback_path = _fallback_path, None
    if not path:
        return None
    opened = _open_named_pipe(path, may_close=False)
    if opened is None:
        return None
    fd, identity = opened
    try:
        copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 512)
        st = os.fstat(copy)
    except OSError:
        return None
    # Between the open and the copy the job may have taken the number.
    if (st.st_dev, st.st_ino) != identity:
        return None
    _fd, _identity = copy, identity
    return copy


def _before_fork():
    _reading.acquire()


def _after_fork_in_parent():
    _reading.release()


def _after_fork_in_child():
    global _reading, _sampling, _main_ident
    _reading = threading.Lock()
    _sampling = threading.Lock()
    # The forking thread is the child's only thread; its ids are new.
    _main_ident = threading.get_ident()
    _frame_ids.clear()
    _stack_ids.clear()
    # The parent's sampling thread is not the child's.
    _sampler_clock[:] = [None, 0.0]


def mark(text):
    """Marks a moment of the job in weightscope's trace (no-op otherwise)."""
    _send({"kind": "mark", "text": str(text)})


def _file_name(file):
    """An absolute path (the recorder runs elsewhere) for a str, bytes or
    one of pathlib's own path types; for anything else only its type's name:
    the job's `__fspath__`, `__str__` or `__repr__` is never called."""
    kind = type(file)
    try:
        if kind is str or kind is bytes:
            return os.path.abspath(os.fsdecode(file))
        # pathlib's own types, read from its module's namespace through
        # the module type's slot (never a lookup that could run the job's
        # code: sys.modules or the module itself may be the job's objects).
        modules = sys.modules
        pathlib = dict.get(modules, "pathlib") if type(modules) is dict else None
        space = _module_dict(pathlib) if type(pathlib) is type(sys) else None
        if type(space) is dict:
            own = [dict.get(space, n) for n in ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")]
            pure = dict.get(space, "PurePath")
            # `is`, never `in`: a metaclass's __eq__ is the job's code.
            if any(kind is t for t in own) and type(pure) is type and issubclass(kind, pure):
                return os.path.abspath(pure.__fspath__(file))
    except (TypeError, ValueError):
        pass
    return "<%s object>" % _type_name(file)


def _wrap(mx):
    """Marks mx.load and mx.clear_cache, calling the originals unchanged."""
    _bind_array_slots(mx)
    load = getattr(mx, "load", None)
    if load is not None and not hasattr(load, "__wrapped__"):

        @functools.wraps(load)
        def traced_load(file, *args, **kwargs):
            _untraced(_at_load, file)
            return load(file, *args, **kwargs)

        mx.load = traced_load
    clear_cache = getattr(mx, "clear_cache", None)
    if clear_cache is not None and not hasattr(clear_cache, "__wrapped__"):

        @functools.wraps(clear_cache)
        def traced_clear_cache(*args, **kwargs):
            before = _cache_now()
            result = clear_cache(*args, **kwargs)
            _send({"kind": "clear-cache", "cache_before": before})
            return result

        mx.clear_cache = traced_clear_cache
    _wrap_distributed(mx)


# MLX's own array type and the methods the walk uses, bound when mlx.core
# is imported, before the job's code can replace them: a subclass's
# `nbytes` property, or a job's `mx.array = ...`, is never what the walk
# calls.
_mx_own = {}


def _at_load(file):
    """A sample as a load begins, then the load's mark: the level the
    file's arrays grow from is MLX's memory then. The last sample of the
    sampling thread can be from before the job let go of the previous
    file's arrays (read from it, the file looked released when memory came
    back to that level)."""
    cpu = _thread_time()
    _sample(at_load=True)
    _send({"kind": "load", "file": _file_name(file)})
    _in_job_cpu[0] += _thread_time() - cpu


def _untraced(function, *args):
    """Calls the probe's `function` in the job's thread with that thread's
    trace and profile functions suspended, put back after: the job's
    tracer, coverage or debugger never sees the probe's frames."""
    trace, profile = sys.gettrace(), sys.getprofile()
    if trace is not None:
        sys.settrace(None)
    if profile is not None:
        sys.setprofile(None)
    try:
        return function(*args)
    finally:
        if profile is not None:
            sys.setprofile(profile)
        if trace is not None:
            sys.settrace(trace)


def _active_now():
    """MLX's active bytes now, read with MLX's own counter; None when
    unknown."""
    counters = _mx_own.get("counters")
    if counters is None:
        return None
    try:
        with _reading:
            return counters[0]()
    except Exception:
        return None


def _cache_now():
    """MLX's cache bytes now, read with MLX's own counter; 0 when unknown."""
    counters = _mx_own.get("counters")
    try:
        return counters[1]() if counters is not None else 0
    except Exception:
        return 0


def _bind_array_slots(mx):
    # MLX's memory counters, as MLX defined them: a job's replacement of
    # `mx.get_active_memory` is not what the probe reads.
    counters = tuple(getattr(mx, n, None) for n in ("get_active_memory", "get_cache_memory", "get_peak_memory"))
    if None not in counters:
        _mx_own["counters"] = counters
    array = getattr(mx, "array", None)
    if not issubclass(type(array), type):
        return
    space = _type_dict(array)
    nbytes = space.get("nbytes")
    if nbytes is None or not hasattr(type(nbytes), "__get__"):
        return
    _mx_own["array"] = array
    _mx_own["nbytes"] = nbytes.__get__
    dlpack = space.get("__dlpack__")
    dot = getattr(mx, "export_to_dot", None)
    if dlpack is not None and dot is not None:
        _mx_own["dlpack"] = dlpack
        _mx_own["dot"] = dot
    metal = getattr(getattr(mx, "metal", None), "is_available", None)
    available = getattr(mx, "is_available", None)
    gpu = getattr(mx, "gpu", None)
    if metal is not None and available is not None and gpu is not None:
        _mx_own["host_pointers"] = lambda: metal() or not available(gpu)


# Collective calls (`mx.distributed.all_sum`, ...) made since the last
# evaluation: MLX's collectives are lazy, so a rank waits for the others in
# the `mx.eval` that computes them. That evaluation is marked: "wait" when
# it starts, "done" when it returns, numbered in order (every rank of a job
# makes the same sequence), with the wall clock for merging the hosts.
_COLLECTIVES = (
    "all_sum", "all_gather", "all_max", "all_min", "sum_scatter", "send", "recv", "recv_like",
)
# The names of the collectives called since the last evaluation: a set of at
# most len(_COLLECTIVES) names, however many calls no evaluation follows (a
# collective read by `.item()` is evaluated without mx.eval).
_pending_collectives = set()
_collective_step = [0]


def _rank():
    rank = os.environ.get("MLX_RANK", "")
    return int(rank) if rank.isdigit() else None


def _wrap_distributed(mx):
    """Marks mx.distributed's collectives and the evaluations that run them."""
    dist = getattr(mx, "distributed", None)
    if dist is None:
        return
    for op in _COLLECTIVES:
        original = getattr(dist, op, None)
        if original is None or hasattr(original, "__wrapped__"):
            continue

        def traced(*args, _original=original, _op=op, **kwargs):
            _pending_collectives.add(_op)
            # mx.eval is wrapped only in a job that calls a collective: in
            # every other job it stays MLX's own function.
            _wrap_eval(mx)
            return _original(*args, **kwargs)

        functools.update_wrapper(traced, original)
        setattr(dist, op, traced)


def _wrap_eval(mx):
    """Marks the evaluations that run collectives (once a collective was
    called), calling the original unchanged."""
    evaluate = getattr(mx, "eval", None)
    if evaluate is None or hasattr(evaluate, "__wrapped__"):
        return

    @functools.wraps(evaluate)
    def traced_eval(*args, **kwargs):
        if not _pending_collectives:
            return evaluate(*args, **kwargs)
        ops = sorted(_pending_collectives)
        _pending_collectives.clear()
        step = _collective_step[0]
        _collective_step[0] += 1
        line = {"kind": "collective", "ops": ops, "step": step, "rank": _rank()}
        _send(dict(line, phase="wait", wall=_wall()))
        result = evaluate(*args, **kwargs)
        _send(dict(line, phase="done", wall=_wall()))
        return result

    mx.eval = traced_eval


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


# Frames and stacks sent so far, by what identifies them: (code object,
# line) -> frame id; tuple of frame ids (innermost first) -> stack id.
_frame_ids = {}
_stack_ids = {}
# At most this many of each (as many as the recorder keeps): a job that
# makes code in a loop (exec, compile) must not have the probe keep every
# code object alive; past it, a new stack is sent as none.
_MAX_IDS = 100000
# The deepest stack sent: the innermost frames are the ones that say where.
_MAX_FRAMES = 50
_own_file = __file__


# Source lines of the job's files, read by the probe itself: linecache
# imports tokenize and re (a fifth of the probe's start, in a job that
# has not imported them) and keeps every file whole whatever its size.
# Here a file is read once, its first _SOURCE_MOST bytes, only when it is a
# regular file (a FIFO named as a source would block), and at most
# _SOURCES_KEPT files are kept, the least recently used let go first.
_SOURCE_MOST = 512 << 10
_SOURCES_KEPT = 32
_sources = {}


def _source_line(file, line):
    """Line `line` of source file `file`, stripped and cut to 160
    characters; "" when it cannot be read."""
    if not issubclass(type(file), str) or file.startswith("<") or not issubclass(type(line), int):
        return ""
    lines = _sources.pop(file, None)
    if lines is None:
        lines = _read_source(file)
        while len(_sources) >= _SOURCES_KEPT:
            _sources.pop(next(iter(_sources)), None)
    _sources[file] = lines
    if not 0 < line <= len(lines):
        return ""
    return lines[line - 1].decode("utf-8", "replace").strip()[:160]


def _close_own(fd, opened):
    """Closes `fd` if it is still the file the probe opened (device and
    inode): a job that closes every descriptor (daemon-style code) may have
    closed it meanwhile and opened its own file on the same number, which
    the probe must not close. Left open when unsure."""
    try:
        st = os.fstat(fd)
    except OSError:
        return
    if opened is not None and (st.st_dev, st.st_ino) == opened:
        try:
            os.close(fd)
        except OSError:
            pass


def _read_source(file):
    import stat

    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return []
    opened = None
    try:
        st = os.fstat(fd)
        opened = (st.st_dev, st.st_ino)
        if not stat.S_ISREG(st.st_mode):
            return []
        chunks, left = [], _SOURCE_MOST
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return []
    finally:
        _close_own(fd, opened)
    text = b"".join(chunks)
    lines = text.split(b"\n")
    if left <= 0:
        # Cut at the limit: the last line may be a part.
        lines.pop()
    return lines


def _frame_id(code, line):
    key = (code, line)
    known = _frame_ids.get(key)
    if known is not None:
        return known
    if len(_frame_ids) >= _MAX_IDS:
        return None
    ident = len(_frame_ids)
    _frame_ids[key] = ident
    text = ""
    try:
        text = _source_line(code.co_filename, line)
    except Exception:
        pass
    _send(
        {
            "kind": "frame",
            "id": ident,
            "file": code.co_filename,
            "line": line,
            "function": getattr(code, "co_qualname", code.co_name),
            "text": text,
        }
    )
    return ident


def _stack_of(pairs):
    """The id of the stack of (code, line) pairs, innermost first (sent
    first when new), or -1."""
    if not pairs:
        return -1
    ids = tuple(_frame_id(code, line) for code, line in pairs)
    if None in ids:
        return -1
    known = _stack_ids.get(ids)
    if known is not None:
        return known
    if len(_stack_ids) >= _MAX_IDS:
        return -1
    ident = len(_stack_ids)
    _stack_ids[ids] = ident
    _send({"kind": "stack-def", "id": ident, "frames": list(ids)})
    return ident


_threading_file = threading.__file__


def _past_own(frame):
    """The innermost frame of the job's own: past the probe's frames and
    the threading module's frames the probe called (its sampler thread's
    start waits in them), which are not the job's."""
    f = frame
    while f is not None and f.f_code.co_filename in (_own_file, _threading_file):
        if f.f_code.co_filename == _own_file:
            frame = f.f_back
        f = f.f_back
    return frame


def _walk_threads():
    """Every thread's stack as (code, line) pairs, innermost first, with
    whether it is the main thread (the sampling thread and the calling one
    left out). Nothing is sent here: a send lets the job run, and the
    stacks must be of the same moment as the memory counters read next.

    The frames are let go of before returning: a frame held while its
    function returns keeps that function's locals (the job's arrays)
    alive. The probe's own frames (its last sample at exit, a mark) are
    left out."""
    own = threading.get_ident()
    walked = []
    frames = sys._current_frames()
    for ident, frame in frames.items():
        if ident == _sampler_ident or (ident == own and ident != _main_ident):
            continue
        frame = _past_own(frame)
        pairs = []
        while frame is not None and len(pairs) < _MAX_FRAMES:
            pairs.append((frame.f_code, frame.f_lineno))
            frame = frame.f_back
        walked.append((ident == _main_ident, pairs))
    frames = frame = None
    return walked


def _define_stacks(walked):
    """The main thread's stack id (-1: none) and the other threads' as a
    JSON field or "", sending the frames and stacks that are new."""
    main, others = -1, []
    for is_main, pairs in walked:
        stack = _stack_of(pairs)
        if is_main:
            main = stack
        elif stack >= 0:
            others.append(str(stack))
    return main, (',"threads":[%s]' % ",".join(others)) if others else ""


# Held while a sample is read and sent, by the sampling thread, by the
# job's thread that begins a load and by the last sample at exit: a stack's
# definition is always sent before a sample that names it.
_sampling = threading.Lock()


def _sample(at_load=False):
    """One sample (see _sample_now), then a held-by walk when MLX's memory
    is at a new high. As a load begins the job's thread waits at most
    0.1 s for a sample in progress (a signal handler that loads while its
    thread samples would wait for itself), else goes on without its own,
    and never walks."""
    if _fd is None:
        return
    if not _sampling.acquire(timeout=0.1 if at_load else -1):
        return
    try:
        counters = _sample_now()
    finally:
        _sampling.release()
    if counters is not None and _held_on and not at_load:
        _maybe_walk_held(counters[0])


def _sample_now():
    """The threads' stacks and MLX's counters read together (no send, so
    no release of the GIL, between them: the job cannot move on to its
    next line after its stack is read and allocate before the counters
    are), then the new frames and stacks sent, then the sample. Returns
    the counters, or None."""
    walked = []
    if _stacks:
        try:
            walked = _walk_threads()
        except Exception:
            walked = []
    own = _mx_own.get("counters") if _mlx is not None else None
    counters = None
    if own is not None:
        try:
            with _reading:
                counters = (own[0](), own[1](), own[2]())
        except Exception:
            return None
    stack, threads = -1, ""
    try:
        stack, threads = _define_stacks(walked)
    except Exception:
        pass
    if counters is None:
        if stack >= 0 or threads:
            _write(
                ('{"kind":"stack","pid":%d,"stack":%d%s}\n' % (os.getpid(), stack, threads)).encode()
            )
        return None
    # Formatted by hand: json.dumps would be most of the probe's cost.
    line = '{"kind":"sample","pid":%d,"active":%d,"cache":%d,"peak":%d,"stack":%d%s}\n' % (
        (os.getpid(),) + counters + (stack, threads)
    )
    _write(line.encode())
    return counters


# Who holds MLX memory: at a new high of MLX active memory (at most one walk
# a second, at most _HELD_BUDGET seconds each), the probe walks down from the
# roots the job's code wrote (every thread's function locals, modules'
# globals, sys.last_traceback) to the live mx.array objects, and sends each
# root with the bytes of the arrays it reaches first. Nothing of the job's is
# kept after a walk: the walk's lists are let go of before it returns.
_HELD_BUDGET = 0.05
# And at most this many objects, whatever the clocks say (the ids it keeps
# meanwhile are its memory).
_HELD_OBJECTS = 500000
_HELD_EVERY = 1.0
# And the walks together take at most this share of the job's time: after a
# walk that took t seconds the next waits at least t / _HELD_SHARE (a job
# with a million-object dict, whose walks use their whole budget, is walked
# every 5 s, not every second).
_HELD_SHARE = 0.01
_HELD_ROOTS_SENT = 12
_BIG = 10000
# The big containers and the libraries' globals are walked only when at
# least this much of MLX's memory is not accounted for by the rest: a job
# that holds a few MiB is not worth a walk through a million-item list.
# Nor is a job whose MLX memory stays under it walked at all (unless
# weightscope asks, near a memory limit).
_LOOK_FURTHER_LEAST = 16 << 20
_held_state = {
    "last": -1e9, "high": 0, "pending": False, "settled": True, "asked": None, "cost": 0.0, "samples": 0,
}
# The file weightscope replaces to ask for a walk now (the job is near its
# memory limit); in weightscope's private folder.
_walk_request = os.environ.get("WEIGHTSCOPE_PROBE_WALK")
_CO_OPTIMIZED = 0x1
_ATOMS = (int, float, complex, str, bytes, bytearray, bool, type(None), range)
# The most characters of a dict key shown in a path: a prompt cache keyed by
# a 4 MB prompt must not make a 4 MB path for each array under it.
_KEY_SHOWN = 60
_C_CONTAINERS = (__import__("collections").deque, functools.partial)

# The walk reads the job's objects only through the exact built-in types'
# own slots, never through a method, property, __getattr__, __iter__,
# __len__, __repr__ or __str__ of the job's (a subclass's override of any of
# them would run the job's code inside the walk: a lock taken, a slow or
# raising call). These are those slots, bound here once.
_type_dict = type.__dict__["__dict__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_getset = type(type.__dict__["__dict__"])


class _Slotted:
    __slots__ = ("slot",)


_member = type(_Slotted.__dict__["slot"])
_exc_traceback = BaseException.__dict__["__traceback__"].__get__
_exc_context = BaseException.__dict__["__context__"].__get__
_exc_cause = BaseException.__dict__["__cause__"].__get__
_module_dict = type(sys).__dict__["__dict__"].__get__
_exc_args = BaseException.__dict__["args"].__get__
_type_flags = type.__dict__["__flags__"].__get__
# Py_TPFLAGS_HEAPTYPE: a class made by a class statement (the job's or a
# library's), not one of the interpreter's built-in types.
_HEAP_TYPE = 1 << 9


_type_name_of = type.__dict__["__name__"].__get__


def _type_name(obj):
    """The name of `obj`'s type, through type's own slot (never a
    metaclass's property)."""
    return _exact_str(_type_name_of(type(obj)), 60)


def _path_text(node):
    """A path as text, made only for what is reported. Paths are kept as
    (parent, kind, step) nodes while the walk runs (kind 0: a dict key,
    shown here by _shown_key; 1: text), so a wide or deep container costs a
    small tuple an item, never a string of its whole path."""
    parts = []
    depth = 0
    while type(node) is tuple and depth < 64:
        parent, kind, step = node
        parts.append("[%s]" % _shown_key(step) if kind == 0 else step)
        node = parent
        depth += 1
    parts.append("..." if type(node) is tuple else node)
    return "".join(reversed(parts))[:300]


def _exact_str(text, most=200):
    """A str (or subclass) as an exact str of at most `most` characters,
    read through str's own slots."""
    return str.__str__(str.__getitem__(text, slice(0, most)))


def _shown_key(key):
    """A dict key as a path shows it: a str or int by the built-in repr of
    the exact type, cut to _KEY_SHOWN characters; anything else `...`."""
    kind = type(key)
    if issubclass(kind, str):
        shown = str.__repr__(_exact_str(key, _KEY_SHOWN))
        if str.__len__(key) > _KEY_SHOWN:
            shown = shown[:-1] + "..." + shown[-1]
        return shown
    if issubclass(kind, int) and not issubclass(kind, bool):
        return int.__repr__(key) if int.bit_length(key) <= 128 else "<int>"
    return "..."


def _own_attribute(obj, name, descriptor_type):
    """Whether `name` of `obj`'s type is the built-in descriptor of that
    name (found first along the type's MRO), not a property of the job's."""
    for klass in _type_mro(type(obj)):
        entry = _type_dict(klass).get(name)
        if entry is not None:
            return type(entry) is descriptor_type
    return False


def _instance_dict(obj):
    """`obj.__dict__` when it is the instance's own namespace (the built-in
    descriptor), else None: never a `__dict__` property of the job's."""
    if not _own_attribute(obj, "__dict__", _getset):
        return None
    try:
        space = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None
    return space if type(space) is dict else None


def _slots(obj):
    """(name, value) of `obj`'s slots, read through their member
    descriptors only."""
    out = []
    for klass in _type_mro(type(obj)):
        names = _type_dict(klass).get("__slots__")
        if names is None:
            continue
        if issubclass(type(names), str):
            names = (names,)
        if type(names) not in (tuple, list):
            continue
        for slot in names:
            if type(slot) is not str or not _own_attribute(obj, slot, _member):
                continue
            try:
                out.append((slot, object.__getattribute__(obj, slot)))
            except (AttributeError, TypeError):
                pass
    return out


def _is_library(file):
    f = (file or "").replace("\\", "/")
    return (
        f.startswith("<")
        or "/site-packages/" in f
        or "/dist-packages/" in f
        or "/lib/python3" in f
        or "/mlx/" in f
        or "/mlx_lm/" in f
        or f.endswith("weightscope_probe.py")
        or f.endswith("sitecustomize.py")
    )


def _maybe_walk_held(active):
    """Walks at a new high of MLX active memory, at most once a second (a
    high reached meanwhile is walked when the second is over), and once more
    when memory has stayed at that high for a second: the walk at the
    moment of the high often finds the arrays still in the locals of the
    function that made them; the one a second later finds where they are
    kept."""
    state = _held_state
    now = _monotonic()
    queued = _pending.get("queued")
    if queued is not None and now - queued >= _HELD_WAIT:
        # The main thread has run no Python since the walk was asked of it:
        # the sampling thread walks (unless the pending call just took the
        # walk), and the pending call, when it runs, finds nothing to do.
        if _pending.pop("queued", None) is not None:
            _walk_and_send(False)
        return
    if active > state["high"] + (1 << 20) and active >= _LOOK_FURTHER_LEAST:
        # Under 16 MiB of MLX memory, nothing is worth a walk (nor the
        # ctypes import its pending call takes).
        state["pending"] = True
    asked = None
    # Under 16 MiB of MLX memory weightscope's ask is read one sample in
    # eight: a stat is a system call, and one each sample was a tenth of
    # the probe's cost (near a cgroup's limit a job holds more, and every
    # sample reads it).
    state["samples"] += 1
    if _walk_request and (active >= _LOOK_FURTHER_LEAST or state["samples"] % 8 == 0):
        try:
            st = os.stat(_walk_request)
            asked = (st.st_ino, st.st_mtime_ns)
        except OSError:
            asked = None
    if asked is not None and asked != state["asked"] and now - state["last"] >= 0.2:
        # weightscope asks: the job is near its memory limit.
        state["asked"] = asked
        state["pending"] = True
        state["last"] = -1e9
    if now - state["last"] < max(_HELD_EVERY, state["cost"] / _HELD_SHARE):
        return
    if state["pending"]:
        state["pending"] = False
        state["settled"] = False
        state["high"] = max(state["high"], active)
    elif not state["settled"] and active * 20 >= state["high"] * 19 and state["high"] > 0:
        state["settled"] = True
    else:
        return
    state["last"] = now
    if threading.get_ident() == _main_ident:
        # The main thread itself (its last sample, at exit): the job does
        # not move while it walks.
        _walk_and_send(True)
    elif not _queue_main_walk():
        _walk_and_send(False)


# A walk holds references to what it walks until it returns. Were the job to
# run meanwhile, what it lets go of (last shard's arrays) would stay alive
# while it makes the next: the walk would raise the very peak it explains.
# So a walk runs in the job's main thread, between two of its bytecodes (a
# pending call, as Python runs signal handlers), where the job does not move
# until the walk returns. Only when the main thread runs no Python for
# _HELD_WAIT seconds (it waits in C: a join, a long evaluation, a
# collective) does the sampling thread walk instead, and it gives up as soon
# as any thread of the job moved (the walk is not one moment then, and its
# references must go at once).
_HELD_WAIT = 0.5
_pending = {"queued": None}
_walk_cpu = [0.0]


# What the probe calls of ctypes and struct, bound when the probe starts
# (held-by on), before any code of the job's has run: a change the job
# makes to those modules is never what the probe calls.
_c = {}


def _c_functions():
    c = _c
    if not c:
        import ctypes
        import struct

        kind = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        # Prototypes of the probe's own: ctypes.pythonapi's function
        # objects are shared with the job (their argtypes are its).
        api = ctypes.PYFUNCTYPE
        c.update(
            callback=kind(_walk_in_main),
            pending=api(ctypes.c_int, kind, ctypes.c_void_p)(("Py_AddPendingCall", ctypes.pythonapi)),
            capsule_pointer=api(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
                ("PyCapsule_GetPointer", ctypes.pythonapi)
            ),
            string_at=ctypes.string_at,
            Struct=struct.Struct,
            unpack=struct.unpack,
        )
    return c


def _queue_main_walk():
    """Asks the main thread to walk at its next bytecode; whether asked (or
    already asked). False where Python offers no pending calls."""
    if _pending.get("queued") is not None:
        return True
    try:
        c = _c_functions()
        _pending["queued"] = _monotonic()
        if c["pending"](c["callback"], None) != 0:
            _pending["queued"] = None
            return False
    except Exception:
        _pending["queued"] = None
        return False
    return True


def _walk_in_main(_arg):
    """The pending call: runs in the main thread, the job paused, with the
    job's trace and profile functions suspended (`_untraced`)."""
    try:
        # A tracer or profiler writes a frame's f_locals dict back into the
        # frame after its callback (Python 3.11, 3.12): that dict is then
        # never emptied by the walk.
        _traced[0] = sys.gettrace() is not None or sys.getprofile() is not None
        _untraced(_walk_if_queued)
    except BaseException:
        pass
    return 0


def _walk_if_queued():
    # Taken in one step (atomic under the GIL): the sampling thread may have
    # taken the walk meanwhile.
    if _pending.pop("queued", None) is not None:
        _walk_and_send(True)


# Whether the job's main thread had a trace or profile function when it was
# last seen (by the pending call), or any thread may get one (threading's
# hooks): f_locals dicts are then left as they are.
_traced = [False]


def _may_empty_locals():
    try:
        hooks = threading.gettrace() is not None or threading.getprofile() is not None
    except AttributeError:
        hooks = False
    return not (_traced[0] or hooks or sys.gettrace() is not None or sys.getprofile() is not None)


def _walk_and_send(in_main):
    mx = _mlx
    if mx is None or _fd is None:
        return
    cpu = _thread_time()
    began = _monotonic()
    line = None
    try:
        active = _active_now()
        if active is not None:
            line = _held_walk(active, in_main)
    except _Moved:
        # The job moved under the walk: again soon, from where it is then.
        _held_state["pending"] = True
        _held_state["last"] = _monotonic() - _HELD_EVERY + 0.1
    except Exception:
        pass
    _walk_cpu[0] += _thread_time() - cpu
    _held_state["cost"] = _monotonic() - began
    if line is not None:
        _write(line)


def _frame_locals(frame):
    """A function frame's locals as (name, value) pairs. Python 3.11 and
    3.12 make a dict of them (`frame.f_locals`) and keep it in the frame,
    where it would keep values alive after the job rebinds them: it is
    emptied at once, unless the job's code holds that dict itself (a
    function that keeps its own `locals()`), or a tracer or profiler may
    write it back into the frame after its callback (emptied, the frame's
    locals would be unbound). Python 3.13's `FrameLocalsProxy` reads the
    frame itself and keeps nothing: read, never emptied."""
    local = frame.f_locals
    if type(local) is dict:
        items = list(dict.items(local))
        # Three references when only the frame holds it: the frame's,
        # `local` and getrefcount's argument.
        if (
            frame.f_code.co_flags & _CO_OPTIMIZED
            and sys.getrefcount(local) <= 3
            and _may_empty_locals()
        ):
            dict.clear(local)
    elif type(local).__name__ == "FrameLocalsProxy":
        items = list(local.items())
    else:
        items = []
    local = None
    return items


def _holders_first(items, array_type):
    """A frame's (name, value) locals ordered for the walk's stack (the
    last pushed is walked first): the locals that name an array directly
    (the value a generator last yielded, a loop variable) are walked after
    the containers, so the bytes are said to be held by the list or dict
    that keeps them, not by the local that names one of them for a moment."""
    bare = [kv for kv in items if issubclass(type(kv[1]), array_type)]
    if not bare:
        return items
    return bare + [kv for kv in items if not issubclass(type(kv[1]), array_type)]


def _frame_roots():
    """(name, kind, function, file, line, object) for every local of every
    thread's function frames, the main thread first, innermost first."""
    frames = sys._current_frames()
    order = sorted(frames.items(), key=lambda kv: kv[0] != _main_ident)
    roots = []
    for ident, frame in order:
        # The probe's own frames (the walk's, in whichever thread) are
        # left out below by their file.
        if ident == _sampler_ident:
            continue
        while frame is not None:
            code = frame.f_code
            if code.co_flags & _CO_OPTIMIZED and code.co_filename != _own_file:
                where = (getattr(code, "co_qualname", code.co_name), code.co_filename, frame.f_lineno)
                items = _frame_locals(frame)
                for name, value in items:
                    if not issubclass(type(value), _ATOMS):
                        roots.append((name, "local") + where + (value,))
                items = None
            frame = frame.f_back
    # The frames must go before returning: this function's own frame is
    # among them, and holding it from its own locals is a cycle that would
    # keep the job's arrays (in `roots`) alive until the garbage collector
    # next runs.
    frames = order = frame = None
    return roots


def _module_roots(libraries):
    """Module globals: the job's own modules', or (`libraries`) the
    installed libraries' (a job importing transformers has thousands)."""
    roots = []
    modules = sys.modules
    if not issubclass(type(modules), dict):
        return roots
    for name, module in list(dict.items(modules)):
        # A module's namespace through the module type's own slot: an
        # object put in sys.modules that is not a module is passed over.
        if not issubclass(type(module), type(sys)) or type(name) is not str:
            continue
        space = _module_dict(module)
        if type(space) is not dict or name == __name__:
            continue
        file = dict.get(space, "__file__")
        file = _exact_str(file, 4096) if issubclass(type(file), str) else ""
        mine = name == "__main__" or bool(file and not _is_library(file))
        if mine == libraries:
            continue
        for key, value in list(dict.items(space)):
            if not issubclass(type(key), str):
                continue
            key = _exact_str(key)
            if key.startswith("__") or issubclass(type(value), _ATOMS) or issubclass(type(value), type(sys)):
                continue
            label = key if mine else name + "." + key
            roots.append((label, "global", "<module>", file, 0, value))
    return roots


def _held_walk(active, in_main):
    """One walk; the line to send (bytes), or None. `in_main`: the walk runs
    in the main thread (the job paused at a bytecode); otherwise in the
    sampling thread, given up (None) as soon as a thread of the job moves."""
    array_type = _mx_own.get("array")
    if _mlx is None or array_type is None:
        return None
    started = _perf_counter()
    interval = sys.getswitchinterval()
    # The walk keeps the GIL as long as Python lets it (at most
    # _HELD_BUDGET): the job's other threads do not move under it.
    sys.setswitchinterval(max(interval, 1.0))
    try:
        return _walk(active, array_type, started, None if in_main else _moment())
    finally:
        sys.setswitchinterval(interval)


def _moment():
    """Where each thread of the job is (frame and instruction), to tell
    whether one moved."""
    own = threading.get_ident()
    frames = sys._current_frames()
    where = tuple(
        sorted((ident, id(frame), frame.f_lasti) for ident, frame in frames.items() if ident != own)
    )
    frames = None
    return where


class _Moved(Exception):
    """A thread of the job moved during a walk from the sampling thread."""


def _walk(active, array_type, started, moment):
    # Types are tested with issubclass(type(x), ...), never isinstance, which
    # reads x.__class__: a proxy's __getattr__ would run the job's code.
    roots = _frame_roots()
    last_tb = getattr(sys, "last_traceback", None)
    if last_tb is not None:
        roots.append(("sys.last_traceback", "traceback", "", "", 0, last_tb))
    roots += _module_roots(False)
    last_tb = None
    # id -> the root that reached it first (ids only: nothing kept alive).
    seen = {}
    # (root, kind) -> other roots whose arrays it also reaches.
    also = {}
    groups = {}
    order = []
    visited = 0
    partial = False
    # Arrays of _BUFFER_LEAST bytes or more, with their group, for telling
    # views and arrays not yet evaluated apart (below).
    big = []
    nbytes_of = _mx_own["nbytes"]
    import types

    import gc

    function_type = types.FunctionType
    generator_types = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
    skipped_types = (types.ModuleType, type, types.BuiltinFunctionType, types.CodeType)
    # Containers of over _BIG items are walked after every root's smaller
    # parts: a list of a million small objects must not spend the whole
    # budget before the arrays kept beside it are found.
    work = [(root, [(root[5], root[0], None, None)]) for root in roots]
    deferred = []
    # Phases: the job's roots, their big containers; then, only when they
    # do not account for MLX's memory, the libraries' globals and theirs.
    shallow = False
    for phase in (0, 1, 2, 3):
        if phase in (1, 2):
            counted = sum(g[5] for g in order)
            if counted * 10 >= active * 9 or (phase == 2 and partial):
                # MLX's memory is accounted for without them: the big
                # containers (a million-entry dict beside the weights)
                # are not walked at all, and the walk stays a millisecond.
                break
            if active - counted < _LOOK_FURTHER_LEAST:
                # Too little is unaccounted for to be worth a walk through
                # a million-item list or every library's globals.
                shallow = True
                break
        if phase == 2:
            work = [(root, [(root[5], root[0], None, None)]) for root in _module_roots(True)]
        elif phase in (1, 3):
            work, deferred = deferred, []
        for (name, kind, function, file, line, value), stack in work:
            if partial:
                break
            while stack:
                obj, path, group, group_kind = stack.pop()
                visited += 1
                if visited % 512 == 0:
                    if _perf_counter() - started > _HELD_BUDGET or visited > _HELD_OBJECTS:
                        partial = True
                        break
                    if moment is not None and _moment() != moment:
                        raise _Moved()
                key = id(obj)
                label = group or name
                first = seen.get(key)
                if first is not None:
                    if first != label and not issubclass(type(obj), _ATOMS):
                        others = also.setdefault((label, group_kind or kind, function, file, line, _type_name(value)), [])
                        if first not in others and len(others) < 3:
                            others.append(first)
                    continue
                seen[key] = label
                if issubclass(type(obj), array_type):
                    g = groups.get((label, group_kind or kind))
                    if g is None:
                        g = [label, group_kind or kind, function, file, line, 0, 0, path, _type_name(value)]
                        groups[(label, group_kind or kind)] = g
                        order.append(g)
                    n = nbytes_of(obj)
                    g[5] += n
                    g[6] += 1
                    if n >= _BUFFER_LEAST:
                        big.append((obj, g, n))
                    continue
                push = stack.append
                if issubclass(type(obj), skipped_types):
                    continue
                base = None
                for candidate in (dict, list, tuple, set, frozenset):
                    if issubclass(type(obj), candidate):
                        base = candidate
                        break
                if base is not None:
                    # Through the built-in type's own slots (a subclass's
                    # __len__, __iter__ or items() are never called).
                    if phase in (0, 2) and base.__len__(obj) > _BIG:
                        del seen[key]
                        deferred.append(((name, kind, function, file, line, value), [(obj, path, group, group_kind)]))
                        continue
                    # Big containers: the clock is read every 4,096 items too.
                    if base is dict:
                        items = dict.items(obj)
                    elif base is list or base is tuple:
                        items = enumerate(base.__iter__(obj))
                    else:
                        items = ((None, v) for v in base.__iter__(obj))
                    n = 0
                    try:
                        for k, v in items:
                            n += 1
                            if n & 4095 == 0 and (
                                _perf_counter() - started > _HELD_BUDGET
                                or visited + n > _HELD_OBJECTS
                            ):
                                partial = True
                                break
                            if issubclass(type(v), _ATOMS):
                                continue
                            if k is None:
                                step = (path, 1, "{...}")
                            else:
                                step = (path, 0, k)
                            push((v, step, group, group_kind))
                    except RuntimeError:
                        pass  # changed size under us (another thread): what was read
                    items = None
                    if partial:
                        break
                elif issubclass(type(obj), function_type):
                    if _is_library(obj.__code__.co_filename):
                        continue
                    qual = obj.__qualname__
                    qual = _exact_str(qual) if issubclass(type(qual), str) else "?"
                    names = obj.__code__.co_freevars
                    for cell_name, cell in zip(names, obj.__closure__ or ()):
                        try:
                            v = cell.cell_contents
                        except ValueError:
                            continue
                        if not issubclass(type(v), _ATOMS):
                            g = group or "%s (closure over %s)" % (qual, cell_name)
                            push((v, (path, 1, ".<closure %s>" % cell_name), g, group_kind or "closure"))
                    defaults = obj.__defaults__ or ()
                    args = obj.__code__.co_varnames[: obj.__code__.co_argcount]
                    for arg, v in zip(args[len(args) - len(defaults):], defaults):
                        if not issubclass(type(v), _ATOMS):
                            g = group or "%s (default %s)" % (qual, arg)
                            push((v, (path, 1, ".<default %s>" % arg), g, group_kind or "default"))
                    for arg, v in dict.items(obj.__kwdefaults__ or {}):
                        if not issubclass(type(v), _ATOMS):
                            g = group or "%s (default %s)" % (qual, arg)
                            push((v, (path, 1, ".<default %s>" % arg), g, group_kind or "default"))
                elif issubclass(type(obj), generator_types):
                    frame = getattr(obj, "gi_frame", None) or getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
                    if frame is not None:
                        items = _holders_first(_frame_locals(frame), array_type)
                        for k, v in items:
                            if not issubclass(type(v), _ATOMS):
                                push((v, (path, 1, ".<suspended %s>" % k), group or name, group_kind or "generator"))
                        items = None
                    frame = None
                elif issubclass(type(obj), BaseException):
                    tb = _exc_traceback(obj)
                    if tb is not None:
                        push((tb, (path, 1, ".__traceback__"), group or name, group_kind or "traceback"))
                    for extra in (_exc_context(obj), _exc_cause(obj)):
                        if extra is not None:
                            push((extra, (path, 1, ".__context__"), group, group_kind))
                    tb = None
                elif issubclass(type(obj), types.TracebackType):
                    entry = obj
                    depth = 0
                    while entry is not None and depth < 100:
                        frame = entry.tb_frame
                        if frame.f_code.co_flags & _CO_OPTIMIZED and frame.f_code.co_filename != _own_file:
                            items = _frame_locals(frame)
                            for k, v in items:
                                if not issubclass(type(v), _ATOMS):
                                    push((v, (path, 1, "<frame %s>.%s" % (frame.f_code.co_name, k)), group or name, group_kind or "traceback"))
                            items = None
                        frame = None
                        entry = entry.tb_next
                        depth += 1
                    entry = None
                else:
                    # The instance's own namespace, read without calling its
                    # code (no __getattr__, no properties).
                    space = _instance_dict(obj)
                    if space is not None:
                        for k, v in list(dict.items(space)):
                            if not issubclass(type(v), _ATOMS) and issubclass(type(k), str):
                                k = _exact_str(k, _KEY_SHOWN)
                                g = group or "%s.%s" % (name, k)
                                push((v, (path, 1, "." + k), g, group_kind or "attribute"))
                    space = None
                    if type(obj) is types.MethodType:
                        push((obj.__self__, (path, 1, ".__self__"), group, group_kind))
                        push((obj.__func__, (path, 1, ".__func__"), group, group_kind))
                    elif issubclass(type(obj), _C_CONTAINERS):
                        # Containers Python code cannot look into without
                        # their methods: what they hold, as the collector
                        # sees it (their C traversal, no code of the job's).
                        for v in gc.get_referents(obj):
                            if not issubclass(type(v), _ATOMS) and not issubclass(type(v), type):
                                push((v, (path, 1, "{...}"), group, group_kind))
                    for slot, v in _slots(obj):
                        if v is not None and not issubclass(type(v), _ATOMS):
                            g = group or "%s.%s" % (name, slot)
                            push((v, (path, 1, "." + slot), g, group_kind or "attribute"))
            stack = None
            obj = value = None
    work = deferred = roots = None
    seen = None
    if moment is not None and _moment() != moment:
        raise _Moved()
    # Counted by array, the roots add up to more than MLX holds: views of
    # one buffer were counted each, or arrays not evaluated yet (which hold
    # no buffer) by their nbytes. Counted again by buffer, where reading
    # MLX's graph is safe (see _count_buffers).
    buffers = None
    if big and sum(g[5] for g in order) > active:
        if moment is not None:
            buffers = {"by": "array", "why": "beside"}
        elif not _alone():
            buffers = {"by": "array", "why": "threads"}
        else:
            try:
                buffers = _count_buffers(big, also, started)
            except Exception:
                buffers = {"by": "array", "why": "failed"}
    big = None
    millis = (_perf_counter() - started) * 1000
    # Roots that reach only what an earlier root holds: listed with 0 bytes,
    # saying whose they are.
    holding = {g[0] for g in order if g[5] > 0}
    for (label, kind_, function_, file_, line_, type_), others in also.items():
        others = [o for o in others if o in holding and o != label]
        if not others:
            continue
        g = groups.get((label, kind_))
        if g is None:
            g = [label, kind_, function_, file_, line_, 0, 0, "", type_]
            groups[(label, kind_)] = g
            order.append(g)
        g.append(others)
    also = None
    # A root whose arrays turned out to hold nothing (not evaluated) and
    # that reaches no one else's is not a holder.
    order = [g for g in order if g[5] > 0 or len(g) > 9 or buffers is None]
    order.sort(key=lambda g: -g[5])
    reached = sum(g[5] for g in order)
    out = []
    for g in order[:_HELD_ROOTS_SENT]:
        out.append(
            {
                "also": g[9] if len(g) > 9 else [],
                "root": g[0][:200],
                "kind": g[1],
                "function": g[2][:120],
                "file": g[3][-300:],
                "line": g[4],
                "bytes": g[5],
                "arrays": g[6],
                "path": _path_text(g[7]) if g[7] else "",
                "type": g[8][:60],
            }
        )
    order = groups = None
    report = {
        "kind": "held",
        "pid": os.getpid(),
        "active": active,
        "reached": reached,
        "roots_total": len(out),
        "partial": partial,
        "objects": visited,
        "millis": round(millis, 3),
        "roots": out,
    }
    if buffers is not None:
        report["buffers"] = buffers
    if shallow:
        report["shallow"] = True
    line = _json(report)
    while len(line) > _MAX_LINE and report["roots"]:
        report["roots"].pop()
        line = _json(report)
    return (line + "\n").encode() if len(line) <= _MAX_LINE else None


# Arrays smaller than this are counted by nbytes without asking whether
# they are views: telling costs a few microseconds an array, and a view of
# a small array misstates little.
_BUFFER_LEAST = 64 << 10
# The most arrays put in order of size for the count (largest first);
# past it they are counted in the order walked.
_BUFFER_SORTED = 16384
# The most text of one array's printed graph before the count by buffer
# stops (about 250 nodes): what is left stays counted by size.
_GRAPH_MOST = 64 << 10
# DLPack's DLTensor (dlpack.h): data, device (type, id), ndim, dtype (code,
# bits, lanes), shape, strides, byte_offset.
_DLTENSOR = "<QiiiBBHQQQ"


def _alone():
    """Whether the main thread is the job's only thread (the probe's
    sampling thread aside)."""
    frames = sys._current_frames()
    alone = all(ident == _main_ident or ident == _sampler_ident for ident in frames)
    frames = None
    return alone


def _count_buffers(big, also, started):
    """Counts the big arrays' bytes by buffer: an array not evaluated yet
    holds none; a view (reshape, slice, transpose, broadcast) counts only
    the bytes of its buffer that no array counted before it spans. Changes
    the groups' bytes in place; says what it did. Within the walk's own
    budget (from `started`): what is left when it runs out stays counted by
    nbytes.

    Whether an array is evaluated comes from MLX's `export_to_dot` (C++
    that prints the array's graph; it evaluates nothing): an evaluated
    array is a source with no primitive. Only then is its DLPack capsule
    asked for (MLX evaluates an array that is not, to make one) and the
    DLTensor read for its data pointer, strides and item size. Reading an
    array's graph while another thread evaluates it (MLX detaches arrays
    as it evaluates them) is a data race in MLX: this runs only in the main
    thread, the job paused, and when the job has no other thread; and only
    with MLX on the CPU or on Metal."""
    own = _mx_own
    dot = own.get("dot")
    dlpack = own.get("dlpack")
    if dot is None or dlpack is None or "host_pointers" not in own:
        return {"by": "array", "why": "mlx"}
    # An array's data pointer is read only where reading it changes
    # nothing: MLX on the CPU or on Metal (unified memory). MLX's CUDA
    # backend moves a buffer held in device memory to unified memory when
    # its pointer is asked for.
    if not own["host_pointers"]():
        return {"by": "array", "why": "device"}
    c = _c_functions()
    pointer = c["capsule_pointer"]
    string_at = c["string_at"]
    unpack = c["unpack"]
    head = c["Struct"](_DLTENSOR)
    # Largest first: where the budget runs out, what is left is small.
    order = range(len(big))
    if len(big) <= _BUFFER_SORTED:
        order = sorted(order, key=lambda i: -big[i][2])
    spans = []
    lazy = [0, 0]
    done = 0
    stopped = None
    for i in order:
        if _perf_counter() - started > _HELD_BUDGET:
            stopped = "time"
            break
        obj, g, n = big[i]
        try:
            text = _StringIO()
            dot(text, obj)
            shown = text.getvalue()
            text = None
            if "->" in shown:
                g[5] -= n
                lazy[0] += 1
                lazy[1] += n
                done += 1
                if len(shown) > _GRAPH_MOST:
                    # MLX prints an array's whole unevaluated graph (about
                    # 5 us a node here), and arrays traced together share
                    # theirs: one big graph is printed once, never again
                    # for each of its arrays.
                    stopped = "graph"
                    break
                shown = None
                continue
            shown = None
            capsule = dlpack(obj)
            at = pointer(capsule, b"dltensor")
            data, _, _, ndim, _, bits, lanes, shape_at, strides_at, offset = head.unpack(
                string_at(at, head.size)
            )
            shape = unpack("<%dq" % ndim, string_at(shape_at, 8 * ndim)) if ndim else ()
            if strides_at:
                strides = unpack("<%dq" % ndim, string_at(strides_at, 8 * ndim))
            else:
                strides, step = [], 1
                for extent in reversed(shape):
                    strides.append(step)
                    step *= extent
                strides.reverse()
            capsule = None
        except Exception:
            capsule = None
            continue
        item = max(1, bits * lanes // 8)
        start = data + offset
        if 0 in shape:
            low = high = start
        else:
            low = start + item * sum((e - 1) * s for e, s in zip(shape, strides) if s < 0)
            high = start + item * (1 + sum((e - 1) * s for e, s in zip(shape, strides) if s > 0))
        g[5] -= n
        spans.append((low, -high, i, g))
        done += 1
    obj = g = None
    # The union of the spans, each byte to the first span (lowest address,
    # then the widest, then the first walked) that covers it.
    spans.sort(key=lambda span: span[:3])
    shared = 0
    covered = 0
    cover = None
    for low, high, _, g in spans:
        high = -high
        new = max(0, high - max(low, covered))
        g[5] += new
        shared += (high - low) - new
        if new < high - low and cover is not None and cover is not g:
            key = (g[0], g[1], g[2], g[3], g[4], g[8])
            others = also.setdefault(key, [])
            if cover[0] not in others and len(others) < 3:
                others.append(cover[0])
        if high > covered:
            covered = high
            cover = g
    spans = None
    counted = {
        "by": "buffer",
        "arrays": done,
        "left": len(big) - done,
        "shared": shared,
        "unevaluated": lazy[0],
        "unevaluated_bytes": lazy[1],
    }
    if stopped is not None and done < len(big):
        counted["stopped"] = stopped
    return counted


def _bye():
    # A last sample: MLX's peak counter covers the moments since the last.
    _sample()
    # The probe's own cost: the CPU time of its sampling thread (read
    # through that thread's CPU clock now, else as the thread last measured
    # it) and of its walks and samples in the job's threads, over the job's
    # wall time.
    _send(
        {
            "kind": "bye",
            "probe_cpu_secs": _sampler_cpu() + _walk_cpu[0] + _in_job_cpu[0],
            "wall_secs": _monotonic() - _started,
        }
    )


# The sampling thread's CPU time as it last measured it (one sample in
# eight: reading a thread's CPU clock is a system call), its CPU clock and
# that clock when it started.
_probe_cpu = [0.0]
_sampler_clock = [None, 0.0]
# The CPU time of the samples taken in the job's threads (as loads begin).
_in_job_cpu = [0.0]


def _sampler_cpu():
    clock, start = _sampler_clock
    if clock is not None:
        try:
            return _clock_gettime(clock) - start
        except OSError:
            pass
    return _probe_cpu[0]


# The sampling thread, never one of the job's threads.
_sampler_ident = None


def _sampler():
    global _sampler_ident
    _sampler_ident = threading.get_ident()
    start = _thread_time()
    try:
        _sampler_clock[:] = [_thread_cpu_clock(_sampler_ident), start]
    except Exception:
        pass
    taken = 0
    while _fd is not None:
        # A job that traces every thread (threading.settrace_all_threads)
        # never sees the probe's own thread.
        if sys.gettrace() is not None:
            sys.settrace(None)
        if sys.getprofile() is not None:
            sys.setprofile(None)
        _sample()
        taken += 1
        if taken % 8 == 0:
            _probe_cpu[0] = _thread_time() - start
        _sleep(_interval)


def _inherited_pipe():
    """The descriptor in WEIGHTSCOPE_PROBE_FD when it is weightscope's pipe
    (a process started with its descriptors closed may hold another file
    under that number), else None."""
    import stat

    try:
        fd = int(os.environ["WEIGHTSCOPE_PROBE_FD"])
        st = os.fstat(fd)
    except (KeyError, ValueError, OSError):
        return None
    expected = os.environ.get("WEIGHTSCOPE_PROBE_INO")
    if not stat.S_ISFIFO(st.st_mode) or (expected and str(st.st_ino) != expected):
        return None
    return fd


def _named_pipe():
    """weightscope's FIFO named in WEIGHTSCOPE_PROBE_PATH (in its private
    folder), for a process that did not inherit the pipe (the ranks
    `mlx.launch` starts), opened without blocking, and its identity; else
    None."""
    path = os.environ.get("WEIGHTSCOPE_PROBE_PATH")
    if not path:
        return None
    return _open_named_pipe(path)


def _open_named_pipe(path, may_close=True):
    """weightscope's FIFO at `path` opened for writing, and its identity
    (device, inode), when the descriptor is that FIFO, this user's: else
    None, the descriptor closed only where `may_close` (see `_moved`)."""
    import stat

    try:
        at_path = os.stat(path)
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    identity = (st.st_dev, st.st_ino)
    if (
        not stat.S_ISFIFO(st.st_mode)
        or st.st_uid != os.getuid()
        or identity != (at_path.st_dev, at_path.st_ino)
    ):
        if may_close:
            os.close(fd)
        return None
    # Opened without blocking (no reader: an error, not a wait), written as
    # the inherited pipe is: a full pipe waits for weightscope's reader
    # rather than drop a frame a later stack names; with weightscope gone
    # a write fails and the probe goes quiet.
    os.set_blocking(fd, True)
    return fd, identity


def _exception_text(kind, value):
    """`Kind: message` without running the job's code: the message only
    when the exception's `__str__` is a built-in type's and its arguments
    are exact str or numbers (what those `__str__` would show); otherwise
    the type's name alone (Python's own hook prints the rest after)."""
    name = _exact_str(_type_name_of(kind), 200) if issubclass(type(kind), type) else "?"
    text = None
    for klass in _type_mro(type(value)):
        found = _type_dict(klass).get("__str__")
        if found is None:
            continue
        if not _type_flags(klass) & _HEAP_TYPE:
            args = _exc_args(value)
            if type(args) is tuple and all(type(a) in (str, int, float, bool) for a in args):
                if len(args) == 1 and type(args[0]) is str and klass is not KeyError:
                    text = args[0][:900]
                elif len(args) == 1:
                    text = type(args[0]).__repr__(args[0])[:900]
                elif args:
                    text = "(" + ", ".join(type(a).__repr__(a)[:200] for a in args) + ")"
                else:
                    text = ""
        break
    return name if text is None else (name + ": " + text if text else name)


def _report_exceptions():
    """An exception that ends the job (uncaught in its main thread) is sent
    with the line that raised it, then handled as before: the hook that was
    there is called with the same arguments."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        try:
            entries = []
            entry = tb
            while entry is not None:
                code = entry.tb_frame.f_code
                line = entry.tb_lineno
                text = _source_line(code.co_filename, line)
                name = getattr(code, "co_qualname", code.co_name)
                entries.append([code.co_filename, line, name, text])
                entry = entry.tb_next
            entry = code = None
            _send(
                {
                    "kind": "exception",
                    "pid": os.getpid(),
                    "text": _exception_text(kind, value)[:1000],
                    "traceback": entries[::-1][:_MAX_FRAMES],
                }
            )
        except Exception:
            pass
        previous(kind, value, tb)

    sys.excepthook = hook


def _start_from_environment():
    """Starts when weightscope's pipe is there: inherited, or by path."""
    global _fd, _interval, _started, _identity, _fallback_path
    fd = _inherited_pipe()
    if fd is not None:
        # The named pipe is where to go if the job takes our number.
        _fallback_path = os.environ.get("WEIGHTSCOPE_PROBE_PATH")
        try:
            _fd, _identity = _own_copy(fd)
        except OSError:
            fd = None
    if fd is None:
        opened = _named_pipe()
        if opened is None:
            return
        fd = opened[0]
        try:
            _fd, _identity = _own_copy(fd)
        except OSError:
            return
        finally:
            os.close(fd)
    _interval = max(0.005, int(os.environ.get("WEIGHTSCOPE_PROBE_INTERVAL_MS", "50")) / 1000)
    _started = _monotonic()
    hello = {"v": 1, "kind": "hello", "client": "python"}
    rank = os.environ.get("MLX_RANK", "")
    if rank.isdigit():
        hello["rank"] = int(rank)
    _send(hello)
    if _held_on:
        try:
            _c_functions()
        except Exception:
            pass
    if "mlx.core" in sys.modules:
        mx = sys.modules["mlx.core"]
        _wrap(mx)
        globals()["_mlx"] = mx
    else:
        sys.meta_path.insert(0, _MlxImportHook())
    import atexit

    atexit.register(_bye)
    _report_exceptions()
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
    threading.Thread(target=_sampler, name="weightscope-probe", daemon=True).start()
