"""Models in the style of PyTorch's own AOTI suite (``test/inductor/test_aot_inductor.py``), re-implemented and run
through ``aoti_check`` on CPU as a user would: plain AOTI compiles, runs and matches eager on each of them, so the
plugin must too. Among them the shapes it once refused: a ``forward()`` of no inputs, and dims derived from a root
that no input holds alone, called with the root at the ``min=1`` the user declared (export's range starts it at 2).

One subprocess runs every user test; packages of the same model and shapes come from the shared cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RunPytest, failure_section, junit_cases

USER_TESTS = r"""
import pytest
import torch
from torch.export import Dim


class NoArgs(torch.nn.Module):
    # test_no_args: the weights are the whole computation.
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 6))
        self.alpha = torch.nn.Parameter(torch.randn(4, 6))

    def forward(self):
        return self.weight * self.alpha


def test_no_inputs(aoti_check):
    model = NoArgs()
    compiled = aoti_check(model, (), more_inputs=[()])
    torch.testing.assert_close(compiled(), model.weight * model.alpha)


class Halves(torch.nn.Module):
    def forward(self, x):
        first, second = x.chunk(2)
        return first * second + 1


HALF = Dim("half", min=1, max=64)


def test_derived_dim_at_its_declared_min(aoti_check):
    # x is 2 * half; no input is half itself. half=1 (x of 2) is what the user declared and what the package computes.
    aoti_check(
        Halves(),
        (torch.randn(8),),
        dynamic_shapes=({0: 2 * HALF},),
        more_inputs=[(torch.randn(2),), (torch.randn(128),)],
    )


def test_derived_dim_past_its_declared_max(aoti_compile):
    compiled = aoti_compile(Halves(), (torch.randn(8),), dynamic_shapes=({0: 2 * HALF},))
    compiled(torch.randn(130))


def test_derived_dim_of_an_odd_size(aoti_compile):
    compiled = aoti_compile(Halves(), (torch.randn(8),), dynamic_shapes=({0: 2 * HALF},))
    compiled(torch.randn(3))


def test_a_bare_tensor_for_args(aoti_compile):
    compiled = aoti_compile(Halves(), (torch.randn(8),), dynamic_shapes=({0: 2 * HALF},))
    compiled.call(torch.randn(8))


class ThreeFromOne(torch.nn.Module):
    def forward(self, x, y, z):
        return x.reshape(2, -1).sum(0) + y[1:] + z[::3]


def test_several_dims_derived_from_one(aoti_check):
    aoti_check(
        ThreeFromOne(),
        (torch.randn(8), torch.randn(5), torch.randn(12)),
        dynamic_shapes=({0: 2 * HALF}, {0: HALF + 1}, {0: 3 * HALF}),
        more_inputs=[
            (torch.randn(2), torch.randn(2), torch.randn(3)),
            (torch.randn(128), torch.randn(65), torch.randn(192)),
        ],
    )


class ShiftedRanges(torch.nn.Module):
    # test_shifted_constraint_ranges
    def forward(self, x, y):
        torch._check(y.size(0) == x.size(0) + 1)
        return x.sum(0) + y.sum(0)


def test_shifted_constraint_ranges(aoti_check):
    dim0_x = Dim("dim0_x", min=2, max=1024)
    aoti_check(
        ShiftedRanges(),
        (torch.randn(4, 5), torch.randn(5, 5)),
        dynamic_shapes={"x": {0: dim0_x}, "y": {0: dim0_x + 1}},
        more_inputs=[(torch.randn(2, 5), torch.randn(3, 5))],
    )


