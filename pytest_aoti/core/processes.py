"""The processes pytest-aoti starts (rerun children, minify's judges): each in a session of its own, so that it and
whatever it starts (compile workers) end together as a group, out of reach of the terminal's Ctrl-C, which the
parent handles; and each dies with the process that started it, even when that one is killed with SIGKILL.
Imports neither torch nor pytest."""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, resolved before any fork (a forked child must not load libraries); None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


def die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (Linux's PR_SET_PDEATHSIG). Spawns happen on
    pytest's main thread, so that is when pytest ends, however it ends."""
    prctl = _prctl()
    if prctl is None:
        return
    parent = os.getppid()
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(1)


def start(command: list[str], **popen_args: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` in a new session, bound to this process's life."""
    _prctl()  # resolved here, in the parent
    return subprocess.Popen(command, start_new_session=True, preexec_fn=die_with_parent, **popen_args)


def run(command: list[str], *, timeout: float, **popen_args: Any) -> int:
    """Run ``command`` as :func:`start` does and return its exit status; at ``timeout`` its group is killed and
    ``subprocess.TimeoutExpired`` raised."""
    process = start(command, **popen_args)
    try:
        return process.wait(timeout=timeout)
    finally:
        signal_group(process.pid, signal.SIGKILL)  # its compile workers too
        process.wait()


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pid`` leads; one that has ended already is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
