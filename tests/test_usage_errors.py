"""A usage error (a mistyped Inductor config key, a keyword a fixture does not take, a bad tolerance) is an
``AOTIUsageError`` that is also the builtin a test catches, and the debug rerun does not rerun it: a rerun would
raise the same error. None of these tests compiles a model."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest, failure_section, junit_cases

USAGE_TESTS = """
import pytest
import torch

from aoti_models import MLP


def test_unknown_config_key(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),), inductor_configs={"max_autotuen": True})


def test_keyword_of_a_marker(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), probe_dims=True)


def test_rtol_alone(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), rtol=0.1)


def test_rtol_a_word(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), rtol="tight", atol=1e-5)


def test_atol_below_zero(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), rtol=1e-5, atol=-1.0)


def test_more_inputs_a_tensor(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), more_inputs=torch.randn(4, 8))


def test_snapshot_rtol_nan(aoti_snapshot):
    aoti_snapshot(torch.ones(2), rtol=float("nan"), atol=0.0)


def test_caught_as_the_builtin(aoti_compile):
    with pytest.raises(ValueError, match="unknown Inductor config key 'max_autotuen'"):
        aoti_compile(MLP(), (torch.randn(4, 8),), inductor_configs={"max_autotuen": True})
    with pytest.raises(TypeError, match="got unexpected keyword argument"):
        aoti_compile(MLP(), (torch.randn(4, 8),), threads=2)
"""


def test_a_usage_error_is_not_debug_rerun(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=USAGE_TESTS)
    result = run_pytest("--aoti-debug", "-p", "no:logging", "--junitxml=report.xml")
    result.assert_outcomes(passed=1, failed=7)
    text = result.stdout.str()
    assert "INTERNALERROR" not in text + result.stderr.str()
    assert "stage kernels" not in text and "stage numerics" not in text
    for test, error in (
        ("test_unknown_config_key", "AOTIValueError: inductor_configs: unknown Inductor config key 'max_autotuen'"),
        ("test_keyword_of_a_marker", "AOTITypeError: aoti_check() got unexpected keyword argument(s) 'probe_dims'"),
        ("test_rtol_alone", "AOTIValueError: rtol and atol: give both or neither"),
        # Issue 62 item 12: these ended in the core's tolerance and more_inputs checks.
        ("test_rtol_a_word", "AOTIValueError: rtol: expected a finite number >= 0, got str 'tight'"),
        ("test_atol_below_zero", "AOTIValueError: atol: expected a finite number >= 0, got float -1.0"),
        ("test_more_inputs_a_tensor", "AOTITypeError: more_inputs: expected a list of input sets"),
        ("test_snapshot_rtol_nan", "AOTIValueError: aoti_snapshot rtol: expected a finite number >= 0, got float nan"),
    ):
        section = failure_section(result, test)
        assert error in section, section
        # The traceback ends at the user's line: no frame of the core's argument checks (issue 50, item 11), nor
        # any other of pytest-aoti's.
        assert "pytest_aoti/" not in section, section
        assert re.findall(r"^(\S+\.py):\d+: ", section, re.M) == ["test_user.py"], section
        if test != "test_snapshot_rtol_nan":  # it builds nothing: no debug rerun to refuse
            assert "verdict: not rerun: pytest-aoti was called wrongly" in section, section
    cases = junit_cases(pytester.path / "report.xml")
    properties = cases["test_unknown_config_key"]["properties"]
    assert isinstance(properties, dict)
    assert properties["aoti_rerun_outcome"] == "not rerun"
    assert str(properties["aoti_verdict"]).startswith("not rerun: pytest-aoti was called wrongly")
