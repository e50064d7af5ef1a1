"""Debug reruns and isolation with real failures inside compiled models: a custom op that segfaults between two
compiled kernels, a kernel that makes NaN, a wrong-shape input, a test that only fails after another one."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import RunPytest

CRASH_TESTS = """
import pytest
import torch

from aoti_models import MLP, Crashy


@pytest.mark.aoti_ima
def test_crash(aoti_compile):
    compiled = aoti_compile(Crashy(), (torch.randn(4, 3),))
    compiled(torch.full((4, 3), 1000.0))


def test_passes_before(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),))


def test_passes_after():
    assert torch.ones(2).sum() == 2
"""

KERNEL_OF_THE_CRASH = "cpp_fused_add_maybe_crash_mul_sin_0"


def _assert_crash_verdict(text: str) -> None:
    assert "verdict: crashed with SIGSEGV; after kernel " + KERNEL_OF_THE_CRASH + " completed" in text
    assert "stage kernels (printer=3): crashed with SIGSEGV" in text
    assert f"stage tensors (printer=2 filtered to {KERNEL_OF_THE_CRASH}): crashed with SIGSEGV" in text
    assert "last phase: run" in text
    reproduce = re.search(r"^reproduce \(kernels\): (.*)$", text, re.MULTILINE)
    assert reproduce is not None
    for part in (
        "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER=3",
        "CUDA_LAUNCH_BLOCKING=1",
        "AOTI_RUNTIME_CHECK_INPUTS=1",
        "TORCHINDUCTOR_NAN_ASSERTS=1",
        "-m pytest test_user.py::test_crash",
    ):
        assert part in reproduce.group(1)
    assert f"[ after_launch: {KERNEL_OF_THE_CRASH} ]" in text
    assert "Fatal Python error: Segmentation fault" in text


def test_crash_under_xdist_gets_a_debug_rerun(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=CRASH_TESTS)
    result = run_pytest("-n", "2", "-p", "no:logging", "--junitxml=report.xml")
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()
    assert "crashed while running 'test_user.py::test_crash'" in text
    _assert_crash_verdict(text)
    result.stdout.fnmatch_lines(
        ["*= aoti =*", f"test_user.py::test_crash: crashed with SIGSEGV; after kernel {KERNEL_OF_THE_CRASH}*"]
    )
    properties = {
        prop.get("name"): prop.get("value") for prop in ET.parse(pytester.path / "report.xml").iter("property")
    }
    assert properties["aoti_signal"] == "SIGSEGV"
    assert properties["aoti_suspect_kernel"] == KERNEL_OF_THE_CRASH
    assert properties["aoti_rerun_outcome"] == "crashed with SIGSEGV"


def test_crash_with_isolate_flag_fails_only_that_test(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=CRASH_TESTS)
    result = run_pytest("--aoti-isolate", "-p", "no:logging")
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()
    assert "crashed with SIGSEGV in an isolated subprocess (pytest-aoti)" in text
    assert "ran in a fresh subprocess: --aoti-isolate" in text
    _assert_crash_verdict(text)
    # The killed children's TMPDIRs, with the aotinductor_* dirs their loader extracted, are gone.
    log_dirs = {Path(p).parent for p in re.findall(r"^full log(?: \(\w+\))?: (\S+)$", text, re.MULTILINE)}
    assert len(log_dirs) == 2
    for log_dir in log_dirs:
        assert not list(log_dir.glob("tmp-*")), list(log_dir.iterdir())
        assert not list(log_dir.rglob("aotinductor_*"))


def test_abort_under_isolate_marker_without_debug(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import os
        import pytest
        import torch
        from aoti_models import Crashy

        @pytest.mark.aoti_isolate
        def test_abort(aoti_compile):
            os.environ["AOTI_TESTS_CRASH"] = "abort"
            aoti_compile(Crashy(), (torch.randn(4, 3),))(torch.full((4, 3), 1000.0))
        """
    )
    result = run_pytest("-p", "no:logging")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*crashed with SIGABRT in an isolated subprocess (pytest-aoti)*", "*last phase: run*"])
    assert "aoti debug rerun" not in result.stdout.str()


def test_nan_and_wrong_shape_without_isolation(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest
        import torch
        from aoti_models import MLP, LogModel

        @pytest.mark.aoti_ima
        def test_nan(aoti_compile):
            aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))(-torch.ones(4, 3))

        def test_wrong_shape(aoti_compile):
            aoti_compile(MLP(), (torch.randn(4, 8),))(torch.randn(5, 8))
        """
    )
    result = run_pytest("--aoti-debug", "-p", "no:logging")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "verdict: failed: pytest_aoti.errors.AOTIInvariantError: output 0: nonfinite invariant violated" in text
    assert re.search(r"first NaN/Inf: cpp_fused_\w*log\w* buf0 \(mean -?nan", text), text
    assert "verdict: failed: pytest_aoti.errors.AOTIInvariantError: input 0 ('x'): shape invariant violated" in text
    result.stdout.fnmatch_lines(
        ["*= aoti =*", "test_user.py::test_nan: failed:*", "test_user.py::test_wrong_shape: failed:*"]
    )


def test_failure_that_needs_an_earlier_test_does_not_reproduce(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest
        import torch
        from aoti_models import LogModel

        STATE = []

        def test_leaves_state():
            STATE.append("dirty")

        @pytest.mark.aoti_ima(stages=("kernels",))
        def test_depends_on_state(aoti_compile):
            compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
            compiled(torch.rand(4, 3) + 0.5)
            assert not STATE, "state leaked from an earlier test"
        """
    )
    result = run_pytest("-p", "no:logging")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*verdict: did not reproduce in isolation*", "*stage kernels (printer=3): passed*"])


def test_child_timeout_dumps_tracebacks(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import time
        import pytest

        @pytest.mark.aoti_isolate(timeout=5)
        def test_hangs():
            time.sleep(120)
        """
    )
    result = run_pytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out in an isolated subprocess (pytest-aoti)*", "*in test_hangs*"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("aoti_ima(timeout='soon')", "@pytest.mark.aoti_ima: timeout= expected seconds greater than 0, got 'soon'"),
        ("aoti_ima(stagse=('kernels',))", "@pytest.mark.aoti_ima: got an unexpected keyword argument 'stagse'"),
        (
            "aoti_ima(stages=('kernel',))",
            "@pytest.mark.aoti_ima: stages= expected a non-empty subset of ('kernels', 'tensors')",
        ),
        ("aoti_isolate(5)", "@pytest.mark.aoti_isolate: too many positional arguments"),
        ("aoti(allow_nan=True)", "@pytest.mark.aoti: got an unexpected keyword argument 'allow_nan'"),
    ],
)
def test_bad_marker_arguments_are_usage_errors(
    pytester: pytest.Pytester, run_pytest: RunPytest, marker: str, message: str
) -> None:
    pytester.makepyfile(
        test_user=f"""
        import pytest

        @pytest.mark.{marker}
        def test_marked():
            pass
        """
    )
    result = run_pytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_user.py::test_marked: {message}*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
