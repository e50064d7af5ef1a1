"""The package cache's key: a sha256 over everything that changes the compiled artifact, in named parts.

The key covers what changes the artifact and nothing about where the code lives or which GPU of a kind compiled it.
Each part (:data:`KEY_PARTS`) is hashed on its own and the key is hashed over the parts' digests, so the cache can
keep the parts beside an entry and say, on a miss, which of them changed (``core.cache_miss``).

Two things every part avoids:

- **Where the code is, and where objects are.** No source locations (``print_readable`` embeds ``# File:`` comments),
  no ``at 0x7f…`` of a repr: the same model keys the same from any checkout, in any process.
- **Which GPU.** The exported program names the GPU it was exported on (``cuda:0`` in the values' metadata,
  ``device(type='cuda', index=0)`` in an ``arange``'s arguments, the weights' devices). A package compiled on
  ``cuda:i`` serves ``cuda:j`` of the same kind (name, compute capability and CUDA version stay in the key): it is
  loaded with ``device_index=j`` and computes there. So the index is left out, unless the graph names a GPU other
  than the one it is compiled for (see :func:`pinned_gpus`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import inspect
import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_aoti.core.machine import machine_identity
from pytest_aoti.core.remote_cache import mask_urls

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

# The environment variables Inductor reads outside its config when it compiles and builds a package (torch 2.11 to
# 2.13, ``torch/_inductor``): each changes the artifact. An allow-list, not a prefix: ``TORCHINDUCTOR_REDIS_URL``
# (Inductor's own remote cache, its password in it) and the other cache, log and debug-output settings change no
# artifact, and a value in the key is kept in every entry's sidecar and named by its misses. The variables Inductor's
# config reads (``TORCHINDUCTOR_MAX_AUTOTUNE``, the debug stages' ``TORCHINDUCTOR_NAN_ASSERTS`` and
# ``AOT_INDUCTOR_*``) are keyed as the config values they become (``inductor_config``), and ``$CXX`` as the
# compiler it names (``compiler``).
CODEGEN_ENV_NAMES = (
    "TORCHINDUCTOR_DEBUG_COMPILE",  # cpp_builder: -O0 and debug symbols
    "TORCHINDUCTOR_DEBUG_SYMBOL",  # cpp_builder: debug symbols
    "CUDA_HOME",  # the CUDA toolkit a GPU package's wrapper builds against
    "CUDACXX",  # the nvcc that builds CUDA (CUTLASS) templates
)

# The parts of a key, in the order they are hashed. "gpus" is empty unless the graph pins the GPU indices it names.
KEY_PARTS = (
    "torch",
    "graph",
    "signature",
    "dynamic_ranges",
    "weights",
    "triton",
    "inductor_configs",
    "inductor_config",
    "codegen_env",
    "device",
    "gpus",
    "compiler",
)
# The parts a miss names by their value (short texts); the others by what they hold, or as "differs".
SHOWN_PARTS = ("torch", "device", "gpus", "compiler")
# What a miss tells apart within a part, kept beside an entry but not hashed into its key: the graph's ops without
# the values' shapes, strides and dtypes ("graph_ops": a graph that differs in these alone differs in its inputs'),
# and the signature without the node names the graph holds too ("interface": relu -> sigmoid renames the output,
# yet the model takes and returns the same).
FACETS = ("graph_ops", "interface")
DIGEST_CHARS = 16  # a part's or a weight's digest as an entry keeps it

# ``cuda:0`` and ``device(type='cuda', index=0)``: how the graph's text names a GPU.
_CUDA_INDEX = re.compile(r"\bcuda:(\d+)\b|device\(type='cuda', index=(\d+)\)")
# ``<function f at 0x7f3a…>``, ``<… object at 0x…>``: an object's address, new in every process.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclass(frozen=True)
class KeyParts:
    """What a package key is made of: each part's digest, and what a miss names a changed part by."""

    digests: dict[str, str]  # every part of KEY_PARTS: the sha256 of its text
    shown: dict[str, str]  # the SHOWN_PARTS' texts
    weights: dict[str, str]  # each weight and constant by name: its digest (DIGEST_CHARS hex digits)
    config: dict[str, str]  # Inductor's config as the compile sees it (inductor_configs over the global one), as reprs
    env: dict[str, str]  # the codegen environment
    # Not in the key; what a miss says more precisely with. Each user input by name: "<dtype> <shape>".
    inputs: dict[str, str] = field(default_factory=dict)
    # Digests of what some parts hold, less what another part holds too (FACETS).
    facets: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        digest = hashlib.sha256()
        for name in KEY_PARTS:
            digest.update(f"{name}\0{self.digests[name]}\0".encode())
        return digest.hexdigest()

    def short_digests(self) -> dict[str, str]:
        return {name: self.digests[name][:DIGEST_CHARS] for name in KEY_PARTS}

    def record(self) -> dict[str, Any]:
        """The parts as an entry keeps them beside its package (plain JSON values)."""
        return {
            "digests": self.short_digests(),
            "shown": dict(self.shown),
            "weights": dict(self.weights),
            "config": dict(self.config),
            "env": dict(self.env),
            "inputs": dict(self.inputs),
            "facets": dict(self.facets),
        }

    def for_isa(self, picked: str) -> KeyParts:
        """These parts for a CPU package built for ``picked``, the lesser ISA Inductor picks where one of its probes
        failed (``core.isa_verdicts``): a key of its own, so such a package never answers for the ISA a full probe
        picks. A package of a full probe keeps the device part alone: the same machine keeps its keys."""
        device = f"{self.shown['device']} isa={picked}"
        digests, shown = {**self.digests, "device": _sha256(device)}, {**self.shown, "device": device}
        return dataclasses.replace(self, digests=digests, shown=shown)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def without_addresses(text: str) -> str:
    return _ADDRESS.sub("", text)


