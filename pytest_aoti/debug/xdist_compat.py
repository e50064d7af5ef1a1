"""Every pytest-xdist and execnet internal pytest-aoti still uses, named here and nowhere else, each behind a check of
the version it was read in. Outside that range each falls back to what it would say if the internal were gone:
the run still works, with a less specific crash message or a crash that ``-x`` does not count.

- ``DSession._handlefailures``: xdist counts its workers' reports toward ``-x``/``--maxfail``, not the crash reports
  it makes itself (``DSession.handle_crashitem``); a crash must count too. Only used under ``-n N``: the session
  pytest-aoti supervises stops through its own scheduler (:mod:`pytest_aoti.debug.in_order`).
- ``WorkerController.gateway._io.popen``: how a crashed worker ended (its signal or exit status), which xdist's
  crash report does not say; and the supervised worker's pid, which the controller hands Ctrl-C and SIGTERM to.
- The scheduler protocol (``xdist.scheduler.protocol.Scheduling``, and ``send_runtest_some``/``shutdown`` on the
  worker nodes a scheduler is given): the documented ``pytest_xdist_make_scheduler`` hook takes one, but the
  protocol itself is xdist's own; outside the versions read, xdist's load scheduler runs the supervised session.
"""

from __future__ import annotations

import functools
import importlib.metadata
from typing import Any

from pytest_aoti.core.processes import signal_name

# The versions whose internals were read (pytest-xdist 3.5 to 3.8, execnet 2.1): both major versions.
_XDIST_MAJOR = 3
_EXECNET_MAJOR = 2


@functools.cache
def _major(distribution: str) -> int | None:
    try:
        return int(importlib.metadata.version(distribution).split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def count_crash_failure(config: Any, report: Any) -> None:
    """Count a crash report xdist made toward ``-x``/``--maxfail``, as xdist counts a worker's failed report."""
    if _major("pytest-xdist") != _XDIST_MAJOR:
        return
    count_failure = getattr(config.pluginmanager.getplugin("dsession"), "_handlefailures", None)
    if count_failure is not None:
        count_failure(report)


def _worker_popen(node: Any) -> Any:
    """The ``subprocess.Popen`` of an xdist worker where execnet's popen gateway exposes it, else None."""
    if _major("execnet") != _EXECNET_MAJOR:
        return None
    return getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)


def worker_pid(node: Any) -> int | None:
    """The pid of an xdist worker started on this host (``popen``), or None where execnet does not say."""
    pid = getattr(_worker_popen(node), "pid", None)
    return pid if isinstance(pid, int) else None


def worker_exit(node: Any) -> str:
    """How a crashed xdist worker ended (``crashed with SIGSEGV``, ``exited with code 3``), read off its process
    where execnet's popen gateway exposes it; ``crashed`` otherwise."""
    popen = _worker_popen(node)
    if popen is None:
        return "crashed"
    try:
        returncode = popen.wait(timeout=10)
    except Exception:  # still running, or not a Popen after all
        return "crashed"
    if not isinstance(returncode, int):
        return "crashed"
    if returncode < 0:
        return f"crashed with {signal_name(-returncode)}"
    return f"exited with code {returncode}"


def scheduler_protocol_known() -> bool:
    """Whether :class:`pytest_aoti.debug.in_order.InOrderScheduling` speaks this xdist's scheduler protocol."""
    return _major("pytest-xdist") == _XDIST_MAJOR
