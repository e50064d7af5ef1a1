"""Children forked warm from pytest-aoti's fork server (pytest_aoti/forkserver/): each is still a process of its own.

One real server for the module (its warm-up imports torch and Inductor and runs the CPU probes); each test starts real
``python -m pytest`` children from it, as the debug stages and isolated tests do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_aoti.forkserver import client
from pytest_aoti.forkserver.server import FORKED_MARK
from tests.conftest import plugin_args

MODEL_TEST = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2


def test_model(aoti_compile):
    compiled = aoti_compile(Model(), (torch.randn(4, 8),))
    compiled(torch.randn(4, 8))
"""


@pytest.fixture(scope="module")
def server() -> Iterator[client.ForkServer]:
    started = client.start_server()
    assert started is not None, "PYTEST_AOTI_FORK_SERVER turns it off in this environment"
    assert started.wait_ready(900), started.unsafe
    yield started
    client.stop_server()


def _child(
    directory: Path, name: str, env: dict[str, str] | None = None, *, refused_is_fresh: bool = False
) -> tuple[int, str, bool]:
    """Run ``pytest`` in ``directory`` as the plugin runs its children; returns (exit status, log, forked). A child
    the server refuses starts fresh where ``refused_is_fresh``, as debug/child.py starts it."""
    log = directory / f"{name}.log"
    command = [
        sys.executable,
        "-u",
        "-m",
        "pytest",
        *plugin_args(),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",  # draws as the interpreter starts them, not from a seed of the run
        "-s",
        "-q",
        f"--basetemp={directory}/{name}.bt",
    ]
    # A package cache of the test's own: a package compiled by another run in another mode is never loaded.
    child_env = {**os.environ, "XDG_CACHE_HOME": str(directory / "xdg"), **(env or {})}
    forked = client.start_forked(command, env=child_env, cwd=directory, log_path=log)
    if forked is None and refused_is_fresh:
        with log.open("wb") as output:
            returncode = subprocess.run(
                command, cwd=directory, env=child_env, stdout=output, stderr=subprocess.STDOUT, timeout=900
            ).returncode
        return returncode, log.read_text(), False
    assert forked is not None, "the server refused a plain child"
    return forked.wait(900), log.read_text(), log.read_text().startswith(FORKED_MARK)


# On every torch release .ci/run tests: the fork server serves on a CUDA build without a GPU (its canary's fork flag
# is harmless there), and a forked stage child re-reads its environment (printer mode 2, NaN asserts).
@pytest.mark.torch_matrix
def test_a_stage_environment_takes_effect_in_a_warm_child(server: client.ForkServer, tmp_path: Path) -> None:
    """Inductor reads the printer mode, NaN asserts and the wrapper's -O level when it is imported, which the server
    did before this child's environment existed: the child's compile must still follow them."""
    (tmp_path / "test_model.py").write_text(MODEL_TEST)
    env = {
        "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER": "2",
        "TORCHINDUCTOR_NAN_ASSERTS": "1",
        "AOT_INDUCTOR_COMPILE_WRAPPER_OPT_LEVEL": "O0",
    }
    code, log, forked = _child(tmp_path, "stage", env)
    assert forked and code == 0, log
    assert "[  after_launch - " in log, log  # the printer's blocks: the package was compiled in printer mode 2
    code, log, forked = _child(tmp_path, "plain")
    assert forked and code == 0, log
    assert "after_launch" not in log, log  # and the next child, without it, is back to the default


# What a child's test sees of what torch and the interpreter read once (at import, or at first use), as one JSON line.
EFFECTS_TEST = """
import json
import sys
import warnings

import torch


def test_effects():
    try:
        torch.empty(2).view(3)
    except RuntimeError as error:
        cpp_frames = "Exception raised from" in str(error)
    numpy = sys.modules.get("numpy")
    effects = {
        "threads": torch.get_num_threads(),
        "cpp_frames": cpp_frames,
        "allocator": torch._C._accelerator_getAllocatorSettings(),
        "torch_draw": torch.rand(1).item(),
        "warning_filters": [repr(f) for f in warnings.filters],
        "numpy_draw": float(numpy.random.rand()) if numpy is not None else None,
    }
    print("EFFECTS " + json.dumps(effects))
"""
# Each drawn afresh by every fresh interpreter: a fork must not repeat its siblings' (torch's and numpy's global
# generators).
_PER_PROCESS = ("torch_draw", "numpy_draw")
_STAGE_KERNELS = {
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
    "CUDA_LAUNCH_BLOCKING": "1",
    "AOTI_RUNTIME_CHECK_INPUTS": "1",
    "TORCHINDUCTOR_NAN_ASSERTS": "1",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
    "INDUCTOR_PROVENANCE": "1",
    "AOT_INDUCTOR_COMPILE_WRAPPER_OPT_LEVEL": "O0",
    "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER": "3",
}


