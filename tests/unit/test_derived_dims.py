"""Dims derived from a root that no input holds alone (``x`` is ``2 * half``), over real exported programs (no
compile): export starts such a root at 2, whatever ``min`` the user declared; the checks start it at the user's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.export import Dim  # noqa: E402

from pytest_aoti.core.dims import ExportCall, declared_ranges, dim_names  # noqa: E402
from pytest_aoti.core.errors import AOTIInvariantError  # noqa: E402
from pytest_aoti.core.invariants import ProgramSpec, check_inputs, flatten_inputs, program_spec  # noqa: E402

CPU = torch.device("cpu")


class Halves(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2)
        return first * second


class Pair(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x]) + y


def _spec(model: torch.nn.Module, args: tuple[torch.Tensor, ...], shapes: object) -> tuple[ProgramSpec, object]:
    program = torch.export.export(model, args, dynamic_shapes=shapes)
    spec = program_spec(program)
    call = ExportCall(model, args, {}, shapes)
    named = program_spec(program, dim_names(call, spec))
    return ProgramSpec(named.inputs, named.outputs, declared_ranges(call, spec, program), named.dim_names), program


def _check(spec: ProgramSpec, program: object, *args: torch.Tensor) -> None:
    check_inputs(spec, flatten_inputs(program.call_spec.in_spec, args, {}), CPU)  # type: ignore[attr-defined]


def test_a_root_no_input_holds_starts_at_the_declared_min() -> None:
    half = Dim("half", min=1, max=64)
    spec, program = _spec(Halves(), (torch.randn(8),), ({0: 2 * half},))
    exported = program_spec(program).ranges  # type: ignore[arg-type]
    assert sorted(exported.values()) == [(2, 64), (2, 128)]  # export's own: half from 2
    assert sorted(spec.ranges.values()) == [(1, 64), (2, 128)]
    for size in (2, 4, 128):
        _check(spec, program, torch.zeros(size))
    with pytest.raises(AOTIInvariantError, match=r"got \(130,\); dim 0 is 2\*half, 2\*half=130 outside \[2, 128\]"):
        _check(spec, program, torch.zeros(130))
    # An odd size is no 2*half: refused before the package reads it as one.
    with pytest.raises(AOTIInvariantError, match=r"got \(3,\); dim 0 is 2\*half: no whole half gives 3"):
        _check(spec, program, torch.zeros(3))


def test_a_declared_min_of_two_is_kept() -> None:
    half = Dim("half", min=2, max=64)
    spec, program = _spec(Halves(), (torch.randn(8),), ({0: 2 * half},))
    with pytest.raises(AOTIInvariantError, match=r"2\*half=2 outside \[4, 128\] \(the compiled"):
        _check(spec, program, torch.zeros(2))


def test_a_root_an_input_holds_keeps_exports_range() -> None:
    """Export honours the user's min for a root an input holds, and there 1 is a size: nothing to widen."""
    batch = Dim("batch", min=1, max=64)
    shapes = {"x": {0: batch}, "y": {0: 2 * batch}}
    spec, program = _spec(Pair(), (torch.randn(4, 3), torch.randn(8, 3)), shapes)
    assert spec.ranges == program_spec(program).ranges  # type: ignore[arg-type]
    _check(spec, program, torch.zeros(1, 3), torch.zeros(2, 3))


def test_several_dims_derived_from_one_root() -> None:
    half = Dim("half", min=1, max=64)
    shapes = ({0: 2 * half}, {0: half + 1}, {0: 3 * half})

    class Three(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return x.reshape(2, -1).sum(0) + y[1:] + z[::3]

    spec, program = _spec(Three(), (torch.randn(8), torch.randn(5), torch.randn(12)), shapes)
    _check(spec, program, torch.zeros(2), torch.zeros(2), torch.zeros(3))
    with pytest.raises(AOTIInvariantError, match=r"input 1 \('y'\).*dim 0 is half \+ 1 = 2"):
        _check(spec, program, torch.zeros(2), torch.zeros(3), torch.zeros(3))


class NeedsFour(torch.nn.Module):
    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return x[:4] + z


def test_a_root_the_model_needs_at_two_keeps_exports_range() -> None:
    """``x[:4] + z`` needs ``x`` of 4 or more: export records that as a guard and starts ``half`` at 2, the same 2
    as its 0/1 assumption. The guard keeps export's range: an ``x`` of 2 would be read past its end."""
    half = Dim("half", min=1, max=64)
    spec, program = _spec(NeedsFour(), (torch.randn(8), torch.randn(4)), ({0: 2 * half}, None))
    assert sorted(spec.ranges.values()) == [(2, 64), (2, 128)]
    with pytest.raises(
        AOTIInvariantError,
        match=r"half=1 outside \[2, 64\] \(export starts half, which only derived dims use, at 2 whatever its min, and "
        r"the guards it recorded do not show that 1 is safe for this model: to accept it, give each input dim derived "
        r"from it a Dim of its own\)",
    ):
        _check(spec, program, torch.zeros(2), torch.zeros(4))


def test_a_root_that_would_make_an_input_of_one_keeps_exports_range() -> None:
    """``y`` is ``half - 1``: at ``half=1`` it would be an input of 0, a size export assumed away."""
    half = Dim("half", min=1, max=64)

    class Pairs(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x[1:] * y.sum()

    spec, _ = _spec(Pairs(), (torch.randn(8), torch.randn(7)), ({0: 2 * half}, {0: 2 * half - 1}))
    assert (1, 64) not in spec.ranges.values()
