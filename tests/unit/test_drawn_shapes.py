"""Hypothesis strategies over a program's Dim ranges (pytest_aoti/core/strategies.py), without a compile: drawn shapes
stay inside the ranges and pass the input check, drawn ids index their table. (The scenarios that compile and shrink
are tests/test_hypothesis.py.)"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
sympy = pytest.importorskip("sympy")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pytest_aoti.core.invariants import ProgramSpec, TensorSpec, check_inputs  # noqa: E402
from pytest_aoti.core.strategies import input_shapes  # noqa: E402


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


@functools.cache
def _lookup_spec() -> ProgramSpec:
    """Exported once for all the examples below (an export is most of an example's time)."""
    from pytest_aoti.core.invariants import program_spec

    batch = torch.export.Dim("batch", min=1, max=64)
    example = (torch.zeros(3, 5, dtype=torch.int64), torch.zeros(3, dtype=torch.int32))
    return program_spec(
        torch.export.export(_Lookup(), example, dynamic_shapes={"ids": {0: batch}, "counts": {0: batch}})
    )


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_drawn_ids_index_the_table_they_feed(data: st.DataObject) -> None:
    """An embedding's ids are drawn inside its table (the input check refuses any other), other integers as before."""
    from pytest_aoti.core.strategies import InputDraw, _materialize

    spec = _lookup_spec()
    shapes = data.draw(input_shapes(spec, unbounded_span=16))
    ids, counts = _materialize(spec, InputDraw(shapes, data.draw(st.integers(0, 2**16)), "normal"), torch.device("cpu"))
    assert ids.numel() == 0 or (int(ids.min()) >= 0 and int(ids.max()) < 10)
    assert counts.dtype == torch.int32
    check_inputs(spec, [ids, counts], torch.device("cpu"))
