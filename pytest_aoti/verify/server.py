"""The interpreter that verifies packages for this process, one package at a time (the parent's side).

A package is foreign code that can crash the process that loads it. So packages are verified in an interpreter of
their own (``python -m pytest_aoti.verify --serve``), which imports torch once and then verifies package after
package, each on request: the price of isolation is one interpreter, not one per package. A package that crashes
it (or hangs it, or leaves its CUDA context unusable) is the one it was verifying when it ended; the next request
starts a new interpreter.

Requests go to the interpreter's stdin and answers come back on a pipe of their own, one JSON line each, so that
what a package's runtime prints cannot garble them: first ``{"ready": PID}`` once its imports are done, then per
request ``{"device": ..., "lines": [...]}`` or ``{"error": ...}``, with ``"last": true`` when it ends after that
answer. Its temp files (a crashed load's extraction too) live in a scratch dir that goes with it, also on SIGTERM.
Imports neither torch nor pytest.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from pytest_aoti.core import processes
from pytest_aoti.core.machine import inductor_cache_dir
from pytest_aoti.core.owned_dirs import make_owned_dir
from pytest_aoti.core.processes import signal_group, signal_name

# Generous: an interpreter imports torch, or loads a package and runs it once. Past this without an answer, the
# package it is on (or its imports) hangs.
CHILD_TIMEOUT = 900.0
SCRATCH_PREFIX = "pytest-aoti-verify-"
_CLOSE_GRACE_SECONDS = 60.0
Answer = dict[str, Any]


class Terminated(BaseException):
    """SIGTERM arrived while this process waited for the verifying interpreter, which is ended and its temp files
    removed: the caller ends as a process asked to stop (pytest: ``pytest.exit(returncode=143)``)."""


class VerifyServer:
    """One verifying interpreter at a time, started with ``options`` (the CLI's ``--rtol``, ``--atol``,
    ``--import``) when a request needs one. ``started`` counts the interpreters it started. Close it (or use it
    as a context manager) to end the interpreter and remove its temp files."""

    def __init__(self, options: Sequence[str] = ()) -> None:
        self._options = list(options)
        self._process: subprocess.Popen[bytes] | None = None
        self._scratch: Path | None = None
        self._answers: int | None = None  # the read end of the answer pipe
        self._buffer = b""
        self._said = 0  # how much of the interpreter's stderr was passed on
        # Why no interpreter can start (a failing --import): the answer for every package, none started again.
        self._cannot_start: str | None = None
        self._waiting = False
        self._previous_sigterm: Any = None
        self._sigterm_installed = False
        self.started = 0

    def __enter__(self) -> VerifyServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def verify(self, package: Path, device: str | None) -> Answer:
        """The answer for ``package`` on ``device`` (None: the package's own): ``{"device", "lines"}``, or
        ``{"error"}`` naming the file, also when the interpreter crashed or hung on it."""
        if self._process is not None and self._process.poll() is not None:
            self._stop()  # it ended after its last answer, on its own: not this package's doing
        if self._process is None and self._cannot_start is None:
            self._start()
        if self._process is None:
            return {"error": f"{package}: {self._cannot_start}"}
        request = json.dumps({"package": str(package), "device": device}) + "\n"
        try:
            assert self._process.stdin is not None
            self._process.stdin.write(request.encode())
            self._process.stdin.flush()
        except BrokenPipeError:
            pass  # it ended already: the answer below says how
        answer, ended = self._next_answer()
        if answer is None:
            return {"error": f"{package}: {ended}"}
        if answer.get("last"):  # its CUDA context is unusable: the next package gets a new interpreter
            self._stop()
        return answer

    def close(self) -> None:
        """End the interpreter (its stdin closed, it finishes) and remove its temp files; restore SIGTERM."""
        process = self._process
        if process is not None and process.stdin is not None:
            try:
                process.stdin.close()
                process.wait(timeout=_CLOSE_GRACE_SECONDS)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._stop()
        self._restore_sigterm()

    def _start(self) -> None:
        self._install_sigterm()
        # Owned by this process: should it be killed with SIGKILL, the next one that verifies removes it.
        self._scratch = make_owned_dir(SCRATCH_PREFIX)
        self._buffer, self._said = b"", 0
        read_end, write_end = os.pipe()
        command = [
            sys.executable,
            *(["-P"] if sys.flags.safe_path else []),
            *("-m", "pytest_aoti.verify", "--serve", f"--answers-fd={write_end}", *self._options),
        ]
        try:
            with (self._scratch / "stderr").open("wb") as stderr:
                self._process = processes.start(
                    command,
                    env=_child_env(self._scratch),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    pass_fds=(write_end,),
                )
        except BaseException:
            os.close(read_end)
            self._stop()  # its temp dir
            raise
        finally:
            os.close(write_end)  # the interpreter holds its own: at its end, reading gives EOF
        self._answers = read_end
        self.started += 1
        ready, ended = self._next_answer(starting=True)
        if ready is None:
            self._cannot_start = ended

    def _next_answer(self, *, starting: bool = False) -> tuple[Answer | None, str]:
        """The interpreter's next answer; or None and how it ended (then it is stopped, its temp files removed)."""
        self._waiting = True
        try:
            line, hung = self._read_line(CHILD_TIMEOUT)
        except BaseException:  # Ctrl-C, SIGTERM: the package it is on is not waited for
            self._stop()
            raise
        finally:
            self._waiting = False
        said = self._pass_on_stderr()
        if line is not None:
            try:
                answer: Answer = json.loads(line)
                return answer, ""
            except ValueError:
                pass  # cut short by a crash
        ended = self._how_it_ended(hung, said, starting)
        self._stop()
        return None, ended

    def _read_line(self, timeout: float) -> tuple[bytes | None, bool]:
        """A whole line from the answer pipe: (line, False); (None, False) at its end; (None, True) past
        ``timeout`` without one."""
        assert self._answers is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                return None, True
            chunk = os.read(self._answers, 65536)
            if not chunk:
                return None, False
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line, False

    def _pass_on_stderr(self) -> str:
        """What the interpreter wrote to stderr since last asked (the package runtime's own account of an error),
        passed on to this process's stderr, where pytest captures it into the test's report."""
        assert self._scratch is not None
        try:
            with (self._scratch / "stderr").open("rb") as stream:
                stream.seek(self._said)
                said = stream.read().decode(errors="replace")
        except OSError:
            return ""
        self._said += len(said.encode(errors="replace"))
        sys.stderr.write(said)
        return said

    def _how_it_ended(self, hung: bool, said: str, starting: bool) -> str:
        """Why the interpreter gave no answer, with the last line it wrote to stderr."""
        assert self._process is not None
        if hung:
            doing = "its imports hang" if starting else "loading or running the package hangs"
            return f"no answer within {CHILD_TIMEOUT:g} s: {doing}"
        returncode = self._process.wait()
        lines = said.strip().splitlines()
        last = f": {lines[-1]}" if lines else ""
        how = signal_name(-returncode) if returncode < 0 else f"exit status {returncode}"
        if starting:
            return f"the interpreter that verifies packages could not start ({how}){last}"
        if returncode < 0:
            return f"the package crashed the process that loaded and ran it ({how}){last}"
        return f"the process that loaded and ran the package ended ({how}) before answering{last}"

    def _stop(self) -> None:
        """Kill the interpreter's process group, if any, and remove its temp files."""
        if self._process is not None:
            signal_group(self._process.pid, signal.SIGKILL)
            self._process.wait()
            if self._process.stdin is not None:
                try:
                    self._process.stdin.close()
                except OSError:
                    pass  # a request it never read
            self._process = None
        if self._answers is not None:
            os.close(self._answers)
            self._answers = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _install_sigterm(self) -> None:
        """While an interpreter may run, SIGTERM first ends it and removes its temp files: a default SIGTERM would
        end this process without cleaning up (Python runs no ``finally`` for it). Only from the main thread, which
        alone receives signals; a SIGTERM that was ignored stays ignored."""
        if self._sigterm_installed or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None or previous == signal.SIG_IGN:  # None: a handler set outside Python, not restorable
            return
        self._previous_sigterm = previous
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._sigterm_installed = True

    def _restore_sigterm(self) -> None:
        if self._sigterm_installed and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._sigterm_installed = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Kill the interpreter and remove its temp files. Waiting for an answer: let the caller end as asked
        (:class:`Terminated`, as pytest-aoti's isolated tests do). Anywhere else (another test runs): then SIGTERM
        does what it did before."""
        waiting = self._waiting
        self._stop()
        self._restore_sigterm()
        if waiting:
            raise Terminated
        os.kill(os.getpid(), signal.SIGTERM)


def _child_env(scratch: Path) -> dict[str, str]:
    """This process's environment with the interpreter's temp files in ``scratch``, and Inductor's cache where it
    was."""
    env = dict(os.environ)
    # Inductor's default cache is under TMPDIR: a package the loader hands to Inductor reuses this machine's.
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache_dir()))
    env["TMPDIR"] = str(scratch)
    return env
