"""What a compiled package accepts and returns, derived from its ExportedProgram, and the checks on every call.

Checks run before the package (so a bad input never reaches native code, where it would run silently or crash) and
after it (device, dtype, shape derived from the exported graph's symbolic shapes, finiteness).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import sympy
import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument

from pytest_aoti.core.errors import AOTIInvariantError, Invariant
from pytest_aoti.core.torch_private import OpOverload

TreeSpec = pytree.TreeSpec

Dim: TypeAlias = int | sympy.Expr


@dataclass(frozen=True)
class IndexBound:
    """An integer input whose values index the rows of a table the package reads (an embedding's weight): each must
    be in ``[0, rows)``. Eager raises IndexError on one outside; the package's own bounds check fails the run with a
    generic error, aborts the process (inside a parallel CPU kernel), or is a device-side assert on CUDA, which
    poisons the context."""

    rows: int
    reader: str  # ``aten.embedding of embed.weight at model.py:12 in forward: return self.embed(ids)``


@dataclass(frozen=True)
class TensorSpec:
    """Shape and strides (ints where static, sympy expressions where dynamic) and dtype of one flat input or
    output; for an input that indexes a table, its bound."""

    name: str
    shape: tuple[Dim, ...]
    stride: tuple[Dim, ...]
    dtype: torch.dtype
    index_bound: IndexBound | None = None


@dataclass(frozen=True)
class ScalarSpec:
    """A non-tensor input: export specializes it, so the package only ever computes with ``value``."""

    name: str
    value: Any


@dataclass(frozen=True)
class SizeGuard:
    """A guard export recorded on the input sizes while tracing (``Eq(Mod(s77, 100), 0)`` for a ``reshape(100, -1)``),
    with export's replacements applied: ``ExportedProgram.module()`` refuses an input that breaks it, and the package,
    which has no such check, would compute with the sizes it was traced for. ``size_assumption``: it only says that
    a size is not 0 or 1, which export assumes of every size (:func:`size_assumption`)."""

    expr: sympy.Expr
    size_assumption: bool


@dataclass(frozen=True)
class ProgramSpec:
    """Flat inputs, outputs (``None`` for a non-tensor output), dynamic-dim ranges, the user's ``Dim`` name for
    each dynamic-dim symbol where known, and export's guards on the input sizes."""

    inputs: tuple[TensorSpec | ScalarSpec, ...]
    outputs: tuple[TensorSpec | None, ...]
    ranges: dict[sympy.Expr, tuple[int, int | None]]
    dim_names: dict[sympy.Symbol, str] = field(default_factory=dict)
    guards: tuple[SizeGuard, ...] = ()

    def named(self, expr: Any) -> str:
        """An expression with torch's symbols (``s77``) replaced by the user's ``Dim`` names (``batch``)."""
        if not isinstance(expr, sympy.Expr) or not self.dim_names:
            return str(expr)
        return str(expr.subs({symbol: sympy.Symbol(name) for symbol, name in self.dim_names.items()}))


def _dim(size: int | torch.SymInt) -> Dim:
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        # A dim export specialized (Dim.AUTO on a size the model reads as a constant) is a number: static.
        return int(expr) if expr.is_number else expr
    return int(size)


def _tensor_spec(name: str, value: Any) -> TensorSpec | None:
    if not isinstance(value, torch.Tensor):
        return None
    return TensorSpec(name, tuple(_dim(s) for s in value.shape), tuple(_dim(s) for s in value.stride()), value.dtype)


def _bound(value: Any) -> int | None:
    """A range bound as an int, or None when unbounded. Export's size ranges hold torch's ``int_oo`` for a dim
    without a ``max`` (``Dim("batch")``, ``Dim.DYNAMIC``, ``Dim.AUTO``), and ``int_oo.is_finite`` is True: it is
    a sympy Number that ``int()`` cannot convert, so test what it is rather than what it claims."""
    from pytest_aoti.core.torch_private import is_infinite_int

    if is_infinite_int(value) or not getattr(value, "is_finite", False):
        return None
    return int(value)


def program_spec(ep: ExportedProgram, dim_names: dict[sympy.Symbol, str] | None = None) -> ProgramSpec:
    """Read the accepted inputs and promised outputs off an ExportedProgram."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    inputs: list[TensorSpec | ScalarSpec] = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        tensor = (
            _tensor_spec(spec.arg.name, placeholders[spec.arg.name].meta["val"])
            if isinstance(spec.arg, TensorArgument)
            else None
        )
        inputs.append(tensor if tensor is not None else ScalarSpec(spec.arg.name, getattr(spec.arg, "value", None)))
    bounds = _index_bounds(ep)
    inputs = [
        dataclasses.replace(tensor, index_bound=bounds[tensor.name])
        if isinstance(tensor, TensorSpec) and tensor.name in bounds
        else tensor
        for tensor in inputs
    ]
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    outputs = tuple(
        _tensor_spec(f"output {i}", getattr(node, "meta", {}).get("val")) for i, node in enumerate(output_node.args[0])
    )
    ranges = {expr: (_bound(vr.lower) or 0, _bound(vr.upper)) for expr, vr in ep.range_constraints.items()}
    return ProgramSpec(tuple(inputs), outputs, ranges, dict(dim_names or {}), _size_guards(ep, inputs))


# A guard of one of these forms says a size is not 0 or 1 (``n >= 2``, ``2 <= n``, ``n > 1``, ``1 < n``): what
# export assumes of every size, not what the model needs.
_ZERO_ONE_FORMS = {
    sympy.GreaterThan: ("rhs", 2),
    sympy.LessThan: ("lhs", 2),
    sympy.StrictGreaterThan: ("rhs", 1),
    sympy.StrictLessThan: ("lhs", 1),
}


def size_assumption(guard: Any) -> bool:
    """Whether a guard, as export recorded it, only says that a size is not 0 or 1."""
    if isinstance(guard, sympy.Ne):  # n != 1, n != 0
        return bool(guard.rhs in (0, 1) or guard.lhs in (0, 1))
    form = _ZERO_ONE_FORMS.get(type(guard))
    return form is not None and bool(getattr(guard, form[0]) == form[1])


def _size_guards(ep: ExportedProgram, inputs: Sequence[TensorSpec | ScalarSpec]) -> tuple[SizeGuard, ...]:
    """The guards export recorded that involve only the symbols of the user inputs' sizes (a guard on a
    data-dependent size, ``u0``, cannot be checked before the package runs). Read them before the compile:
    Inductor adds guards of its own to the same shape environment, and a package from the cache had no compile."""
    from pytest_aoti.core.torch_private import export_size_guards

    symbols = {
        symbol
        for entry in inputs
        if isinstance(entry, TensorSpec)
        for dim in (*entry.shape, *entry.stride)
        for symbol in getattr(dim, "free_symbols", ())
    }
    found: dict[sympy.Expr, SizeGuard] = {}
    for recorded, replaced in export_size_guards(ep) or ():
        free: set[sympy.Symbol] = getattr(replaced, "free_symbols", set())
        if free and free <= symbols and replaced not in found:
            found[replaced] = SizeGuard(replaced, size_assumption(recorded))
    return tuple(found.values())


# Ops that hand on every value of their input unchanged (a view, a copy, an integer cast): an index that reaches a
# table through them is the user's input itself. A slice, a select or arithmetic is not one: the values the table
# sees are then not the input's.
_SAME_VALUES = frozenset(
    {
        "aten::view",
        "aten::reshape",
        "aten::_unsafe_view",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::flatten",
        "aten::clone",
        "aten::contiguous",
        "aten::permute",
        "aten::transpose",
        "aten::t",
        "aten::expand",
        "aten::alias",
        "aten::detach",
        "aten::_to_copy",
        "aten::to",
        "aten::lift_fresh_copy",
    }
)


def _integer(node: Any) -> bool:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex()


def _user_input_behind(node: Any, user_inputs: set[str]) -> str | None:
    """The user input whose values ``node`` holds unchanged, if it is one behind views, copies and integer casts."""
    while isinstance(node, torch.fx.Node) and _integer(node):
        if node.op == "placeholder":
            return node.name if node.name in user_inputs else None
        target = node.target
        if node.op != "call_function" or not isinstance(target, OpOverload):
            return None
        if target._schema.name not in _SAME_VALUES or not node.args:
            return None
        node = node.args[0]
    return None


def _index_bounds(ep: ExportedProgram) -> dict[str, IndexBound]:
    """The user inputs that ``aten.embedding`` reads as row indices of a weight the package holds (a parameter,
    buffer or constant of static size), each with the tightest such bound."""
    from pytest_aoti.core.source_lines import torch_install_dir, user_line

    signature = ep.graph_signature
    user_inputs = {spec.arg.name for spec in signature.input_specs if spec.kind == InputKind.USER_INPUT}
    tables = {
        spec.arg.name: spec.target
        for spec in signature.input_specs
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR) and spec.target
    }
    bounds: dict[str, IndexBound] = {}
    torch_dir = torch_install_dir()
    for node in ep.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, OpOverload):
            continue
        if target._schema.name != "aten::embedding" or len(node.args) < 2:
            continue
        weight, indices = node.args[0], node.args[1]
        if not isinstance(weight, torch.fx.Node) or weight.name not in tables:
            continue
        rows = weight.meta["val"].shape[0] if isinstance(weight.meta.get("val"), torch.Tensor) else None
        source = _user_input_behind(indices, user_inputs)
        if source is None or not isinstance(rows, int):
            continue
        line = user_line(node.meta.get("stack_trace") or "", torch_dir)
        reader = f"aten.embedding of {tables[weight.name]}" + (f" at {line.describe(Path.cwd())}" if line else "")
        if source not in bounds or rows < bounds[source].rows:
            bounds[source] = IndexBound(rows, reader)
    return bounds


def _check_index_bound(index: int, spec: TensorSpec, value: torch.Tensor) -> None:
    __tracebackhide__ = True
    bound = spec.index_bound
    if bound is None or value.numel() == 0:
        return
    bad = (value < 0) | (value >= bound.rows)
    count = int(bad.sum().item())
    if count == 0:
        return
    first = tuple(int(i) for i in bad.nonzero()[0].tolist())
    raise _input_error(
        "input_index",
        index,
        spec,
        f"row indices in [0, {bound.rows})",
        f"{count} value(s) of {value.numel()} outside (min {int(value.min())}, max {int(value.max())})",
        f"first at index {first}: {int(value[first])}; it indexes the {bound.rows} rows read by {bound.reader}. "
        "Eager raises IndexError here; the package's own bounds check fails the run, or aborts the whole process "
        "(inside a parallel kernel; a device-side assert on CUDA). Mark the test "
        "@pytest.mark.aoti(allow_out_of_range=True) to pass it to the package anyway",
    )


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


def _structure_error(path: str, expected: str, actual: str) -> AOTIInvariantError:
    return AOTIInvariantError(
        "input_structure", side="input", index=0, name=None, expected=expected, actual=actual, where=path
    )


def _children(spec: TreeSpec) -> list[TreeSpec]:
    # torch 2.13 deprecates the children_specs attribute for a children() method that earlier releases lack.
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def _leaves_like(spec: TreeSpec, value: Any, path: str) -> list[Any]:
    """``value``'s leaves in the order ``spec`` gives them, checking that ``value`` has exactly ``spec``'s structure:
    container types, lengths, dict keys (in any order: a dict is read by key). The package reads its inputs by
    position, so a dict in another key order, or another nest with as many leaves, would feed it wrong tensors."""
    __tracebackhide__ = True
    if spec.is_leaf():
        return [value]
    if spec.type is dict:
        if not isinstance(value, dict):
            raise _structure_error(path, f"a dict with keys {list(spec.context)}", type(value).__name__)
        if set(value) != set(spec.context):
            missing = [k for k in spec.context if k not in value]
            extra = [k for k in value if k not in spec.context]
            raise _structure_error(
                path, f"a dict with keys {list(spec.context)}", f"keys {list(value)} (missing {missing}, extra {extra})"
            )
        return [
            leaf
            for key, child in zip(spec.context, _children(spec), strict=True)
            for leaf in _leaves_like(child, value[key], f"{path}[{key!r}]")
        ]
    if spec.type in (tuple, list):
        if type(value) is not spec.type:
            raise _structure_error(path, f"a {spec.type.__name__} of {spec.num_children}", type(value).__name__)
        if len(value) != spec.num_children:
            raise _structure_error(
                path, f"a {spec.type.__name__} of {spec.num_children}", f"a {spec.type.__name__} of {len(value)}"
            )
        return [
            leaf
            for number, (child, item) in enumerate(zip(_children(spec), value, strict=True))
            for leaf in _leaves_like(child, item, f"{path}[{number}]")
        ]
    leaves, actual = pytree.tree_flatten(value)
    if actual != spec:
        raise _structure_error(path, f"a {spec.type.__name__} shaped like the example", type(value).__name__)
    return leaves


def flatten_inputs(in_spec: TreeSpec, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """The flat inputs of a call, in the order the package reads them, after checking their structure against the
    exported ``in_spec`` (``(args, kwargs)``)."""
    __tracebackhide__ = True
    if not isinstance(args, tuple | list):  # a bare tensor would be read as the tuple of its rows
        raise TypeError(
            f"args: expected a tuple of positional inputs, got {type(args).__name__} (wrap one input as (x,))"
        )
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs: expected a dict of keyword inputs, got {type(kwargs).__name__}")
    args_spec, kwargs_spec = _children(in_spec)
    leaves = _leaves_like(args_spec, tuple(args), "args")
    if kwargs_spec.context or kwargs:
        leaves += _leaves_like(kwargs_spec, dict(kwargs), "kwargs")
    return leaves


def _check_device_and_dtype(
    side: Literal["input", "output"],
    index: int,
    name: str | None,
    value: torch.Tensor,
    device: torch.device,
    dtype: torch.dtype,
) -> None:
    __tracebackhide__ = True
    if not _same_device(value.device, device):
        kind: Invariant = "input_device" if side == "input" else "output_device"
        raise AOTIInvariantError(
            kind, side=side, index=index, name=name, expected=str(device), actual=str(value.device)
        )
    if value.dtype != dtype:
        kind = "input_dtype" if side == "input" else "output_dtype"
        raise AOTIInvariantError(kind, side=side, index=index, name=name, expected=str(dtype), actual=str(value.dtype))


def _fmt_stride(stride: Sequence[Any]) -> str:
    return "(" + ", ".join(str(s) for s in stride) + ("," if len(stride) == 1 else "") + ")"


def check_inputs(
    spec: ProgramSpec,
    flat_inputs: Sequence[Any],
    device: torch.device,
    *,
    allow_nonfinite: bool = False,
    restride: bool = False,
    allow_out_of_range: bool = False,
) -> tuple[dict[sympy.Symbol, int], list[Any]]:
    """Raise :class:`AOTIInvariantError` for the first input the package would not accept, or would read wrongly.

    Returns the values bound to the dynamic-dim symbols (they fix the expected output shapes) and the inputs to run
    with: ``flat_inputs``, except that with ``restride`` an input whose strides differ from the compiled ones is
    replaced by a copy with the compiled strides.
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
    tensors = _typed_tensor_inputs(spec, flat_inputs, device)
    bound = _bind_dims(spec, tensors)
    _check_shapes(spec, tensors, bound)
    _check_guards(spec, tensors, bound)
    run_with = list(flat_inputs)
    for index, expected, value in tensors:
        compiled_stride = _compiled_stride(expected, value, bound)
        if compiled_stride is not None:
            if not restride:
                why = (
                    "the package reads this input with the strides it was compiled for (a transposed, sliced or "
                    f"expanded view would be read wrongly); pass {expected.name}.contiguous(), or mark the test "
                    "@pytest.mark.aoti(restride_inputs=True) to have a copy passed"
                )
                stride, given = _fmt_stride(compiled_stride), _fmt_stride(value.stride())
                raise _input_error("input_stride", index, expected, stride, given, why)
            run_with[index] = torch.empty_strided(
                value.shape, compiled_stride, dtype=value.dtype, device=value.device
            ).copy_(value)
        if not allow_nonfinite and (value.is_floating_point() or value.is_complex()):
            _check_finite("input", index, expected.name, value)
        if not allow_out_of_range:
            _check_index_bound(index, expected, value)
    return bound, run_with