def device_identity(device: torch.device) -> str:
    """The kind of device a package is built for, without its index: a GPU's name, compute capability and CUDA
    version; a CPU's vector ISA."""
    import torch

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda:{props.name}:sm{props.major}{props.minor}:{torch.version.cuda}"
    return f"{device.type}:{torch.backends.cpu.get_cpu_capability()}"


def codegen_environment(environ: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    """The :data:`CODEGEN_ENV_NAMES` that are set, any URL in a value masked (:func:`mask_urls`): none of them holds
    a credential, and if one ever did, a rotated password must neither show nor change the key."""
    return {name: mask_urls(environ[name]) for name in sorted(CODEGEN_ENV_NAMES) if name in environ}


def _value_text(value: Any) -> str:
    """Shape, strides, dtype and device of a node's value, the parts of its metadata codegen reads."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)}:{value.stride()}:{value.dtype}:{value.device}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_value_text(v) for v in value) + "]"
    return repr(value) if isinstance(value, int | float | bool | type(None)) else type(value).__name__


def graph_text(ep: ExportedProgram) -> str:
    """The exported graph as text without any source location or object address: each node's op, target,
    arguments and value metadata, for the top graph and every subgraph (a ``torch.cond`` branch, a
    ``wrap_with_set_grad_enabled`` body: the top graph names them only by their attribute). ``print_readable``
    embeds ``# File: /abs/path.py:LINE`` comments, which would tie the key to where the code and torch are installed
    and to line numbers."""
    import torch

    lines: list[str] = []
    for name, module in ep.graph_module.named_modules():
        graph = getattr(module, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        if name:
            lines.append(f"subgraph {name}:")
        lines += [f"{node.format_node()}{_VALUE_MARK}{_value_text(node.meta.get('val'))}" for node in graph.nodes]
    return without_addresses("\n".join(lines))


_VALUE_MARK = " :: "  # between a node of graph_text and its value's metadata


def graph_ops_text(graph: str) -> str:
    """:func:`graph_text` without each value's shape, strides, dtype and device: the ops and their arguments."""
    return "\n".join(line.rsplit(_VALUE_MARK, 1)[0] for line in graph.splitlines())


def interface_text(ep: ExportedProgram) -> str:
    """The signature without the node names (the graph holds those): each input's and output's kind and target, and
    the inputs' and outputs' structure."""
    specs = [
        f"{spec.kind.name} {spec.target} {getattr(spec, 'persistent', None)}"
        for spec in (*ep.graph_signature.input_specs, *ep.graph_signature.output_specs)
    ]
    return "\n".join([*specs, str(ep.call_spec.in_spec), str(ep.call_spec.out_spec)])


def user_inputs(ep: ExportedProgram) -> dict[str, str]:
    """Each user input by its name in the graph: ``<dtype> <shape>`` of a tensor, else its type."""
    import torch

    values = {node.name: node.meta.get("val") for node in ep.graph.nodes if node.op == "placeholder"}
    inputs: dict[str, str] = {}
    for spec in ep.graph_signature.input_specs:
        name = getattr(spec.arg, "name", None)
        if spec.kind.name != "USER_INPUT" or not isinstance(name, str):
            continue
        value = values.get(name)
        if isinstance(value, torch.Tensor):
            inputs[name] = f"{value.dtype} {tuple(value.shape)}"
        else:
            inputs[name] = repr(value) if isinstance(value, int | float | bool | type(None)) else type(value).__name__
    return inputs


def _triton_kernel_text(kernel: Any) -> str:
    """A user Triton kernel's identity: Triton's own cache key (a hash of the source and of every jit function it
    calls) and, for an autotuned kernel, its configs."""
    parts = []
    while not hasattr(kernel, "src") and hasattr(kernel, "fn"):  # Autotuner / Heuristics wrap the JITFunction
        parts.append(repr(getattr(kernel, "configs", "")))
        kernel = kernel.fn
    parts.append(str(getattr(kernel, "cache_key", None) or getattr(kernel, "src", None) or repr(kernel)))
    return "\n".join(parts)


def custom_op_names(ep: ExportedProgram) -> list[str]:
    """The qualified names (``ns::op``) of the custom ops the graph calls, in order, each once."""
    names: dict[str, None] = {}
    for node in ep.graph.nodes:
        name = getattr(getattr(node.target, "_schema", None), "name", "")
        if node.op == "call_function" and name and not name.startswith(("aten::", "prims::")):
            names[name] = None
    return list(names)


def custom_op_function(op_name: str) -> Any:
    """The user's Python function behind a custom op (``torch.library.custom_op`` or ``triton_op``), or None.
    ``triton_op`` registers a torch-internal closure around it: unwrap that."""
    from pytest_aoti.core.torch_private import custom_op_definition

    function = getattr(custom_op_definition(op_name), "_init_fn", None)
    while function is not None and getattr(function, "__module__", "").startswith("torch."):
        inner = [
            cell.cell_contents
            for cell in (getattr(function, "__closure__", None) or ())
            if callable(cell.cell_contents)
        ]
        function = inner[0] if inner else None
    return function


def _triton_op_text(op_name: str) -> list[str]:
    """For a ``triton_op`` (which export keeps as one opaque custom-op call, and Inductor traces into at compile time):
    its Python body and every Triton kernel it launches. Nothing for other custom ops: their bodies run at call
    time, so an edit cannot make a package stale."""
    from pytest_aoti.core.torch_private import triton_kernels_for_op

    kernels = triton_kernels_for_op(op_name)
    if not kernels:
        return []
    body = custom_op_function(op_name)
    try:
        source = inspect.getsource(body) if body is not None else ""
    except (OSError, TypeError):
        source = repr(body)
    return [op_name, source, *(_triton_kernel_text(kernel) for kernel in kernels)]


def triton_kernels_text(ep: ExportedProgram) -> str:
    """The sources of the user Triton kernels the graph runs: those of ``triton_op`` custom ops (``wrap_triton``
    inside), and kernels called through Triton's wrapper op. The graph names neither by its source, so without this
    an edited kernel would keep its key and a stale package would be served."""
    texts: list[str] = []
    for node in ep.graph.nodes:
        if node.op == "call_function" and "triton_kernel_wrapper" in str(node.target):
            from pytest_aoti.core.torch_private import triton_kernel_side_table

            kernel_side_table = triton_kernel_side_table()
            texts.append(_triton_kernel_text(kernel_side_table.get_kernel(node.kwargs.get("kernel_idx"))))
            constant_idx = node.kwargs.get("constant_args_idx")
            if constant_idx is not None:
                texts.append(repr(sorted(kernel_side_table.get_constant_args(constant_idx).items(), key=str)))
    for op_name in custom_op_names(ep):
        texts += _triton_op_text(op_name)
    return without_addresses("\n".join(texts))


# Written by Inductor itself during a compile (the package's metadata lands in the global config's dict), so it would
# make the key of the next model in a process depend on what was compiled before it. User metadata passed in
# ``inductor_configs`` is keyed with them.
_CONFIG_WRITTEN_BY_COMPILES = ("aot_inductor.metadata",)


def inductor_config_values() -> dict[str, str]:
    """Inductor's config as codegen sees it, each value's repr: Inductor's own portable snapshot (what its FX graph
    cache keys on, without settings that change no artifact). Catches ``torch._inductor.config.x = ...`` and
    ``config.patch``."""
    from pytest_aoti.core.torch_private import inductor_config_snapshot

    snapshot = inductor_config_snapshot()
    snapshot = {k: v for k, v in snapshot.items() if k not in _CONFIG_WRITTEN_BY_COMPILES}
    # TORCHINDUCTOR_VEC_ISA_OK=1 skips the CPU vector-ISA probe (a session that found every ISA passing before):
    # the same ISA is picked, no artifact changes. Vectorization turned off (False) does change them: kept.
    if snapshot.get("cpp.vec_isa_ok") is True:
        snapshot["cpp.vec_isa_ok"] = None
    return {key: without_addresses(repr(value)) for key, value in sorted(snapshot.items())}


def _flat_configs(configs: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``inductor_configs`` as dotted keys (``{"aot_inductor": {"x": 1}}`` is ``aot_inductor.x``), each value's repr."""
    flat: dict[str, str] = {}
    for key, value in configs.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name != "aot_inductor.metadata":
            flat.update(_flat_configs(value, f"{name}."))
        else:
            flat[name] = without_addresses(repr(value))
    return flat


def cuda_indices(text: str) -> set[int]:
    """The GPU indices a text names (``cuda:1``, ``device(type='cuda', index=1)``)."""
    return {int(plain or typed) for plain, typed in _CUDA_INDEX.findall(text)}


def without_cuda_index(text: str) -> str:
    return _CUDA_INDEX.sub(lambda found: "cuda" if found.group(1) is not None else "device(type='cuda')", text)


def pinned_gpus(named: set[int], device: torch.device) -> str:
    """``""`` when a package of this graph may serve any GPU of its kind; else the GPUs that pin it to its index,
    ``cuda:0,cuda:1``. AOTI places the tensors of a package loaded with ``device_index=j`` on ``cuda:j``, but an
    index the graph names apart from the one it was compiled for (a model split over ``cuda:0`` and ``cuda:1``, a
    ``.to("cuda:1")`` inside a model compiled on ``cuda:0``) is the user's own choice of GPU: loaded on another index
    such a package would move data to GPUs other than the test's, or onto the test's GPU where the model says another.
    A package of such a graph serves only the GPUs it was compiled on, so its key keeps their indices."""
    own = {device.index} if device.type == "cuda" and device.index is not None else set()
    if named <= own:
        return ""
    return ",".join(f"cuda:{index}" for index in sorted(named | own))


def _tensor_text(tensor: torch.Tensor, portable: bool) -> str:
    device = tensor.device.type if portable else str(tensor.device)
    return f"{type(tensor).__qualname__}:{tuple(tensor.shape)}:{tensor.stride()}:{tensor.dtype}:{device}"


def _hash_tensor(digest: Any, tensor: torch.Tensor, portable: bool) -> None:
    """A weight's type, shape, strides, dtype, device (its type only where ``portable``) and content. A tensor
    subclass (a ``__tensor_flatten__`` wrapper, as quantized or ``TwoTensor`` weights are) by its flattening context and
    inner tensors: it has no storage of its own (``data_ptr()`` is 0), and reading its bytes read whatever memory was
    there, a new key in every process."""
    digest.update(_tensor_text(tensor, portable).encode())
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is not None:
        names, context = flatten()
        digest.update(without_addresses(repr(context)).encode())
        for name in names:
            digest.update(f"\0{name}\0".encode())
            _hash_tensor(digest, getattr(tensor, name), portable)
        return
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return
    # Raw bytes of a contiguous CPU copy; bytes(untyped_storage) walks it element by element (slow).
    flat = tensor.detach().cpu().contiguous()
    if flat.data_ptr() == 0:  # no storage to read (a subclass of another protocol): its values
        digest.update(repr(flat.tolist()).encode())
        return
    digest.update(ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()))


def _constant_text(constant: Any) -> str:
    """A constant that is no tensor (a torchbind object): its flattened state where it has one, else its repr."""
    flatten = getattr(constant, "__obj_flatten__", None)
    try:
        text = repr(flatten()) if callable(flatten) else repr(constant)
    except Exception:  # a script object whose state cannot be read: its type
        text = type(constant).__qualname__
    return without_addresses(text)


def _weight_digests(ep: ExportedProgram, portable: bool) -> dict[str, str]:
    """Each weight and constant of the program by name: the sha256 of its content and metadata."""
    import torch

    digests: dict[str, str] = {}
    for name, value in sorted({**ep.state_dict, **ep.constants}.items()):
        digest = hashlib.sha256()
        if isinstance(value, torch.Tensor):
            _hash_tensor(digest, value, portable)
        else:
            digest.update(_constant_text(value).encode())
        digests[name] = digest.hexdigest()
    return digests


def _named_gpus(ep: ExportedProgram, texts: list[str]) -> set[int]:
    import torch

    named = {index for text in texts for index in cuda_indices(text)}
    for value in [*ep.state_dict.values(), *ep.constants.values()]:
        if isinstance(value, torch.Tensor) and value.device.type == "cuda" and value.device.index is not None:
            named.add(value.device.index)
    return named


def key_parts(ep: ExportedProgram, inductor_configs: dict[str, Any], device: torch.device) -> KeyParts:
    """Every part of the key of ``ep`` compiled with ``inductor_configs`` for ``device``: torch version, the graph's
    structure (ops, arguments, shapes, strides, dtypes, device types; no source locations), signature, input/output
    specs, dynamic ranges, weights' and constants' bytes, user Triton kernels' sources, ``inductor_configs``,
    Inductor's config, codegen env vars, the device (CPU ISA / GPU kind) and the C++ compiler Inductor builds with
    (the machine's one identity of it, :func:`pytest_aoti.core.machine.machine_identity`)."""
    import torch

    graph, triton = graph_text(ep), triton_kernels_text(ep)
    pinned = pinned_gpus(_named_gpus(ep, [graph, triton]), device)
    portable = not pinned
    if portable:
        graph, triton = without_cuda_index(graph), without_cuda_index(triton)
    weights = _weight_digests(ep, portable)
    config, env = inductor_config_values(), codegen_environment()
    texts = {
        "torch": torch.__version__,
        "graph": graph,
        "signature": "\n".join(map(str, (ep.graph_signature, ep.call_spec.in_spec, ep.call_spec.out_spec))),
        "dynamic_ranges": repr(sorted((str(k), str(v)) for k, v in ep.range_constraints.items())),
        "weights": "".join(f"{name}\0{digest}\0" for name, digest in weights.items()),
        "triton": triton,
        "inductor_configs": repr(sorted((k, without_addresses(repr(v))) for k, v in inductor_configs.items())),
        "inductor_config": repr(sorted(config.items())),
        "codegen_env": json.dumps(env),
        "device": device_identity(device),
        "gpus": pinned,
        "compiler": machine_identity().cxx.identity,
    }
    return KeyParts(
        digests={name: _sha256(texts[name]) for name in KEY_PARTS},
        shown={name: texts[name] for name in SHOWN_PARTS},
        weights={name: digest[:DIGEST_CHARS] for name, digest in weights.items()},
        config={**config, **_flat_configs(inductor_configs)},
        env=env,
        inputs=user_inputs(ep),
        facets={
            "graph_ops": _sha256(graph_ops_text(graph))[:DIGEST_CHARS],
            "interface": _sha256(interface_text(ep))[:DIGEST_CHARS],
        },
    )


def package_key(ep: ExportedProgram, inductor_configs: dict[str, Any], device: torch.device) -> str:
    """A stable sha256 over everything that changes the compiled artifact (:func:`key_parts`)."""
    return key_parts(ep, inductor_configs, device).key
