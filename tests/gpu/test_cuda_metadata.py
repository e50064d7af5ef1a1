"""Where torch's exported metadata is wrong on CUDA: ``torch.unique``'s ``inverse`` is promised as float32 (torch 2.11;
the op runs through Inductor's proxy executor), while the package and eager both return int64. ``aoti_check`` holds
the package to what eager returns, and says so."""

from __future__ import annotations

import pytest

from tests.conftest import RunPytest, junit_cases
from tests.gpu.test_cuda_debug import _keep

pytestmark = pytest.mark.gpu

UNIQUE_TESTS = """
import torch


class Unique(torch.nn.Module):
    def forward(self, x):
        values, inverse = torch.unique(x, sorted=True, return_inverse=True)
        return torch.relu(values), inverse


def test_unique(aoti_check, aoti_device):
    x = torch.tensor([3.0, -1.0, 2.0, 3.0, -1.0, 7.0], device=aoti_device)
    aoti_check(Unique(), (x,))
"""


def _metadata_says_float32() -> bool:
    import torch

    class Unique(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            values, inverse = torch.unique(x, sorted=True, return_inverse=True)
            return torch.relu(values), inverse

    ep = torch.export.export(Unique(), (torch.tensor([3.0, 1.0, 3.0], device="cuda"),))
    inverse = next(n for n in ep.graph.nodes if n.op == "output").args[0][1]
    return bool(inverse.meta["val"].dtype == torch.float32)


def test_unique_inverse_is_checked_against_eager(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=UNIQUE_TESTS)
    result = run_pytest("-p", "no:logging", "--junitxml=report.xml")
    _keep("unique_inverse_dtype", result)
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "dtype invariant violated" not in text
    note = (
        "output 1: the exported program says torch.float32, eager returns torch.int64; the package's output is "
        "checked against eager's torch.int64 (torch's output metadata is wrong here)"
    )
    properties = junit_cases(pytester.path / "report.xml")["test_unique"]["properties"]
    if _metadata_says_float32():  # torch 2.11 on CUDA: said in the warnings summary and in JUnit
        assert note in text
        assert properties["aoti_dtype_from_eager"] == note  # type: ignore[index]
    else:  # a torch whose metadata is right: nothing to say
        assert "aoti_dtype_from_eager" not in properties  # type: ignore[operator]
