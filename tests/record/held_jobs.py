"""Jobs that hold a known amount of MLX memory in a known place, for the
held-by tests (tests/plain/held.rs). Each makes 16 arrays of 4 MiB (64 MiB),
keeps them where its mode says, and stays at that peak for 1.5 s (the probe
walks at most once a second) before it lets go and exits.

    python held_jobs.py MODE

MODE: fold (a list local of main), global (a module dict), attribute
(self.cache of an instance), closure (a dict a closure keeps), default (a
default argument's dict), exception (an exception kept in a local after its
except block, its traceback's frame holding the arrays), generator (a
suspended generator's local), two-roots (one list reached from two locals:
counted once, for the first), objects (a million small Python objects
beside the arrays: the walk stops at its budget and says partial), views (one 64 MiB array and 16 slices of it
that share its buffer: the buffer counted once), reshaped (16 arrays kept each with a reshape, a slice and a
transpose of itself, and a broadcast of one row: 64 MiB, not 196), unevaluated (16 arrays kept and 16
products of them never evaluated: those hold nothing), views-threaded (views, while another thread of the
job waits: counted by array, and said to be beyond MLX active), small-list (64 MiB kept, and 20,000 arrays of 512 bytes in a list: too
little unaccounted for to walk the list, said "not looked for"), small (only that list: under 16 MiB of MLX
memory, no walk),
thread (a list local of a
thread's function while the main thread waits in join(): the main thread
runs no Python, so the probe's own thread walks), killed
(the fold, then it allocates until the memory cgroup's limit kills it),
proxy MARKER (arrays in an object whose __getattr__ and __class__ write to
MARKER: the walk must not run them), refs PROBE_DIR (no probe started: the
walk called directly, in the main thread and from another, with the garbage
collector off; every object it saw must have the references it had before,
and a function's own `locals()` dict must keep what it holds).
"""

import sys
import time

import mlx.core as mx

MIB = 1 << 20
COUNT = 16
SIZE = 4 * MIB // 4  # float32 values in 4 MiB


def arrays():
    made = [mx.ones((SIZE,), dtype=mx.float32) * i for i in range(COUNT)]
    mx.eval(made)
    return made


def hold():
    # At the peak long enough for a walk (at most one a second); a small
    # evaluation now and then keeps the probe's samples coming.
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        time.sleep(0.05)


CACHE = {}


class Folder:
    def __init__(self):
        self.cache = {}

    def fold(self):
        for i, a in enumerate(arrays()):
            self.cache["layer.%d" % i] = a
        hold()


def make_keeper():
    kept = {}

    def keep(name, a):
        kept[name] = a

    return keep


def remember(a, seen={}):  # noqa: B006 - the default is the point
    seen[len(seen)] = a


def fold():
    kept = []
    for a in arrays():
        kept.append(a)
    del a
    hold()


def global_cache():
    for i, a in enumerate(arrays()):
        CACHE["layer.%d" % i] = a
    del a
    hold()


def attribute():
    folder = Folder()
    folder.fold()


def closure():
    keep = make_keeper()
    for i, a in enumerate(arrays()):
        keep("layer.%d" % i, a)
    del a
    hold()


def default():
    for a in arrays():
        remember(a)
    del a
    hold()


def views():
    base = mx.ones((COUNT * SIZE,), dtype=mx.float32)
    mx.eval(base)
    parts = [base[i * SIZE : (i + 1) * SIZE] for i in range(COUNT)]
    mx.eval(parts)
    hold()
    return len(parts)