_TensorInput = tuple[int, TensorSpec, "torch.Tensor"]


def _input_error(
    invariant: Invariant, index: int, spec: TensorSpec | ScalarSpec, expected: str, actual: str, detail: str = ""
) -> AOTIInvariantError:
    return AOTIInvariantError(
        invariant, side="input", index=index, name=spec.name, expected=expected, actual=actual, detail=detail
    )


def _typed_tensor_inputs(spec: ProgramSpec, flat_inputs: Sequence[Any], device: torch.device) -> list[_TensorInput]:
    """The tensor inputs with their specs, once each scalar equals the value baked in at export and each tensor is
    a tensor on the right device with the right dtype."""
    __tracebackhide__ = True
    tensors: list[_TensorInput] = []
    for index, (expected, value) in enumerate(zip(spec.inputs, flat_inputs, strict=True)):
        if isinstance(expected, ScalarSpec):
            if isinstance(value, torch.Tensor) or type(value) is not type(expected.value) or value != expected.value:
                why = (
                    f"compiled for {expected.name}={expected.value!r}: this argument was baked into the package at "
                    "export; export again with the new value (or make it a tensor)"
                )
                raise _input_error("input_value", index, expected, f"{expected.value!r}", f"{value!r}", why)
            continue
        if not isinstance(value, torch.Tensor):
            what = f"a tensor of dtype {expected.dtype}"
            raise _input_error("input_structure", index, expected, what, type(value).__name__)
        _check_device_and_dtype("input", index, expected.name, value, device, expected.dtype)
        tensors.append((index, expected, value))
    return tensors


