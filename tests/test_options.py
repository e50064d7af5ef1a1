"""What only a real pytest subprocess shows: loading the plugin does not import torch, and a bad marker argument
is a clear error under xdist too (raised in a worker, it used to be an INTERNALERROR)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases, left_behind, plugin_args


def test_loading_the_plugin_does_not_import_torch(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import sys

        def test_torch_stays_out():
            assert "pytest_aoti.plugin" in sys.modules
            assert "torch" not in sys.modules
            assert "hypothesis.extra" not in sys.modules
        """
    )
    result = run_pytest("--aoti-debug", "--aoti-isolate", fresh=True)  # no fork server: it imported torch
    result.assert_outcomes(passed=1)


def test_bad_marker_argument_under_xdist(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest

        @pytest.mark.aoti_ima(env="A=1")
        def test_marked():
            pass

        @pytest.mark.aoti_ima(timeout=1e99)
        def test_forever():
            assert False

        def test_after():
            pass
        """
    )
    result = run_pytest("-n", "2")
    # Each bad marker fails its own test at setup, in a worker as in a plain run; the other tests run.
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*test_user.py::test_marked: @pytest.mark.aoti_ima: env= expected a dict of str*",
            "*::test_forever: @pytest.mark.aoti_ima: timeout= expected seconds of at most 604800, got 1e+99*",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_strict_markers_accept_the_aoti_markers(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest

        @pytest.mark.aoti_ima(timeout=30)
        @pytest.mark.aoti(allow_nonfinite=True)
        def test_marked():
            pass
        """
    )
    run_pytest("--strict-markers").assert_outcomes(passed=1)


ISOLATED_LIGHT = """
import sys

import pytest

@pytest.fixture
def noisy():
    print("FIXTURE-SETUP-OUTPUT")
    yield
    print("FIXTURE-TEARDOWN-OUTPUT", end="", file=sys.stderr)

@pytest.mark.aoti_isolate
def test_fails():
    assert 1 == 2

@pytest.mark.aoti_isolate
def test_prints(noisy):
    print("OUTPUT-OF-THE-CHILD")
"""


def test_pytest_options_behave_with_isolated_tests_as_without_the_plugin(
    pytester: pytest.Pytester, run_pytest: RunPytest, watched_tmpdir: Path
) -> None:
    """Isolated tests (a child each, no torch) under options that change what pytest runs or keeps."""
    pytester.makepyfile(test_user=ISOLATED_LIGHT)
    # -p no:tmpdir: the children's logs live in a temp dir of their own, removed at the end (the header says so).
    no_tmpdir = run_pytest("-p", "no:tmpdir", "--aoti-isolate")
    no_tmpdir.assert_outcomes(passed=1, failed=1)
    assert "-p no:tmpdir: child logs and repro bundles are removed at the end of the run" in no_tmpdir.stdout.str()
    assert left_behind(watched_tmpdir) == []
    # --lf with nothing failed before and --lfnf=none: nothing runs, no child is asked for a test it cannot find.
    none_failed = run_pytest("--lf", "--lfnf=none", "--aoti-isolate", "-p", "cacheprovider")
    assert none_failed.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    none_failed.stdout.fnmatch_lines(["*2 deselected*"])
    # --setup-plan only shows the fixtures: no child.
    plan = run_pytest("--setup-plan", "--aoti-isolate")
    assert plan.ret == pytest.ExitCode.OK
    assert "ran in a fresh subprocess" not in plan.stdout.str()
    # -s shows what the isolated test and its fixtures printed, and not the child's own session around it.
    shown = run_pytest("-s", "--aoti-isolate", "-k", "prints")
    shown.assert_outcomes(passed=1)
    text = shown.stdout.str()
    for line in ("FIXTURE-SETUP-OUTPUT", "OUTPUT-OF-THE-CHILD", "FIXTURE-TEARDOWN-OUTPUT"):
        assert text.count(line) == 1, text
    assert text.index("FIXTURE-SETUP-OUTPUT") < text.index("OUTPUT-OF-THE-CHILD") < text.index("FIXTURE-TEARDOWN")
    for session_line in ("test session starts", "rootdir:", "collected 2 items", "1 passed"):
        assert text.count(session_line) == 1, text
    assert "[pytest-aoti:test-output" not in text


