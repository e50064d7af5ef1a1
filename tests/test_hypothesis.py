"""Dynamic-shape testing with Hypothesis: strategies over a package's Dim ranges, shrinking to the failing shape,
the debug rerun replaying that shape, and no spurious shrinking after the device is poisoned."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest

torch = pytest.importorskip("torch")
sympy = pytest.importorskip("sympy")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pytest_aoti.core.invariants import ProgramSpec, TensorSpec, check_inputs  # noqa: E402
from pytest_aoti.core.strategies import input_shapes  # noqa: E402

USER_TESTS = """
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.export import Dim

from aoti_models import PLANTED, PlantedBug
from pytest_aoti import dynamic_inputs
def _batch_dynamic(aoti_compile_shared, model, features):
    batch = Dim("batch", min=1, max=64)
    return aoti_compile_shared(model, (torch.randn(4, features),), dynamic_shapes={"x": {0: batch}})


@pytest.fixture(scope="module")
def planted(aoti_compile_shared):
    return _batch_dynamic(aoti_compile_shared, PlantedBug(), 4)


@pytest.fixture(scope="module")
def sticky(aoti_compile_shared):
    # The same model (a cache hit): its op poisons the stand-in device in mode "sticky".
    return _batch_dynamic(aoti_compile_shared, PlantedBug(), 4)


@pytest.mark.aoti_ima(stages=("kernels",))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_planted_bug(planted, data):
    inputs = data.draw(dynamic_inputs(planted))
    torch.testing.assert_close(planted(*inputs), inputs[0] * 2)


def _sticky_property(sticky, data):
    inputs = data.draw(dynamic_inputs(sticky))
    torch.testing.assert_close(sticky(*inputs), inputs[0] * 2)


@settings(max_examples=200, deadline=None, database=None)
@given(data=st.data())
def test_sticky_with_health_check(sticky, data):
    _sticky_property(sticky, data)


@pytest.fixture(autouse=True)
def fresh_stand_in_device(request):
    PLANTED.update(mode="sticky" if "sticky" in request.fixturenames else "planted", poisoned=False)
    if "sticky" in request.fixturenames:
        sticky = request.getfixturevalue("sticky")
        sticky.poisoned = None
        watched = "with_health_check" in request.node.name
        sticky.health_check = (lambda: "stand-in device poisoned" if PLANTED["poisoned"] else None) if watched else None


@settings(max_examples=200, deadline=None, database=None)
@given(data=st.data())
def test_sticky_without_health_check(sticky, data):
    _sticky_property(sticky, data)