def _bind_dims(spec: ProgramSpec, tensors: list[_TensorInput]) -> dict[sympy.Symbol, int]:
    """The dynamic-dim symbols bound to the inputs' sizes: plain symbols first, so derived dims (2*b) can be
    evaluated; a derived dim whose root appears nowhere else is solved for its root."""
    __tracebackhide__ = True
    bound: dict[sympy.Symbol, int] = {}
    for index, expected, value in tensors:
        if len(value.shape) != len(expected.shape):
            raise _shape_error(spec, index, expected, value, f"rank {len(expected.shape)} expected")
        for axis, (want, got) in enumerate(zip(expected.shape, value.shape, strict=True)):
            if isinstance(want, sympy.Symbol):
                previous = bound.setdefault(want, int(got))
                if previous != got:
                    raise _shape_error(
                        spec,
                        index,
                        expected,
                        value,
                        f"dim {axis} is {spec.named(want)}, already bound to {previous} by another input",
                    )
    for _, expected, value in tensors:
        for axis, want in enumerate(expected.shape):
            if isinstance(want, sympy.Expr) and not isinstance(want, sympy.Symbol):
                _solve_for(want, int(value.shape[axis]), bound)
    return bound


def _check_shapes(spec: ProgramSpec, tensors: list[_TensorInput], bound: dict[sympy.Symbol, int]) -> None:
    """Every dim against its static size, its symbol's bound value and the ranges of its symbols."""
    __tracebackhide__ = True
    for index, expected, value in tensors:
        for axis, (want, got) in enumerate(zip(expected.shape, value.shape, strict=True)):
            if isinstance(want, int):
                if want != got:
                    raise _shape_error(spec, index, expected, value, f"dim {axis} is static {want}")
                continue
            evaluated = want.subs(bound)
            if evaluated.is_number and int(evaluated) != got:
                raise _shape_error(spec, index, expected, value, f"dim {axis} is {spec.named(want)} = {evaluated}")
            if len(evaluated.free_symbols) == 1:  # a derived dim no whole value of its root gives (2*half = 3)
                (root,) = evaluated.free_symbols
                why = f"dim {axis} is {spec.named(want)}: no whole {spec.named(root)} gives {got}"
                raise _shape_error(spec, index, expected, value, why)
            for expr in (want, *want.free_symbols):
                lo, hi = spec.ranges.get(expr, (0, None))
                current = expr.subs(bound)
                if current.is_number and (int(current) < lo or (hi is not None and int(current) > hi)):
                    raise _shape_error(
                        spec,
                        index,
                        expected,
                        value,
                        f"dim {axis} is {spec.named(want)}, {spec.named(expr)}={current} outside "
                        f"{_range_text(expr, spec.ranges)}{_zero_one_hint(spec, expr, int(current), lo)}",
                    )


