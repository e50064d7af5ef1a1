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


class _HundredRows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(100, -1) * 2


@pytest.mark.parametrize(
    ("example", "accepted", "refused"),
    [
        # Traced at 100, the -1 is 1: export keeps x's dim dynamic in its ranges, with guards that hold it to 100.
        (100, [100], [(300, r"\(x.shape\[0\]//100\) == 1 fails at x.shape\[0\]=300"), (150, r"Mod\(x.shape")]),
        # Traced at 200, the -1 is not 1: any multiple of 100 but 100 itself.
        (200, [300, 1000], [(100, r"\(x.shape\[0\]//100\) != 1 fails at x.shape\[0\]=100"), (150, r"Mod\(x")]),
    ],
)
def test_an_input_exports_guards_refuse_is_refused_before_the_package(
    example: int, accepted: list[int], refused: list[tuple[int, str]]
) -> None:
    """What ExportedProgram.module() refuses (its guards), the input check refuses: the range alone says [2, inf]."""
    ep = torch.export.export(_HundredRows(), (torch.randn(example),), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    spec = program_spec(ep)
    assert list(spec.ranges.values()) == [(2, None)]
    for size in accepted:
        check_inputs(spec, [torch.randn(size)], CPU)
        ep.module()(torch.randn(size))
    for size, message in refused:
        with pytest.raises(AOTIInvariantError, match=r"dim 0: export's guard " + message) as caught:
            check_inputs(spec, [torch.randn(size)], CPU)
        assert caught.value.invariant == "input_shape"
        assert str(caught.value).endswith(
            "(ExportedProgram.module() refuses this input too) (the compiled package was not run)"
        )
        with pytest.raises(AssertionError, match="Guard failed"):
            ep.module()(torch.randn(size))


def test_a_widened_root_is_not_held_to_exports_size_assumptions() -> None:
    """A root only derived dims use starts at the user's min (1) where export's guards allow it: export's guards
    that it is not 0 or 1 (``Ne(half, 1)``) are what export assumes of every size, not what the model needs."""
    import dataclasses

    from pytest_aoti.core.dims import declared_ranges

    class Halves(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            first, second = x.chunk(2)
            return first * second

    half = Dim("half", min=1, max=64)
    args, shapes = (torch.randn(8),), ({0: 2 * half},)
    ep = torch.export.export(Halves(), args, dynamic_shapes=shapes)
    spec = program_spec(ep)
    assert any(guard.size_assumption for guard in spec.guards)
    spec = dataclasses.replace(spec, ranges=declared_ranges(ExportCall(Halves(), args, {}, shapes), spec, ep))
    for size in (2, 4, 128):
        check_inputs(spec, [torch.randn(size)], CPU)


class _Unique(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, inverse = torch.unique(x, sorted=True, return_inverse=True)
        return torch.relu(values), inverse


def test_output_dtypes_follow_eager_where_the_exported_metadata_is_wrong() -> None:
    """torch 2.11 on CUDA exports the unique model with float32 metadata for ``inverse``, which eager and the package
    return as int64. Here the CPU export's metadata is made as wrong as that one, in place."""
    from pytest_aoti.core.invariants import check_call_outputs

    x = torch.tensor([3.0, 1.0, 2.0, 3.0, 1.0])
    ep = torch.export.export(_Unique(), (x,))
    inverse = next(n for n in ep.graph.nodes if n.op == "output").args[0][1]
    inverse.meta["val"] = inverse.meta["val"].to(torch.float32)
    spec = program_spec(ep)
    assert [o.dtype for o in spec.outputs if o is not None] == [torch.float32, torch.float32]
    eager = _Unique()(x)
    ran = ep.module()(x)  # what the package returns: the op's real kernel, int64
    with pytest.raises(AOTIInvariantError, match=r"output 1: dtype invariant violated: expected torch.float32"):
        check_call_outputs(spec, ran, CPU, {}).raise_if_broken()

    checked = check_call_outputs(spec, ran, CPU, {}, eager_outputs=eager)
    trusted, notes = checked.spec, list(checked.dtype_notes)
    assert notes == [
        "output 1: the exported program says torch.float32, eager returns torch.int64; the package's output is "
        "checked against eager's torch.int64 (torch's output metadata is wrong here)"
    ]
    checked.raise_if_broken()
    # A package that returned what the metadata said is now held to what eager returns.
    with pytest.raises(AOTIInvariantError, match=r"output 1: dtype invariant violated: expected torch.int64, got"):
        check_call_outputs(trusted, (ran[0], ran[1].float()), CPU, {}).raise_if_broken()
    again = check_call_outputs(trusted, ran, CPU, {}, eager_outputs=eager)
    assert (again.spec, again.dtype_notes, again.error) == (trusted, (), None)


def test_a_call_that_breaks_an_invariant_keeps_what_eager_taught_about_the_dtypes() -> None:
    """The dtype eager returns is kept for later calls even when this call's outputs fail (here: a NaN)."""
    from pytest_aoti.core.invariants import check_call_outputs

    x = torch.tensor([3.0, 1.0, 2.0, 3.0, 1.0])
    ep = torch.export.export(_Unique(), (x,))
    inverse = next(n for n in ep.graph.nodes if n.op == "output").args[0][1]
    inverse.meta["val"] = inverse.meta["val"].to(torch.float32)
    values, indices = ep.module()(x)
    checked = check_call_outputs(
        program_spec(ep), (values * float("nan"), indices), CPU, {}, eager_outputs=_Unique()(x)
    )
    assert [o.dtype for o in checked.spec.outputs if o is not None] == [torch.float32, torch.int64]
    assert len(checked.dtype_notes) == 1
    assert checked.error is not None and checked.error.invariant == "output_nonfinite"
