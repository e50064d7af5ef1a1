"""Where pytest-aoti's checks meet torch's own word, through real CPU compiles: an output dtype held to what eager
returns where the exported metadata is wrong, an Inductor config value taken as Inductor reads it, and an input that
export's guards refuse refused before the package runs."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest, failure_section, junit_cases

USER_TESTS = """
import torch
from torch.export import Dim

from aoti_models import MLP


@torch.library.custom_op("aoti_promises::inverse_of", mutates_args=())
def inverse_of(x: torch.Tensor) -> torch.Tensor:
    return torch.unique(x, sorted=True, return_inverse=True)[1]


@inverse_of.register_fake
def _inverse_of_fake(x):
    # float32, where the op returns int64: what torch 2.11 exports for torch.unique's inverse on CUDA.
    return torch.empty_like(x)


class Unique(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x), inverse_of(x)


def test_metadata_wrong_about_a_dtype(aoti_check):
    aoti_check(Unique(), (torch.tensor([3.0, -1.0, 2.0, 3.0, -1.0]),))


def test_a_flag_as_pytorch_passes_it(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), inductor_configs={"profile_bandwidth": "1", "profile_bandwidth_regex": ""})


class HundredRows(torch.nn.Module):
    def forward(self, x):
        return x.reshape(100, -1) * 2


def test_an_input_exports_guards_refuse(aoti_compile):
    compiled = aoti_compile(HundredRows(), (torch.randn(100),), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    compiled(torch.randn(100))
    compiled(torch.randn(300))
"""


# On every torch release .ci/run tests: export's guards and output metadata, a custom op.
@pytest.mark.torch_matrix
def test_torch_promises_on_real_compiles(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = run_pytest("-p", "no:logging", "-rA", "--junitxml=report.xml")
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()

    # The package and eager return int64 where the exported program promised float32: checked against eager's,
    # and said in the warnings summary and in JUnit.
    assert "PASSED test_user.py::test_metadata_wrong_about_a_dtype" in text
    note = (
        "output 1: the exported program says torch.float32, eager returns torch.int64; the package's output is "
        "checked against eager's torch.int64 (torch's output metadata is wrong here)"
    )
    assert note in text
    # Issue 50 pass-5 recheck: an AOTIWarning (-W ignore::pytest_aoti.AOTIWarning silences it), at the user's line.
    assert re.search(r"test_user\.py:\d+: AOTIDtypeFromEagerWarning: pytest-aoti: ", text), text
    cases = junit_cases(pytester.path / "report.xml")
    assert cases["test_metadata_wrong_about_a_dtype"]["properties"]["aoti_dtype_from_eager"] == note  # type: ignore[index]

    # "1" for a flag, as PyTorch's own test_with_profiler passes it: compiled, and the package matches eager.
    assert "PASSED test_user.py::test_a_flag_as_pytorch_passes_it" in text

    # Export ranges x's dim over [2, inf] but guards it to 100 (the -1 of reshape(100, -1) traced as 1).
    refused = failure_section(result, "test_an_input_exports_guards_refuse")
    assert re.search(
        r"input 0 \('x'\): shape invariant violated: expected \(s\d+,\), got \(300,\); dim 0: export's guard "
        r"\(x\.shape\[0\]//100\) == 1 fails at x\.shape\[0\]=300\.",
        refused,
    ), refused
    assert "(ExportedProgram.module() refuses this input too) (the compiled package was not run)" in refused
    assert "output 0: shape invariant violated" not in refused