def _check_guards(spec: ProgramSpec, tensors: list[_TensorInput], bound: dict[sympy.Symbol, int]) -> None:
    """Every guard export recorded on the input sizes, at the sizes given: what ``ExportedProgram.module()`` checks
    before it runs. A size assumption (not 0 or 1) about a root whose range starts below 2 is not checked: that root
    was widened to the user's ``min`` where export's other guards allow it
    (:func:`pytest_aoti.core.dims.declared_ranges`)."""
    __tracebackhide__ = True
    if not spec.guards:
        return
    failed = _failed_guard(spec.guards, tuple(sorted(bound.items(), key=str)), frozenset(_below_two(spec)))
    if failed is None:
        return
    symbols = failed.free_symbols
    index, expected, value, axis = next(
        (index, expected, value, axis)
        for index, expected, value in tensors
        for axis, dim in enumerate(expected.shape)
        if symbols & getattr(dim, "free_symbols", set())
    )
    sizes = ", ".join(f"{_guard_name(spec, symbol)}={bound[symbol]}" for symbol in sorted(symbols, key=str))
    why = (
        f"dim {axis}: export's guard {_guard_text(spec, failed)} fails at {sizes}. Tracing the example fixed what "
        "this size may be (a reshape or a slice to a constant size, a branch on a size), and the package computes "
        "with the sizes it was traced for (ExportedProgram.module() refuses this input too)"
    )
    raise _shape_error(spec, index, expected, value, why)


