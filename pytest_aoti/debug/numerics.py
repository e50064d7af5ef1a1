"""Accuracy triage: the first kernel of a package whose output diverges from eager.

Runs in the ``numerics`` debug child, whose package was compiled with the intermediate value printer at 1 (every
kernel's arguments saved as ``.pt`` files before and after its launch) and Inductor's provenance tracking on (the
package's ``kernel_information.json`` maps each kernel launch to the graph nodes it computes). On the failing call:

- the package runs with its working directory in a capture dir, where the printer writes;
- eager runs under a dispatch recorder that keeps every ATen op's outputs;
- the exported program runs under the same recorder through an FX interpreter, which says which graph node
  dispatched which op; aligning the two op sequences gives eager's value of every graph node. The same interpreter
  in float64 gives a reference, where the dtypes allow;
- the launches are walked in order: each buffer a launch writes is compared with eager's value of the node it
  computes, each buffer it reads with the value recorded when it was written. The first launch whose output is not
  close to eager is the verdict.

A difference is a divergence when it is past both the test's tolerance and float32 rounding (torch.testing's
float32 defaults, or the dtype's own when it is wider than float32): Inductor computes low-precision ops in float32,
so float32 rounding is the noise floor; a bfloat16 rounding at a kernel boundary is precision lost.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import json
import operator
import os
import re
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from pytest_aoti.core.compiler import ComparedCall
from pytest_aoti.core.protocol import Event, Finding, KernelFinding, append_event
from pytest_aoti.core.torch_private import HigherOrderOperator, TorchDispatchMode, default_tolerances

# The printer's level 1 writes ``<cwd>/tmp/aoti_torch<before|after>_launch_<kernel>_<arg>_<device>.pt``.
# An extern call's saves name its ATen op (``at::_ops::cumsum::call``).
_SAVE_CALL = re.compile(
    r'aoti_torch_save_tensor_handle\(\s*\w+,\s*"(\w+)",\s*"(before|after)_launch",\s*"([\w:]+)"\s*\)'
)
_HANDLE = re.compile(r"\[Provenance debug handles\]\s+(\w+):(\d+)")
# The wrapper hands a dead buffer's memory to a new one: ``auto buf1 = std::move(buf0);  // reuse``.
_REUSE = re.compile(r"auto\s+(\w+)\s*=\s*std::move\((\w+)\);\s*//\s*reuse")
_DEVICE_SUFFIX = re.compile(r"_(cpu|cuda(?::\d+)?|xpu(?::\d+)?|mps)\.pt$")
# A C++ kernel's call in the wrapper casts each buffer it reads to ``const T*`` and each it writes to ``T*``:
# ``cpp_fused_mul_5((float*)(buf24.data_ptr()), s70);``.
_WRITTEN_ARG = re.compile(r"\((?!const )[\w:]+\*\)\((\w+)\.data_ptr\(\)\)")


@dataclass(frozen=True)
class Launch:
    """One kernel launch of the package, in launch order: its arguments and the graph nodes it computes."""

    kernel: str
    args: tuple[str, ...]
    nodes: tuple[str, ...] = ()  # pre-grad nodes: the exported program's node names
    reused: tuple[tuple[str, str], ...] = ()  # (new, old) buffer names handed over since the previous launch
    # The arguments a C++ kernel writes (its call's non-const casts): an output even where the kernel wrote back
    # the values it read (a ``* 1`` export baked in place); empty where the call does not say (Triton).
    writes: tuple[str, ...] = ()


def package_launches(package_path: Path) -> list[Launch]:
    """The launches of a package built with printer level 1 and provenance tracking, read from the files the
    compile put in it: the wrapper's save calls give the order and arguments, ``kernel_information.json`` the
    nodes (keyed ``<kernel>:<debug handle>``, the handle also written next to the launch in the wrapper)."""
    with zipfile.ZipFile(package_path) as archive:
        names = archive.namelist()
        wrapper = next((n for n in names if n.endswith(".wrapper.cpp")), None)
        info_name = next((n for n in names if n.endswith("kernel_information.json")), None)
        if wrapper is None:
            return []
        source = archive.read(wrapper).decode(errors="replace")
        info: dict[str, Any] = json.loads(archive.read(info_name)) if info_name else {}
    parsed: list[tuple[str, list[str], tuple[str, ...], tuple[tuple[str, str], ...]]] = []
    handle: str | None = None
    last_when: str | None = None
    reused: list[tuple[str, str]] = []
    written: dict[int, tuple[str, ...]] = {}  # launch number -> the arguments its call writes
    for line in source.splitlines():
        moved = _REUSE.search(line)
        if moved:
            reused.append((moved.group(1), moved.group(2)))
            continue
        found = _HANDLE.search(line)
        if found:
            _unsaved_call(parsed, info, handle)
            handle = f"{found.group(1)}:{found.group(2)}"
            continue
        call = _SAVE_CALL.search(line)
        if call is None:
            if parsed and last_when == "before" and line.strip().startswith(parsed[-1][0] + "("):
                written[len(parsed) - 1] = tuple(_WRITTEN_ARG.findall(line))
            continue
        arg, when, kernel = call.groups()
        if when == "before":
            # A launch is its run of before_launch saves, the call, then its after_launch saves.
            if last_when != "before" or parsed[-1][0] != kernel:
                parsed.append((kernel, [], _nodes(info, handle, kernel), tuple(reused)))
                reused = []
                handle = None  # the handle written next to this launch: no later launch's
            parsed[-1][1].append(arg)
        last_when = when
    _unsaved_call(parsed, info, handle)
    return [
        Launch(kernel, tuple(args), nodes, moves, written.get(number, ()))
        for number, (kernel, args, nodes, moves) in enumerate(parsed)
    ]


def _unsaved_call(
    parsed: list[tuple[str, list[str], tuple[str, ...], tuple[tuple[str, str], ...]]],
    info: dict[str, Any],
    handle: str | None,
) -> None:
    """A call whose handle the wrapper wrote with no save of its arguments after it (a custom op through the proxy
    executor): a launch of no arguments, so that the nodes it finishes are not held to the kernel before it."""
    entry = info.get(handle) if handle is not None else None
    if isinstance(entry, dict) and entry.get("pre_grad_nodes"):
        assert handle is not None
        parsed.append((handle.rsplit(":", 1)[0], [], tuple(entry["pre_grad_nodes"]), ()))


def _nodes(info: dict[str, Any], handle: str | None, kernel: str) -> tuple[str, ...]:
    """The nodes of the launch of ``kernel`` whose handle the wrapper wrote next to it. An extern call saves its
    arguments under its ATen op's name (``at::_ops::cumsum::call``), not its handle's (``aoti_torch_cpu_cumsum:2``):
    its handle is the one written next to it, else the nodes it finishes would count as the kernel's before it."""
    own = any(key.rsplit(":", 1)[0] == kernel for key in info)
    entry = info.get(handle or "") if handle and (handle.startswith(kernel + ":") or not own) else None
    if entry is None:  # no handle next to this launch: the kernel's only entry, if it has one
        matching = [v for k, v in info.items() if k.rsplit(":", 1)[0] == kernel]
        entry = matching[0] if len(matching) == 1 else None
    return tuple(entry.get("pre_grad_nodes", ())) if entry else ()


