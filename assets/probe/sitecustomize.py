"""weightscope's probe hook for Python jobs started by `weightscope record`.

`weightscope record` puts this folder first on the job's PYTHONPATH, so Python
imports this file at start-up. It does nothing unless weightscope started the
job (WEIGHTSCOPE_PROBE_FD names the pipe to report on); then it starts the
probe. Either way it runs the sitecustomize that was there before us, if any.
"""

import os
import sys


def _run_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as err:  # a broken sitecustomize of theirs is not ours to raise
        sys.stderr.write(f"weightscope probe: the job's sitecustomize failed: {err!r}\n")


if os.environ.get("WEIGHTSCOPE_PROBE_FD"):
    try:
        import weightscope_probe

        weightscope_probe._start_from_environment()
    except Exception as err:
        sys.stderr.write(f"weightscope probe: not started: {err!r}\n")

_run_next_sitecustomize()