def _effects(log: str) -> dict[str, object]:
    line = next((line for line in log.splitlines() if line.startswith("EFFECTS ")), None)
    assert line is not None, log
    effects: dict[str, object] = json.loads(line.removeprefix("EFFECTS "))
    return effects


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OMP_NUM_THREADS": "1"},
        {"MKL_NUM_THREADS": "1"},
        {"TORCH_SHOW_CPP_STACKTRACES": "1"},
        {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        _STAGE_KERNELS,
    ],
    ids=[
        "as the server",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "TORCH_SHOW_CPP_STACKTRACES",
        "allocator",
        "stage kernels",
    ],
)
def test_a_warm_child_starts_as_a_fresh_one_would(
    server: client.ForkServer, tmp_path: Path, env: dict[str, str]
) -> None:
    """What torch reads once (thread counts, C++ stack traces, allocator settings: each variable the stages set, and
    the ones users commonly set) and what an interpreter starts with (warning filters, random state) are in a child
    the fork server gives as they are in a fresh interpreter with the same environment; where a fork cannot give
    them, the server refuses and the child starts fresh (issue #62 items 7, 13)."""
    (tmp_path / "test_effects.py").write_text(EFFECTS_TEST)
    code, log, forked = _child(tmp_path, "warm", env, refused_is_fresh=True)
    assert code == 0, log
    warm, cold = _effects(log), _fresh_effects(tmp_path, env)
    for key in _PER_PROCESS:
        warm.pop(key), cold.pop(key)
    assert warm == cold, f"forked: {forked}"
    if env in ({}, {"OMP_NUM_THREADS": "1"}):
        assert forked  # the server gives these itself
    if not env:  # two forks draw as two fresh interpreters do: apart
        _, sibling, _ = _child(tmp_path, "sibling")
        for key in _PER_PROCESS:
            assert _effects(sibling)[key] != _effects(log)[key], key


