"""What only a real pytest subprocess shows: loading the plugin does not import torch, and a bad marker argument
is a clear error under xdist too (raised in a worker, it used to be an INTERNALERROR)."""

from __future__ import annotations

import pytest

from tests.conftest import RunPytest


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
    result = run_pytest("--aoti-debug", "--aoti-isolate")
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