VERDICT_HOOK_CONFTEST = """
import json


def pytest_aoti_verdict(config, nodeid, verdict):
    # The frozen public record: how the first rerun ended, e.g. "crashed with SIGSEGV" or "failed: ...".
    first = verdict.rerun_outcome.split(":")[0].split(" with ")[0]
    record = {"nodeid": nodeid, "first": first, "not_rerun": verdict.not_rerun}
    with open(config.rootpath / "verdicts.jsonl", "a") as stream:
        stream.write(json.dumps(record) + "\\n")
"""

VERDICT_HOOK_TESTS = """
import os
import signal

import pytest


@pytest.mark.aoti_ima
def test_fails():
    assert 1 == 2


@pytest.mark.aoti_ima
def test_crashes():
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_the_verdict_hook_sees_every_verdict(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """``pytest_aoti_verdict`` in a conftest, under plain ``--aoti-debug``: the failure's verdict is made in the xdist
    worker, the crash's in the controller; both reach the hook once."""
    pytester.makeconftest(VERDICT_HOOK_CONFTEST)
    pytester.makepyfile(test_user=VERDICT_HOOK_TESTS)
    result = run_pytest("--aoti-debug")
    result.assert_outcomes(failed=2)
    records = [json.loads(line) for line in (pytester.path / "verdicts.jsonl").read_text().splitlines()]
    assert sorted((r["nodeid"], r["first"]) for r in records) == [
        ("test_user.py::test_crashes", "crashed"),
        ("test_user.py::test_fails", "failed"),
    ]


SIDE_EFFECTS = """
import os

import pytest


@pytest.mark.aoti_ima
def test_marked_may_crash():
    os.environ["SET_BY_THE_MARKED_TEST"] = str(os.getpid())


def test_later():
    assert "SET_BY_THE_MARKED_TEST" not in os.environ
"""


def test_a_test_marked_aoti_ima_runs_isolated_and_the_run_says_so(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """A plain run (no --aoti-debug, no -n): a test marked aoti_ima is expected to crash its process, so it runs in
    a fresh subprocess from the start, and what it changes in its process stays there. The run says so after
    collection, and the test's report says why it ran elsewhere."""
    pytester.makepyfile(test_user=SIDE_EFFECTS)
    result = run_pytest("-rA", "--junitxml=report.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "collected 2 items",
            "aoti: tests that want a debug rerun (marked aoti_ima, or under --aoti-debug; 1 here) run in fresh "
            "subprocesses from the start, so that a crash fails only that test; what they change in a process*",
        ]
    )
    assert (
        "ran in a fresh subprocess: debug reruns are on and this session runs tests in-process" in result.stdout.str()
    )
    assert set(junit_cases(pytester.path / "report.xml")) == {"test_marked_may_crash", "test_later"}
    # Nothing marked, nothing said: plain pytest is unchanged.
    pytester.makepyfile(test_user=SIDE_EFFECTS.replace("@pytest.mark.aoti_ima\n", ""))
    plain = run_pytest()
    plain.assert_outcomes(passed=1, failed=1)  # in one process, the first test's change reaches the second
    assert "want a debug rerun" not in plain.stdout.str()


WHAT_THE_CHILD_HAS = """
import json
import os
import pathlib
import sys

import pytest


@pytest.mark.aoti_ima
def test_light():
    seen = {"torch": "torch" in sys.modules, "server": os.environ.get("PYTEST_AOTI_FORK_SERVER")}
    pathlib.Path(__file__).with_name("seen.json").write_text(json.dumps(seen))
"""


