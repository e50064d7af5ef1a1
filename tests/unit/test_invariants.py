"""The input checks over real exported programs, without compiling: structure, baked-in scalars, strides, NaN,
dynamic-dim names."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.export import Dim  # noqa: E402

from pytest_aoti.dims import ExportCall, dim_names  # noqa: E402
from pytest_aoti.errors import AOTIInvariantError  # noqa: E402
from pytest_aoti.invariants import check_inputs, flatten_inputs, program_spec  # noqa: E402

CPU = torch.device("cpu")


class ScaleBy(torch.nn.Module):
    def forward(self, x: torch.Tensor, factor: int, nest: dict) -> torch.Tensor:
        return x * factor + nest["a"][0] - nest["b"]


def _exported() -> torch.export.ExportedProgram:
    return torch.export.export(ScaleBy(), (torch.randn(4, 8), 3, {"a": [torch.randn(4, 8)], "b": torch.randn(4, 8)}))


def _check(ep: torch.export.ExportedProgram, *args: object, **options: bool) -> list[object]:
    flat = flatten_inputs(ep.call_spec.in_spec, args, {})
    return check_inputs(program_spec(ep), flat, CPU, **options)[1]


def test_a_baked_in_scalar_called_with_another_value() -> None:
    ep = _exported()
    nest = {"a": [torch.randn(4, 8)], "b": torch.randn(4, 8)}
    _check(ep, torch.randn(4, 8), 3, nest)
    with pytest.raises(
        AOTIInvariantError,
        match=r"input 1 \('factor'\): value invariant violated: expected 3, got 5; "
        r"compiled for factor=3: this argument was baked into the package at export",
    ):
        _check(ep, torch.randn(4, 8), 5, nest)


@pytest.mark.parametrize(
    ("nest", "message"),
    [
        ({"b": torch.zeros(4, 8), "a": [torch.zeros(4, 8)]}, None),  # another key order: read by key
        (
            {"a": torch.zeros(4, 8), "b": torch.zeros(4, 8)},
            r"input args\[2\]\['a'\]: .*expected a list of 1, got Tensor",
        ),
        ({"a": [torch.zeros(4, 8)]}, r"expected a dict with keys \['a', 'b'\], got keys \['a'\] \(missing \['b'\]"),
        (
            {"a": (torch.zeros(4, 8),), "b": torch.zeros(4, 8)},
            r"input args\[2\]\['a'\]: .*expected a list of 1, got tuple",
        ),
    ],
)
def test_the_nest_must_match_the_exported_structure(nest: dict, message: str | None) -> None:
    ep = _exported()
    if message is None:
        flat = flatten_inputs(ep.call_spec.in_spec, (torch.ones(4, 8), 3, nest), {})
        assert flat[3] is nest["b"]  # in the exported order, whatever the dict's order
        return
    with pytest.raises(AOTIInvariantError, match=message):
        _check(ep, torch.ones(4, 8), 3, nest)


def test_strides_and_restride() -> None:
    ep = _exported()
    nest = {"a": [torch.randn(4, 8)], "b": torch.randn(4, 8)}
    transposed = torch.randn(8, 4).t()
    with pytest.raises(AOTIInvariantError, match=r"stride invariant violated: expected \(8, 1\), got \(1, 4\)"):
        _check(ep, transposed, 3, nest)
    run_with = _check(ep, transposed, 3, nest, restride=True)
    assert run_with[0].stride() == (8, 1) and torch.equal(run_with[0], transposed)


def test_nan_in_an_input_is_named_as_an_input() -> None:
    ep = _exported()
    bad = {"a": [torch.randn(4, 8)], "b": torch.full((4, 8), float("inf"))}
    with pytest.raises(AOTIInvariantError, match=r"input 3 \('nest_b'\): nonfinite invariant violated: .*32 Inf"):
        _check(ep, torch.randn(4, 8), 3, bad)
    _check(ep, torch.randn(4, 8), 3, bad, allow_nonfinite=True)


def test_dynamic_dims_carry_the_users_names() -> None:
    class Pair(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.sum() + y.sum()

    batch = Dim("batch", min=2, max=16)
    args = (torch.randn(4, 3), torch.randn(8, 3))
    shapes = {"x": {0: batch}, "y": {0: 2 * batch}}
    ep = torch.export.export(Pair(), args, dynamic_shapes=shapes)
    spec = program_spec(ep)
    spec = program_spec(ep, dim_names(ExportCall(Pair(), args, {}, shapes), spec))
    with pytest.raises(AOTIInvariantError, match=r"dim 0 is batch, batch=17 outside \[2, 16\]"):
        check_inputs(spec, [torch.randn(17, 3), torch.randn(34, 3)], CPU)
    with pytest.raises(AOTIInvariantError, match=r"expected \(2\*batch, 3\), got \(9, 3\)"):
        check_inputs(spec, [torch.randn(4, 3), torch.randn(9, 3)], CPU)