def saved_tensor(capture_dir: Path, when: str, kernel: str, arg: str) -> torch.Tensor | None:
    """One tensor the printer saved: ``aoti_torch<when>_launch_<kernel>_<arg>_<device>.pt`` (device ``cpu``,
    ``cuda:0``, …)."""
    prefix = f"aoti_torch{when}_launch_{kernel}_{arg}"
    for path in (capture_dir / "tmp").glob(prefix + "_*.pt"):
        suffix = _DEVICE_SUFFIX.search(path.name)
        if suffix is not None and path.name[: suffix.start()] == prefix:
            value = torch.load(path, map_location="cpu", weights_only=True)
            return value if isinstance(value, torch.Tensor) else None
    return None


# -- eager's value of every graph node ----------------------------------------------------------------------------


@dataclass
class _Op:
    name: str
    outputs: list[torch.Tensor]
    node: str | None


class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's mode is untyped
    """Keeps a copy of every ATen op's tensor outputs, and which graph node (if any) was running."""

    # Higher-order ops (cond, while_loop, map, scan…) come here whole and run unrecorded (this mode is popped while
    # it handles an op): their outputs are compared, the ops of their subgraphs are not.
    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[_Op] = []
        self.node: str | None = None
        self.higher_order: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if isinstance(func, HigherOrderOperator):
            self.higher_order.add(str(func.name()))  # type: ignore[no-untyped-call]
        tensors = [t.detach().to("cpu", copy=True) for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.ops.append(_Op(_op_name(func), tensors, self.node))
        return out


def _op_name(func: Any) -> str:
    if isinstance(func, HigherOrderOperator):
        return f"higher_order.{func.name()}"  # type: ignore[no-untyped-call]
    # In-place and functional forms are the same computation: eager's relu_ is the exported program's relu.
    name = str(func._schema.name) if hasattr(func, "_schema") else str(func)
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


class _NodeTracking(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule, recorder: _Recorder) -> None:
        super().__init__(module)
        self.recorder = recorder
        self.ops = recorder.ops  # filled as the graph runs
        self.values: dict[str, Any] = {}
        self.items: dict[str, tuple[str, int]] = {}  # node -> (multi-output node, index): ``getitem``s dispatch nothing
        self.users: dict[str, tuple[str, ...]] = {}  # node -> the nodes that read it ("output" for the graph's)

    def run_node(self, n: torch.fx.Node) -> Any:
        self.recorder.node = n.name
        value = super().run_node(n)
        self.recorder.node = None
        if n.op == "call_function":
            self.values[n.name] = value
            self.users[n.name] = tuple(user.name for user in n.users)
            source, index = (*n.args, None, None)[:2]
            if n.target is operator.getitem and isinstance(source, torch.fx.Node) and isinstance(index, int):
                self.items[n.name] = (source.name, index)
        return value


def _interpret(program: ExportedProgram, flat_inputs: Sequence[Any], *, float64: bool = False) -> _NodeTracking:
    module = program.module()
    if float64:
        module = copy.deepcopy(module).to(torch.float64)
        flat_inputs = [
            x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in flat_inputs
        ]
    recorder = _Recorder()
    interpreter = _NodeTracking(module, recorder)
    with torch.no_grad(), recorder:
        interpreter.run(*flat_inputs)
    return interpreter


@dataclass
class NodeValues:
    """Per graph node (the exported program's node names): eager's value, the exported program's, and float64's."""

    eager: dict[str, torch.Tensor] = field(default_factory=dict)
    exported: dict[str, torch.Tensor] = field(default_factory=dict)
    reference: dict[str, torch.Tensor] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # graph order
    users: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> the nodes that read it
    notes: list[str] = field(default_factory=list)


def _single_tensor(value: Any) -> torch.Tensor | None:
    return value.detach().to("cpu") if isinstance(value, torch.Tensor) else None


def node_values(eager_ops: list[_Op], program: ExportedProgram, flat_inputs: Sequence[Any]) -> NodeValues:
    """Eager's value of each graph node, by aligning eager's op sequence with the exported program's."""
    values = NodeValues()
    traced = _interpret(program, flat_inputs)
    program_ops = traced.ops
    values.users = traced.users
    matcher = difflib.SequenceMatcher(
        a=[op.name for op in program_ops], b=[op.name for op in eager_ops], autojunk=False
    )
    eager_index: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            eager_index[block.a + offset] = block.b + offset
    ops_of: dict[str, list[int]] = {}
    for index, op in enumerate(program_ops):
        if op.node is not None:
            ops_of.setdefault(op.node, []).append(index)
    for name, value in traced.values.items():
        tensor = _single_tensor(value)
        if tensor is None:
            continue
        values.order.append(name)
        values.exported[name] = tensor
        # The node's value is the last op it dispatched that made a tensor like it; eager made the aligned one.
        for index in reversed(ops_of.get(name, [])):
            outputs = program_ops[index].outputs
            if outputs and outputs[0].shape == tensor.shape and index in eager_index:
                eager_outputs = eager_ops[eager_index[index]].outputs
                if eager_outputs and eager_outputs[0].shape == tensor.shape:
                    values.eager[name] = eager_outputs[0]
                break
    for name, (source, item) in traced.items.items():  # an output of a multi-output op: eager's same output
        aligned = [eager_index[index] for index in ops_of.get(source, []) if index in eager_index]
        if name in values.exported and aligned:
            eager_outputs = eager_ops[aligned[-1]].outputs
            if item < len(eager_outputs) and eager_outputs[item].shape == values.exported[name].shape:
                values.eager[name] = eager_outputs[item]
    if traced.recorder.higher_order:
        names = ", ".join(sorted(traced.recorder.higher_order))
        values.notes.append(
            f"higher-order ops ({names}): their outputs are compared, the kernels of their subgraphs are not"
        )
    try:
        reference = _interpret(program, flat_inputs, float64=True)
        values.reference = {
            name: tensor for name, value in reference.values.items() if (tensor := _single_tensor(value)) is not None
        }
    except Exception as error:  # an op without a float64 kernel on this device: no reference, say why
        values.notes.append(f"no float64 reference: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
    return values


# -- comparing ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    max_abs: float
    max_rel: float
    index: tuple[int, ...]
    beyond_test: bool  # past the test's tolerance
    beyond_noise: bool  # past float32 rounding

    @property
    def diverged(self) -> bool:
        return self.beyond_test and self.beyond_noise


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    return "complex" if dtype.is_complex else "float" if dtype.is_floating_point else "int"


def noise_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) of float32 rounding, or of the dtype when it is wider (float64)."""
    wider = torch.promote_types(dtype, torch.float32) if dtype.is_floating_point else torch.float32
    return default_tolerances(wider)


def compare(actual: torch.Tensor, expected: torch.Tensor, tolerance: tuple[float, float] | None) -> Difference | None:
    """How ``actual`` differs from ``expected``; None when they cannot be compared (shape, or a bool against a
    number: a 0-d sum is not the comparison made from it)."""
    if _kind(actual.dtype) != _kind(expected.dtype):
        return None
    if actual.shape != expected.shape:
        if actual.numel() != expected.numel():
            return None
        actual = actual.reshape(expected.shape)
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    both_nan = a.isnan() & e.isnan()
    diff = torch.where(both_nan, torch.zeros_like(a), (a - e).abs()).nan_to_num(nan=float("inf"))
    same_inf = (a == e) & a.isinf()
    diff = torch.where(same_inf, torch.zeros_like(diff), diff)
    if diff.numel() == 0:
        return Difference(0.0, 0.0, (), False, False)
    rel = diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    rtol, atol = tolerance if tolerance is not None else default_tolerances(expected.dtype)
    noise_rtol, noise_atol = noise_tolerance(expected.dtype)
    magnitude = e.abs().nan_to_num(nan=0.0, posinf=0.0)
    worst = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), diff.shape))
    return Difference(
        max_abs=float(diff.max()),
        max_rel=float(rel.max()),
        index=index,
        beyond_test=bool((diff > atol + rtol * magnitude).any()),
        beyond_noise=bool((diff > noise_atol + noise_rtol * magnitude).any()),
    )


# -- the walk ---------------------------------------------------------------------------------------------------------


def _tolerance_text(tolerance: tuple[float, float] | None, dtype: torch.dtype | None) -> str:
    if tolerance is None:
        if dtype is None:
            return "torch.testing's defaults"
        rtol, atol = default_tolerances(dtype)
        return f"torch.testing's {str(dtype).removeprefix('torch.')} defaults (rtol={rtol:g}, atol={atol:g})"
    return f"rtol={tolerance[0]:g}, atol={tolerance[1]:g}"


def first_divergence(
    launches: Sequence[Launch],
    capture_dir: Path,
    values: NodeValues,
    tolerance: tuple[float, float] | None,
) -> Finding:
    """Walk the launches in order; see the module docstring."""
    finding = Finding(launches=len(launches), notes=list(values.notes))
    position = {name: number for number, name in enumerate(values.order)}
    written: dict[str, tuple[str, str | None]] = {}  # buffer -> (kernel that wrote it, node it holds if known)
    first_dtype: torch.dtype | None = None
    last_launch = {node: number for number, launch in enumerate(launches, start=1) for node in launch.nodes}
    for number, launch in enumerate(launches, start=1):
        before = {arg: saved_tensor(capture_dir, "before", launch.kernel, arg) for arg in launch.args}
        after = {arg: saved_tensor(capture_dir, "after", launch.kernel, arg) for arg in launch.args}
        for new, old in launch.reused:
            if old in written:
                written[new] = written.pop(old)
        input_notes, unknown_inputs = _inputs_against_eager(launch, before, written, values, tolerance)
        outputs = _written(launch, before, after)
        # A node is compared where it is finished (its last launch), with the written buffer closest to eager's
        # value: a fused kernel may also store intermediates of the node's shape.
        finished = (n for n in launch.nodes if last_launch.get(n) == number and _stored(n, launch, values))
        candidates = sorted(finished, key=lambda n: position.get(n, -1), reverse=True)
        worst: tuple[KernelFinding, Difference] | None = None
        for node in candidates:
            expected = values.eager[node]
            scored = [
                (difference, arg)
                for arg in outputs
                if (difference := compare(after[arg], expected, tolerance)) is not None  # type: ignore[arg-type]
            ]
            if not scored:
                continue
            difference, arg = min(scored, key=lambda pair: pair[0].max_abs)
            finding.kernel_errors.append((number, launch.kernel, difference.max_abs, difference.max_rel))
            outputs.remove(arg)
            first_dtype = first_dtype or expected.dtype
            finding.compared += 1
            written[arg] = (launch.kernel, node)
            if difference.beyond_test and (worst is None or difference.max_abs > worst[1].max_abs):
                produced = after[arg]
                assert produced is not None
                found = _kernel_finding(launch, number, node, arg, produced, expected, difference, values)
                found.inputs_matched, found.input_notes = not input_notes, input_notes
                found.inputs_not_compared = unknown_inputs
                worst = (found, difference)
        for arg in outputs:  # written, but holding no node's value we know
            written[arg] = (launch.kernel, None)
        if worst is not None:
            if worst[1].diverged:
                finding.diverged = worst[0]
                break
            if finding.past_tolerance is None:
                finding.past_tolerance = worst[0]
    return _finished(finding, tolerance, first_dtype)


def _written(
    launch: Launch, before: dict[str, torch.Tensor | None], after: dict[str, torch.Tensor | None]
) -> list[str]:
    """The arguments ``launch`` wrote: those its call writes, or whose saved values changed over the launch."""
    return [
        arg
        for arg in launch.args
        if (value := after[arg]) is not None
        and (arg in launch.writes or (held := before[arg]) is None or not _same(held, value))
    ]


def _stored(node: str, launch: Launch, values: NodeValues) -> bool:
    """Whether ``launch`` may store ``node``'s value, which eager has: something outside the launch reads it
    (another launch, the graph's outputs). A node whose every reader the same fused kernel computes lives in
    registers only (GPT-2's ``diff`` inside the kernel that stores ``ne(diff)``), and the closest buffer would be
    another node's."""
    users = values.users.get(node)
    return node in values.eager and (not users or any(user not in launch.nodes for user in users))


def _finished(finding: Finding, tolerance: tuple[float, float] | None, dtype: torch.dtype | None) -> Finding:
    """The tolerances the finding was judged by, and a note when nothing could be compared."""
    finding.test_tolerance = _tolerance_text(tolerance, dtype)
    if dtype is not None:
        rtol, atol = noise_tolerance(dtype)
        finding.noise = f"rtol={rtol:g}, atol={atol:g}"
    if finding.compared == 0:
        finding.notes.append("no kernel output could be matched to a graph node's eager value")
    return finding


def _inputs_against_eager(
    launch: Launch,
    before: dict[str, torch.Tensor | None],
    written: dict[str, tuple[str, str | None]],
    values: NodeValues,
    tolerance: tuple[float, float] | None,
) -> tuple[list[str], list[str]]:
    """A launch's inputs, what earlier launches wrote into its arguments (model inputs and weights are eager's own),
    against eager: the ones that differ, and the ones no graph node's value can be compared with."""
    input_notes: list[str] = []
    unknown_inputs: list[str] = []
    for arg in launch.args:
        held = written.get(arg)
        value = before[arg]
        if held is None or value is None:
            continue
        writer, node = held
        if node is None or node not in values.eager:
            unknown_inputs.append(f"{arg} (written by {writer}: no graph node holds its value)")
            continue
        difference = compare(value, values.eager[node], tolerance)
        if difference is not None and difference.diverged:
            input_notes.append(f"{arg} (node {node}) differs from eager: max abs err {difference.max_abs:.3g}")
    return input_notes, unknown_inputs


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b) or (a.isnan() & b.isnan() | (a == b)).all())


def _kernel_finding(
    launch: Launch,
    number: int,
    node: str,
    buffer: str,
    produced: torch.Tensor,
    expected: torch.Tensor,
    difference: Difference,
    values: NodeValues,
) -> KernelFinding:
    found = KernelFinding(
        kernel=launch.kernel,
        launch=number,
        nodes=list(launch.nodes),
        node=node,
        buffer=buffer,
        max_abs=difference.max_abs,
        max_rel=difference.max_rel,
        index=list(difference.index),
        within_noise=not difference.beyond_noise,
        inputs_matched=True,
    )
    exported = values.exported.get(node)
    if exported is not None:
        # Export's doing when the package computes what the exported program does and eager does not.
        package_vs_exported = compare(produced, exported, None)
        eager_vs_exported = compare(expected, exported, None)
        found.as_exported = (
            package_vs_exported is not None
            and not package_vs_exported.beyond_noise
            and eager_vs_exported is not None
            and eager_vs_exported.diverged
        )
    reference = values.reference.get(node)
    if reference is not None and reference.shape == expected.shape:
        package_err = compare(produced, reference, None)
        eager_err = compare(expected, reference, None)
        if package_err is not None and eager_err is not None:
            found.package_err64, found.eager_err64 = package_err.max_abs, eager_err.max_abs
            p, e = package_err.max_abs, eager_err.max_abs
            found.closer = "neither" if abs(p - e) <= 0.1 * max(p, e) else "package" if p < e else "eager"
    return found


def _outputs_as_exported(call: ComparedCall) -> bool:
    """Whether the package's outputs match the exported program's (run eagerly on the same flat inputs) while
    eager's do not."""
    if call.package_outputs is None or call.eager_outputs is None:
        return False
    module = call.program.module(check_guards=False)
    in_spec, flat_inputs = call.program.call_spec.in_spec, call.flat_inputs
    args, kwargs = pytree.tree_unflatten(list(flat_inputs), in_spec) if in_spec is not None else (flat_inputs, {})
    with torch.no_grad():
        exported_outputs = module(*args, **kwargs)
    rtol, atol = call.tolerance if call.tolerance is not None else (None, None)

    def close(actual: Any, expected: Any) -> bool:
        try:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        except (AssertionError, TypeError, ValueError):
            return False
        return True

    return close(call.package_outputs, exported_outputs) and not close(call.eager_outputs, exported_outputs)


def _outputs_within_noise(call: ComparedCall) -> bool:
    """Whether the package's outputs differ from eager's past the test's tolerance, each by no more than rounding
    noise: an exact comparison (``rtol=0, atol=0``) of arithmetic that rounds differently."""
    actual = pytree.tree_leaves(call.package_outputs)
    expected = pytree.tree_leaves(call.eager_outputs)
    if call.package_outputs is None or len(actual) != len(expected):
        return False
    differences = [
        compare(a, e, call.tolerance) if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) else None
        for a, e in zip(actual, expected, strict=True)
    ]
    if any(difference is None for difference in differences):
        return False
    return any(d.beyond_test for d in differences if d) and not any(d.beyond_noise for d in differences if d)