def test_a_child_that_compiles_nothing_starts_no_fork_server(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """A warm fork pays off only for a child that imports torch and compiles: a test marked ``aoti_ima`` that uses no
    pytest-aoti fixture starts fresh (~2 s), and no server warms up for it (~7 CPU-s, on the machine its session runs
    on). tests/test_warm_children.py checks that such a child never waits for a server still warming up."""
    pytester.makepyfile(test_light=WHAT_THE_CHILD_HAS)
    result = run_pytest("-rA")
    result.assert_outcomes(passed=1)
    assert "ran in a fresh subprocess" in result.stdout.str()
    # Forked from a warm server, the child would have had torch imported before its test ran, and its socket.
    assert json.loads((pytester.path / "seen.json").read_text()) == {"torch": False, "server": None}


SERVER_SEEN = """
import json
import os
import pathlib
import time

import pytest


def test_{first}({fixture}):
    pass

{more}
def test_records_the_server():
    directory = pathlib.Path(os.environ["PYTEST_AOTI_FORK_SERVER"]).parent
    # The controller launches the server when it logs the first test's setup report, which it may do after this
    # worker has gone on to this test: wait for that (never long) where the first test set up a device.
    waited_until = time.monotonic() + {wait}
    while (directory / "planned").exists() and time.monotonic() < waited_until:
        time.sleep(0.1)
    pathlib.Path(__file__).with_name("server.json").write_text(json.dumps(sorted(os.listdir(directory))))
"""


def test_a_debug_session_launches_its_fork_server_at_its_first_aoti_test(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """Under ``--aoti-debug`` the fork server is planned at configure time (its socket path handed to the worker)
    and launched when the first test that uses a pytest-aoti fixture has been set up: a session whose tests use
    none never pays its warm-up (~7 CPU-s), not even for the debug rerun of one that crashes (its stages compile
    nothing: they start fresh). Planned, the server's directory holds only its owner and the mark that says so."""
    crashes = "\n@pytest.mark.aoti_ima\ndef test_crashes():\n    os.kill(os.getpid(), 11)\n\n"
    pytester.makepyfile(test_light=SERVER_SEEN.format(first="light", fixture="", wait=0, more=crashes))
    result = run_pytest("--aoti-debug")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*aoti debug rerun*", "verdict: crashed with SIGSEGV*"])
    assert json.loads((pytester.path / "server.json").read_text()) == ["owner", "planned"]

    pytester.makepyfile(test_light=SERVER_SEEN.format(first="on_a_device", fixture="aoti_device", wait=300, more=""))
    run_pytest("--aoti-debug").assert_outcomes(passed=2)
    seen = json.loads((pytester.path / "server.json").read_text())
    assert "planned" not in seen and "server.log" in seen, seen


HANGS = """
import threading

import pytest


@pytest.mark.aoti_ima(timeout=3)
def test_hangs():
    threading.Event().wait()  # never set: only the timeout ends this test
"""


def test_an_aoti_ima_timeout_bounds_the_isolated_first_run(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """A test marked ``aoti_ima(timeout=3)`` runs in a fresh subprocess in a plain run: the marker's timeout stops
    it there (as ``aoti_isolate(timeout=)`` does), and a run that timed out gets no debug rerun that would hang too."""
    pytester.makepyfile(test_user=HANGS)
    result = run_pytest("--junitxml=report.xml")
    result.assert_outcomes(failed=1)
    case = junit_cases(pytester.path / "report.xml")["test_hangs"]
    assert case["outcomes"] == ["failure"]
    text = result.stdout.str()
    assert "timed out after 3 s in an isolated subprocess (pytest-aoti)" in text, text
    assert "the isolated run timed out after 3 s; the debug stages would hang the same way" in text, text


WARNS_CONFTEST = """
def pytest_configure(config):
    config.issue_config_time_warning(UserWarning("configuring warns"), stacklevel=2)
"""

WARNS_ONCE = """
import warnings

import pytest

warnings.warn("collecting the module warns", UserWarning)


@pytest.mark.aoti_ima
@pytest.mark.parametrize("n", range(3))
def test_isolated(n):
    if n == 0:
        warnings.warn("the test itself warns", UserWarning)
"""


def test_each_warning_counts_once_with_isolated_tests(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """Three tests marked ``aoti_ima`` in a plain run, each in a child of its own: the warnings of configuring and
    collecting are the parent's, counted once, and the test's own warning comes back once (issue #50 item 18)."""
    pytester.makeconftest(WARNS_CONFTEST)
    pytester.makepyfile(test_user=WARNS_ONCE)
    result = run_pytest("-p", "no:xdist")
    result.assert_outcomes(passed=3, warnings=3)
    text = result.stdout.str()
    for warning in ("configuring warns", "collecting the module warns", "the test itself warns"):
        assert text.count(f"UserWarning: {warning}") == 1, text
    assert "test_user.py::test_isolated[0]" in text  # the test's own warning names it


@pytest.mark.parametrize("dist", ["loadgroup", "loadscope", "loadfile"])
def test_debug_under_a_dist_that_loses_crashes_is_refused(
    pytester: pytest.Pytester, run_pytest: RunPytest, dist: str
) -> None:
    """pytest-xdist 3.8.0's loadgroup hangs after a worker crashes; loadscope and loadfile give the crashed test to
    each new worker and never run the rest of its scope or file (both without pytest-aoti too). ``--aoti-debug``
    promises that a crash fails only its test, so under ``-n`` it refuses them at start (issue #50 item 19)."""
    pytester.makepyfile(test_user="def test_passes():\n    pass\n")
    refused = run_pytest("--aoti-debug", "-n", "2", f"--dist={dist}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [f"ERROR: --aoti-debug with -n and --dist {dist}: pytest-xdist's {dist} scheduler *Use --dist load or *"]
    )
    if dist == "loadgroup":
        # Without -n (a --dist in addopts): pytest-aoti runs the session in one supervised worker, scheduled by load.
        run_pytest("--aoti-debug", f"--dist={dist}").assert_outcomes(passed=1)
        # Each aoti test in a child of its own: a crash leaves its worker alive.
        run_pytest("--aoti-debug", "--aoti-isolate", "-n", "2", f"--dist={dist}").assert_outcomes(passed=1)


def test_the_debug_reruns_and_the_caches_options_from_their_own_packages(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path
) -> None:
    """The options that moved out of settings.py (issue 53) read as before, ini below the command line, in the
    session and in the isolated child; the verify feature's flag matches its ini key, its old spelling still read."""
    pytester.makeini(
        "[pytest]\naoti_isolate = true\naoti_rerun_timeout = 120\naoti_cache_max_mb = 64\naoti_flaky_reruns = 3\n"
    )
    pytester.makepyfile(
        test_user="""
        import os

        def test_runs_isolated(aoti_device):
            assert os.environ.get("PYTEST_AOTI_CHILD") == "isolate"
        """
    )
    result = run_pytest("--aoti-rerun-timeout=60", "--aoti-verify-import=os", cache=tmp_path / "cache")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"aoti: device=*, debug=off, isolate=on, rerun timeout=60s, cache={tmp_path / 'cache'} (cap 64 MiB)*",
            "*PytestDeprecationWarning: --aoti-verify-import is deprecated: use --aoti-verify-imports*",
        ]
    )
    bad = run_pytest("--aoti-flaky-reruns=11", cache=None)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["ERROR: --aoti-flaky-reruns: expected a number of extra runs of at most 10, got '11'"])


def _first_loop_of_looponfail(pytester: pytest.Pytester, *args: str) -> str:
    """The output of ``pytest -f``'s first loop: it then waits for a file to change, forever, so it is stopped (its
    process group: xdist's looponfail runs each loop in an execnet child) once it says so."""
    command = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-f", *args]
    process = subprocess.Popen(
        command, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    assert process.stdout is not None
    output, deadline = b"", time.monotonic() + 600
    try:
        while b"waiting for changes" not in output and time.monotonic() < deadline:
            if select.select([process.stdout], [], [], 5.0)[0]:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                output += chunk
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return output.decode(errors="replace")


def test_looponfail_says_debug_reruns_are_off(pytester: pytest.Pytester) -> None:
    """Under ``pytest -f --aoti-debug`` (pytest-xdist's looponfail) each loop's session gets only the test paths,
    not the command line, and so would every child it started: the header and each failure's verdict say that
    debug reruns are off, and why (issue 62 item 17: the header said debug=on and no rerun or verdict came)."""
    pytester.makepyfile(test_user="def test_fails(aoti_device):\n    assert False\n")
    output = _first_loop_of_looponfail(pytester, "--aoti-debug")
    assert "waiting for changes" in output, output
    assert "no subprocesses: --looponfail (-f) runs each loop in a process that pytest-xdist gives only" in output
    assert "verdict: not rerun: --looponfail (-f)" in output, output
    assert "INTERNALERROR" not in output


def test_a_test_marked_aoti_isolate_is_refused_under_a_debugger(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest

        @pytest.mark.aoti_isolate
        def test_isolated():
            pass

        @pytest.mark.aoti_ima
        def test_debugged(aoti_device):
            pass
        """
    )
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "--trace", "--aoti-device=cpu")
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_isolated*",
            "*test_user.py::test_isolated: @pytest.mark.aoti_isolate needs a fresh subprocess, and --trace debugs*",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_json_target_without_benchmarks_is_named_in_the_header(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one(): pass\n")
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "--aoti-benchmark-json=b.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti benchmarks: off; --aoti-benchmark-json writes nothing without --aoti-benchmark"])
    assert not (pytester.path / "b.json").exists()
