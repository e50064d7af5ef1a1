"""Where a NaN/Inf was born: the failing call's exported program replayed in eager, op by op, on its inputs.

The NaN asserts stop at the first non-finite buffer and the printer's stats name the first kernel that wrote one, but
real models hold infinities by design (an additive attention mask's ``-inf``, ``masked_fill(-inf)``, a max-pool's
padding), and a fused kernel holds several ops of several lines, of which the first may only pass a NaN on (a ReLU
after an eval BatchNorm of a negative variance). Here each graph node runs alone on the values before it, so the node
that turned inputs holding no NaN into a NaN is the op that made it. With no NaN in the outputs, the first node that
overflowed to Inf from finite inputs is the origin; a node whose infinities are a constant it was given is a fill.
When eager's replay stays finite, the package alone made the values: a compiler bug, traced at the kernel level.

The same replay names the op of a package that raised instead: the first index read (an embedding, ``index_select``,
``gather``, advanced indexing) whose indices fall outside its table, checked before it runs (an index made inside the
model, such as GPT-2's position ids past ``n_positions``), else the first node that raises in eager (a custom op's
own check).

Runs as ``python -m pytest_aoti.debug.origin BUNDLE`` (torch imported there, not in the session) and writes
``ORIGIN_RESULT`` into the bundle.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from pytest_aoti.core.protocol import ORIGIN_RESULT, NonfiniteOrigin
from pytest_aoti.debug.minify import load_program


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()]


def _holds(value: Any, kind: str) -> bool:
    test = torch.isnan if kind == "NaN" else torch.isinf
    return any(bool(test(tensor).any()) for tensor in _tensors(value))


def _infinities(value: Any) -> set[float]:
    """The signs of the infinities ``value`` holds: a ``+inf`` made from inputs holding only ``-inf`` (an ``exp`` that
    overflowed after a ``masked_fill(-inf)``) is a new one."""
    return {sign for t in _tensors(value) for sign in (math.inf, -math.inf) if bool((t == sign).any())}


def _constant_infinity(node: torch.fx.Node) -> bool:
    """The node was given an infinite constant (``where(mask, x, -inf)``, ``full(..., -inf)``, ``masked_fill``):
    its infinities are a fill by design."""
    constants = [leaf for leaf in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(leaf, float | int)]
    return any(isinstance(value, float) and math.isinf(value) for value in constants)


def _range(tensor: torch.Tensor) -> str:
    finite = tensor[torch.isfinite(tensor)]
    parts = []
    if finite.numel():
        parts.append(f"min {finite.min().item():.4g}, max {finite.max().item():.4g}")
    for name, count in (("NaN", torch.isnan(tensor)), ("Inf", torch.isinf(tensor))):
        number = int(count.sum())
        if number:
            parts.append(f"{number} {name}")
    return ", ".join(parts) or "empty"


class _Stopped(Exception):
    """The replay stopped at ``node``: an index read out of its table's range (``kind`` "index"), or a node that
    raised (``kind`` "error"); ``what`` says which value and bound, or the error."""

    def __init__(self, node: torch.fx.Node, kind: str, what: str, inputs: list[str]) -> None:
        super().__init__(what)
        self.node, self.kind, self.what, self.inputs = node, kind, what, inputs


def _index_range(tensor: torch.Tensor) -> str:
    return f"min {int(tensor.min())}, max {int(tensor.max())}" if tensor.numel() else "empty"


def _index_reads(node: torch.fx.Node, args: tuple[Any, ...]) -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """(table, indices, dim) for each index tensor ``node`` reads a table with; empty for other ops."""
    target, aten = node.target, torch.ops.aten
    if target is aten.embedding.default:
        return [(args[0], args[1], 0)]
    if target in (aten.index_select.default, aten.gather.default):
        return [(args[0], args[2], args[1])]
    if target is aten.index.Tensor:
        reads, dim = [], 0
        for index in args[1]:
            if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
                dim += index.dim()  # a mask spans as many of the table's dims as it has
                continue
            if isinstance(index, torch.Tensor):
                reads.append((args[0], index, dim))
            dim += 1
        return reads
    return []


def _out_of_range(node: torch.fx.Node, args: tuple[Any, ...]) -> str | None:
    """``index 39 outside [0, 32) (dim 0 of a 32x16 table)`` for the first of ``node``'s index reads out of range;
    None when all are in range (negative indices count from the end where the op allows it, as advanced indexing
    does)."""
    for table, indices, dim in _index_reads(node, args):
        if not isinstance(table, torch.Tensor) or not isinstance(indices, torch.Tensor) or not indices.numel():
            continue
        if indices.dtype == torch.bool or indices.is_floating_point():
            continue
        size = table.shape[dim]
        low = -size if node.target is torch.ops.aten.index.Tensor else 0
        bad = indices[(indices < low) | (indices >= size)]
        if bad.numel():
            value = int(bad.max()) if bool((bad >= size).any()) else int(bad.min())
            shape = "x".join(str(n) for n in table.shape)
            return f"index {value} outside [{low}, {size}) (dim {dim} of a {shape} table)"
    return None


def _input_ranges(node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> list[str]:
    described = []
    for arg in node.all_input_nodes:
        value = env.get(arg)
        if isinstance(value, torch.Tensor) and value.numel():
            text = _range(value) if value.is_floating_point() else _index_range(value)
            described.append(f"{arg.name} ({'x'.join(str(n) for n in value.shape)}: {text})")
    return described


def _made(value: Any, kind: str) -> str:
    """``12 of 512 values NaN``: how many of a node's values are of ``kind``."""
    test = torch.isnan if kind == "NaN" else torch.isinf
    made = sum(int(test(t).sum()) for t in _tensors(value))
    return f"{made} of {sum(t.numel() for t in _tensors(value))} values {kind}"


