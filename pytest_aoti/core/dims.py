"""The dynamic dims a user asked for (``dynamic_shapes``: ``Dim("batch")``, ``Dim.AUTO``, ``Dim.DYNAMIC``) against
what export made of them: the user's names for torch's symbols, and the dims export fixed to a number."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from pytest_aoti.core.errors import AOTISpecializationError
from pytest_aoti.core.invariants import ProgramSpec, TensorSpec, size_assumption
from pytest_aoti.core.torch_private import (
    combine_args,
    dim_hint_name,
    export_size_guards,
    is_derived_dim,
    is_static_hint,
    tree_map_with_path,
)


@dataclass(frozen=True)
class ExportCall:
    """What a model was exported with: the module, its example inputs and the user's ``dynamic_shapes``."""

    module: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    dynamic_shapes: Any = None

    def requested_dims(self, spec: ProgramSpec) -> list[tuple[TensorSpec, int, Any, int]]:
        """``(input spec, axis, what the user gave for it, the example's size)`` for every dim ``dynamic_shapes``
        names (a ``Dim``, ``Dim.AUTO``, ``Dim.DYNAMIC``, ``Dim.STATIC``); empty for a ``dynamic_shapes`` form this
        walk does not know."""
        if not self.dynamic_shapes:
            return []
        dims_of: dict[int, Any] = {}
        try:
            combined: Any = combine_args(self.module, self.args, self.kwargs)
            if isinstance(self.dynamic_shapes, tuple | list):
                combined = type(self.dynamic_shapes)(combined.values())
            tree_map_with_path(
                lambda path, value, dims: (
                    dims_of.__setitem__(id(value), dims) if isinstance(value, torch.Tensor) else None
                ),
                combined,
                self.dynamic_shapes,
            )
        except Exception:
            return []
        requested: list[tuple[TensorSpec, int, Any, int]] = []
        tensor_specs = [s for s in spec.inputs if isinstance(s, TensorSpec)]
        tensors = [leaf for leaf in pytree.tree_leaves((self.args, self.kwargs)) if isinstance(leaf, torch.Tensor)]
        for tensor, tensor_spec in zip(tensors, tensor_specs, strict=False):
            dims = dims_of.get(id(tensor))
            items = dims.items() if isinstance(dims, dict) else enumerate(dims or ())
            for axis, dim in items:
                if dim is not None and isinstance(axis, int) and axis < len(tensor_spec.shape):
                    requested.append((tensor_spec, axis, dim, int(tensor.shape[axis])))
        return requested


def dim_names(call: ExportCall, spec: ProgramSpec) -> dict[Any, str]:
    """The user's ``Dim`` name for each of torch's dynamic-dim symbols (``s77`` -> ``batch``), so that shape errors
    speak the user's language. Empty where the mapping cannot be made."""
    from torch.export.dynamic_shapes import Dim

    names: dict[Any, str] = {}
    for tensor_spec, axis, dim, _ in call.requested_dims(spec):
        symbols: set[Any] = getattr(tensor_spec.shape[axis], "free_symbols", set())
        if isinstance(dim, Dim) and len(symbols) == 1:
            root = getattr(dim, "root", dim) if is_derived_dim(dim) else dim
            names.setdefault(next(iter(symbols)), root.__name__)
    return names


def declared_ranges(call: ExportCall, spec: ProgramSpec, program: Any) -> dict[Any, tuple[int, int | None]]:
    """``spec.ranges``, with each root that only derived dims use (``x`` is ``2 * half`` and no input is ``half``)
    starting at the ``min`` the user declared (down to 1) where export started it at 2. Export creates such a root
    as a size and assumes it is never 0 or 1; yet the root is no tensor's size, and a ``half`` of 1 is an ``x`` of
    2, which the package computes. The root is widened only where that is all there is to it: every input it sizes
    stays at 2 or more, and every guard export recorded on the input sizes, but for its 0/1 assumptions about
    intermediate sizes, holds at the new value (:func:`_guards_hold`). A root that an input's dim holds alone keeps
    export's range: there export honours the user's ``min`` itself, and 0 or 1 would be a size."""
    ranges = dict(spec.ranges)
    alone = {dim for entry in spec.inputs if isinstance(entry, TensorSpec) for dim in entry.shape}
    sized_by: dict[Any, list[Any]] = {}
    declared: dict[Any, int] = {}
    for tensor_spec, axis, dim, _ in call.requested_dims(spec):
        symbols: set[Any] = getattr(tensor_spec.shape[axis], "free_symbols", set())
        minimum = getattr(getattr(dim, "root", None), "min", None)
        if is_derived_dim(dim) and len(symbols) == 1 and isinstance(minimum, int):
            (root,) = symbols
            sized_by.setdefault(root, []).append(tensor_spec.shape[axis])
            declared[root] = max(minimum, 1)
    for root, sizes in sized_by.items():
        low, high = ranges.get(root, (0, None))
        values = range(declared[root], low)
        if root in alone or low != 2 or not values:
            continue
        sizes_stay = all(int(size.subs(root, value)) >= 2 for size in sizes for value in values)
        if sizes_stay and _guards_hold(program, root, values):
            ranges[root] = (declared[root], high)
    return ranges


def _guards_hold(program: Any, root: Any, values: range) -> bool:
    """Whether every guard export recorded on the input sizes that involves ``root``, but for its 0/1 assumptions,
    holds at each of ``values``: a model that needs the root at 2 or more (``x[:4]`` of an ``x`` of ``2 * half``)
    records that need as a guard. A guard that cannot be decided (it involves another dim too) keeps export's range,
    as does a program without its guards."""
    guards = export_size_guards(program)
    if guards is None:
        return False
    for recorded, replaced in guards:
        if size_assumption(recorded) or root not in getattr(replaced, "free_symbols", set()):
            continue
        if any(replaced.subs(root, value) is not sympy.true for value in values):
            return False
    return True


def _dim_label(dim: Any) -> str:
    hint = dim_hint_name(dim)
    if hint is not None:
        return f"Dim.{hint}"
    return f"Dim({getattr(dim, '__name__', str(dim))!r})"


def specialized_dims(call: ExportCall, spec: ProgramSpec) -> list[str]:
    """Each dim requested dynamic that export fixed to a number (``Dim.AUTO`` does it silently): the package then
    accepts only the example's size, and traffic of other sizes fails where it is deployed."""
    found = []
    for tensor_spec, axis, dim, example in call.requested_dims(spec):
        if is_static_hint(dim):
            continue
        exported = tensor_spec.shape[axis]
        if not isinstance(exported, int):
            continue
        cause = (
            f"the example's size is {example}, and export specializes sizes 0 and 1: give an example of size >= 2"
            if example in (0, 1)
            else f"the model uses this size as a constant (int(x.shape[{axis}]), a branch on it, or a tensor built "
            "from it)"
        )
        found.append(
            f"input {tensor_spec.name!r} dim {axis} ({_dim_label(dim)}) was specialized to {exported} by export; the "
            f"package accepts only {exported}. Likely cause: {cause}"
        )
    return found


def refuse_specialized(call: ExportCall, spec: ProgramSpec) -> None:
    specialized = specialized_dims(call, spec)
    if specialized:
        raise AOTISpecializationError(
            "; ".join(specialized) + " (pass allow_specialized_dims=True if a static dim is intended)"
        )
