"""Accuracy triage (stage ``numerics``) on real compiles and real divergences: a Python counter that export bakes in
and eager reads afresh, a bfloat16 model compared with float32-tight tolerances, a float32 model compared exactly.
The verdict must name the kernel where package and eager part, not the first or the last one. The same bfloat16 model
without a tolerance passes on the float64 judge. (Three tests share the counter model, two the bfloat16 one: their
packages, normal and numerics, compile once.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases

NUMERICS_TESTS = """
import pytest
import torch


class Counter(torch.nn.Module):
    # linear -> pointwise reading a call counter -> linear -> softmax: extern calls between the three stages.
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = torch.relu(self.first(x)) * self.calls + 0.5
        return torch.softmax(self.second(h), dim=-1)


class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x):
        h = self.up(x)
        h = torch.nn.functional.silu(h) * torch.tanh(h) + h.exp() * 0.1
        return self.down(h)


def test_counter(aoti_check):
    # Export traces one call ahead, as eager's first call: the second input set is where they part.
    aoti_check(Counter(), (torch.randn(3, 8),), more_inputs=[(torch.randn(3, 8),)])


def test_bf16(aoti_check):
    model = Gated().to(torch.bfloat16)
    aoti_check(model, (torch.randn(8, 32, dtype=torch.bfloat16),), rtol=1e-5, atol=1e-5)


def test_bf16_default_tolerance(aoti_check):
    # The same package: beyond assert_close's bfloat16 defaults too, but closer to float64 than eager is.
    model = Gated().to(torch.bfloat16)
    aoti_check(model, (torch.randn(8, 32, dtype=torch.bfloat16),))


def test_exact(aoti_check):
    # The first call agrees but for float32 rounding (softmax), which an exact comparison rejects.
    aoti_check(Counter(), (torch.randn(3, 8),), rtol=0.0, atol=0.0)


class CondSoftmax(torch.nn.Module):
    # A branch on the data: the kernels inside torch.cond's branches are not compared one by one.
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        return torch.cond(h.sum() > 0, lambda t: torch.softmax(t, -1), lambda t: torch.softmax(-t, -1), (h,))


def test_exact_cond(aoti_check):
    # The softmax inside the branch rounds differently in the package: past an exact tolerance, within noise.
    aoti_check(CondSoftmax(), (torch.randn(3, 8),), rtol=0.0, atol=0.0)


@pytest.mark.aoti_ima(stages=("numerics",))
def test_not_a_mismatch(aoti_check):
    aoti_check(Counter(), (torch.randn(3, 8),))
    assert False, "the test's own assertion"
"""

# test_counter's middle stage: line 15's pointwise ops, where the counter enters. Inductor fuses the relu before them
# into the same kernel or not, as its release decides (2.11 and 2.13 do, cpp_fused_add_mul_relu_0; 2.14 does not).
MIDDLE_LINE = "at test_numerics_user.py:15 in forward: h = torch.relu(self.first(x)) * self.calls + 0.5; max abs err"
MIDDLE_NODES = {"add", "mul"}
_DIVERGENT = re.compile(r"first divergent kernel: (?P<kernel>\w+) \(nodes: (?P<nodes>[\w, ]+)\) ")
BF16_KERNEL = "cpp_fused_add_exp_mul_silu_tanh_0"


def _section(text: str, test: str) -> str:
    """The failure report of ``test``, up to the next test's (or the summary)."""
    start = text.index(f"_ {test} _")
    ends = [text.find(marker, start + 1) for marker in ("\n______", "short test summary info")]
    return text[start : min(end for end in ends if end != -1)]


def _middle_kernel(counter: str) -> str:
    """The kernel test_counter's verdict names, checked to be the middle stage as this Inductor fused it: at line 15,
    computing its add and mul (with the relu at most, never a linear's or the softmax's nodes), and named for them."""
    match = _DIVERGENT.search(counter)
    assert match is not None and counter[match.end() :].startswith(MIDDLE_LINE), counter
    nodes = match["nodes"].split(", ")
    assert MIDDLE_NODES <= set(nodes) <= MIDDLE_NODES | {"relu"}, counter
    assert match["kernel"] == f"cpp_fused_{'_'.join(sorted(nodes))}_0", counter
    return match["kernel"]


# On every torch release .ci/run tests: stage numerics (printer mode 1, eager values through a dispatch mode).
@pytest.mark.torch_matrix
def test_numerics_names_the_first_divergent_kernel(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_numerics_user=NUMERICS_TESTS)
    result = run_pytest("--aoti-debug", "--junitxml=report.xml", "-rf")
    result.assert_outcomes(failed=5, passed=1)
    text = result.stdout.str()

    counter = _section(text, "test_counter")
    # The middle stage, not the linear before it nor the softmax after it; its input (the first linear) matched.
    middle_kernel = _middle_kernel(counter)
    assert "inputs matched eager" in counter
    assert "the difference comes from export, not Inductor" in counter
    assert "stage numerics (printer=1, provenance tracking): failed" in counter
    assert "stage kernels" not in counter  # a mismatch gets numerics only: kernels/tensors show nothing for it

    bf16 = _section(text, "test_bf16")
    assert f"first divergent kernel: {BF16_KERNEL}" in bf16
    assert "in forward: h = torch.nn.functional.silu(h) * torch.tanh(h) + h.exp() * 0.1" in bf16
    assert "float64 reference of add: the package is closer" in bf16

    exact = _section(text, "test_exact")
    assert "no kernel diverged from eager beyond rounding noise" in exact
    assert "the test's tolerance (rtol=0, atol=0) is tighter than the arithmetic allows" in exact

    # No kernel of torch.cond's branches is compared, so none is past the tolerance; the outputs are, by rounding.
    exact_cond = _section(text, "test_exact_cond")
    assert "numerics: higher-order ops (cond): their outputs are compared" in exact_cond
    assert (
        "the outputs differ from eager's by rounding noise only: the test's tolerance (rtol=0, atol=0) is tighter "
        "than the arithmetic allows"
    ) in exact_cond
    assert "the mismatch is in the comparison itself" not in exact_cond

    other = _section(text, "test_not_a_mismatch")
    assert "stage numerics not run: it explains a package-vs-eager mismatch" in other

    # The terminal summary names the kernel too.
    summary = text[text.rindex("= aoti =") :]
    assert "test_numerics_user.py::test_counter: failed" in summary
    assert f"first divergent kernel: {middle_kernel}" in summary

    cases = junit_cases(pytester.path / "report.xml")
    assert cases["test_counter"]["properties"]["aoti_first_divergent_kernel"] == middle_kernel  # type: ignore[index]
    assert cases["test_bf16"]["properties"]["aoti_first_divergent_kernel"] == BF16_KERNEL  # type: ignore[index]
    assert str(cases["test_counter"]["properties"]["aoti_source"]).startswith(  # type: ignore[index]
        f"{middle_kernel}: at test_numerics_user.py:15 in forward: h = torch.relu("
    )
    assert cases["test_exact"]["properties"]["aoti_first_divergent_kernel"] == "none"  # type: ignore[index]
    # Without a tolerance of its own, the bfloat16 test passes on the float64 judge, which JUnit records.
    judged = str(cases["test_bf16_default_tolerance"]["properties"]["aoti_float64_judge"])  # type: ignore[index]
    assert judged.startswith("example inputs: float64 reference, output (bfloat16): RMSE to a float64 run"), judged
    assert judged.endswith("the package is as accurate as eager"), judged
    bundle = Path(cases["test_counter"]["properties"]["aoti_bundle"])  # type: ignore[index]
    assert (bundle / "repro.py").exists()
