"""What a compiled package accepts and returns, derived from its ExportedProgram, and the checks on every call.

Checks run before the package (so a bad input never reaches native code, where it would run silently or crash) and
after it (device, dtype, shape derived from the exported graph's symbolic shapes, finiteness).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument

from pytest_aoti.errors import AOTIInvariantError

Dim: TypeAlias = int | sympy.Expr


@dataclass(frozen=True)
class TensorSpec:
    """Shape (ints for static dims, sympy expressions for dynamic ones) and dtype of one flat input or output."""

    name: str
    shape: tuple[Dim, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class ProgramSpec:
    """Flat inputs (``None`` for a non-tensor input baked into the package), outputs and dynamic-dim ranges."""

    inputs: tuple[TensorSpec | None, ...]
    outputs: tuple[TensorSpec | None, ...]
    ranges: dict[sympy.Expr, tuple[int, int | None]]


def _dim(size: int | torch.SymInt) -> Dim:
    return size.node.expr if isinstance(size, torch.SymInt) else int(size)


def _tensor_spec(name: str, value: Any) -> TensorSpec | None:
    if not isinstance(value, torch.Tensor):
        return None
    return TensorSpec(name, tuple(_dim(s) for s in value.shape), value.dtype)


def _bound(value: Any) -> int | None:
    # ValueRanges hold sympy ints, or sympy.oo for an unbounded max.
    return int(value) if value.is_finite else None


def program_spec(ep: ExportedProgram) -> ProgramSpec:
    """Read the accepted inputs and promised outputs off an ExportedProgram."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    inputs: list[TensorSpec | None] = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        if isinstance(spec.arg, TensorArgument):
            inputs.append(_tensor_spec(spec.arg.name, placeholders[spec.arg.name].meta["val"]))
        else:
            inputs.append(None)
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    outputs = tuple(
        _tensor_spec(f"output {i}", getattr(node, "meta", {}).get("val")) for i, node in enumerate(output_node.args[0])
    )
    ranges = {expr: (int(vr.lower), _bound(vr.upper)) for expr, vr in ep.range_constraints.items()}
    return ProgramSpec(tuple(inputs), outputs, ranges)