def _below_two(spec: ProgramSpec) -> set[sympy.Expr]:
    return {expr for expr, (low, _) in spec.ranges.items() if low < 2}


@functools.lru_cache(maxsize=256)
def _failed_guard(
    guards: tuple[SizeGuard, ...], bound: tuple[tuple[sympy.Symbol, int], ...], widened: frozenset[sympy.Expr]
) -> sympy.Expr | None:
    """The first guard false at ``bound`` (a guard with a symbol left unbound is not decided here); cached, since
    a test calls a package with the same sizes again and again and sympy takes a while."""
    values = dict(bound)
    for guard in guards:
        if guard.size_assumption and guard.expr.free_symbols & widened:
            continue
        if guard.expr.free_symbols <= values.keys() and guard.expr.subs(values) is sympy.false:
            return guard.expr
    return None


def _guard_name(spec: ProgramSpec, symbol: sympy.Symbol) -> str:
    """The user's ``Dim`` name of a symbol, else the first input dim it sizes (``x.shape[0]``)."""
    if symbol in spec.dim_names:
        return spec.dim_names[symbol]
    for entry in spec.inputs:
        if isinstance(entry, TensorSpec) and symbol in entry.shape:
            return f"{entry.name}.shape[{entry.shape.index(symbol)}]"
    return str(symbol)