def reshaped():
    side = 1024  # 1024 x 1024 float32: 4 MiB
    kept = []
    for i in range(COUNT):
        a = mx.ones((side, side), dtype=mx.float32) * i
        kept.append((a, a.reshape(-1), a[: side // 2], a.T))
    wide = mx.broadcast_to(kept[1][0][:1], (4 * side, side))
    mx.eval(kept, wide)
    del a
    hold()
    return len(kept), wide.shape


def unevaluated():
    kept = arrays()
    doubled = [a * 2 for a in kept]
    hold()
    return len(doubled)


def views_threaded():
    import threading

    done = threading.Event()
    waiter = threading.Thread(target=done.wait, name="waiter")
    waiter.start()
    try:
        return views()
    finally:
        done.set()
        waiter.join()


def small_list():
    # 64 MiB kept, and 20,000 arrays of 512 bytes in a list beside them:
    # 10 MiB unaccounted for, not worth a walk through the list.
    kept = arrays()
    small = [mx.ones((128,), dtype=mx.float32) * i for i in range(20000)]
    mx.eval(small)
    hold()
    return len(kept), len(small)


def small():
    # Only the 10 MiB list: under 16 MiB of MLX memory, no walk at all.
    small = [mx.ones((128,), dtype=mx.float32) * i for i in range(20000)]
    mx.eval(small)
    hold()
    return len(small)


def worker():
    held = arrays()
    hold()
    return len(held)


def thread():
    import threading

    t = threading.Thread(target=worker, name="worker")
    t.start()
    t.join()


def failing():
    held = arrays()
    raise RuntimeError("failed with %d arrays" % len(held))


def exception():
    saved = None
    try:
        failing()
    except RuntimeError as err:
        saved = err
    hold()
    return saved


def producer():
    held = arrays()
    yield len(held)
    yield 0


def generator():
    gen = producer()
    next(gen)
    hold()
    gen.close()


def producing():
    # Keeps what it made in a list and yields each: the list holds the
    # bytes, `w` only names the last one for a moment.
    pending_outputs = []
    for i in range(COUNT):
        w = mx.ones((SIZE,), dtype=mx.float32) * i
        mx.eval(w)
        pending_outputs.append(w)
        yield w


def yielding():
    gen = producing()
    for _ in range(COUNT):
        next(gen)
    hold()
    gen.close()


def two_roots():
    first = arrays()
    second = first
    hold()
    return second


def objects():
    junk = [[i, str(i)] for i in range(1_000_000)]
    kept = arrays()
    hold()
    return len(junk) + len(kept)


def killed():
    kept = arrays()
    hold()
    more = []
    while True:
        # 400 MiB a second: faster than a walk a second; weightscope asks
        # for one as the job nears its cgroup's limit.
        more.append(mx.ones((SIZE,), dtype=mx.float32))
        mx.eval(more[-1])
        time.sleep(0.01)
    return kept


class Trap:
    """Runs code when anything it lacks is asked for: the walk must never
    run it (it reads __dict__ directly and types by type())."""

    def __init__(self, marker):
        self.__dict__["marker"] = marker
        self.__dict__["layers"] = arrays()

    def __getattr__(self, name):
        with open(self.__dict__["marker"], "a") as f:
            f.write("asked for %s\n" % name)
        raise AttributeError(name)

    @property
    def __class__(self):
        with open(self.__dict__["marker"], "a") as f:
            f.write("asked for __class__\n")
        return Trap


def proxy():
    marker = sys.argv[2]
    trap = Trap(marker)
    hold()
    return trap


def refs():
    import gc
    import threading

    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    probe._mlx = mx
    probe._bind_array_slots(mx)
    gc.disable()
    kept = arrays()
    cache = {"layer.%d" % i: a for i, a in enumerate(kept)}
    mine = locals()
    watched = [kept, cache] + kept
    before = [sys.getrefcount(x) for x in watched]
    lines = [probe._held_walk(mx.get_active_memory(), True)]
    walker = threading.Thread(target=lambda: lines.append(probe._held_walk(mx.get_active_memory(), False)))
    walker.start()
    walker.join()
    after = [sys.getrefcount(x) for x in watched]
    assert all(line and b'"root":"kept"' in line for line in lines), lines
    assert before == after, (before, after)
    assert mine["kept"] is kept and mine["cache"] is cache, sorted(mine)
    print("refs unchanged", len(watched), flush=True)


def profiled():
    # A pure-Python profiler (as cProfile's pure cousins, tracers and
    # coverage tools are): the walk runs in its callback; the locals it
    # reads must stay bound.
    events = [0]

    def profile(frame, event, arg):
        events[0] += 1

    sys.setprofile(profile)
    kept = []
    for a in arrays():
        kept.append(a)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        assert len(kept) == COUNT
        time.sleep(0.02)
    sys.setprofile(None)
    print("profiled, kept bound:", len(kept), flush=True)


def traced():
    # The job's own tracer counts what it sees: its own lines, never the
    # probe's.
    events = [0]

    def tracer(frame, event, arg):
        events[0] += 1
        return tracer

    kept = arrays()
    sys.settrace(tracer)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        time.sleep(0.05)
    sys.settrace(None)
    print("traced events:", events[0], len(kept), flush=True)


class Sneaky(str):
    """A key whose own methods tell on the walk (a str Enum's repr, say)."""

    def __repr__(self):
        tell("Sneaky.__repr__")
        return str.__repr__(self)

    def __str__(self):
        tell("Sneaky.__str__")
        return str.__str__(self)

    def __radd__(self, other):
        tell("Sneaky.__radd__")
        return str.__add__(other, self)


def tell(what):
    with open(sys.argv[2], "a") as f:
        f.write(what + "\n")


class TellingArray(mx.array):
    """An array whose own nbytes property tells on the walk."""

    @property
    def nbytes(self):
        tell("TellingArray.nbytes")
        return mx.array.nbytes.__get__(self)


class Tattling(dict):
    def __len__(self):
        tell("Tattling.__len__")
        return dict.__len__(self)

    def __iter__(self):
        tell("Tattling.__iter__")
        return dict.__iter__(self)

    def items(self):
        tell("Tattling.items")
        return dict.items(self)


class TattlingList(list):
    def __iter__(self):
        tell("TattlingList.__iter__")
        return list.__iter__(self)

    def __len__(self):
        tell("TattlingList.__len__")
        return list.__len__(self)


class Meta(type):
    @property
    def __name__(cls):
        tell("Meta.__name__")
        return "Named"


class Guarded(metaclass=Meta):
    @property
    def __dict__(self):
        tell("Guarded.__dict__")
        return {}


class Failed(Exception):
    @property
    def __traceback__(self):
        tell("Failed.__traceback__")
        return None


class NotAModule:
    def __getattr__(self, name):
        tell("NotAModule." + name)
        raise AttributeError(name)


class TellingStringIO(__import__("io").StringIO):
    def __init__(self, *args):
        tell("io.StringIO")
        super().__init__(*args)


def replace_what_the_probe_uses():
    # The job replaces functions of ctypes, struct and io that the count by
    # buffer uses, and MLX's counters: the probe bound its own when it
    # started (MLX's when mlx.core was imported).
    import ctypes
    import io
    import struct

    def telling(name, real):
        def replaced(*args, **kwargs):
            tell(name)
            return real(*args, **kwargs)

        return replaced

    ctypes.string_at = telling("ctypes.string_at", ctypes.string_at)
    ctypes.PYFUNCTYPE = telling("ctypes.PYFUNCTYPE", ctypes.PYFUNCTYPE)
    struct.unpack = telling("struct.unpack", struct.unpack)
    struct.Struct = telling("struct.Struct", struct.Struct)
    io.StringIO = TellingStringIO
    # And MLX's memory counters, which every sample reads.
    for name in ("get_active_memory", "get_cache_memory", "get_peak_memory"):
        setattr(mx, name, telling("mx." + name, getattr(mx, name)))


def hostile_objects():
    import collections
    import functools

    replace_what_the_probe_uses()

    made = arrays()
    table = Tattling()
    for i in range(4):
        table[Sneaky("layer.%d" % i)] = made[i]
    rows = TattlingList(made[4:8])
    queue = collections.deque(made[8:12])
    later = functools.partial(print, *made[12:16])
    del made
    guarded = Guarded()
    failed = Failed("x")
    shadow = TellingArray(table[Sneaky("layer.0")])
    # A view: the roots add up to more than MLX holds, so the walk counts
    # by buffer (through what replace_what_the_probe_uses replaced).
    half = rows[0][: SIZE // 2]
    mx.eval(shadow, half)
    sys.modules["not_a_module"] = NotAModule()
    hold()
    return table, rows, queue, later, guarded, failed, shadow, half


def long_key():
    # A prompt cache keyed by a 4 MB prompt, a thousand arrays under it.
    key = "p" * (4 << 20)
    cache = {key: [mx.ones((1024,), dtype=mx.float32) for _ in range(1000)], "big": arrays()}
    mx.eval(cache[key])
    hold()
    return cache


def frozen_clocks():
    # The job freezes its clocks and mocks sleep (as freezegun and test
    # patches do); the probe keeps its own.
    real_monotonic, real_sleep = time.monotonic, time.sleep
    time.perf_counter = lambda: 0.0
    time.monotonic = lambda: 1000.0
    time.sleep = lambda seconds: None
    kept = arrays()
    for _ in range(3):
        end = real_monotonic() + 1.2
        while real_monotonic() < end:
            real_sleep(0.05)
    return kept


def collectives():
    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    evaluate = mx.eval
    probe._wrap(mx)
    assert mx.eval is evaluate, "mx.eval wrapped in a job with no collective"
    for _ in range(20000):
        mx.distributed.all_sum(mx.array(1.0)).item()
    assert len(probe._pending_collectives) <= len(probe._COLLECTIVES), len(probe._pending_collectives)
    assert mx.eval is not evaluate, "mx.eval marked once a collective was called"
    print("pending", len(probe._pending_collectives), flush=True)


def frames():
    # Code made in a loop: the probe's tables of frames and stacks stay
    # bounded, and the code objects it keeps are at most that many.
    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    for i in range(probe._MAX_IDS + 5000):
        code = compile("x = %d" % i, "<made %d>" % i, "exec")
        probe._stack_of([(code, 1)])
    assert len(probe._frame_ids) <= probe._MAX_IDS, len(probe._frame_ids)
    assert len(probe._stack_ids) <= probe._MAX_IDS, len(probe._stack_ids)
    print("frames bounded", len(probe._frame_ids), flush=True)


def budget():
    # The walk's object budget holds whatever its clock says.
    import json

    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    probe._mlx = mx
    probe._bind_array_slots(mx)
    probe._HELD_BUDGET = 1e9
    # Arrays in the big list too: what the first phase finds does not
    # account for MLX's memory, so the list is walked.
    many = [[i] for i in range(700000)]
    kept = arrays()
    many.append(arrays())
    line = probe._held_walk(mx.get_active_memory(), True)
    report = json.loads(line)
    assert report["partial"], report
    assert any(r["root"] == "kept" for r in report["roots"]), report
    print("budget held", len(many), len(kept), flush=True)


def buffers():
    # The count by buffer called directly: the figures it sends, and what it
    # does where reading a data pointer could move a buffer (CUDA).
    import json

    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    probe._mlx = mx
    probe._bind_array_slots(mx)
    base = mx.ones((COUNT * SIZE,), dtype=mx.float32)
    mx.eval(base)
    parts = [base[i * SIZE : (i + 1) * SIZE] for i in range(COUNT)]
    lazy = [p * 2 for p in parts[:4]]
    mx.eval(parts)
    active = mx.get_active_memory()
    report = json.loads(probe._held_walk(active, True))
    assert report["buffers"] == {
        "by": "buffer",
        "arrays": COUNT + 1 + 4,
        "left": 0,
        "shared": COUNT * SIZE * 4,
        "unevaluated": 4,
        "unevaluated_bytes": 4 * SIZE * 4,
    }, report
    assert report["reached"] == COUNT * SIZE * 4, report
    roots = {r["root"]: r for r in report["roots"]}
    assert roots["base"]["bytes"] == COUNT * SIZE * 4 and roots["parts"]["also"] == ["base"], roots
    assert "lazy" not in roots, roots
    host = probe._mx_own["host_pointers"]
    probe._mx_own["host_pointers"] = lambda: False
    report = json.loads(probe._held_walk(active, True))
    probe._mx_own["host_pointers"] = host
    assert report["buffers"] == {"by": "array", "why": "device"}, report
    assert report["reached"] == (2 * COUNT + 4) * SIZE * 4, report
    # An array not evaluated whose graph is a chain of 1,000 additions, the
    # largest array (counted first): its graph is printed once, and the
    # count stops there, the rest by size.
    deep = mx.concatenate([base, base])
    for _ in range(1000):
        deep = deep + 1
    report = json.loads(probe._held_walk(active, True))
    buffers = report["buffers"]
    assert buffers["stopped"] == "graph" and buffers["arrays"] == 1, report
    assert buffers["unevaluated"] == 1 and buffers["left"] == COUNT + 1 + 4, report
    print("buffers counted", len(parts), len(lazy), flush=True)


class Telling:
    """A path-like object and an exception whose own methods tell."""

    def __fspath__(self):
        tell("Telling.__fspath__")
        return "/nowhere"

    def __repr__(self):
        tell("Telling.__repr__")
        return "Telling()"


class TellingError(Exception):
    def __str__(self):
        tell("TellingError.__str__")
        return "told"


def no_job_code():
    # The probe's load mark and its exception hook name what they are
    # given without calling its methods.
    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    sys.argv[2:3] = [sys.argv[3]]
    assert probe._file_name(Telling()) == "<Telling object>", probe._file_name(Telling())
    assert probe._file_name("w.safetensors").endswith("/w.safetensors")
    import pathlib

    assert probe._file_name(pathlib.Path("/m/w.safetensors")) == "/m/w.safetensors"
    error = TellingError("x")
    assert probe._exception_text(TellingError, error) == "TellingError", probe._exception_text(TellingError, error)
    error = ValueError("bad shape", 3)
    assert probe._exception_text(ValueError, error) == "ValueError: ('bad shape', 3)"
    assert probe._exception_text(KeyError, KeyError("w")) == "KeyError: 'w'"
    assert probe._exception_text(RuntimeError, RuntimeError("no memory")) == "RuntimeError: no memory"
    print("no job code", flush=True)


def walk_share():
    # After a walk that took t, the next waits t / 1 %: the walks take at
    # most 1 % of the job's time, whatever its containers.
    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    walks = []
    probe._walk_and_send = lambda in_main: walks.append(in_main)
    state = probe._held_state
    state.update(pending=True, last=probe._monotonic() - 1.5, cost=0.05)
    probe._maybe_walk_held(1 << 30)
    assert walks == [], "walked 1.5 s after a 50 ms walk"
    state.update(last=probe._monotonic() - 5.1)
    probe._maybe_walk_held(1 << 30)
    assert len(walks) == 1, "no walk 5.1 s after a 50 ms walk"
    state.update(pending=True, last=probe._monotonic() - 1.1, cost=0.001)
    probe._maybe_walk_held(2 << 30)
    assert len(walks) == 2, "no walk 1.1 s after a 1 ms walk"
    print("walk share", len(walks), flush=True)


def encoded():
    # The probe's own JSON and source lines against the standard library's
    # (json.dumps, linecache), which it no longer imports.
    import json
    import linecache

    sys.path.insert(0, sys.argv[2])
    import weightscope_probe as probe

    values = [
        {"kind": "held", "roots": [{"root": "kept", "bytes": 1 << 40, "path": "kept['\u00e9\n\"']"}]},
        [1, -2.5, 1e300, -0.0, None, True, False, "\u2028\x00", (3, 4), 10**30],
        {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")},
    ]
    for value in values:
        ours, theirs = probe._json(value), json.dumps(value, separators=(",", ":"))
        assert ours == theirs, (ours, theirs)
    source = probe.__file__
    count = len(open(source, encoding="utf-8").read().splitlines())
    for line in range(0, count + 3):
        ours, theirs = probe._source_line(source, line), linecache.getline(source, line).strip()[:160]
        assert ours == theirs, (line, ours, theirs)
    assert probe._source_line("/dev/zero", 1) == ""
    assert probe._source_line("<string>", 1) == ""
    print("encoded like the standard library", len(values), count, flush=True)


MODES = {
    "yielding": yielding,
    "no-job-code": no_job_code,
    "walk-share": walk_share,
    "fold": fold,
    "global": global_cache,
    "attribute": attribute,
    "closure": closure,
    "default": default,
    "exception": exception,
    "generator": generator,
    "two-roots": two_roots,
    "objects": objects,
    "views": views,
    "reshaped": reshaped,
    "unevaluated": unevaluated,
    "views-threaded": views_threaded,
    "small-list": small_list,
    "small": small,
    "thread": thread,
    "killed": killed,
    "proxy": proxy,
    "refs": refs,
    "profiled": profiled,
    "traced": traced,
    "hostile-objects": hostile_objects,
    "long-key": long_key,
    "frozen-clocks": frozen_clocks,
    "collectives": collectives,
    "frames": frames,
    "budget": budget,
    "buffers": buffers,
    "encoded": encoded,
}

if __name__ == "__main__":
    MODES[sys.argv[1]]()
    print("done", sys.argv[1], flush=True)
