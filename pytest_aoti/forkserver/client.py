"""The session's side of the fork server: start it, and start children from it.

:mod:`pytest_aoti.debug.warm_starts` owns the session's server: the process that may start children (the user's
session, or an xdist controller) *plans* one at configure time when debugging is on (:func:`plan_server`: the
server's directory, and its socket path handed to its xdist workers through ``PYTEST_AOTI_FORK_SERVER``), and
launches it when the first test that uses a pytest-aoti fixture is set up (:func:`launch_server`): the server's
warm-up (~7 CPU-s) then runs beside that test's compile, and a session whose tests compile nothing never pays it. A
child asked for before the launch starts fresh: nobody waits on a server that is only planned. A process that needs a
child and has no server (a test marked ``aoti_ima`` without ``--aoti-debug``) starts its own then.
``PYTEST_AOTI_FORK_SERVER=0`` turns it off: every child then starts fresh, as it did before.

:func:`start_forked` returns a :class:`ForkedProcess`, which waits and reports like ``subprocess.Popen``, or None
where a child must start fresh: no server (off, unsafe, dead), a command that is not ``python -m pytest``, or an
environment the server cannot give a fork. Imports neither torch nor pytest.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from pytest_aoti.core import processes
from pytest_aoti.core.owned_dirs import make_owned_dir
from pytest_aoti.forkserver.server import SERVER_ONLY_ENV
from pytest_aoti.forkserver.wire import Ended, Forked, ForkRequest, Ready, Refused, Unsafe, WireError, decode, encode

FORK_SERVER_ENV = "PYTEST_AOTI_FORK_SERVER"
UNSAFE_MARK = "unsafe"  # beside the socket: the server will never be ready
PLANNED_MARK = "planned"  # beside the socket until the server is launched: a child starts fresh rather than wait
_DIR_PREFIX = "pytest-aoti-fork-"
# All a server's directory ever holds besides its owner (core/owned_dirs.py): what a later session may remove once
# the session that made it is dead (it cannot remove it itself when killed with SIGKILL).
_DIR_CONTENTS = frozenset({"socket", "server.log", UNSAFE_MARK, PLANNED_MARK})
_OFF = ("0", "off", "no", "false")
# How long a child waits for a server still warming up before it starts fresh instead. A fresh interpreter pays the
# same warm-up, so waiting is never slower unless the server is stuck.
_READY_WAIT_SECONDS = 600.0


class ForkServer:
    """A fork server: planned (its directory, its socket path) until :meth:`launch` starts its process; then its
    process, its socket and what it said when it was ready."""

    def __init__(self, environment: Mapping[str, str] | None = None) -> None:
        self.dir = make_owned_dir(_DIR_PREFIX, contents=_DIR_CONTENTS)
        # Over this process's environment: what torch reads once at import, as most of its children will want it.
        self.environment = dict(environment or {})
        self.socket_path = str(self.dir / "socket")
        self.started: float | None = None
        self.ready_seconds: float | None = None
        self.unsafe: str | None = None
        self.forked = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        (self.dir / PLANNED_MARK).touch()

    def launch(self) -> None:
        """Start the server's process, once. Where it cannot start (its directory removed meanwhile, by a tmp
        cleaner), every child starts fresh instead."""
        if self.process is not None or self._ready.is_set():
            return
        self.started = time.monotonic()
        env = {**os.environ, **self.environment, SERVER_ONLY_ENV: os.environ.get(SERVER_ONLY_ENV, "1")}
        env.pop(FORK_SERVER_ENV, None)
        # The server says Ready or Unsafe on a pipe of its own, not on its stdout: whatever the interpreter's start
        # prints there (a sitecustomize, a module's banner) goes to its log and is never read as its word.
        readiness_read, readiness_write = os.pipe()
        try:
            with (self.dir / "server.log").open("wb") as log:
                self.process = processes.start(
                    [sys.executable, "-m", "pytest_aoti.forkserver.server", self.socket_path, str(readiness_write)],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(readiness_write,),
                )
            (self.dir / PLANNED_MARK).unlink(missing_ok=True)  # from here a child waits for the socket
        except (OSError, subprocess.SubprocessError) as error:
            os.close(readiness_read)
            self.unsafe = f"it could not start: {error}"
            self._ready.set()
            return
        finally:
            os.close(readiness_write)  # the server holds the only write end: its exit ends the read
        readiness = os.fdopen(readiness_read, "rb")
        threading.Thread(target=self._read_readiness, args=(readiness,), daemon=True).start()

    def _read_readiness(self, readiness: IO[bytes]) -> None:
        assert self.process is not None and self.started is not None
        with readiness:
            line = readiness.readline()
        said: Ready | Unsafe | None = None
        problem = f"it ended before it was ready (see {self.dir / 'server.log'})"
        if line:
            try:
                said = decode(line, Ready, Unsafe)
            except WireError as error:
                problem = f"it said {error} (see {self.dir / 'server.log'})"
        if isinstance(said, Ready):
            self.ready_seconds = time.monotonic() - self.started
        else:
            self.unsafe = said.reason if isinstance(said, Unsafe) else problem
            # The processes this one handed the socket to (xdist workers) stop waiting for it and start fresh (as
            # they do once its directory is gone).
            try:
                (self.dir / UNSAFE_MARK).write_text(self.unsafe)
            except OSError:
                pass
        self._ready.set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout) and self.unsafe is None

    def close(self) -> None:
        if self.process is not None:
            stdin = self.process.stdin
            if stdin is not None:
                try:
                    stdin.close()  # the server's loop ends
                except OSError:
                    pass
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            processes.signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_own_server: ForkServer | None = None
_lock = threading.Lock()


def turned_off() -> bool:
    return os.environ.get(FORK_SERVER_ENV, "").strip().lower() in _OFF


def plan_server(environment: Mapping[str, str] | None = None) -> ForkServer | None:
    """Plan this process's fork server (once): its directory, and its socket path handed to the processes started
    from here (xdist workers) through the environment. :func:`launch_server` starts it, with ``environment`` over
    this process's (what torch reads once, as the children it will mostly fork want it: a child that differs
    starts fresh). None when turned off."""
    global _own_server
    with _lock:
        if _own_server is None and not turned_off():
            _own_server = ForkServer(environment)
            os.environ[FORK_SERVER_ENV] = _own_server.socket_path
        return _own_server


def launch_server() -> None:
    """Start this process's planned fork server, if it planned one: a test that compiles is being set up."""
    with _lock:
        if _own_server is not None:
            _own_server.launch()


