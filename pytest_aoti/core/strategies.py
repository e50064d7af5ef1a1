"""Hypothesis strategies that draw inputs a compiled package accepts, dynamic dims ranging over their ``Dim`` bounds.

Shapes are drawn from the exported program's symbols: boundaries first (min, max, 1, 2, powers of two and their
neighbours), static dims fixed, shared symbols shared between inputs, derived dims (``2 * batch``) computed and kept
inside their own ranges. Values come from a drawn seed, so an example is small to print and exact to replay. Import
this module only where Hypothesis is wanted (``pytest_aoti.dynamic_inputs`` imports it lazily).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from hypothesis import reject
from hypothesis import strategies as st

from pytest_aoti.core.compiler import CompiledModel
from pytest_aoti.core.invariants import ProgramSpec, ScalarSpec, TensorSpec

FILLS = ("normal", "zeros", "large", "nan", "inf")
# A dim without a max (Dim("batch"), Dim.DYNAMIC, Dim.AUTO) is drawn over [min, min + DEFAULT_UNBOUNDED_SPAN].
DEFAULT_UNBOUNDED_SPAN = 64
# No drawn tensor holds more elements than this (64 MiB of float32): a Dim(max=2**40) must not take the machine down.
DEFAULT_MAX_ELEMENTS = 2**24


@dataclass(frozen=True)
class InputDraw:
    """What was drawn for one example: a shape per tensor input, a seed and how values are filled."""

    shapes: tuple[tuple[int, ...] | None, ...]
    seed: int
    fill: str


class DrawnInputs(tuple):  # type: ignore[type-arg]  # of whatever inputs the model takes
    """The drawn positional inputs, with the keyword inputs in ``kwargs`` (call ``compiled(*drawn, **drawn.kwargs)``;
    ``compiled(*drawn)`` where the model takes positional inputs only), printed by shape so a falsifying example
    reads well."""

    draw: InputDraw
    kwargs: dict[str, Any]

    def __new__(cls, values: Sequence[Any], draw: InputDraw, kwargs: dict[str, Any] | None = None) -> DrawnInputs:
        instance = super().__new__(cls, values)
        instance.draw = draw
        instance.kwargs = dict(kwargs or {})
        return instance

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(s)) if s is not None else "-" for s in self.draw.shapes)
        return f"DrawnInputs(shapes=[{shapes}], seed={self.draw.seed}, fill={self.draw.fill!r})"


def _candidates(low: int, high: int) -> list[int]:
    """Boundary values first: min, max, 1, 2, then powers of two and their neighbours inside [low, high]."""
    values = [low, high, 1, 2]
    power = 4
    while power <= high + 1:
        values += [power - 1, power, power + 1]
        power *= 2
    return list(dict.fromkeys(v for v in values if low <= v <= high))


def root_bounds(spec: ProgramSpec, symbol: sympy.Symbol, unbounded_span: int, max_elements: int) -> tuple[int, int]:
    """``symbol``'s smallest and largest value: its range (a dim without a max: min + ``unbounded_span``), capped
    where a tensor holding it would exceed ``max_elements``."""
    low, high = spec.ranges.get(symbol, (0, None))
    low = max(low, 0)
    high = low + unbounded_span if high is None else high
    # The largest value that keeps every tensor holding the symbol under the element cap, its other dims at their
    # smallest: past it, no draw could be kept.
    for tensor in spec.inputs:
        if isinstance(tensor, TensorSpec) and any(symbol in getattr(d, "free_symbols", ()) for d in tensor.shape):
            others = 1
            for dim in tensor.shape:
                if isinstance(dim, int):
                    others *= max(dim, 1)
            high = min(high, max(low, max_elements // others))
    return low, high


def consistent_dims(spec: ProgramSpec, values: dict[sympy.Symbol, int], max_elements: int) -> bool:
    """Every dim expression (derived ones too) evaluates inside its own range, and no tensor is over the cap."""
    for tensor in spec.inputs:
        if not isinstance(tensor, TensorSpec):
            continue
        elements = 1
        for dim in tensor.shape:
            if isinstance(dim, int):
                elements *= dim
                continue
            value = dim.subs(values)
            if not value.is_number or value < 0:
                return False
            low, high = spec.ranges.get(dim, (0, None))
            if int(value) < low or (high is not None and int(value) > high):
                return False
            elements *= int(value)
        if elements > max_elements:
            return False
    return True


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}= expected a positive int, got {value!r}")
    return value


def input_shapes(
    spec: ProgramSpec, *, unbounded_span: int = DEFAULT_UNBOUNDED_SPAN, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> st.SearchStrategy[tuple[tuple[int, ...] | None, ...]]:
    """Shapes for the flat inputs of ``spec`` (``None`` for non-tensor inputs) that the package accepts: a dim
    without a max is drawn over ``[min, min + unbounded_span]``, and no tensor holds more than ``max_elements``."""
    _positive_int(unbounded_span, "unbounded_span")
    _positive_int(max_elements, "max_elements")
    symbols = sorted(
        {
            s
            for t in spec.inputs
            if isinstance(t, TensorSpec)
            for d in t.shape
            if not isinstance(d, int)
            for s in d.free_symbols
        },
        key=str,
    )
    per_symbol = []
    for symbol in symbols:
        low, high = root_bounds(spec, symbol, unbounded_span, max_elements)
        per_symbol.append(st.one_of(st.integers(low, high), st.sampled_from(_candidates(low, high))))

    def shapes_for(values: tuple[int, ...]) -> tuple[tuple[int, ...] | None, ...]:
        bound = dict(zip(symbols, values, strict=True))
        if not consistent_dims(spec, bound, max_elements):
            reject()
        return tuple(bound_shape(tensor, bound) for tensor in spec.inputs)

    return st.tuples(*per_symbol).map(shapes_for)


def bound_shape(tensor: TensorSpec | ScalarSpec, bound: dict[sympy.Symbol, int]) -> tuple[int, ...] | None:
    """``tensor``'s shape with its dims' symbols bound to values; None for a scalar input."""
    if not isinstance(tensor, TensorSpec):
        return None
    return tuple(d if isinstance(d, int) else int(d.subs(bound)) for d in tensor.shape)


def _materialize(spec: ProgramSpec, draw: InputDraw, device: torch.device) -> list[Any]:
    """The flat inputs: drawn tensors, and the value export baked in for each non-tensor input."""
    generator = torch.Generator().manual_seed(draw.seed)
    values: list[Any] = []
    for tensor, shape in zip(spec.inputs, draw.shapes, strict=True):
        if isinstance(tensor, ScalarSpec) or shape is None:
            values.append(tensor.value if isinstance(tensor, ScalarSpec) else None)
            continue
        rows = tensor.index_bound.rows if tensor.index_bound is not None else None
        values.append(_fill(tensor.dtype, shape, draw.fill, generator, rows).to(device))
    return values


def _fill(
    dtype: torch.dtype, shape: tuple[int, ...], fill: str, generator: torch.Generator, rows: int | None = None
) -> torch.Tensor:
    """Values for one input; ``rows``: it indexes a table of that many rows (an embedding's ids), so each is a row."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if rows is not None:
        return torch.randint(0, rows, shape, generator=generator).to(dtype)
    if not (dtype.is_floating_point or dtype.is_complex):
        return torch.randint(-8, 8, shape, generator=generator).to(dtype)
    if fill == "zeros":
        return torch.zeros(shape, dtype=dtype)
    values = torch.randn(shape, generator=generator)
    if fill == "large":
        values = values * 1e4
    if fill in ("nan", "inf") and values.numel() > 0:
        position = int(torch.randint(0, values.numel(), (1,), generator=generator))
        values.view(-1)[position] = float("nan") if fill == "nan" else float("inf")
    return values.to(dtype)


def dynamic_inputs(
    compiled: CompiledModel,
    *,
    fills: Sequence[str] = ("normal",),
    unbounded_span: int = DEFAULT_UNBOUNDED_SPAN,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> st.SearchStrategy[DrawnInputs]:
    """Inputs for ``compiled`` over its dynamic-shape ranges, on its device, in its dtypes; non-tensor inputs take
    the value export baked in, keyword inputs come in ``drawn.kwargs``.

    Integer inputs an embedding reads hold row indices of its table; other integers range over [-8, 8).
    ``fills`` picks how float values are made: ``normal`` (finite, the default), ``zeros``, ``large`` (|x| ~ 1e4),
    ``nan``/``inf`` (one injected value, for NaN-handling tests). Dims without a max (``Dim("batch")``,
    ``Dim.DYNAMIC``, ``Dim.AUTO``) range over ``[min, min + unbounded_span]``; no tensor holds more than
    ``max_elements`` (a huge ``max`` is drawn up to what fits).

    After a call leaves the device unusable (``compiled.poisoned``), later examples are rejected instead of
    failing with the inherited error, so Hypothesis cannot shrink toward examples that only failed because of it;
    the original example replays its original error.
    """
    if isinstance(fills, str) or not isinstance(fills, Sequence):
        raise TypeError(f"dynamic_inputs: fills= expected a sequence of fill names, got {fills!r}")
    unknown = [f for f in fills if f not in FILLS]
    if unknown or not fills:
        raise ValueError(f"dynamic_inputs: fills= expected a non-empty subset of {FILLS}, got {tuple(fills)!r}")
    # Checked here, where the test calls it, not at the first draw.
    _positive_int(unbounded_span, "dynamic_inputs: unbounded_span")
    _positive_int(max_elements, "dynamic_inputs: max_elements")
    if not hasattr(compiled, "spec") or not hasattr(compiled, "exported_program"):
        raise TypeError(
            f"dynamic_inputs: expected the CompiledModel aoti_compile returned, got {type(compiled).__name__}"
        )
    spec = compiled.spec
    in_spec = compiled.exported_program.call_spec.in_spec

    def structured(flat: list[Any], draw: InputDraw) -> DrawnInputs:
        args, kwargs = pytree.tree_unflatten(flat, in_spec)
        return DrawnInputs(args, draw, kwargs)

    # Hypothesis prints a falsifying draw as this call: inputs_with_shapes(((13, 4),), seed, fill).
    def inputs_with_shapes(shapes: tuple[tuple[int, ...] | None, ...], seed: int, fill: str) -> DrawnInputs:
        draw = InputDraw(shapes, seed, fill)
        poisoned = compiled.poisoned
        if poisoned is not None and poisoned.draw != draw:
            reject()
        compiled.last_draw = draw
        if poisoned is not None:
            # Replaying the example that poisoned the device: no device work; the call re-raises its error.
            return structured(_materialize(spec, draw, torch.device("meta")), draw)
        return structured(_materialize(spec, draw, compiled.device), draw)

    shapes = input_shapes(spec, unbounded_span=unbounded_span, max_elements=max_elements)
    return st.builds(inputs_with_shapes, shapes, st.integers(0, 2**16), st.sampled_from(list(fills)))
