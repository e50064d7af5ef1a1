"""Debug reruns and isolation with real failures inside compiled models: a custom op that segfaults between two
compiled kernels, a kernel that makes NaN, a hang, tests that print, warn, skip, exit early or need an earlier test."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_aoti.debug.minify import MAX_CANDIDATES_ENV
from pytest_aoti.forkserver.server import FORKED_MARK
from tests.conftest import MODELS_SOURCE, RunPytest, junit_cases, left_behind, plugin_args, report_log_failures

CRASH_TESTS = """
import os

import pytest
import torch

from aoti_models import MLP, Crashy


def test_crash(aoti_compile):
    compiled = aoti_compile(Crashy(), (torch.randn(4, 3),))
    compiled(torch.full((4, 3), 1000.0))


def test_passes_before(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),))


def test_passes_after():
    assert torch.ones(2).sum() == 2


@pytest.mark.aoti_ima(stages=("kernels",))
def test_exits(aoti_device):
    os._exit(3)
"""

KERNEL_OF_THE_CRASH = "cpp_fused_add_maybe_crash_mul_sin_0"


# On every torch release .ci/run tests: both stages' logs of a dying process, minify, the repro bundle's own loader.
@pytest.mark.torch_matrix
def test_crash_under_xdist_from_a_subdir_is_one_junit_testcase(
    pytester: pytest.Pytester, run_pytest: RunPytest, watched_tmpdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test that crashes its xdist worker gets the two-stage debug rerun, and JUnit and pytest-reportlog hold every
    test once: the crashed one as a failure carrying its aoti_* properties. A test that ends its worker with
    ``os._exit`` fails alone too. The custom op is defined in a package (``suite.aoti_models``): the bundle imports
    it from the package's root."""
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "__init__.py").write_text("")
    (pytester.path / "suite" / "test_user.py").write_text(
        CRASH_TESTS.replace("from aoti_models import", "from suite.aoti_models import")
    )
    (pytester.path / "suite" / "aoti_models.py").write_text(MODELS_SOURCE)
    (pytester.path / "sub").mkdir()
    # Bounded by a count of candidates, not by seconds a busy machine may not have.
    monkeypatch.setenv(MAX_CANDIDATES_ENV, "1")
    result = run_pytest(
        "../suite",
        "-n",
        "2",
        "--aoti-debug",
        "--aoti-minify",
        "-p",
        "no:logging",
        "--junitxml=../report.xml",
        "--report-log=../log.jsonl",
        cwd=pytester.path / "sub",
    )
    result.assert_outcomes(passed=2, failed=2)
    # A crashed worker, two crashed debug children and the compiles leave nothing in TMPDIR.
    assert left_behind(watched_tmpdir) == []
    text = result.stdout.str()
    assert "crashed while running 'suite/test_user.py::test_crash'" in text
    assert f"verdict: crashed with SIGSEGV; after kernel {KERNEL_OF_THE_CRASH} completed" in text
    assert "stage kernels (printer=3): crashed with SIGSEGV" in text
    assert "stage tensors (printer=2, every kernel): crashed with SIGSEGV" in text
    assert f"suspects (read in stage tensors' log): {KERNEL_OF_THE_CRASH}" in text
    assert "last phase: run" in text
    assert "verdict: error: the child exited with code 3 before reporting the test's result" in text
    assert f"[ after_launch: {KERNEL_OF_THE_CRASH} ]" in text
    # The call after the last completed kernel is the custom op, on its line of the model.
    at_the_op = re.compile(
        r"aoti_torch_cpu_maybe_crash:? at \S*/suite/aoti_models.py:\d+ in forward: "
        r"y = maybe_crash\(torch.sin\(x\) \* 2 \+ x\)"
    )
    assert re.search(r"the next call is " + at_the_op.pattern, text), text
    reproduce = re.search(r"^reproduce \(kernels\): (.*::test_crash .*)$", text, re.MULTILINE)
    assert reproduce is not None
    for part in (
        "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER=3",
        "CUDA_LAUNCH_BLOCKING=1",
        "AOTI_RUNTIME_CHECK_INPUTS=1",
        "TORCHINDUCTOR_NAN_ASSERTS=1",
        "PYTEST_AOTI_NODEID=suite/test_user.py::test_crash",
        "-m pytest",
        "../suite --aoti-debug",
        "--capture=no",
    ):
        assert part in reproduce.group(1)
    # The user's report file and scheduling are not repeated: pasted, the line would overwrite their JUnit file.
    for parent_only in ("-n 2", "--junitxml", "-n 0"):
        assert parent_only not in reproduce.group(1)
    result.stdout.fnmatch_lines(
        ["*= aoti =*", f"suite/test_user.py::test_crash: crashed with SIGSEGV; after kernel {KERNEL_OF_THE_CRASH}*"]
    )
    cases = junit_cases(pytester.path / "report.xml")
    assert set(cases) == {"test_crash", "test_passes_before", "test_passes_after", "test_exits"}
    assert cases["test_exits"]["outcomes"] == ["failure"]
    # The device of a test that crashed its worker, for JUnit consumers that group by it (the controller writes it).
    assert cases["test_exits"]["properties"]["aoti_device"] == "cpu"  # type: ignore[index]
    # pytest-reportlog: every line parses, each crashed test's failure is reported once.
    failed = report_log_failures(pytester.path / "log.jsonl")
    assert failed == {"suite/test_user.py::test_crash": 1, "suite/test_user.py::test_exits": 1}, failed
    crash = cases["test_crash"]
    assert crash["outcomes"] == ["failure"]
    properties = crash["properties"]
    assert isinstance(properties, dict)
    assert properties["aoti_signal"] == "SIGSEGV" and properties["aoti_device"] == "cpu"
    assert properties["aoti_suspect_kernel"] == KERNEL_OF_THE_CRASH
    assert properties["aoti_rerun_outcome"] == "crashed with SIGSEGV"
    assert properties["aoti_reproduced"] == "consistent (2 of 2 reruns)"
    assert at_the_op.search(str(properties["aoti_source"])), properties
    # Minified within its cap, each candidate judged in its own process (the crashing ones too).
    minified = re.match(r"6 -> (\d) nodes: (\S+/minified/repro.py)$", str(properties["aoti_minified"]))
    assert minified is not None and int(minified.group(1)) < 6, properties
    assert re.search(
        r"^minify: 6 -> \d nodes, still crash \(\d+ candidates? in .* s, (done|candidate cap reached)\)", text, re.M
    )
    assert cases["test_passes_before"]["outcomes"] == cases["test_passes_after"]["outcomes"] == []

    # The repro bundle reproduces the crash without pytest and without the test file, from a clean directory, on the
    # package that crashed.
    bundle = Path(str(properties["aoti_bundle"]))
    assert (
        f"repro bundle: {bundle} (python repro.py: needs importable: suite.aoti_models (the custom ops the graph "
        f"calls; repro.py imports them from {pytester.path.resolve()}: elsewhere, put that on PYTHONPATH))"
    ) in text
    assert {"exported_program.pt2", "inputs.pt", "package.pt2", "env.json", "versions.json", "kernels.log"} <= {
        path.name for path in bundle.iterdir()
    }
    clean = pytester.path / "clean"
    clean.mkdir()
    repro = subprocess.run(
        [sys.executable, str(bundle / "repro.py")], cwd=clean, capture_output=True, text=True, timeout=600
    )
    assert repro.returncode in (-11, 139), repro.stdout + repro.stderr
    assert "repro: running package.pt2, the package that failed" in repro.stdout
    assert f"[ after_launch: {KERNEL_OF_THE_CRASH} ]" in repro.stdout