def _guard_text(spec: ProgramSpec, guard: sympy.Expr) -> str:
    """A guard in the inputs' terms, as Python reads it: ``(x.shape[0]//100) == 1``."""
    named = guard.subs({symbol: sympy.Symbol(_guard_name(spec, symbol)) for symbol in guard.free_symbols})
    if isinstance(named, sympy.core.relational.Relational):
        return f"{named.lhs} {named.rel_op} {named.rhs}"
    return str(named)


def _zero_one_hint(spec: ProgramSpec, expr: sympy.Expr, value: int, low: int) -> str:
    """Why a dynamic dim refuses 0 or 1 where export started it at 2: a dim the user did not name (``Dim.AUTO``,
    ``Dim.DYNAMIC``), since export specializes a size of 0 or 1 (a batch of one is the common victim); or a named
    root that only derived dims use, which export starts at 2 whatever its ``min`` (and which the checks start at the
    user's only where export's guards show the package computes it). A named ``Dim`` of an input starts where the
    user said."""
    if not isinstance(expr, sympy.Symbol) or value not in (0, 1) or low != 2:
        return ""
    if expr in spec.dim_names:
        if any(expr in entry.shape for entry in spec.inputs if isinstance(entry, TensorSpec)):
            return ""
        return (
            f" (export starts {spec.named(expr)}, which only derived dims use, at 2 whatever its min, and the guards "
            f"it recorded do not show that {value} is safe for this model: to accept it, give each input dim derived "
            "from it a Dim of its own)"
        )
    return (
        f" (export assumes a dynamic dim is never 0 or 1 unless told: to accept {value}, export with "
        f"Dim('name', min={value}) for this dim)"
    )


