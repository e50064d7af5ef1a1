"""The fork server: one warm process per session that forks pytest-aoti's children.

Run as ``python -m pytest_aoti.forkserver.server SOCKET READY_FD`` by :mod:`~pytest_aoti.forkserver.client`, with
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` in its environment: importing Inductor asks whether CUDA is available, and the
default answer (``cudaGetDeviceCount``) initialises the CUDA driver, after which no forked child can use CUDA ("Cannot
re-initialize CUDA in forked subprocess", seen on the H200). NVML answers without that. The server imports pytest,
torch and Inductor and runs Inductor's CPU probes, then checks with a canary fork that a child could still start CUDA;
only then does it say it is ready (``Ready`` on a pipe the client handed it, or ``Unsafe`` and exit; its stdout and
stderr are its log).

Each connection to SOCKET carries one ``ForkRequest`` and gets ``Forked`` when the child started (or ``Refused``:
start it fresh instead), then ``Ended`` when it ended; :mod:`~pytest_aoti.forkserver.wire` holds the messages. A
request that is not one is written to the server's log and its connection closed. The server ends when its stdin
closes or the process that started it dies.
"""

from __future__ import annotations

import faulthandler
import io
import os
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import warnings
from typing import Any

from pytest_aoti.core import processes
from pytest_aoti.forkserver.wire import Ended, Forked, ForkRequest, Ready, Refused, Unsafe, WireError, decode, encode

# The warning filters of a fresh interpreter (with this one's -W and PYTHONWARNINGS, which a child shares or starts
# fresh): what a child gets back, not those the server's imports and warm-up added.
_FRESH_WARNING_FILTERS = list(warnings.filters)
# Read by the child's interpreter at start-up, which a fork does not redo: handled in _become_child.
_APPLIED_PYTHON_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE")
# Read once, at start-up or when a library loads, and not re-read in a fork: a request that changes one is refused.
# The thread pools' settings (OpenMP, MKL, OpenBLAS) are read when torch loads them; the others by torch's C++ when it
# is imported (checked by tests/test_warm_children.py against a fresh child).
_UNAPPLIABLE_PREFIXES = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_")
_UNAPPLIABLE_ENV = (
    "TORCH_SHOW_CPP_STACKTRACES",
    "TORCH_CPP_LOG_LEVEL",
    "TORCH_DISABLE_ADDR2LINE",
    "ATEN_CPU_CAPABILITY",
)
# Applied in the child (torch.set_num_threads), as a fresh torch applies it: a positive count, where the other thread
# pool settings are the server's.
THREADS_ENV = "OMP_NUM_THREADS"
SERVER_ONLY_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
# The first line of a forked child's log: where it came from, for whoever reads the log.
FORKED_MARK = "[pytest-aoti] forked warm from the fork server"


def warm_up() -> None:
    """What every child would do first: import pytest, torch, torch.export and Inductor, and run Inductor's CPU
    vector-ISA probes (their verdicts are cached in this process, so every fork inherits them)."""
    import pytest  # noqa: F401  (the child runs it)
    import torch.export  # noqa: F401

    from pytest_aoti.core import isa_verdicts

    # What a compile does first (core.isa_verdicts): Inductor's compile path imported, and its ISA probes answered
    # from the machine's record or run (and recorded for the rest).
    isa_verdicts.ready_for_compile()


def unsafe_reason() -> str | None:
    """Why a fork of this process would not be a clean start, or None: CUDA touched here (a canary child could not
    start CUDA), or torch without the means to re-read the environment a child gets."""
    from pytest_aoti.core import torch_private

    if torch_private.cuda_initialized():
        return "CUDA was initialised while warming up"
    if not torch_private.can_reread_env_configs():
        return "this torch's config modules cannot be re-read in a child"
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch_private.cuda_fork_poisoned() else 0)
    _, status = os.waitpid(pid, 0)
    # A CUDA build of torch on a machine without an NVIDIA GPU (no NVML) asks the CUDA runtime whether a GPU is there,
    # which marks every fork: harmless where no child can use a GPU anyway.
    if os.waitstatus_to_exitcode(status) != 0 and _nvidia_devices():
        return "a forked child could not start CUDA (the CUDA driver was initialised while warming up)"
    return None


def _nvidia_devices() -> list[str]:
    """The NVIDIA GPU device nodes this machine has (a container given a GPU has them too)."""
    import glob

    return glob.glob("/dev/nvidia[0-9]*")


def refusal(env: dict[str, str], startup_env: dict[str, str]) -> str | None:
    """Why a child with ``env`` must start fresh instead, or None."""
    for name in sorted(set(env) | set(startup_env)):
        if name in _APPLIED_PYTHON_ENV or name == SERVER_ONLY_ENV or env.get(name) == startup_env.get(name):
            continue
        if name == THREADS_ENV and _thread_count(env) is not None:
            continue
        if name.startswith(_UNAPPLIABLE_PREFIXES) or name in _UNAPPLIABLE_ENV:
            return f"{name} differs from the fork server's, and only a fresh interpreter reads it"
    return None