def _fresh_effects(directory: Path, env: dict[str, str]) -> dict[str, object]:
    """:data:`EFFECTS_TEST`'s effects in a fresh interpreter with ``env``."""
    log = directory / "fresh.log"
    command = [sys.executable, "-u", "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-p", "no:randomly"]
    with log.open("wb") as output:
        fresh = subprocess.run(
            [*command, "-s", "-q", f"--basetemp={directory}/fresh.bt"],
            cwd=directory,
            env={**os.environ, "XDG_CACHE_HOME": str(directory / "xdg"), **env},
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    assert fresh.returncode == 0, log.read_text()
    return _effects(log.read_text())


def test_a_server_started_for_the_debug_stages_forks_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under --aoti-debug the server imports torch with what the stages set and torch reads once
    (``READ_ONCE_STAGE_ENV``): a stage is forked, with its C++ stack traces, as a fresh stage would be."""
    from pytest_aoti.debug.stages import READ_ONCE_STAGE_ENV, kernels_env

    stage_server = client.ForkServer(READ_ONCE_STAGE_ENV)
    try:
        stage_server.launch()
        assert stage_server.wait_ready(900), stage_server.unsafe
        monkeypatch.setattr(client, "_own_server", stage_server)
        (tmp_path / "test_effects.py").write_text(EFFECTS_TEST)
        env = kernels_env({})
        code, log, forked = _child(tmp_path, "warm", env)
        assert forked and code == 0, log
        warm, cold = _effects(log), _fresh_effects(tmp_path, env)
    finally:
        stage_server.close()
    for key in _PER_PROCESS:
        warm.pop(key), cold.pop(key)
    assert warm == cold and warm["cpp_frames"], (warm, cold)


def test_a_crash_in_a_warm_child_leaves_the_server_alive(server: client.ForkServer, tmp_path: Path) -> None:
    (tmp_path / "test_crash.py").write_text("import ctypes\n\n\ndef test_crash():\n    ctypes.string_at(0)\n")
    code, log, forked = _child(tmp_path, "crash", {"PYTHONFAULTHANDLER": "1"})
    assert forked and code == -11, log  # SIGSEGV, as subprocess reports a signal
    assert "Fatal Python error: Segmentation fault" in log  # faulthandler, as PYTHONFAULTHANDLER asks
    (tmp_path / "test_crash.py").write_text("def test_fine():\n    pass\n")
    code, log, forked = _child(tmp_path, "after", None)
    assert forked and code == 0 and "1 passed" in log, log
    assert server.process.poll() is None


def test_a_request_that_is_no_message_fails_alone(server: client.ForkServer) -> None:
    """A client of another version (or not pytest-aoti's) gets its connection closed and a line in the server's log
    that says what was wrong; the server answers the next request."""
    import socket

    from pytest_aoti.forkserver import wire

    def ask(line: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(60)
            connection.connect(server.socket_path)
            connection.sendall(line)
            return connection.makefile("rb").readline()

    assert ask(b'{"args": [], "cwd": "/"}\n') == b""  # the old wire's request: no name
    assert ask(wire.encode(wire.Ended(0)).encode()) == b""
    log = (server.dir / "server.log").read_text()
    assert "a bad request: not a message" in log and "a bad request: a 'ended' message where 'fork' was expected" in log
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    refusal = wire.ForkRequest(args=(), safe_path=False, cwd="/", env=env, log=os.devnull)
    answer = wire.decode(ask(wire.encode(refusal).encode()), wire.Forked, wire.Refused)
    assert isinstance(answer, wire.Refused) and "PYTHONHASHSEED" in answer.reason
    assert server.process is not None and server.process.poll() is None


def test_an_edited_user_module_is_never_stale(server: client.ForkServer, tmp_path: Path) -> None:
    (tmp_path / "user_model.py").write_text("VERSION = 1\n")
    (tmp_path / "test_version.py").write_text(
        "from user_model import VERSION\n\n\ndef test_v():\n    print('v', VERSION)\n"
    )
    _, first, _ = _child(tmp_path, "first")
    (tmp_path / "user_model.py").write_text("VERSION = 2\n")
    _, second, forked = _child(tmp_path, "second")
    assert forked and "v 1" in first and "v 2" in second, (first, second)


def test_the_server_never_initialises_cuda(server: client.ForkServer) -> None:
    """It says it is ready only after a canary fork found CUDA startable (server.unsafe_reason); on a machine
    without CUDA that is trivially so, and tests/gpu runs the same check where it is not."""
    assert server.unsafe is None and server.ready_seconds is not None


def test_a_child_skips_the_interpreter_teardown_once_it_has_reported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No exit tax: a child's session ends the process at its last hook, with its status, after its reports are
    written (atexit handlers, the final garbage collection and the compile workers' shutdown are skipped)."""
    teardown_mark = pytester.path / "teardown-ran"
    pytester.makeconftest(
        f"import atexit, pathlib\natexit.register(pathlib.Path({str(teardown_mark)!r}).write_text, 'ran')\n"
    )
    pytester.makepyfile(test_child="def test_fails():\n    assert 1 == 2\n")
    reports = pytester.path / "reports.jsonl"
    env = {"PYTEST_AOTI_CHILD": "isolate", "PYTEST_AOTI_NODEID": "test_child.py::test_fails"}
    env["PYTEST_AOTI_REPORT_FILE"] = str(reports)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert '"when": "call"' in reports.read_text() and '"outcome": "failed"' in reports.read_text()
    assert not teardown_mark.exists()


def test_a_worker_probes_at_its_first_compile_and_no_earlier(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An xdist worker starts Inductor's ISA probes at its first compile (core.isa_verdicts), not as it collects a
    test that uses a pytest-aoti fixture: a worker whose packages all come from a cache never pays for them. Its
    compile then imports the rest of Inductor beside the probes, and none of their warnings (torch's own deprecations
    as Inductor is imported) lands in the user's warnings summary."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(pytester.path / "xdg"))  # the ISA verdicts it records: not the user's
    monkeypatch.delenv("PYTEST_AOTI_ISA_RECORD", raising=False)
    pytester.makeconftest(
        "import pathlib, sys\n\n\ndef _write(session, when):\n"
        "    from pytest_aoti.core import isa_verdicts\n"
        "    config = session.config\n"
        "    name = config.workerinput['workerid'] if hasattr(config, 'workerinput') else 'main'\n"
        "    seen = (isa_verdicts._started, 'torch._inductor.compile_fx' in sys.modules)\n"
        "    pathlib.Path(f'{when}-{name}.txt').write_text(repr(seen))\n\n\n"
        "def pytest_collection_finish(session):\n    _write(session, 'collected')\n\n\n"
        "def pytest_sessionfinish(session):\n    _write(session, 'finished')\n"
    )
    pytester.makepyfile(test_aoti=MODEL_TEST)
    pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-n", "1").assert_outcomes(
        passed=1, warnings=0
    )
    assert (pytester.path / "collected-gw0.txt").read_text() == "(False, False)"
    assert (pytester.path / "finished-gw0.txt").read_text() == "(True, True)"
    assert (pytester.path / "finished-main.txt").read_text() == "(False, False)"


def test_what_the_servers_imports_print_is_never_read_as_its_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sitecustomize (or a module's banner) that prints while the server warms up lands in the server's log; the
    client still reads the server's own readiness line, and the server forks."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("print('hello from sitecustomize')\n")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    )
    noisy = client.ForkServer({})
    try:
        noisy.launch()
        assert noisy.wait_ready(900), noisy.unsafe
        assert "hello from sitecustomize" in (noisy.dir / "server.log").read_text()
    finally:
        noisy.close()
