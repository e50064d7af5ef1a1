"""A fork server for the user's pytest runs in the end-to-end tests.

Each end-to-end test starts pytest as a user would, and on a 2-core machine the ~4 s of imports of that process
(pytest, torch, Inductor) were a fifth of the suite's time. This server imports them once; each run is a fork of
it, so the run is still a process of its own: its cwd, environment, sys.path, stdio, exit status, crash and signals are
its own, and it starts pytest the way ``python -m pytest`` does (``pytest/__main__.py`` over ``sys.argv``). What
the plugin starts (debug stages, isolated tests, xdist workers, minify's judges) still starts fresh: those processes
are what the tests test. Inductor's vector-ISA probes are made once here, and every run inherits their verdicts.

Run as a script (``python tests/forkserver.py``), so that it imports nothing from this repository's ``tests``
package, whose name user layouts in the tests use too. It reads one JSON request per line on stdin and answers two
JSON lines per run on stdout: ``{"pid": N}`` when the run started and ``{"returncode": N}`` when it ended (negative
for a signal, as ``subprocess`` reports it). It ends when stdin closes.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import sys
import tempfile
import threading
import traceback
from typing import Any

# What every user run imports first: torch and Inductor, ~4 s on 2 cores. None of it starts a thread or reads the
# environment a run changes (Inductor's config reads TORCHINDUCTOR_* and AOT_INDUCTOR_* at import: the tests set them
# only in-process, never for a run). Not pytest plugins (xdist, pytest-aoti itself): pytest rewrites their asserts as
# it imports them, and warns about one imported before it.
# And the Hypothesis library, ~1.3 s a run: Hypothesis's pytest plugin imports all of it in every run's terminal
# summary (for ``hypothesis.internal.observability``), whether or not a test used it. Its distribution is a pytest
# plugin's, so pytest marks it for assertion rewriting and would warn that it was imported first: the marker added to
# its docstrings below tells pytest to leave it as imported (rewriting would only reword the asserts inside it).
import _hypothesis_globals
import hypothesis
import hypothesis.internal.observability
import pytest
import torch
import torch._inductor.compile_fx
import torch._inductor.package

for _module in (hypothesis, _hypothesis_globals):
    _module.__doc__ = f"{_module.__doc__ or ''}\nPYTEST_DONT_REWRITE"

# sys.path as a fresh interpreter has it, less this script's dir and the PYTHONPATH this server was started with.
_STARTUP_PYTHONPATH = {entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry}
_BASE_PATH = [entry for entry in sys.path[1:] if entry not in _STARTUP_PYTHONPATH]


def _probe_vector_isa() -> None:
    """Inductor's CPU vector-ISA probes, made once here: one build and one Python per ISA (~1.5 CPU-s) in every process
    that compiles. Their verdicts are cached in this process, so the forked runs inherit them; the processes a run
    starts itself (xdist workers, debug children) read the ISA record the plugin keeps in the run's cache dir."""
    import torch._inductor.cpu_vec_isa

    torch._inductor.cpu_vec_isa.valid_vec_isa_list()


def _run(request: dict[str, Any]) -> None:
    """In the forked process: become ``python -m pytest ARGS`` started from ``cwd`` with ``env``. Never returns."""
    code: int = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # read TMPDIR afresh
        pythonpath = [entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[:] = [request["cwd"], *pythonpath, *_BASE_PATH]  # what ``python -m`` puts first: the cwd
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        # pytest rewrites the plugin's asserts as it imports it: a pytest_aoti module this server imported (the ISA
        # probe's torch_private imports the package) would be warned about as imported before.
        for name in [name for name in sys.modules if name == "pytest_aoti" or name.startswith("pytest_aoti.")]:
            del sys.modules[name]
        sys.argv = [pytest.__file__.replace("__init__.py", "__main__.py"), *request["args"]]
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)  # what ``python -m pytest`` runs
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # Interpreter shutdown as usual (atexit handlers run), less the final walk over torch's objects.
    gc.freeze()
    sys.exit(code)


def main() -> None:
    # Refuse where a fork would not be a clean start (the caller then starts each run fresh): a process with threads,
    # or a CUDA build on a machine with a GPU. There the imports leave CUDA's fork guard set although
    # torch.cuda.is_initialized() says False, and every forked run fails "Cannot re-initialize CUDA in forked
    # subprocess" (seen on the H100).
    unsafe = None
    if torch.version.cuda is not None and torch.cuda.is_available():
        unsafe = "a GPU machine: a forked run could not use CUDA"
    else:
        _probe_vector_isa()
        if threading.active_count() != 1:
            unsafe = f"{threading.active_count()} threads after imports"
    if unsafe is not None:
        print(json.dumps({"unsafe": unsafe}), flush=True)
        return
    # What the imports made is never freed: frozen, the forked runs' garbage collections skip it (and do not copy
    # the pages they would have touched).
    gc.freeze()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    while line := sys.stdin.readline():
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