def _compiled_stride(
    expected: TensorSpec, value: torch.Tensor, bound: dict[sympy.Symbol, int]
) -> tuple[int, ...] | None:
    """The strides the package was compiled for, when ``value``'s differ from them in a dim that is read (size > 1);
    None when they agree (or cannot be evaluated)."""
    if value.numel() == 0:
        return None
    compiled: list[int] = []
    for want in expected.stride:
        evaluated = want if isinstance(want, int) else want.subs(bound)
        if not getattr(evaluated, "is_number", True):
            return None
        compiled.append(int(evaluated))
    differs = any(
        size > 1 and want != got for size, want, got in zip(value.shape, compiled, value.stride(), strict=True)
    )
    return tuple(compiled) if differs else None


def _shape_error(
    spec: ProgramSpec, index: int, expected: TensorSpec, value: torch.Tensor, detail: str
) -> AOTIInvariantError:
    return AOTIInvariantError(
        "input_shape",
        side="input",
        index=index,
        name=expected.name,
        expected="("
        + ", ".join(spec.named(d) for d in expected.shape)
        + ("," if len(expected.shape) == 1 else "")
        + ")",
        actual=_fmt_shape(tuple(value.shape)),
        detail=detail,
    )


@dataclass(frozen=True)
class CheckedOutputs:
    """One call's outputs held to the package's spec (:func:`check_call_outputs`).

    ``spec``: the spec they were held to, which the calls after this one keep: the package's, with eager's dtype for
    each output where the exported program's metadata said another (``dtype_notes``: one note each). ``error``: the
    first invariant the outputs broke, or None. It is returned rather than raised so that what eager taught about
    the dtypes is kept even by a call that fails."""

    spec: ProgramSpec
    dtype_notes: tuple[str, ...] = ()
    error: AOTIInvariantError | None = None

    def raise_if_broken(self) -> None:
        __tracebackhide__ = True
        if self.error is not None:
            raise self.error


def check_call_outputs(
    spec: ProgramSpec,
    outputs: Any,
    device: torch.device,
    bound: dict[sympy.Symbol, int],
    *,
    allow_nonfinite: bool = False,
    eager_outputs: Any = None,
) -> CheckedOutputs:
    """The one check of a package call's outputs (a pytree, as the package returned them): each on ``device``, of
    its dtype and of the shape the dims ``bound`` by the inputs give, and finite unless ``allow_nonfinite``. With
    ``eager_outputs`` (eager's outputs on the same inputs, as ``aoti_check`` has them), the dtypes are eager's first
    where the exported program's metadata disagrees with them (:func:`_dtypes_as_eager_returns`)."""
    __tracebackhide__ = True
    notes: list[str] = []
    if eager_outputs is not None:
        spec, notes = _dtypes_as_eager_returns(spec, pytree.tree_leaves(eager_outputs))
    try:
        _check_outputs(spec, pytree.tree_leaves(outputs), device, bound, allow_nonfinite=allow_nonfinite)
    except AOTIInvariantError as error:
        return CheckedOutputs(spec, tuple(notes), error)
    return CheckedOutputs(spec, tuple(notes))


