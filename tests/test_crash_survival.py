"""A crash never ends the run: plain ``pytest --aoti-debug`` and tests marked ``aoti_ima`` survive a segfault, an
abort and ``os._exit`` without ``-n`` or ``--aoti-isolate``; later tests run, each test is one JUnit case, and a
pasted reproduce line leaves the user's report files as they were."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import MODELS_SOURCE, RunPytest, junit_cases, report_log_failures

CRASHES = """
import os

import pytest
import torch

from aoti_models import Crashy


@pytest.mark.aoti_ima(stages=("kernels",))
def test_segfault(aoti_compile):
    aoti_compile(Crashy(), (torch.randn(4, 3),))(torch.full((4, 3), 1000.0))


def test_healthy_after_segfault():
    assert torch.ones(2).sum() == 2


@pytest.mark.aoti_ima(stages=("kernels",))
def test_abort(aoti_compile, monkeypatch):
    monkeypatch.setenv("CRASHY_MODE", "abort")
    aoti_compile(Crashy(), (torch.randn(4, 3),))(torch.full((4, 3), 1000.0))


def test_healthy_after_abort():
    pass


@pytest.mark.aoti_ima(stages=("kernels",))
def test_exits(aoti_device):
    os._exit(3)


def test_healthy_at_the_end():
    pass


@pytest.fixture
def segfaults_at_teardown():
    yield
    import ctypes

    ctypes.string_at(0)


@pytest.mark.aoti_ima(stages=("kernels",))
def test_teardown_crash(segfaults_at_teardown, aoti_compile):
    aoti_compile(Crashy(), (torch.randn(4, 3),))(torch.randn(4, 3))