ISOLATED_TESTS = """
import os
import sys
import time
import warnings

import pytest
import torch

from aoti_models import MLP


def test_prints_warns_and_fails(aoti_device):
    print("out from the isolated test")
    print("err from the isolated test", file=sys.stderr)
    warnings.warn(UserWarning("a warning from the isolated test"))
    assert 1 == 2


def test_skips(aoti_device):
    pytest.skip("skipped in the child")


@pytest.mark.xfail(reason="known bug", strict=True)
def test_xfails(aoti_device):
    assert False


def test_exits_early(aoti_device):
    os._exit(0)


def test_input_invariant(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),))(torch.randn(5, 8))


@pytest.fixture
def missing_data():
    raise FileNotFoundError("data.bin")


def test_broken_fixture(aoti_compile, missing_data):
    pass


class DataDependent(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


def test_export_rejects(aoti_compile):
    aoti_compile(DataDependent(), (torch.randn(4, 8),))
"""


HANG_TEST = """
import threading

import pytest


@pytest.mark.aoti_ima
@pytest.mark.aoti_isolate(timeout=10)
def test_hangs():
    threading.Event().wait()
"""


def test_an_isolated_test_reports_like_an_in_process_one(
    pytester: pytest.Pytester, run_pytest: RunPytest, watched_tmpdir: Path
) -> None:
    # The hang has a file of its own, which imports nothing heavy: its child reaches the test well inside the
    # timeout even on a busy machine, and never finishes it.
    pytester.makepyfile(test_user=ISOLATED_TESTS, test_hang=HANG_TEST)
    result = run_pytest("--aoti-isolate", "--aoti-debug", "-p", "no:logging", "-rA", "--junitxml=report.xml")
    # Children (one killed at its timeout) leave nothing in TMPDIR: their temp dirs live under pytest's basetemp.
    assert left_behind(watched_tmpdir) == []
    result.assert_outcomes(failed=5, skipped=1, xfailed=1, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = result.stdout.str()
    # Its own output and warnings, as pytest shows them in-process.
    result.stdout.fnmatch_lines(
        [
            "*- Captured stdout call -*",
            "out from the isolated test",
            "*- Captured stderr call -*",
            "err from the isolated test",
        ]
    )
    result.stdout.fnmatch_lines(["*warnings summary*", "*UserWarning: a warning from the isolated test*"])
    result.stdout.fnmatch_lines(["SKIPPED * test_user.py:*: skipped in the child", "XFAIL test_user.py::test_xfails*"])
    assert "the child exited with code 0 before reporting the test's result" in text
    # One timeout, not three: the debug stages would hang the same way.
    assert "timed out after 10 s in an isolated subprocess (pytest-aoti)" in text
    assert "verdict: not rerun: the isolated run timed out after 10 s" in text
    assert "in test_hangs" in text  # faulthandler's dump of the hanging child
    assert (
        "verdict: not rerun: the failure is an input check raised before the package ran; a debug rerun cannot "
        "tell more" in text
    )
    assert "stage kernels" not in text.split("_ test_input_invariant _")[1].split("\n____")[0]
    broken = text.split("_ ERROR at setup of test_broken_fixture _")[1].split("\n____")[0]
    assert "verdict: not rerun: the test's setup failed before it exported, compiled or ran a model" in broken
    assert "stage kernels" not in broken
    assert "verdict: not rerun: torch.export rejected the model: no package was built" in text
    assert "INTERNALERROR" not in text + result.stderr.str()
    cases = junit_cases(pytester.path / "report.xml")
    assert len(cases) == 8
    assert cases["test_broken_fixture"]["outcomes"] == ["error"]
    rejected = cases["test_export_rejects"]["properties"]
    assert isinstance(rejected, dict)
    assert rejected["aoti_rerun_outcome"] == "not rerun" and "aoti_reproduce" not in rejected
    assert str(rejected["aoti_verdict"]).startswith("not rerun: torch.export rejected the model")
    assert cases["test_skips"]["outcomes"] == cases["test_xfails"]["outcomes"] == ["skipped"]
    assert cases["test_exits_early"]["outcomes"] == ["failure"]


def test_failure_that_needs_an_earlier_test_does_not_reproduce(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """A failure that needs an earlier test does not reproduce in any of its three reruns; one that fails on every
    second call (a counter in a file) is called flaky, with its counts."""
    pytester.makepyfile(
        test_user="""
        import os
        import shutil
        from pathlib import Path
        import pytest
        import torch
        from aoti_models import LogModel

        STATE = []
        CALLS = Path(__file__).with_name("calls.txt")

        @pytest.mark.aoti_ima(stages=("kernels",))
        def test_fails_every_second_call(aoti_compile):
            calls = int(CALLS.read_text()) + 1 if CALLS.exists() else 1
            CALLS.write_text(str(calls))
            compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
            compiled(-torch.ones(4, 3) if calls % 2 else torch.ones(4, 3))  # log of -1: NaN

        def test_leaves_state():
            STATE.append("dirty")

        @pytest.mark.aoti_ima(stages=("kernels",))
        def test_depends_on_state(aoti_compile):
            compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
            compiled(torch.rand(4, 3) + 0.5)
            assert not STATE, "state leaked from an earlier test"

        @pytest.fixture
        def missing_data():
            raise FileNotFoundError("data.bin")

        @pytest.mark.aoti_ima
        def test_broken_fixture(aoti_compile, missing_data):
            pass

        @pytest.mark.aoti_ima(stages=("kernels",))
        def test_loses_its_log(aoti_device):
            # A tmp cleaner removing the child's files while it runs: the verdict says so, the session goes on.
            report_file = os.environ.get("PYTEST_AOTI_REPORT_FILE")
            if report_file:
                shutil.rmtree(os.path.dirname(report_file))
            assert False
        """
    )
    # --aoti-debug: the session's tests run in one xdist worker, in order, so the earlier test's state leaks.
    result = run_pytest("-p", "no:logging", "--aoti-debug")
    result.assert_outcomes(passed=1, failed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*verdict: did not reproduce in isolation (0 of 3 reruns failed; the failure may depend*",
            "*stage kernels (printer=3): passed*",
            "*stage kernels, run 2 (printer=3): passed*",
            "*stage kernels, run 3 (printer=3): passed*",
        ]
    )
    text = result.stdout.str()
    # A debug package is keyed on the stage's environment: stage kernels' later runs load what its first compiled.
    assert text.count("aoti cache: 1 hits, 0 misses") >= 2, text
    # Its extra runs start fresh, each with a string-hash seed of its own (a fork has the server's: issue #62 item 13).
    workdir = {Path(bundle).parent for bundle in re.findall(r"PYTEST_AOTI_BUNDLE_DIR=(\S+depends_on_state\S+)", text)}
    assert len(workdir) == 1, text
    extra_runs = sorted(workdir.pop().glob("kernels.[23].log"))
    assert len(extra_runs) == 2 and not [log for log in extra_runs if log.read_text().startswith(FORKED_MARK)]
    # Calls 1 (the test), 2 (stage kernels: passes), 3 (its second run: the NaN again), and no more.
    assert (pytester.path / "calls.txt").read_text() == "3"
    result.stdout.fnmatch_lines(
        [
            "*verdict: NaN made by aten.log.default*; failed: pytest_aoti.core.errors.AOTIInvariantError: output 0: "
            "nonfinite*; flaky (1 of 2 reruns)",
            "*stage kernels (printer=3): passed*",
            "*stage kernels, run 2 (printer=3): failed*",
        ]
    )
    # A fixture that broke before the test reached pytest-aoti: no child for it.
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of test_broken_fixture*", "*verdict: not rerun: the test's setup failed before it*"]
    )
    assert re.search(r"stage kernels \(printer=3\): error: the child exited with code \d+ before reporting", text)
    assert "(log missing: " in text
    assert "INTERNALERROR" not in text


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "kill -9"])
def test_a_signal_to_the_parent_ends_the_isolated_child(pytester: pytest.Pytester, sig: signal.Signals) -> None:
    """The child sleeps for an hour: only the parent's signal can end it before the test's deadlines, which are
    minutes long so that a busy machine cannot fail the test (the child's pid file, the parent's exit)."""
    pid_file = pytester.path / "child.pid"
    pytester.makepyfile(
        test_user=f"""
        import os
        import time
        import pytest

        @pytest.mark.aoti_isolate
        def test_hangs():
            with open({str(pid_file)!r}, "w") as stream:
                stream.write(str(os.getpid()))
            time.sleep(3600)
        """
    )
    basetemp = pytester.path / "basetemp"
    output = (pytester.path / "parent.log").open("wb")
    parent = pytester.popen(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", f"--basetemp={basetemp}"],
        stdin=pytester.CLOSE_STDIN,
        stdout=output,  # a file: a pipe nobody reads would block the parent's summary
        stderr=subprocess.STDOUT,
        # As from a terminal, whatever this xdist worker's own signal state: Ctrl-C delivered, default handlers.
        preexec_fn=_terminal_signals,
    )
    try:
        child_pid = _pid_written(pid_file, parent, "the isolated child never started")
        parent.send_signal(sig)
        expected = {signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}.get(sig, pytest.ExitCode.INTERRUPTED)
        try:
            assert parent.wait(timeout=300) == expected
        except subprocess.TimeoutExpired:
            pytest.fail("the parent ignored the signal:\n" + (pytester.path / "parent.log").read_text()[-5000:])
        _wait_gone(child_pid, "the child outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        output.close()
    if sig != signal.SIGKILL:  # a killed parent cleans nothing; pytest's basetemp retention does, later
        assert not list(basetemp.rglob("tmp-*")), "the child's TMPDIR was left behind"


def _pid_written(pid_file: Path, process: subprocess.Popen[bytes], never: str) -> int:
    """The pid a test of ``process``'s session wrote once it started (minutes allowed: a busy machine is slow)."""
    deadline = time.monotonic() + 300
    while not pid_file.exists() or not pid_file.read_text():
        assert process.poll() is None and time.monotonic() < deadline, never
        time.sleep(0.2)
    return int(pid_file.read_text())


def _wait_gone(pid: int, outlived: str) -> None:
    deadline = time.monotonic() + 300
    while _alive(pid):
        assert time.monotonic() < deadline, outlived
        time.sleep(0.1)


def _terminal_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose; /proc says which.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\nState:\tZ" not in status.read_text()


def test_ctrl_c_ends_the_supervised_worker(pytester: pytest.Pytester) -> None:
    """Plain ``--aoti-debug`` runs the tests in one xdist worker: a terminal's Ctrl-C (SIGINT to the whole
    foreground process group) ends the run, the worker with it, and leaves nothing in the basetemp."""
    pid_file = pytester.path / "worker.pid"
    pytester.makepyfile(
        test_user=f"""
        import os
        import time

        def test_sleeps():
            with open({str(pid_file)!r}, "w") as stream:
                stream.write(str(os.getpid()))
            time.sleep(3600)
        """
    )
    basetemp = pytester.path / "basetemp"
    text = _ctrl_c_once_started(pytester, ["--aoti-debug", f"--basetemp={basetemp}"], pid_file, "the worker")
    assert "KeyboardInterrupt" in text
    assert not [path for path in basetemp.rglob("*") if path.is_file()]


@pytest.mark.parametrize("how", [["--aoti-debug"], []], ids=["--aoti-debug", "marker only"])
def test_ctrl_c_during_a_crash_debug_rerun_keeps_the_crash(pytester: pytest.Pytester, how: list[str]) -> None:
    """Ctrl-C while the debug rerun of a crashed test runs ends the run (status 2, interrupted) with the crash
    reported: a failure in the summary and one named JUnit test case whose verdict says the rerun was interrupted
    (issue #43 S7), whether the crash came from the supervised worker or the marked test's isolated child. The
    rerun's child sleeps for an hour: only the Ctrl-C ends it."""
    pid_file = pytester.path / "child.pid"
    pytester.makepyfile(
        test_user=f"""
        import os
        import signal
        import time

        import pytest

        def test_before():
            pass

        @pytest.mark.aoti_ima(stages=("kernels",))
        def test_crash(aoti_device):
            if os.environ.get("PYTEST_AOTI_CHILD", "isolate") != "isolate":  # a debug stage's child
                with open({str(pid_file)!r}, "w") as stream:
                    stream.write(str(os.getpid()))
                time.sleep(3600)
            os.kill(os.getpid(), signal.SIGSEGV)

        def test_after():
            pass
        """
    )
    args = ["-p", "no:randomly", *how, "--junitxml=r.xml", f"--basetemp={pytester.path / 'basetemp'}"]
    text = _ctrl_c_once_started(pytester, args, pid_file, "the debug rerun's child")
    assert "KeyboardInterrupt" in text and "1 failed, 1 passed" in text, text[-3000:]
    assert "test_user.py::test_crash: not rerun: the debug rerun was interrupted (KeyboardInterrupt)" in text
    cases = junit_cases(pytester.path / "r.xml")
    assert list(cases) == ["test_before", "test_crash"]
    assert cases["test_crash"]["outcomes"] == ["failure"]
    properties = cases["test_crash"]["properties"]
    assert isinstance(properties, dict) and "interrupted" in str(properties["aoti_verdict"])


FAILS_THEN_HANGS_IN_ITS_RERUN = """
import os
import time

import pytest


def test_before():
    pass


@pytest.mark.aoti_ima(stages=("kernels",))
def test_fails(aoti_device):
    if os.environ.get("PYTEST_AOTI_CHILD", "isolate") != "isolate":  # a debug stage's child
        with open({pid_file!r}, "w") as stream:
            stream.write(str(os.getpid()))
        time.sleep(3600)
    assert False, "the test's own failure"


def test_after():
    pass
"""


@pytest.mark.parametrize(
    ("how", "sig", "fork_server"),
    [
        (["--aoti-debug"], signal.SIGINT, "on"),
        (["--aoti-debug"], signal.SIGINT, "0"),
        (["--aoti-debug"], signal.SIGTERM, "on"),
        ([], signal.SIGINT, "on"),
        (["--aoti-isolate"], signal.SIGTERM, "0"),
    ],
    ids=[
        "--aoti-debug ctrl-c",
        "--aoti-debug ctrl-c no fork server",
        "--aoti-debug sigterm",
        "marker ctrl-c",
        "--aoti-isolate sigterm no fork server",
    ],
)
def test_a_signal_during_a_failed_tests_debug_rerun_keeps_the_failure(
    pytester: pytest.Pytester,
    watched_tmpdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: list[str],
    sig: signal.Signals,
    fork_server: str,
) -> None:
    """Ctrl-C (to the terminal's whole job) or SIGTERM (a CI cancel, to pytest's own pid) while a failed test's debug
    rerun runs ends the run with the failure reported: failed in the summary, one named JUnit test case with a verdict
    that says the rerun was interrupted, no traceback of pytest-aoti's, and nothing left in TMPDIR (the fork
    server's directory). The rerun's child sleeps for an hour: only the signal ends it (issue #62 items 4, 5)."""
    monkeypatch.setenv("PYTEST_AOTI_FORK_SERVER", fork_server)
    pid_file = pytester.path / "child.pid"
    pytester.makepyfile(test_user=FAILS_THEN_HANGS_IN_ITS_RERUN.format(pid_file=str(pid_file)))
    args = ["-p", "no:randomly", *how, "--junitxml=r.xml", f"--basetemp={pytester.path / 'basetemp'}"]
    text = _signal_once_started(pytester, args, pid_file, "the debug rerun's child", sig)
    how_stopped = "KeyboardInterrupt" if sig == signal.SIGINT else "SIGTERM"
    assert f"test_user.py::test_fails: not rerun: the debug rerun was interrupted ({how_stopped})" in text, text
    assert "1 failed, 1 passed" in text, text[-3000:]
    for unwanted in ("Traceback", "PluggyTeardownRaisedWarning", "OSError", "INTERNALERROR"):
        assert unwanted not in text, text[-3000:]
    cases = junit_cases(pytester.path / "r.xml")
    assert list(cases) == ["test_before", "test_fails"]
    assert cases["test_fails"]["outcomes"] == ["failure"]
    properties = cases["test_fails"]["properties"]
    assert isinstance(properties, dict) and f"interrupted ({how_stopped})" in str(properties["aoti_verdict"])
    assert not left_behind(watched_tmpdir)


def _signal_once_started(
    pytester: pytest.Pytester, args: list[str], pid_file: Path, who: str, sig: signal.Signals
) -> str:
    """:func:`_ctrl_c_once_started` for ``sig``: SIGINT to the job's process group (a terminal's Ctrl-C), SIGTERM to
    pytest's pid alone (a CI cancel, ``timeout``), which then ends with status 143."""
    if sig == signal.SIGINT:
        return _ctrl_c_once_started(pytester, args, pid_file, who)
    command = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", *args]
    with (pytester.path / "session.log").open("wb") as output:
        session = pytester.popen(
            command,
            stdin=pytester.CLOSE_STDIN,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_terminal_signals,
        )
        try:
            started = _pid_written(pid_file, session, f"{who} never started the test")
            session.send_signal(sig)
            assert session.wait(timeout=300) == 143
            _wait_gone(started, f"{who} outlived the session")
        finally:
            if session.poll() is None:
                os.killpg(session.pid, signal.SIGKILL)
                session.wait()
    return (pytester.path / "session.log").read_text()


def _ctrl_c_once_started(pytester: pytest.Pytester, args: list[str], pid_file: Path, who: str) -> str:
    """Run pytest with ``args`` as a terminal's foreground job; once ``who`` (a process of the run) wrote its pid to
    ``pid_file``, Ctrl-C the job (SIGINT to its process group). Asserts the run ends interrupted and ``who`` with it
    (minutes allowed: a busy machine is slow); returns the run's output."""
    command = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", *args]
    with (pytester.path / "session.log").open("wb") as output:
        session = pytester.popen(
            command,
            stdin=pytester.CLOSE_STDIN,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own, as a terminal's foreground job
            preexec_fn=_terminal_signals,
        )
        try:
            started = _pid_written(pid_file, session, f"{who} never started the test")
            os.killpg(session.pid, signal.SIGINT)
            assert session.wait(timeout=300) == pytest.ExitCode.INTERRUPTED
            _wait_gone(started, f"{who} outlived the session")
        finally:
            if session.poll() is None:
                os.killpg(session.pid, signal.SIGKILL)
                session.wait()
    return (pytester.path / "session.log").read_text()


RAISING_VERDICT_HOOK = """
import pytest


@pytest.fixture
def broken_data():
    raise FileNotFoundError("data.bin")


@pytest.mark.aoti_ima
def test_setup_fails(aoti_device, broken_data):
    pass


def test_after():
    pass
"""


@pytest.mark.parametrize("how", [[], ["--aoti-debug"], ["-n", "2"]], ids=["marker only", "--aoti-debug", "-n 2"])
def test_a_raising_verdict_hook_is_reported_and_the_run_goes_on(
    pytester: pytest.Pytester, run_pytest: RunPytest, how: list[str]
) -> None:
    """A conftest's ``pytest_aoti_verdict`` that raises is reported on the test's report with its traceback, and
    every other test runs: no INTERNALERROR (issue #43 C3). (A setup failure before pytest-aoti ran is not rerun: its
    verdict says so, without a child.)"""
    pytester.makeconftest(
        """
        import json

        def pytest_aoti_verdict(config, nodeid, verdict):
            seen = {"type": type(verdict).__qualname__, "nodeid": verdict.nodeid, "headline": verdict.headline}
            with open("verdicts.jsonl", "a") as stream:
                stream.write(json.dumps(seen) + "\\n")
            raise ValueError("the dashboard is down")
        """
    )
    pytester.makepyfile(test_user=RAISING_VERDICT_HOOK)
    result = run_pytest(*how, "--junitxml=r.xml")
    result.assert_outcomes(passed=1, errors=1)
    text = result.stdout.str()
    assert "INTERNALERROR" not in text + result.stderr.str()
    assert "aoti verdict hook error" in text
    assert 'raise ValueError("the dashboard is down")' in text
    assert "pytest_aoti_verdict raised ValueError: the dashboard is down (test_user.py::test_setup_fails" in text
    cases = junit_cases(pytester.path / "r.xml")
    assert cases["test_setup_fails"]["outcomes"] == ["error"] and cases["test_after"]["outcomes"] == []
    # The hook got the frozen public record, whose headline is the one JUnit shows.
    (seen,) = [json.loads(line) for line in (pytester.path / "verdicts.jsonl").read_text().splitlines()]
    assert seen == {
        "type": "PublicVerdict",
        "nodeid": "test_user.py::test_setup_fails",
        "headline": cases["test_setup_fails"]["properties"]["aoti_verdict"],  # type: ignore[index]
    }


NAN_AFTER_TANH = """
import torch


class TanhLogLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        h = torch.log(h - 100.0)
        return self.b(h)


def test_nan(aoti_check):
    torch.manual_seed(0)
    aoti_check(TanhLogLinear().eval(), (torch.randn(4, 8),))
"""


# On every torch release .ci/run tests: stage kernels (printer mode 3, NaN asserts) and stage tensors (printer mode
# 2) on a NaN, with provenance.
@pytest.mark.torch_matrix
def test_a_nan_verdict_leads_with_the_kernel_that_made_it(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """Issue 50 item 7, issue 61 item 1: a NaN made by a fused kernel (tanh, then log of a negative) and read by the
    linear after it. The headline, the summary line and JUnit lead with the op that made it (the eager replay of the
    exported program: ``aten.log``), its line and the kernel that computes it, not with the last kernel that
    completed (the linear) or its NaN input."""
    pytester.makepyfile(test_user=NAN_AFTER_TANH)
    log_line = NAN_AFTER_TANH.lstrip("\n").splitlines().index("        h = torch.log(h - 100.0)") + 1
    result = run_pytest("--aoti-debug", "-p", "no:logging", "--junitxml=r.xml")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    lead = (
        rf"NaN made by aten.log.default \(node log\) at test_user.py:{log_line} in forward: "
        r"h = torch.log\(h - 100.0\) from \w+ \(min -?[\d.]+, max -?[\d.]+\), in kernel (cpp_fused_\w*log\w*)"
    )
    verdict = re.search(rf"^verdict: {lead}", text, re.MULTILINE)
    assert verdict is not None, text
    kernel = verdict.group(1)
    # The rest follows: the rerun's outcome, then the last kernel that completed (the linear, reading the NaN).
    assert re.search(rf"^verdict: {lead}.*; failed: .*; last kernel completed: aoti_torch_cpu_addmm_out", text, re.M)
    first = rf"^first NaN/Inf: {kernel} (buf\d+) \(mean -?nan.*test_user.py:{log_line} in forward"
    found = re.search(first, text, re.M)
    assert found is not None, text
    buffer = found.group(1)
    result.stdout.re_match_lines([r"=+ aoti =+", rf"test_user.py::test_nan: {lead}"])
    properties = junit_cases(pytester.path / "r.xml")["test_nan"]["properties"]
    assert isinstance(properties, dict)
    assert re.match(lead, str(properties["aoti_verdict"])), properties
    assert (properties["aoti_first_nonfinite_kernel"], properties["aoti_first_nonfinite_buffer"]) == (kernel, buffer)
    assert re.match(rf"aten.log.default: at .*test_user.py:{log_line} in forward", str(properties["aoti_source"]))
    # The kernel the failure is blamed on is the writer too: the linear's NaN input is not shown as a "bad input"
    # (it was: "bad input buf1 (…nan…) into aoti_torch_cpu_addmm_out: not finite"), and inputs shown are the writer's.
    assert properties["aoti_suspect_kernel"] == kernel, properties
    assert "into aoti_torch_cpu_addmm_out" not in text and "inputs of aoti_torch_cpu_addmm_out" not in text, text