class _Replay(torch.fx.Interpreter):
    """Runs the graph and keeps each node that made a NaN, which births each NaN value carries, and the first node
    that overflowed to Inf."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.output_node = next(node for node in module.graph.nodes if node.op == "output")
        # kind -> (node, how many values it made, its inputs): every NaN birth, in the order they ran; the first Inf.
        self.births: dict[str, dict[torch.fx.Node, tuple[str, list[str]]]] = {"NaN": {}, "Inf": {}}
        # The births whose NaN a value holding NaN carries: a NaN made and then dropped (a "safe" ``where(x > 0,
        # log(x), 0)``) is no origin of the NaN in the outputs.
        self.lineage: dict[torch.fx.Node, frozenset[torch.fx.Node]] = {}
        self.fills: list[str] = []
        # What each value holds (a NaN; the signs of its infinities), read once when it is made, not again for each
        # node that reads it.
        self.held: dict[torch.fx.Node, tuple[bool, set[float]]] = {}

    def _held(self, node: torch.fx.Node, value: Any) -> tuple[bool, set[float]]:
        if node not in self.held:
            self.held[node] = (_holds(value, "NaN"), _infinities(value))
        return self.held[node]

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        args, _ = self.fetch_args_kwargs_from_env(n)
        outside = _out_of_range(n, args)
        if outside is not None:
            raise _Stopped(n, "index", outside, _input_ranges(n, self.env))
        try:
            value = super().run_node(n)
        except Exception as error:  # the user's model and custom ops: where eager raises is the answer
            what = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            raise _Stopped(n, "error", what[:300], _input_ranges(n, self.env)) from error
        if _tensors(value):
            self._record(n, value)
        return value

    def _record(self, n: torch.fx.Node, value: Any) -> None:
        inputs = {arg: self.env[arg] for arg in n.all_input_nodes if arg in self.env}
        before = {arg: self._held(arg, held) for arg, held in inputs.items()}
        nan, infinities = self._held(n, value)
        carried = [arg for arg, (had_nan, _) in before.items() if had_nan]
        if nan:
            self.lineage[n] = frozenset().union(*(self.lineage.get(arg, frozenset()) for arg in carried))
        made = {
            "NaN": nan and not carried,
            "Inf": not self.births["Inf"] and bool(infinities - set().union(*(s for _, s in before.values()))),
        }
        for kind in ("NaN", "Inf"):
            if not made[kind]:
                continue
            if kind == "Inf" and _constant_infinity(n):
                self.fills.append(n.name)
                continue
            described = [f"{arg.name} ({_range(t[0])})" for arg, v in inputs.items() if (t := _tensors(v))]
            self.births[kind][n] = (_made(value, kind), described)
            if kind == "NaN":
                self.lineage[n] = frozenset({n})

    def origin(self, kind: str) -> tuple[torch.fx.Node, str, list[str]] | None:
        """The first birth of ``kind`` that reaches the outputs: of a NaN, the first whose NaN an output carries."""
        births = self.births[kind]
        if kind == "NaN":
            reaching = set().union(*(self.lineage.get(leaf, frozenset()) for leaf in self.output_node.all_input_nodes))
            births = {node: birth for node, birth in births.items() if node in reaching}
        first = next(iter(births.items()), None)
        return (first[0], *first[1]) if first is not None else None


def replay(module: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> NonfiniteOrigin:
    """The origin of the outputs' NaN (else Inf) in one eager run of ``module`` on ``flat_inputs``; or where the run
    stopped: an index out of range, a node that raised."""
    interpreter = _Replay(module)
    try:
        with torch.no_grad():
            outputs = interpreter.run(*flat_inputs)
    except _Stopped as stopped:
        return NonfiniteOrigin(
            "raised",
            kind=stopped.kind,
            node=stopped.node.name,
            op=str(stopped.node.target),
            inputs=stopped.inputs,
            output=stopped.what,
            fills=interpreter.fills,
        )
    held = "nan" if _holds(outputs, "NaN") else "inf" if _holds(outputs, "Inf") else "finite"
    kind = {"nan": "NaN", "inf": "Inf"}.get(held)
    found = interpreter.origin(kind) if kind is not None else None
    if kind is None or found is None:
        return NonfiniteOrigin(held, fills=interpreter.fills)
    node, output, inputs = found
    return NonfiniteOrigin(
        held,
        kind=kind,
        node=node.name,
        op=str(node.target),
        inputs=inputs,
        output=output,
        fills=interpreter.fills,
    )


def find_origin(bundle: Path) -> NonfiniteOrigin:
    try:
        module, flat_inputs = load_program(bundle)
        return replay(module, flat_inputs)
    except Exception as error:  # the user's model and torch's loaders: any failure is a note, not a crash
        return NonfiniteOrigin("unknown", error=f"{type(error).__name__}: {error}"[:500])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_aoti.debug.origin", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path)
    options = parser.parse_args(argv)
    found = find_origin(options.bundle)
    (options.bundle / ORIGIN_RESULT).write_text(found.to_json())
    print(found.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