"""

KERNEL_OF_THE_CRASH = "cpp_fused_add_maybe_crash_mul_sin_0"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# Under -n 2 --aoti-debug: tests/test_debug_rerun.py::test_crash_under_xdist_from_a_subdir_is_one_junit_testcase.
# --aoti-isolate takes the marker's path (the isolated guard); its own scenario, with an exit and a hang, is
# tests/test_debug_rerun.py::test_an_isolated_test_reports_like_an_in_process_one, and tests/test_layouts.py
# segfaults isolated children in every layout.
@pytest.mark.parametrize("how", ["--aoti-debug", "marker only"])
def test_a_crash_fails_only_its_test(pytester: pytest.Pytester, run_pytest: RunPytest, how: str) -> None:
    """Every crash under the headline ``--aoti-debug``; under the marker alone, a segfault and an exit (an abort
    takes the segfault's path there, and the pasted reproduce line is the same line). Both ways, a crash in a
    fixture's teardown, after the package's run returned, is a teardown error whose verdict names the fixture's
    line, not a kernel."""
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    tests = pytester.path / "tests"
    tests.mkdir()
    (tests / "test_crashes.py").write_text(CRASHES)
    (tests / "aoti_models.py").write_text(MODELS_SOURCE)
    beside = pytester.path / "beside"
    beside.mkdir()
    flags = [] if how == "marker only" else how.split()
    headline = how == "--aoti-debug"
    selection = [] if headline else ["-k", "not abort"]
    result = run_pytest(
        "../tests",
        *flags,
        *selection,
        "-p",
        "no:logging",
        "--junitxml=../r.xml",
        "--report-log=../log.jsonl",
        cwd=beside,
    )
    crashed = ["test_segfault", "test_exits"] + (["test_abort"] if headline else [])
    healthy = ["test_healthy_after_segfault", "test_healthy_at_the_end"] + (
        ["test_healthy_after_abort"] if headline else []
    )
    # The teardown crash's call passed: pytest's count for a fixture's exception in teardown.
    result.assert_outcomes(passed=len(healthy) + 1, failed=len(crashed), errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = result.stdout.str()
    assert "INTERNALERROR" not in text + result.stderr.str()
    if headline:
        assert "crash guard: one xdist worker" in text
        assert "verdict: crashed with SIGABRT" in text
    assert f"verdict: crashed with SIGSEGV; after kernel {KERNEL_OF_THE_CRASH} completed" in text
    assert re.search(r"verdict: error: the child exited with code 3 before reporting the test's result", text)
    at_the_fixture = r"\S*tests/test_crashes.py:\d+ in segfaults_at_teardown: ctypes.string_at\(0\)"
    assert re.search(
        r"verdict: crashed with SIGSEGV; in teardown, after the package's last run returned: no kernel was running "
        r"\(the crash is outside the compiled code, unless the package corrupted memory that later code touched\); "
        r"the Python stack was at " + at_the_fixture,
        text,
    ), text

    cases = junit_cases(pytester.path / "r.xml")
    assert set(cases) == {*crashed, *healthy, "test_teardown_crash"}
    for name in crashed:
        assert cases[name]["outcomes"] == ["failure"], cases[name]
    for name in healthy:
        assert cases[name]["outcomes"] == []
    teardown = cases["test_teardown_crash"]
    assert teardown["outcomes"] == ["error"], teardown
    assert isinstance(teardown["properties"], dict) and "aoti_suspect_kernel" not in teardown["properties"]
    assert re.fullmatch("crash: at " + at_the_fixture, str(teardown["properties"]["aoti_source"])), teardown
    segfault = cases["test_segfault"]["properties"]
    assert isinstance(segfault, dict)
    assert segfault["aoti_signal"] == "SIGSEGV" and segfault["aoti_suspect_kernel"] == KERNEL_OF_THE_CRASH
    # The device each crashed test ran on, for JUnit consumers that group by it.
    for name in [*crashed, "test_teardown_crash"]:
        assert cases[name]["properties"]["aoti_device"] == "cpu", cases[name]  # type: ignore[index]

    # pytest-reportlog: every line parses, each crashed test's failure is reported once.
    assert report_log_failures(pytester.path / "log.jsonl") == {f"tests/test_crashes.py::{name}": 1 for name in crashed}

    if not headline:
        return
    # The reproduce line, pasted in bash, reproduces the crash and leaves the user's report files as they were.
    reproduce = re.search(
        r"^    reproduce: (cd .*PYTEST_AOTI_NODEID=tests/test_crashes.py::test_segfault .*)$", text, re.M
    )
    assert reproduce is not None, text
    for parent_only in ("--junitxml", "--report-log", "-n "):
        assert parent_only not in reproduce.group(1)
    before = (_digest(pytester.path / "r.xml"), _digest(pytester.path / "log.jsonl"))
    pasted = subprocess.run(["bash", "-c", reproduce.group(1)], capture_output=True, text=True, timeout=600)
    assert pasted.returncode in (-11, 139), pasted.stdout[-3000:] + pasted.stderr[-3000:]
    assert f"[ after_launch: {KERNEL_OF_THE_CRASH} ]" in pasted.stdout + pasted.stderr
    assert (_digest(pytester.path / "r.xml"), _digest(pytester.path / "log.jsonl")) == before


PLAIN_CRASHES = """
import os
import signal

import pytest


def test_bus_error():
    os.kill(os.getpid(), signal.SIGBUS)


def test_healthy():
    pass


def test_illegal_instruction():
    os.kill(os.getpid(), signal.SIGILL)
"""

CRASHING_SESSION_FIXTURE = """
import os
import signal

import pytest


@pytest.fixture(scope="session")
def broken():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_one(broken):
    pass


def test_two(broken):
    pass


def test_three(broken):
    pass
"""


def test_what_users_combine_with_the_crash_guard(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """Under plain ``--aoti-debug`` (one supervised xdist worker): a crash counts toward ``-x``/``--maxfail``,
    ``--lf`` reruns the crashed tests, ``--durations`` and ``-k`` work, and a crash in a session fixture or during
    collection stops the run once instead of crashing every later test. (No compile: plain tests that crash.)"""
    pytester.makepyfile(test_crashes=PLAIN_CRASHES)
    every = run_pytest("--aoti-debug", "-p", "cacheprovider", "--durations=2")
    every.assert_outcomes(passed=1, failed=2)
    every.stdout.fnmatch_lines(["*crashed with SIGBUS*", "*crashed with SIGILL*", "*slowest 2 durations*"])
    stopped = run_pytest("--aoti-debug", "-x")
    stopped.assert_outcomes(failed=1)
    stopped.stdout.fnmatch_lines(["*stopping after 1 failures*"])
    last_failed = run_pytest("--aoti-debug", "-p", "cacheprovider", "--lf")
    last_failed.assert_outcomes(failed=2)
    selected = run_pytest("--aoti-debug", "-k", "healthy")
    selected.assert_outcomes(passed=1)

    pytester.makepyfile(test_crashes=CRASHING_SESSION_FIXTURE)
    fixture = run_pytest("--aoti-debug")
    assert fixture.ret == pytest.ExitCode.INTERRUPTED
    fixture.assert_outcomes(errors=2)  # the second crash in setup in a row stops the run
    assert "crashed in setup right after another test did" in fixture.stdout.str()

    pytester.makepyfile(test_crashes="import os\nos._exit(7)\n\ndef test_never():\n    pass\n")
    collection = run_pytest("--aoti-debug")
    assert collection.ret == pytest.ExitCode.INTERRUPTED
    assert "ended while collecting (exited with code 7)" in collection.stdout.str()


# Crashes (SIGSEGV) and plain failures in one file: under the crash guard a crash is a failure, so the run must be
# the run plain pytest makes when both are failures (each a test run in pytest's order, counted by -x/--maxfail/--sw).
CRASHES_AND_FAILURES = """
import os
import signal


def test_0():
    pass


def test_1_crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_2():
    pass


def test_3_fail():
    assert False


def test_4():
    pass


def test_5_crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_6_fail():
    assert False


def test_7():
    pass
"""


def _junit_order(path: Path) -> list[str]:
    """The test cases of a JUnit file in the order pytest reported them, each with ``!`` if it failed."""
    return [f"{name}{'!' if case['outcomes'] else ''}" for name, case in junit_cases(path).items()]


@pytest.mark.parametrize(
    ("options", "order", "returncode", "stop_line"),
    [
        ([], ["0", "1_crash!", "2", "3_fail!", "4", "5_crash!", "6_fail!", "7"], 1, None),
        (["-x"], ["0", "1_crash!"], 1, "stopping after 1 failures"),
        (["--maxfail=3"], ["0", "1_crash!", "2", "3_fail!", "4", "5_crash!"], 1, "stopping after 3 failures"),
    ],
    ids=["all", "-x", "--maxfail=3"],
)
def test_the_crash_guard_keeps_pytests_order_counts_and_exit_codes(
    pytester: pytest.Pytester,
    run_pytest: RunPytest,
    options: list[str],
    order: list[str],
    returncode: int,
    stop_line: str | None,
) -> None:
    """Plain ``--aoti-debug`` runs the session in one xdist worker, replaced after each crash: the tests after a
    crash still run in pytest's order, and ``-x``/``--maxfail`` stop at pytest's count with pytest's exit status 1
    (issue #43 A4)."""
    pytester.makepyfile(test_mixed=CRASHES_AND_FAILURES)
    result = run_pytest("--aoti-debug", "-p", "no:randomly", "--junitxml=r.xml", *options)
    assert result.ret == returncode
    assert _junit_order(pytester.path / "r.xml") == [f"test_{name}" for name in order]
    text = result.stdout.str()
    assert "INTERNALERROR" not in text + result.stderr.str()
    if stop_line is not None:
        assert f"!! {stop_line} !!" in text and "xdist.dsession.Interrupted" not in text


def test_stepwise_stops_at_a_crash_and_starts_there_next_time(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """``--aoti-debug --sw`` stops at the first crash as at the first failure (pytest's exit status 2, interrupted),
    the next ``--sw`` run starts at the crashed test, and ``--sw-skip`` skips one failure across the replaced worker
    (issue #43 S6)."""
    pytester.makepyfile(test_mixed=CRASHES_AND_FAILURES)
    common = ["--aoti-debug", "-p", "cacheprovider", "-p", "stepwise", "-p", "no:randomly", "--junitxml=r.xml"]
    first = run_pytest(*common, "--sw")
    assert first.ret == pytest.ExitCode.INTERRUPTED
    assert _junit_order(pytester.path / "r.xml") == ["test_0", "test_1_crash!"]
    assert "Test failed, continuing from this test next run." in first.stdout.str()
    again = run_pytest(*common, "--sw")
    assert again.ret == pytest.ExitCode.INTERRUPTED
    assert _junit_order(pytester.path / "r.xml") == ["test_1_crash!"]
    skip_one = run_pytest(*common, "--sw", "--sw-skip")
    assert skip_one.ret == pytest.ExitCode.INTERRUPTED
    assert _junit_order(pytester.path / "r.xml") == ["test_1_crash!", "test_2", "test_3_fail!"]


def test_pytest_exit_in_a_test_ends_the_guarded_run_with_its_code(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """``pytest.exit(returncode=7)`` under ``--aoti-debug`` (and ``-n 2``) ends the run with status 7, as plain
    pytest does, not as a crash of the worker or an INTERNALERROR (issue #43 C2); so does a test marked ``aoti_ima``
    in a plain run, where it runs in a child of its own (issue #50 item 14)."""
    pytester.makepyfile(
        test_exits="""
        import pytest

        def test_before():
            pass

        @pytest.mark.aoti_ima
        def test_exits():
            pytest.exit("the suite asked to stop", returncode=7)

        def test_after():
            pass
        """
    )
    for options in (["--aoti-debug"], ["-n", "2"], []):
        result = run_pytest(*options, "-p", "no:randomly", "--junitxml=r.xml")
        assert result.ret == 7, options
        text = result.stdout.str() + result.stderr.str()
        assert "INTERNALERROR" not in text and "crashed" not in text, options
        assert "the suite asked to stop" in text
        cases = junit_cases(pytester.path / "r.xml")
        assert "test_exits" not in cases and all(not case["outcomes"] for case in cases.values()), cases
        if options != ["-n", "2"]:  # one worker or none, pytest's order: nothing ran after the exit
            # Plain pytest's JUnit file too has a nameless case: junitxml times the exiting test's setup report.
            assert [name for name in cases if name] == ["test_before"]