def _fmt_shape(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _same_device(actual: torch.device, expected: torch.device) -> bool:
    if actual.type != expected.type:
        return False
    # A compile device without an index (plain "cuda") means the current device.
    if expected.index is None or actual.index is None:
        return True
    return actual.index == expected.index


def _range_text(expr: sympy.Expr, ranges: dict[sympy.Expr, tuple[int, int | None]]) -> str:
    lo, hi = ranges.get(expr, (0, None))
    return f"[{lo}, {'inf' if hi is None else hi}]"


def _solve_for(expr: sympy.Expr, value: int, bound: dict[sympy.Symbol, int]) -> None:
    """Bind the one unbound symbol of a derived dim (``2*b == value``) when the expression is solvable."""
    unbound = [s for s in expr.free_symbols if s not in bound]
    if len(unbound) != 1:
        return
    solutions = sympy.solve(sympy.Eq(expr.subs(bound), value), unbound[0])
    integer = [s for s in solutions if s.is_integer]
    if len(integer) == 1:
        bound[unbound[0]] = int(integer[0])


def check_inputs(spec: ProgramSpec, flat_inputs: Sequence[Any], device: torch.device) -> dict[sympy.Symbol, int]:
    """Raise :class:`AOTIInvariantError` for the first input the package would not accept.

    Returns the values bound to the dynamic-dim symbols, which fix the expected output shapes.
    """
    __tracebackhide__ = True
    if len(flat_inputs) != len(spec.inputs):
        raise AOTIInvariantError(
            "input_structure",
            side="input",
            index=min(len(flat_inputs), len(spec.inputs)),
            name=None,
            expected=f"{len(spec.inputs)} flat inputs",
            actual=f"{len(flat_inputs)}",
        )
    tensors: list[tuple[int, TensorSpec, torch.Tensor]] = []
    for index, (expected, value) in enumerate(zip(spec.inputs, flat_inputs, strict=True)):
        if expected is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise AOTIInvariantError(
                "input_structure",
                side="input",
                index=index,
                name=expected.name,
                expected=f"a tensor of dtype {expected.dtype}",
                actual=type(value).__name__,
            )
        if not _same_device(value.device, device):
            raise AOTIInvariantError(
                "input_device",
                side="input",
                index=index,
                name=expected.name,
                expected=str(device),
                actual=str(value.device),
            )
        if value.dtype != expected.dtype:
            raise AOTIInvariantError(
                "input_dtype",
                side="input",
                index=index,
                name=expected.name,
                expected=str(expected.dtype),
                actual=str(value.dtype),
            )
        tensors.append((index, expected, value))

    bound: dict[sympy.Symbol, int] = {}
    # Plain symbols first, so derived dims (2*b) can be evaluated; a derived dim whose root appears nowhere else is
    # solved for its root.
    for index, expected, value in tensors:
        if len(value.shape) != len(expected.shape):
            raise _shape_error(index, expected, value, f"rank {len(expected.shape)} expected")
        for axis, (want, got) in enumerate(zip(expected.shape, value.shape, strict=True)):
            if isinstance(want, sympy.Symbol):
                previous = bound.setdefault(want, int(got))
                if previous != got:
                    raise _shape_error(
                        index, expected, value, f"dim {axis} is {want}, already bound to {previous} by another input"
                    )
    for _, expected, value in tensors:
        for axis, want in enumerate(expected.shape):
            if isinstance(want, sympy.Expr) and not isinstance(want, sympy.Symbol):
                _solve_for(want, int(value.shape[axis]), bound)
    for index, expected, value in tensors:
        for axis, (want, got) in enumerate(zip(expected.shape, value.shape, strict=True)):
            if isinstance(want, int):
                if want != got:
                    raise _shape_error(index, expected, value, f"dim {axis} is static {want}")
                continue
            evaluated = want.subs(bound)
            if evaluated.is_number and int(evaluated) != got:
                raise _shape_error(index, expected, value, f"dim {axis} is {want} = {evaluated}")
            for expr in (want, *want.free_symbols):
                lo, hi = spec.ranges.get(expr, (0, None))
                current = expr.subs(bound)
                if current.is_number and (int(current) < lo or (hi is not None and int(current) > hi)):
                    raise _shape_error(
                        index,
                        expected,
                        value,
                        f"dim {axis} is {want}, {expr}={current} outside {_range_text(expr, spec.ranges)}",
                    )
    return bound


def _shape_error(index: int, expected: TensorSpec, value: torch.Tensor, detail: str) -> AOTIInvariantError:
    return AOTIInvariantError(
        "input_shape",
        side="input",
        index=index,
        name=expected.name,
        expected=_fmt_shape(expected.shape),
        actual=_fmt_shape(tuple(value.shape)),
        detail=detail,
    )


def check_outputs(
    spec: ProgramSpec,
    flat_outputs: Sequence[Any],
    device: torch.device,
    bound: dict[sympy.Symbol, int],
    *,
    allow_nonfinite: bool = False,
) -> None:
    """Raise :class:`AOTIInvariantError` for the first output on the wrong device, of the wrong dtype or shape,
    or holding NaN/Inf (unless ``allow_nonfinite``)."""
    __tracebackhide__ = True
    for index, (expected, value) in enumerate(zip(spec.outputs, flat_outputs, strict=False)):
        if expected is None or not isinstance(value, torch.Tensor):
            continue
        name = None
        if not _same_device(value.device, device):
            raise AOTIInvariantError(
                "output_device",
                side="output",
                index=index,
                name=name,
                expected=str(device),
                actual=str(value.device),
            )
        if value.dtype != expected.dtype:
            raise AOTIInvariantError(
                "output_dtype",
                side="output",
                index=index,
                name=name,
                expected=str(expected.dtype),
                actual=str(value.dtype),
            )
        want_shape = tuple(d if isinstance(d, int) else d.subs(bound) for d in expected.shape)
        shape_ok = len(want_shape) == value.dim() and all(
            # A dim that stays symbolic (data-dependent size) cannot be predicted: accept it.
            not getattr(want, "is_number", True) or int(want) == got
            for want, got in zip(want_shape, value.shape, strict=False)
        )
        if not shape_ok:
            raise AOTIInvariantError(
                "output_shape",
                side="output",
                index=index,
                name=name,
                expected=_fmt_shape(want_shape),
                actual=_fmt_shape(tuple(value.shape)),
            )
        if not allow_nonfinite and (value.is_floating_point() or value.is_complex()):
            _check_finite(index, value)


def _check_finite(index: int, value: torch.Tensor) -> None:
    __tracebackhide__ = True
    bad = ~torch.isfinite(value)
    count = int(bad.sum().item())
    if count == 0:
        return
    first = tuple(int(i) for i in bad.nonzero()[0].tolist())
    kinds = []
    if bool(torch.isnan(value).any()):
        kinds.append("NaN")
    if bool(torch.isinf(value).any()):
        kinds.append("Inf")
    raise AOTIInvariantError(
        "output_nonfinite",
        side="output",
        index=index,
        name=None,
        expected="finite values",
        actual=f"{count} {'/'.join(kinds)} value(s) of {value.numel()}",
        detail=f"first at index {first}: {value[first].item()}",
    )