def start_server() -> ForkServer | None:
    """Plan this process's fork server and launch it now. None when turned off."""
    server = plan_server()
    launch_server()
    return server


def stop_server() -> ForkServer | None:
    """Stop this process's fork server, if it started one; returns it, for its numbers."""
    global _own_server
    with _lock:
        server, _own_server = _own_server, None
    if server is not None:
        if os.environ.get(FORK_SERVER_ENV) == server.socket_path:
            del os.environ[FORK_SERVER_ENV]
        server.close()
    return server


def own_server() -> ForkServer | None:
    return _own_server


def _socket_path(*, for_a_compile: bool) -> str | None:
    """The socket of a ready server: this process's own (launched now for a compile if it was only planned), else the
    one a parent process handed down (whose socket appears once it is ready), else one started now. A child that will
    not compile (``for_a_compile`` false) takes only a server that is ready now: it starts fresh faster than a server
    warms up for it (docs/benchmarks.md#children-and-the-fork-server). Nobody waits for a handed-down server that is
    only planned: the parent may never launch it."""
    handed_down = os.environ.get(FORK_SERVER_ENV, "").strip()
    if turned_off():
        return None
    wait = _READY_WAIT_SECONDS if for_a_compile else 0.0
    server = _own_server
    if server is None and handed_down:
        deadline = time.monotonic() + wait
        directory = os.path.dirname(handed_down)
        while not os.path.exists(handed_down):
            marks = (UNSAFE_MARK, PLANNED_MARK)
            gone = not os.path.isdir(directory) or any(os.path.exists(os.path.join(directory, m)) for m in marks)
            if gone or time.monotonic() >= deadline:
                return None
            time.sleep(0.2)
        return handed_down
    if not for_a_compile:
        return server.socket_path if server is not None and server.wait_ready(0) else None
    server = start_server()
    if server is None or not server.wait_ready(wait):
        return None
    return server.socket_path


def forkable(command: list[str]) -> tuple[list[str], bool] | None:
    """The pytest arguments and ``-P`` of ``command`` when it is ``python -u [-P] -m pytest ARGS`` run by this
    interpreter; None for anything else (a tool such as compute-sanitizer wrapping it)."""
    if len(command) < 4 or command[0] != sys.executable or command[1] != "-u":
        return None
    safe_path = command[2] == "-P"
    rest = command[3:] if safe_path else command[2:]
    if rest[:2] != ["-m", "pytest"]:
        return None
    return rest[2:], safe_path


def start_forked(
    command: list[str], *, env: Mapping[str, str], cwd: Path, log_path: Path, compiles: bool = True
) -> ForkedProcess | None:
    """Start ``command`` as a fork of the session's fork server, its output to ``log_path``; None where it must
    start fresh instead. A child that will not compile (``compiles`` false: an isolated test that uses no
    pytest-aoti fixture) is forked only by a server that is ready now."""
    parsed = forkable(command)
    if parsed is None:
        return None
    path = _socket_path(for_a_compile=compiles)
    if path is None:
        return None
    args, safe_path = parsed
    request = ForkRequest(args=tuple(args), safe_path=safe_path, cwd=str(cwd), env=dict(env), log=str(log_path))
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
        connection.sendall(encode(request).encode())
        reader = connection.makefile("rb")
        answer = decode(reader.readline(), Forked, Refused)
    except (OSError, WireError):  # a server gone, or one of another version: the child starts fresh
        connection.close()
        return None
    if isinstance(answer, Refused):
        connection.close()
        return None
    if _own_server is not None:
        _own_server.forked += 1
    return ForkedProcess(answer.pid, connection, reader)


class ForkedProcess:
    """A child forked by the server, waited for as ``subprocess.Popen`` is: ``pid``, ``returncode``,
    ``wait(timeout)`` (raising ``subprocess.TimeoutExpired``). The server tells its exit status over the
    connection; a server gone before that means the child went with it (it dies with the server)."""

    def __init__(self, pid: int, connection: socket.socket, reader: IO[bytes]) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.args = f"fork server child {pid}"
        self._connection, self._reader = connection, reader
        self._ended = threading.Event()
        threading.Thread(target=self._read_end, daemon=True).start()

    def _read_end(self) -> None:
        try:
            line = self._reader.readline()
            self.returncode = decode(line, Ended).returncode if line else -9
        except (OSError, WireError):
            self.returncode = -9
        finally:
            self._connection.close()
            self._ended.set()

    def poll(self) -> int | None:
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode
