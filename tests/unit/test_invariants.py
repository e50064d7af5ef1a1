"""The input checks over real exported programs, without compiling: structure, baked-in scalars, strides, NaN,
dynamic-dim names."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from torch.export import Dim  # noqa: E402

from pytest_aoti.core.dims import ExportCall, dim_names  # noqa: E402
from pytest_aoti.core.errors import AOTIInvariantError  # noqa: E402
from pytest_aoti.core.invariants import TensorSpec, check_inputs, flatten_inputs, program_spec  # noqa: E402

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


class _Tables(torch.nn.Module):
    """Token ids read by two tables (the tighter one bounds them), through a view; positions computed from the
    ids (arithmetic) and a slice of them are not the input's values and get no bound."""

    def __init__(self) -> None:
        super().__init__()
        self.words = torch.nn.Embedding(100, 4)
        self.types = torch.nn.Embedding(10, 4)
        self.shifted = torch.nn.Embedding(5, 4)

    def forward(self, ids: torch.Tensor, other: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        return (
            self.words(flat).sum()
            + self.types(ids).sum()
            + self.shifted(other % 5).sum()
            + self.shifted(head[:, :1]).sum()
        )


def _ids(*values: int) -> torch.Tensor:
    return torch.tensor([values])


def test_an_input_that_indexes_a_table_is_held_to_its_rows() -> None:
    from pytest_aoti.core.invariants import spec_from_json, spec_to_json

    ep = torch.export.export(_Tables(), (_ids(1, 2), _ids(7, 9), _ids(1, 9)))
    spec = program_spec(ep)
    ids, other, head = spec.inputs
    assert isinstance(ids, TensorSpec) and ids.index_bound is not None
    assert ids.index_bound.rows == 10  # words has 100 rows, types 10
    assert ids.index_bound.reader.startswith("aten.embedding of types.weight at ")
    assert ids.index_bound.reader.endswith("in forward: + self.types(ids).sum()")
    assert isinstance(other, TensorSpec) and other.index_bound is None  # other % 5: arithmetic
    assert isinstance(head, TensorSpec) and head.index_bound is None  # head[:, :1]: only part of it is read

    def check(spec: object, *values: torch.Tensor, **options: bool) -> None:
        check_inputs(spec, flatten_inputs(ep.call_spec.in_spec, values, {}), CPU, **options)  # type: ignore[arg-type]

    check(spec, _ids(0, 9), _ids(70, -3), _ids(1, 99))
    for bad, first in ((_ids(3, 10), "(0, 1): 10"), (_ids(-1, 2), "(0, 0): -1")):
        with pytest.raises(AOTIInvariantError) as refused:
            check(spec, bad, _ids(1, 2), _ids(1, 2))
        assert refused.value.invariant == "input_index"
        assert "expected row indices in [0, 10), got 1 value(s) of 2 outside" in str(refused.value)
        assert f"first at index {first}" in str(refused.value)
        assert "@pytest.mark.aoti(allow_out_of_range=True)" in str(refused.value)
    check(spec, _ids(3, 10), _ids(1, 2), _ids(1, 2), allow_out_of_range=True)
    # A package that verifies itself on the deployment machine carries the bound.
    with pytest.raises(AOTIInvariantError, match="index invariant violated"):
        check(spec_from_json(json.loads(json.dumps(spec_to_json(spec)))), _ids(3, 10), _ids(1, 2), _ids(1, 2))
