"""What only a real pytest subprocess shows: loading the plugin does not import torch, and a bad marker argument
is a clear error under xdist too (raised in a worker, it used to be an INTERNALERROR)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import RunPytest, left_behind


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
        """
    )
    result = run_pytest("-n", "2")
    # xdist reports a worker's collection error as an error (exit 1); without xdist it interrupts (exit 2).
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*test_user.py::test_marked: @pytest.mark.aoti_ima: env= expected a dict of str*"])
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
import pytest

@pytest.mark.aoti_isolate
def test_fails():
    assert 1 == 2

@pytest.mark.aoti_isolate
def test_prints():
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
    # -s shows what the isolated test printed.
    shown = run_pytest("-s", "--aoti-isolate", "-k", "prints")
    shown.assert_outcomes(passed=1)
    assert "OUTPUT-OF-THE-CHILD" in shown.stdout.str()


VERDICT_HOOK_CONFTEST = """
import json


def pytest_aoti_verdict(config, nodeid, verdict):
    first = verdict.first
    record = {"nodeid": nodeid, "first": first.outcome if first else None, "not_rerun": verdict.not_rerun}
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