def _thread_count(env: dict[str, str]) -> int | None:
    """``OMP_NUM_THREADS`` as one positive count (not a list of nested levels), else None."""
    value = env.get(THREADS_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _as_a_fresh_interpreter(env: dict[str, str], startup_env: dict[str, str]) -> None:
    """In the forked child: what a fresh interpreter starts with and a fork inherits from the server instead. The
    warning filters of a fresh interpreter; its own random state (numpy's and torch's global generators: Python's
    ``random`` reseeds itself after a fork); the thread count ``OMP_NUM_THREADS`` asks for. The string-hash seed
    cannot be changed: every fork shares the server's (debug/stages.py starts a stage's reruns fresh for it)."""
    warnings.resetwarnings()  # also makes every module's record of warnings already shown out of date
    filters: list[Any] = warnings.filters  # type: ignore[assignment]  # a list, typeshed says Sequence
    filters.extend(_FRESH_WARNING_FILTERS)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    import torch

    torch.default_generator.seed()  # a seed of its own, as a fresh torch draws (CUDA's generators start in the child)
    threads = _thread_count(env)
    if threads is not None and env.get(THREADS_ENV) != startup_env.get(THREADS_ENV):
        torch.set_num_threads(threads)


def _unbuffered_stdio() -> None:
    """``python -u``: the child's text goes straight to the log, so a crash loses none of it."""
    for fd, name, errors in ((1, "stdout", "strict"), (2, "stderr", "backslashreplace")):
        stream = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors=errors)
        stream.reconfigure(write_through=True, line_buffering=True)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _become_child(request: ForkRequest, startup_env: dict[str, str], base_path: list[str]) -> None:
    """In the forked process: become ``python -u [-P] -m pytest ARGS`` started in ``cwd`` with ``env``. Never
    returns."""
    code = 1
    try:
        os.setsid()  # a process group of its own, as a spawned child has: the parent stops it and its workers
        processes.die_with_parent()
        log = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        _unbuffered_stdio()
        print(f"{FORKED_MARK} {os.getppid()}", flush=True)
        env = dict(request.env)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # TMPDIR read afresh
        pythonpath = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[:] = [*([] if request.safe_path else [request.cwd]), *pythonpath, *base_path]
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        if env.get("PYTHONFAULTHANDLER"):
            faulthandler.enable()
        from pytest_aoti.core import torch_private

        changed = {name for name in set(env) | set(startup_env) if env.get(name) != startup_env.get(name)}
        torch_private.reread_env_configs(changed)
        _as_a_fresh_interpreter(env, startup_env)
        # pytest imports the plugin itself, rewriting its asserts: a module imported before would be warned about.
        for name in [name for name in sys.modules if name == "pytest_aoti" or name.startswith("pytest_aoti.")]:
            del sys.modules[name]
        import pytest

        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request.args]
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    # No exit tax: what the child reports is flushed as it happens; the interpreter's teardown (seconds of it after
    # a compile) would only delay the parent. Its compile workers are ended with its process group.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class _Server:
    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.startup_env = dict(os.environ)
        self.base_path = _base_path()
        self.selector = selectors.DefaultSelector()
        self.waiting: dict[int, socket.socket] = {}  # child pid -> the connection told when it ends
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        os.set_blocking(wake_read, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.selector.register(wake_read, selectors.EVENT_READ, "children")
        self.selector.register(sys.stdin, selectors.EVENT_READ, "stdin")

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "accept":
                    connection, _ = self.listener.accept()
                    self._handle(connection)
                elif key.data == "children":
                    _drain(key.fd)
                    self._reap()
                elif not sys.stdin.readline():  # the client closed our stdin: the session is over
                    return

    def _handle(self, connection: socket.socket) -> None:
        try:
            connection.settimeout(10)
            request = decode(connection.makefile("rb").readline(), ForkRequest)
            reason = refusal(dict(request.env), self.startup_env)
            if reason is not None:
                connection.sendall(encode(Refused(reason)).encode())
                connection.close()
                return
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                self._leave()
                _become_child(request, self.startup_env, self.base_path)
            self.waiting[pid] = connection
            connection.sendall(encode(Forked(pid)).encode())
        except WireError as error:  # a client of another version, or not pytest-aoti's: this request only fails
            print(f"pytest-aoti fork server: a bad request: {error}", file=sys.stderr, flush=True)
            connection.close()
        except OSError as error:
            print(f"pytest-aoti fork server: a request failed: {error!r}", file=sys.stderr, flush=True)
            connection.close()

    def _leave(self) -> None:
        """In a forked child: drop the server's signal handling and the other clients' connections."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for connection in self.waiting.values():
            connection.close()
        self.selector.close()
        self.listener.close()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            connection = self.waiting.pop(pid, None)
            if connection is not None:
                try:
                    connection.sendall(encode(Ended(os.waitstatus_to_exitcode(status))).encode())
                except OSError:
                    pass  # the client went away; the child ended all the same
                connection.close()


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _base_path() -> list[str]:
    """sys.path as a fresh ``python -m`` has it, less the dir this server was started in (``-m`` put it first) and
    the PYTHONPATH it was started with: each child puts its own cwd and PYTHONPATH first."""
    startup_pythonpath = {entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry}
    return [entry for entry in sys.path[1:] if entry not in startup_pythonpath]


def main(socket_path: str, readiness_fd: int) -> None:
    processes.die_with_parent()
    # The readiness line goes on the client's pipe of its own; stdout is the server's log, so whatever the imports
    # print while warming up (a sitecustomize, a module's banner) is never read as the server's word.
    readiness = os.fdopen(readiness_fd, "w")
    # Forking a process with a thread of torch's own is what this server is for; the canary checks what matters.
    warnings.filterwarnings("ignore", message=r".*multi-threaded, use of fork\(\)", category=DeprecationWarning)
    warm_up()
    reason = unsafe_reason()
    if reason is not None:
        readiness.write(encode(Unsafe(reason)))
        readiness.close()
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    server = _Server(listener)
    readiness.write(encode(Ready(os.getpid())))
    readiness.close()  # no forked child inherits the client's pipe
    server.serve()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
