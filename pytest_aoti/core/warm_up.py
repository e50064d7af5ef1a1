"""A process's warm-up beside its collection: what its first compile would otherwise pay first.

An xdist worker (and the crash-guard worker of plain ``--aoti-debug``) runs Inductor's CPU ISA probes at its first
compile: seconds on a CPU runner, a minute on the GPU machine when nothing is recorded yet (docs/benchmarks.md).
Started in a thread of its own when the first test that uses a pytest-aoti fixture is collected, the probes
(subprocesses; a recorded verdict answers them at once) overlap the rest of collection, the scheduling and the
test's export instead. The compile imports the rest of Inductor in its own thread meanwhile, then waits for them
(:func:`wait`).

What the probes import is imported first, in the caller's thread: the probing thread then imports nothing, so no two
threads ever import one module graph at once (Python hands one of two threads in a concurrent circular import a
partially initialized module). The rest of Inductor's compile path is not part of the warm-up: it holds the GIL (a
thread would overlap little of it), it warns (torch's own deprecations, which only the importing thread can
silence), and a worker that runs no test (the one xdist starts to replace a worker that crashed on the last test)
would pay seconds for it.
"""

from __future__ import annotations

import threading

_thread: threading.Thread | None = None
_started = False
_lock = threading.Lock()


def _warm() -> None:
    try:
        from pytest_aoti.core import isa_verdicts

        isa_verdicts.probe()  # recorded at once: for a worker that replaces this one, should a test crash it
    except Exception:  # the compile itself will meet and report whatever went wrong here
        pass


def start_in_background() -> None:
    """Start the warm-up once per process: the probes' imports here, the ISA probes (subprocesses) in a thread."""
    global _thread, _started
    with _lock:
        if not _started:
            _started = True
            try:
                from pytest_aoti.core import isa_verdicts, torch_private  # noqa: F401  (the thread's own imports)

                with torch_private.torch_internal_deprecations_silenced():
                    torch_private.import_what_probes_import()
            except Exception:  # the compile itself will meet and report whatever went wrong here
                return
            _thread = threading.Thread(target=_warm, name="pytest-aoti-warm-up", daemon=True)
            _thread.start()


def wait() -> None:
    """Before a compile: let a warm-up under way finish (its probes are this compile's)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()