class ZeroSizeWeight(torch.nn.Module):
    # test_zero_size_weight: channel // r is 0, so the first Linear's weight has no elements.
    def __init__(self, channel=4, r=8):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(channel, channel // r, bias=False),
            torch.nn.ReLU(inplace=True),
            torch.nn.Linear(channel // r, channel, bias=False),
            torch.nn.Sigmoid(),
        )

    def forward(self, inp):
        b, c, _, _ = inp.shape
        x = self.pool(inp).view(b, c)
        x = self.net(x).view(b, c, 1, 1)
        return inp * x


def test_zero_size_weight(aoti_check):
    aoti_check(ZeroSizeWeight(), (torch.rand(4, 4, 4, 4),))


class CondOnBatch(torch.nn.Module):
    # test_cond_simple's shape: a branch on a data-dependent predicate, both sides on a dynamic batch.
    def forward(self, p, a, b):
        return torch.cond(p, lambda x, y: x + y, lambda x, y: x - y, (a, b))


def test_cond_with_a_dynamic_batch(aoti_check):
    batch = Dim("batch", min=2, max=64)
    aoti_check(
        CondOnBatch(),
        (torch.tensor(True), torch.randn(10, 3), torch.randn(10, 3)),
        dynamic_shapes={"p": {}, "a": {0: batch}, "b": {0: batch}},
        more_inputs=[(torch.tensor(False), torch.randn(3, 3), torch.randn(3, 3))],
    )


class NonzeroRows(torch.nn.Module):
    # test_zero_grid_with_unbacked_symbols: an output whose size is data-dependent (none when x is all zeros).
    def forward(self, x, y):
        nz = torch.nonzero(x)
        ones = torch.ones_like(nz, dtype=torch.float16)
        return ((ones + torch.zeros_like(nz, dtype=torch.float16)) @ y).sum()


def test_data_dependent_sizes(aoti_check):
    y = torch.randn(1, 32, dtype=torch.float16)
    aoti_check(NonzeroRows(), (torch.tensor([1, 1, 1]), y), more_inputs=[(torch.tensor([0, 0, 0]), y)])


class EmptyCat(torch.nn.Module):
    # test_empty_cat_dtype_promotion: an input with no elements.
    def forward(self, x, y):
        return torch.cat([x, y], dim=1).to(dtype=torch.bfloat16) * 2


def test_an_input_with_no_elements(aoti_check):
    aoti_check(EmptyCat(), (torch.randn(4, 10, dtype=torch.bfloat16), torch.randn(4, 0)))


class Seq(torch.nn.Module):
    # test_seq
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 1))

    def forward(self, x):
        return torch.sigmoid(self.layers(x))


def test_seq(aoti_check):
    aoti_check(Seq().eval(), (torch.randn(16, 10),))
"""


def test_suite_style_models(pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    junit = tmp_path / "junit.xml"
    result = run_pytest("-p", "no:logging", "-rA", f"--junitxml={junit}")
    cases = junit_cases(junit)
    failed = {name for name, case in cases.items() if case["outcomes"] == ["failure"]}
    assert failed == {
        "test_derived_dim_past_its_declared_max",
        "test_derived_dim_of_an_odd_size",
        "test_a_bare_tensor_for_args",
    }, result.stdout.str()
    assert all(case["outcomes"] == [] for name, case in cases.items() if name not in failed)
    assert len(cases) == 12

    # The declared range holds at both ends: past the max is refused, in the user's own names.
    above = failure_section(result, "test_derived_dim_past_its_declared_max")
    assert "input 0 ('x'): shape invariant violated: expected (2*half,), got (130,)" in above
    assert "dim 0 is 2*half, 2*half=130 outside [2, 128]" in above
    odd = failure_section(result, "test_derived_dim_of_an_odd_size")
    assert "expected (2*half,), got (3,); dim 0 is 2*half: no whole half gives 3" in odd
    # A bare tensor is not read as the tuple of its rows.
    bare = failure_section(result, "test_a_bare_tensor_for_args")
    assert "TypeError: args: expected a tuple of positional inputs, got Tensor (wrap one input as (x,))" in bare
    assert "INTERNALERROR" not in result.stdout.str()