def _check_outputs(
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
        _check_device_and_dtype("output", index, name, value, device, expected.dtype)
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
            _check_finite("output", index, None, value)


def _dtypes_as_eager_returns(spec: ProgramSpec, eager_outputs: Sequence[Any]) -> tuple[ProgramSpec, list[str]]:
    """``spec`` with each output dtype that eager's flat outputs disagree with replaced by eager's, and a note for
    each. The exported program's output metadata can be wrong where an op's fake implementation is: torch 2.11 on
    CUDA promises float32 for the ``inverse`` of ``torch.unique``, which eager and the package both return as
    int64 (the op runs outside Inductor's code, through its proxy executor)."""
    outputs = list(spec.outputs)
    notes = []
    for index, (expected, value) in enumerate(zip(spec.outputs, eager_outputs, strict=False)):
        if expected is None or not isinstance(value, torch.Tensor) or value.dtype == expected.dtype:
            continue
        outputs[index] = dataclasses.replace(expected, dtype=value.dtype)
        notes.append(
            f"output {index}: the exported program says {expected.dtype}, eager returns {value.dtype}; the "
            f"package's output is checked against eager's {value.dtype} (torch's output metadata is wrong here)"
        )
    return (dataclasses.replace(spec, outputs=tuple(outputs)) if notes else spec), notes


def _check_finite(side: Literal["input", "output"], index: int, name: str | None, value: torch.Tensor) -> None:
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
        "input_nonfinite" if side == "input" else "output_nonfinite",
        side=side,
        index=index,
        name=name,
        expected="finite values",
        actual=f"{count} {'/'.join(kinds)} value(s) of {value.numel()}",
        detail=f"first at index {first}: {value[first].item()}"
        + (
            "; mark the test @pytest.mark.aoti(allow_nonfinite=True) if NaN/Inf inputs are intended"
            if side == "input"
            else ""
        ),
    )


def _dim_text(dim: Dim) -> str | int:
    return dim if isinstance(dim, int) else str(dim)


def _tensor_json(spec: TensorSpec | None) -> dict[str, Any] | None:
    if spec is None:
        return None
    record: dict[str, Any] = {
        "name": spec.name,
        "shape": [_dim_text(d) for d in spec.shape],
        "stride": [_dim_text(d) for d in spec.stride],
        "dtype": str(spec.dtype).removeprefix("torch."),
    }
    if spec.index_bound is not None:
        record["index_bound"] = {"rows": spec.index_bound.rows, "reader": spec.index_bound.reader}
    return record


def spec_to_json(spec: ProgramSpec) -> dict[str, Any]:
    """A JSON-able record of ``spec``, for a package that carries its own invariants (``pytest_aoti.verify``)."""
    inputs: list[dict[str, Any]] = []
    for entry in spec.inputs:
        if isinstance(entry, ScalarSpec):
            inputs.append({"scalar": entry.name, "value": repr(entry.value)})
        else:
            inputs.append({"tensor": _tensor_json(entry)})
    return {
        "inputs": inputs,
        "outputs": [_tensor_json(entry) for entry in spec.outputs],
        "ranges": [[str(expr), lo, hi] for expr, (lo, hi) in spec.ranges.items()],
        "dim_names": {str(symbol): name for symbol, name in spec.dim_names.items()},
    }


def literal_value(text: str) -> Any:
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):  # inf, nan, an object's repr: compared as the text it was
        return text


def spec_from_json(data: dict[str, Any]) -> ProgramSpec:
    """The inverse of :func:`spec_to_json`: dynamic dims come back as sympy expressions over integer symbols."""
    import re

    symbols: dict[str, sympy.Symbol] = {}

    def dim(text: str | int) -> Dim:
        if isinstance(text, int):
            return text
        for name in re.findall(r"[A-Za-z_]\w*", text):
            symbols.setdefault(name, sympy.Symbol(name, integer=True, positive=True))
        return sympy.sympify(text, locals=symbols)

    def tensor(entry: dict[str, Any] | None) -> TensorSpec | None:
        if entry is None:
            return None
        dtype = getattr(torch, entry["dtype"])
        bound = entry.get("index_bound")
        return TensorSpec(
            entry["name"],
            tuple(dim(d) for d in entry["shape"]),
            tuple(dim(d) for d in entry["stride"]),
            dtype,
            IndexBound(int(bound["rows"]), str(bound["reader"])) if bound else None,
        )

    inputs: list[TensorSpec | ScalarSpec] = []
    for entry in data["inputs"]:
        if "scalar" in entry:
            inputs.append(ScalarSpec(entry["scalar"], literal_value(entry["value"])))
        else:
            parsed = tensor(entry["tensor"])
            assert parsed is not None
            inputs.append(parsed)
    ranges = {sympy.sympify(dim(expr)): (lo, hi) for expr, lo, hi in data["ranges"]}
    names = {symbols.get(key, sympy.Symbol(key)): value for key, value in data["dim_names"].items()}
    return ProgramSpec(tuple(inputs), tuple(tensor(entry) for entry in data["outputs"]), ranges, names)