"""


def _falsifying_batch(text: str, test: str) -> int:
    """The batch size of the falsifying example Hypothesis printed for ``test``."""
    start = text.index(f"_ {test} _")
    # Hypothesis prints the draw on one line or over several (each prefixed "E" inside a failure report).
    match = re.search(r"Draw 1: inputs_with_shapes\(\s*(?:E\s+)?\(\((\d+), 4\),\)", text[start:])
    assert match is not None, text[start : start + 3000]
    return int(match.group(1))


def test_dynamic_shapes_with_hypothesis(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = run_pytest("-p", "no:logging", hypothesis=True)
    result.assert_outcomes(failed=3)
    text = result.stdout.str()

    # Found, shrunk to the threshold, reported with that shape.
    assert _falsifying_batch(text, "test_planted_bug") == 13
    # The debug rerun replayed the failing example from the database instead of searching again.
    section = text[text.index("_ test_planted_bug _") :]
    kernels_log = section[section.index("--- log of stage kernels") :]
    assert re.search(r"inputs_with_shapes\(\s*\(\(13, 4\),\)", kernels_log), kernels_log[:3000]

    # A poisoned device: with the health check the original failing example (batch > 12) is reported, not a
    # spurious shrink; without it Hypothesis shrinks to the smallest batch, which only failed because of the poison.
    assert _falsifying_batch(text, "test_sticky_with_health_check") > 12
    assert _falsifying_batch(text, "test_sticky_without_health_check") == 1


@st.composite
def program_specs(draw: st.DrawFn) -> ProgramSpec:
    """Random Dim specs: 1-3 root symbols with ranges, inputs whose dims are static, a root, or derived from one."""
    roots = [sympy.Symbol(f"s{i}", integer=True, nonnegative=True) for i in range(draw(st.integers(1, 3)))]
    ranges: dict[sympy.Expr, tuple[int, int | None]] = {}
    for root in roots:
        low = draw(st.integers(0, 8))
        ranges[root] = (low, draw(st.one_of(st.none(), st.integers(low, low + 40))))
    inputs = []
    for number in range(draw(st.integers(1, 3))):
        dims: list[int | sympy.Expr] = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["static", "root", "derived"]))
            root = draw(st.sampled_from(roots))
            if kind == "static":
                dims.append(draw(st.integers(1, 5)))
            elif kind == "root":
                dims.append(root)
            else:
                derived = draw(st.sampled_from([2 * root, root + 1, 4 * root]))
                low, high = ranges[root]
                bound = derived.subs(root, low), None if high is None else derived.subs(root, high)
                ranges[derived] = (int(bound[0]), None if bound[1] is None else int(bound[1]))
                dims.append(derived)
        strides = [sympy.Mul(*dims[axis + 1 :]) for axis in range(len(dims))]  # contiguous
        inputs.append(TensorSpec(f"x{number}", tuple(dims), tuple(strides), torch.float32))
    return ProgramSpec(tuple(inputs), (), ranges)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(spec=program_specs(), data=st.data())
def test_drawn_shapes_stay_inside_the_compiled_ranges(spec: ProgramSpec, data: st.DataObject) -> None:
    shapes = data.draw(input_shapes(spec, unbounded_span=16))
    values: dict[sympy.Expr, int] = {}
    for tensor, shape in zip(spec.inputs, shapes, strict=True):
        assert tensor is not None and shape is not None and len(shape) == len(tensor.shape)
        for want, got in zip(tensor.shape, shape, strict=True):
            if isinstance(want, int):
                assert got == want
                continue
            low, high = spec.ranges[want]
            assert got >= low and (high is None or got <= high)
            root = next(iter(want.free_symbols))
            root_value = sympy.solve(sympy.Eq(want, got), root)[0]
            assert values.setdefault(root, int(root_value)) == int(root_value), "a shared symbol took two values"
    # The invariant checker (the package's own gate) accepts every drawn shape.
    meta = [torch.empty(shape, device="meta") for shape in shapes]
    check_inputs(spec, meta, torch.device("meta"), allow_nonfinite=True)


class _Lookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(10, 2)

    def forward(self, ids: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return self.table(ids).sum() + counts.sum()


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_drawn_ids_index_the_table_they_feed(data: st.DataObject) -> None:
    """An embedding's ids are drawn inside its table (the input check refuses any other), other integers as before."""
    from pytest_aoti.core.invariants import program_spec
    from pytest_aoti.core.strategies import InputDraw, _materialize

    batch = torch.export.Dim("batch", min=1, max=64)
    example = (torch.zeros(3, 5, dtype=torch.int64), torch.zeros(3, dtype=torch.int32))
    ep = torch.export.export(_Lookup(), example, dynamic_shapes={"ids": {0: batch}, "counts": {0: batch}})
    spec = program_spec(ep)
    shapes = data.draw(input_shapes(spec, unbounded_span=16))
    ids, counts = _materialize(spec, InputDraw(shapes, data.draw(st.integers(0, 2**16)), "normal"), torch.device("cpu"))
    assert ids.numel() == 0 or (int(ids.min()) >= 0 and int(ids.max()) < 10)
    assert counts.dtype == torch.int32
    check_inputs(spec, [ids, counts], torch.device("cpu"))
