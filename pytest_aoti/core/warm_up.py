"""A process's warm-up beside its collection: what its first compile would otherwise pay first.

An xdist worker (and the crash-guard worker of plain ``--aoti-debug``, and a plain session) imports Inductor and runs
Inductor's CPU ISA probes at its first compile: seconds on a CPU runner, a minute on the GPU machine when nothing is
recorded yet (docs/benchmarks.md). Started when the first test that uses a pytest-aoti fixture is collected, that
work overlaps the rest of collection and the scheduling instead. The compile waits for it (:func:`wait`) rather than
probing beside it. Imports Inductor in the caller's thread (silencing torch's own deprecations), probes in its own.
"""

from __future__ import annotations

import threading

_thread: threading.Thread | None = None
_lock = threading.Lock()


def _import_here() -> None:
    """Inductor's imports, in the caller's thread: they warn (torch's own deprecations, as ``torch.utils.mkldnn``
    loads), and only the caller's thread can silence that, since ``warnings.catch_warnings`` is process-wide and not
    thread-safe. From a thread of its own each warning would land in the warnings summary of whichever test was being
    collected or run. Imports hold the GIL anyway: a thread would overlap little of them."""
    try:
        from pytest_aoti.core import torch_private

        with torch_private.torch_internal_deprecations_silenced():
            torch_private.import_what_compiles_import()
    except Exception:  # the compile itself will meet and report whatever went wrong here
        pass


def _warm() -> None:
    try:
        from pytest_aoti.core import isa_verdicts

        isa_verdicts.probe()  # recorded at once: for a worker that replaces this one, should a test crash it
    except Exception:  # the compile itself will meet and report whatever went wrong here
        pass


def start_in_background() -> None:
    """Start the warm-up once per process: the imports here, the ISA probes (subprocesses) in a thread."""
    global _thread
    with _lock:
        if _thread is None:
            _import_here()
            _thread = threading.Thread(target=_warm, name="pytest-aoti-warm-up", daemon=True)
            _thread.start()


def wait() -> None:
    """Before a compile: let a warm-up under way finish (its probes are this compile's)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()
