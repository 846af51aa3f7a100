"""weightscope's probe hook for Python jobs started by `weightscope record`.

`weightscope record` puts this folder first on the job's PYTHONPATH, so Python
imports this file at start-up. It starts the probe when weightscope started
the job (WEIGHTSCOPE_PROBE_FD names the pipe to report on), then leaves no
trace of itself: this folder goes off `sys.path`, and the sitecustomize that
was there before us, if any, runs and becomes what `import sitecustomize`
returns. The folder is private to the user who recorded (docs/record.md).
"""

import os
import sys


def _another_may_be_there():
    """Whether a folder on the path has anything named sitecustomize (a
    module, a package, a compiled or extension module): only then is
    importlib, which the job may never use, imported to find it."""
    import _imp

    names = ["sitecustomize", "sitecustomize.py", "sitecustomize.pyc"]
    names += ["sitecustomize" + suffix for suffix in _imp.extension_suffixes()]
    for folder in sys.path:
        if not isinstance(folder, str):
            return True
        if os.path.isfile(folder):
            return True  # a zip archive: zipimport may find one inside
        for name in names:
            if os.path.exists(os.path.join(folder or os.curdir, name)):
                return True
    return False


def _leave_and_run_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    # Off the path: the job's imports search its own folders only, and
    # `import weightscope_probe` finds the module already loaded.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    if not _another_may_be_there():
        return
    try:
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        # What `import sitecustomize` returns from now on, as if we were
        # never here (the import that runs us takes sys.modules' entry).
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as err:  # a broken sitecustomize of theirs is not ours to raise
        sys.stderr.write(f"weightscope probe: the job's sitecustomize failed: {err!r}\n")


try:
    import weightscope_probe

    if os.environ.get("WEIGHTSCOPE_PROBE_FD"):
        weightscope_probe._start_from_environment()
except Exception as err:
    sys.stderr.write(f"weightscope probe: not started: {err!r}\n")

_leave_and_run_next_sitecustomize()
