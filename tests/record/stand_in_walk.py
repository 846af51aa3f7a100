"""The held-by walk on a Python without MLX's wheel (3.12, 3.13 here), with
a stand-in `mlx.core` whose arrays only say their bytes: the walk is
called directly, in the main thread, under a profiler, and must name the
local that holds the arrays, leave every local bound, and keep nothing.

    python stand_in_walk.py PROBE_DIR
"""

import os
import sys
import tempfile
import types

sys.path.insert(0, sys.argv[1])

# The stand-in: `mlx.core.array` with `nbytes`, and MLX's active memory.
core = types.ModuleType("mlx.core")


class array:  # noqa: N801 - MLX's name
    def __init__(self, nbytes):
        self._nbytes = nbytes

    @property
    def nbytes(self):
        return self._nbytes


core.array = array
core.get_active_memory = lambda: 16 * 4 << 20
sys.modules["mlx"] = types.ModuleType("mlx")
sys.modules["mlx.core"] = core

import weightscope_probe as probe  # noqa: E402

probe._mlx = core
probe._bind_array_slots(core)


def fold():
    kept = [array(4 << 20) for _ in range(16)]
    lines = []

    def profile(frame, event, arg):
        # The walk inside a profile callback, as a pending call may run.
        if event == "c_call" and not lines:
            lines.append(probe._held_walk(core.get_active_memory(), True))

    sys.setprofile(profile)
    len(kept)
    sys.setprofile(None)
    # Still bound after the callback wrote the frame's locals back.
    assert len(kept) == 16, kept
    return lines[0]


line = fold()
assert line and b'"root":"kept"' in line and b'"bytes":67108864' in line, line
print("walked", sys.version.split()[0], flush=True)