# -- glue for check_model ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """The printer writes under the process's working directory: point it at the capture dir for one call."""
    path.mkdir(parents=True, exist_ok=True)
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


class Capture:
    """One compared call in the numerics child: where its package run saved its tensors, and eager's ops."""

    def __init__(self, root: Path, number: int, event_file: str | None = None) -> None:
        self.root = root
        self.event_file = event_file  # the child's event stream: where the finding goes
        self.directory = root / f"call-{number}"
        self.recorder = _Recorder()

    @contextlib.contextmanager
    def package(self) -> Iterator[None]:
        with working_directory(self.directory):
            yield

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        try:
            with self.recorder:
                yield
        finally:
            # An eager torch.cond run under a dispatch mode leaves a compiled cond frame in dynamo's cache that the
            # next torch.export of a cond model in this process hits and fails on ("Attempted to inline function
            # marked as skipped", torch 2.13): the test may export again after its eager call.
            torch.compiler.reset()

    def explain(self, call: ComparedCall) -> Finding:
        """Find the first divergent kernel of this call and write the finding where the parent reads it."""
        try:
            values = node_values(self.recorder.ops, call.program, call.flat_inputs)
            finding = first_divergence(package_launches(call.package_path), self.directory, values, call.tolerance)
            finding.outputs_as_exported = _outputs_as_exported(call)
            finding.outputs_within_noise = finding.diverged is None and _outputs_within_noise(call)
        except Exception as error:  # the triage must not hide the test's own failure
            finding = Finding(notes=[f"numerics triage failed: {type(error).__name__}: {error}"])
        if self.event_file is not None:
            append_event(self.event_file, Event.FINDING, finding.to_dict())
        return finding
