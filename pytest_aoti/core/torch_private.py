"""Every private torch API pytest-aoti uses, each behind one name here with its version guard. When a torch release
moves or drops one, this is the file to change. docs/torch-private-apis.md lists each with the torch releases
.ci/run checks it on (``torch_versions.TESTED``) and what happens where it is missing.

Imports that cost time (Inductor's, ``docs/benchmarks.md#importing-inductor``) happen inside the functions, when they
are called, never at import: a warm cached run loads packages without importing Inductor at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._ops import HigherOrderOperator, OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_aoti.core.torch_versions import MissingTorchAPI

try:  # torch >= 2.8
    from torch.export.pt2_archive._package import AOTICompiledModel
except ImportError:  # earlier releases kept the package code in Inductor
    from torch._inductor.package.package import AOTICompiledModel  # type: ignore[attr-defined]

__all__ = [
    "AOTICompiledModel",
    "HigherOrderOperator",
    "OpOverload",
    "TorchDispatchMode",
    "can_reread_env_configs",
    "combine_args",
    "cpp_compiler",
    "cuda_fork_poisoned",
    "cuda_initialized",
    "custom_op_definition",
    "default_tolerances",
    "dim_hint_name",
    "export_size_guards",
    "fx_minifier",
    "import_what_compiles_import",
    "import_what_probes_import",
    "inductor_config_defaults",
    "inductor_config_snapshot",
    "inductor_load_package",
    "is_derived_dim",
    "is_infinite_int",
    "is_static_hint",
    "memoize_isa_checks",
    "package_loader",
    "package_metadata",
    "picked_vec_isa",
    "probe_side_by_side",
    "reread_env_configs",
    "run_vector_isa_probes",
    "tree_map_with_path",
    "triton_kernel_side_table",
    "triton_kernels_for_op",
]


# -- AOTI packages ------------------------------------------------------------------------------------------------


def _cpp_package_loader() -> Any:
    """``torch._C._aoti.AOTIModelPackageLoader``; :class:`MissingTorchAPI` (a RuntimeError) where a release moved it,
    so that the caller falls back to ``aoti_load_package``, which knows where its own release keeps it."""
    loader = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if loader is None:
        raise MissingTorchAPI("torch._C._aoti.AOTIModelPackageLoader", torch.__version__)
    return loader


def package_loader(path: str, run_single_threaded: bool, num_runners: int, device_index: int) -> Any:
    """The C++ package loader ``aoti_load_package`` ends up in, without importing Inductor."""
    return _cpp_package_loader()(path, "model", run_single_threaded, num_runners, device_index)


def package_metadata(path: str) -> dict[str, str]:
    """The metadata AOTI recorded at compile time (platform, ISA, device, compute capability); raises on a package
    the loader cannot read, and :class:`MissingTorchAPI` where this torch has no such loader or method."""
    read = getattr(_cpp_package_loader(), "load_metadata_from_package", None)
    if read is None:
        symbol = "torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package"
        raise MissingTorchAPI(symbol, torch.__version__)
    return dict(read(path, "model"))


def inductor_load_package(path: str, *, run_single_threaded: bool, num_runners: int, device_index: int) -> Any:
    """``aoti_load_package``'s own loader, for what :func:`package_loader` cannot load. An AttributeError inside it
    is a torch internal it reaches for and this torch lacks: :class:`MissingTorchAPI` names it and the version."""
    try:
        from torch._inductor.package import load_package  # type: ignore[attr-defined]
    except ImportError as error:
        raise MissingTorchAPI("torch._inductor.package.load_package", torch.__version__) from error
    try:
        return load_package(
            path, run_single_threaded=run_single_threaded, num_runners=num_runners, device_index=device_index
        )
    except AttributeError as error:
        raise MissingTorchAPI(
            _attribute_symbol(error), torch.__version__, "aoti_load_package reaches for it"
        ) from error


def _attribute_symbol(error: AttributeError) -> str:
    """``torch._C._aoti.AOTIModelPackageLoader`` for ``module 'torch._C._aoti' has no attribute ...``."""
    owner = getattr(error.obj, "__name__", None) or type(error.obj).__qualname__
    return f"{owner}.{error.name}" if error.name else str(error)


def import_what_probes_import() -> None:
    """Import every module the ISA probes import (Inductor's probe and C++ builder, and ``torch.utils.cpp_extension``
    with setuptools): probing then imports nothing. Done in the thread that starts the probes in the background, so
    that no two threads import one module graph at once (a concurrent circular import hands one of them a partially
    initialized module)."""
    import torch._inductor.codecache
    import torch._inductor.cpp_builder
    import torch._inductor.cpu_vec_isa
    import torch.utils.cpp_extension  # noqa: F401


def import_what_compiles_import() -> None:
    """Import the Inductor modules every AOTI compile imports (a process that forks compiles does it once)."""
    import torch._inductor.codegen.cpp_wrapper_cpu
    import torch._inductor.compile_fx
    import torch._inductor.package  # noqa: F401


def inductor_config_snapshot() -> dict[str, Any]:
    """Inductor's config as codegen sees it: its own portable snapshot, what its FX graph cache keys on (torch.export
    has imported the config already). Where a release drops ``save_config_portable``: every key but the private
    ones and those Inductor's cache leaves out (``_cache_config_ignore_prefix``), what that snapshot holds."""
    import torch._inductor.config as inductor_config

    portable = getattr(inductor_config, "save_config_portable", None)
    if portable is not None:
        return dict(portable())
    ignored = ("_", *getattr(inductor_config, "_cache_config_ignore_prefix", ()))
    return {key: value for key, value in inductor_config_defaults().items() if not key.startswith(ignored)}


def inductor_config_defaults() -> dict[str, Any]:
    """Every Inductor config key with its value. Importing the config is slow where torch.export has not imported it
    (docs/benchmarks.md#importing-inductor): only when called."""
    import torch._inductor.config as inductor_config

    copy = getattr(inductor_config, "get_config_copy", None)
    if copy is None:
        raise MissingTorchAPI("torch._inductor.config.get_config_copy", torch.__version__)
    return dict(copy())


def cpp_compiler() -> str:
    """The C++ compiler Inductor builds packages with."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    return str(get_cpp_compiler())


# -- custom ops and user Triton kernels -------------------------------------------------------------------------------


def custom_op_definition(op_name: str) -> Any:
    """The ``torch.library.custom_op`` definition registered under ``op_name`` (``ns::name``), or None."""
    from torch._library.custom_ops import OPDEFS

    return OPDEFS.get(op_name)


def triton_kernels_for_op(op_name: str) -> list[Any]:
    """The Triton kernels a ``triton_op`` launches; none on a torch without ``triton_op``."""
    try:
        from torch._library.triton import get_triton_kernels_for_op
    except ImportError:
        return []
    return list(get_triton_kernels_for_op(op_name) or ())


def triton_kernel_side_table() -> Any:
    """Where export keeps the user Triton kernels a graph calls through Triton's wrapper op (by ``kernel_idx``)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    return kernel_side_table


# -- torch.export's dynamic shapes ------------------------------------------------------------------------------------


def combine_args(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``args``/``kwargs`` bound to ``module.forward``'s parameters, as export matches ``dynamic_shapes`` to them."""
    from torch.export.dynamic_shapes import _combine_args

    return _combine_args(module, args, kwargs)


def tree_map_with_path(function: Any, tree: Any, dynamic_shapes: Any) -> Any:
    """Export's walk of inputs and ``dynamic_shapes`` together."""
    from torch.export.dynamic_shapes import _tree_map_with_path

    return _tree_map_with_path(function, tree, dynamic_shapes)


def is_derived_dim(dim: Any) -> bool:
    from torch.export.dynamic_shapes import _DerivedDim

    return isinstance(dim, _DerivedDim)


def dim_hint_name(dim: Any) -> str | None:
    """``AUTO``, ``DYNAMIC`` or ``STATIC`` for a ``Dim.AUTO``-style hint, None for anything else."""
    from torch.export.dynamic_shapes import _DimHint

    return str(dim.type.name) if isinstance(dim, _DimHint) else None


def export_size_guards(program: Any) -> list[tuple[Any, Any]] | None:
    """The guards export recorded on the input sizes, each as recorded and with export's own replacements applied
    (``s77`` -> ``2*s44`` for an input declared ``2 * half``); None for a program without its shape environment
    (one loaded from disk)."""
    for node in program.graph.nodes:
        fake_mode = getattr(node.meta.get("val"), "fake_mode", None) if node.op == "placeholder" else None
        shape_env = getattr(fake_mode, "shape_env", None)
        if shape_env is not None:
            return [(guard.expr, shape_env.replace(guard.expr)) for guard in shape_env.guards]
    return None


def is_static_hint(dim: Any) -> bool:
    return dim_hint_name(dim) == "STATIC"


def is_infinite_int(value: Any) -> bool:
    """Whether a symbolic bound is sympy's integer infinity (an unbounded dim's max)."""
    from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity

    return isinstance(value, IntInfinity | NegativeIntInfinity)


# -- comparison and the minifier ----------------------------------------------------------------------------------


def default_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """``torch.testing.assert_close``'s (rtol, atol) for ``dtype``."""
    from torch.testing._comparison import default_tolerances as tolerances

    rtol, atol = tolerances(dtype)
    return float(rtol), float(atol)


def fx_minifier() -> Any:
    """The module of functorch's graph minifier (``minifier``, ``ConcreteProp``)."""
    import torch._functorch.fx_minifier as module

    return module


# -- warm processes (the fork server) ----------------------------------------------------------------------------------


def run_vector_isa_probes() -> None:
    """Inductor's CPU vector-ISA probes, all of them (the base probe and the avx512-bf16, avx512-vnni and AMX
    builds), cached in this process: a fork inherits the verdicts. Nothing to do where Inductor has no such list.

    ``valid_vec_isa_list`` probes the ISAs the CPU advertises one after the other, each probe a build and a Python that
    loads it (one that imports torch, before torch 2.13): tens of seconds on a GPU machine
    (docs/benchmarks.md#inductors-isa-probes). They are independent, so each candidate ISA is probed in a thread of its
    own first (:func:`probe_side_by_side`), and the list then answers from their cached verdicts."""
    global _vector_isas_probed
    if _vector_isas_probed:  # every verdict is cached on its ISA: a fork inherits them
        return
    import torch._inductor.cpu_vec_isa as cpu_vec_isa

    listing = getattr(cpu_vec_isa, "valid_vec_isa_list", None)
    if listing is None:
        return
    probe_side_by_side(_advertised_isas(cpu_vec_isa))
    listing()
    _vector_isas_probed = True


_vector_isas_probed = False


def _advertised_isas(cpu_vec_isa: Any) -> list[Any]:
    """The x86 ISAs whose flags this CPU advertises, as ``valid_vec_isa_list`` filters them before probing each;
    none where this torch lacks that list or its checker (the list then probes as before)."""
    import platform

    candidates = getattr(cpu_vec_isa, "supported_vec_isa_list", None)
    checker = getattr(cpu_vec_isa, "x86_isa_checker", None)
    if not candidates or checker is None or platform.machine() not in ("x86_64", "AMD64"):
        return []
    try:
        flags = checker()
        return [isa for isa in candidates if all(flag in flags for flag in str(isa).split())]
    except Exception:
        return []


def probe_side_by_side(isas: Sequence[Any]) -> None:
    """``bool(isa)`` (the ISA's probes) for each of ``isas`` in a thread of its own: their builds and loading
    interpreters are subprocesses, so they overlap. Each ISA is its own object (its verdict cached on it) and its
    own probe files, so the threads share nothing but the probe record (a dict). A probe that raises is left for
    Inductor's own list to meet again, as it would have."""
    if len(isas) < 2:
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(isas), thread_name_prefix="pytest-aoti-isa-probe") as pool:
        for future in [pool.submit(bool, isa) for isa in isas]:
            with contextlib.suppress(Exception):
                future.result()


def cuda_initialized() -> bool:
    return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]


def cuda_fork_poisoned() -> bool:
    """In a forked child: whether CUDA would refuse to start here ("Cannot re-initialize CUDA in forked
    subprocess"), without starting it."""
    in_bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    return bool(in_bad_fork()) if in_bad_fork is not None else bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]


def _config_modules() -> list[Any]:
    """Every torch config module loaded in this process (Inductor's, Dynamo's, functorch's, export's...): each one
    read its environment variables when it was imported."""
    import sys

    from torch.utils._config_module import ConfigModule

    return [module for module in list(sys.modules.values()) if isinstance(module, ConfigModule)]


def can_reread_env_configs() -> bool:
    """Whether :func:`reread_env_configs` can work with this torch's config modules."""
    try:
        modules = _config_modules()
        return bool(modules) and all(isinstance(getattr(m, "_config", None), dict) for m in modules)
    except Exception:
        return False


def reread_env_configs(changed: set[str]) -> list[str]:
    """In a forked child whose environment differs from its parent's in ``changed``: make torch's config modules
    and its logging read the environment again, as a fresh import would. Each config module whose source names one
    of ``changed`` is executed afresh under a scratch name, and every entry whose default (what its environment
    variables gave) differs is copied over. Returns the modules re-read."""
    import importlib.util
    import sys

    reread: list[str] = []
    for module in _config_modules():
        path = getattr(module, "__file__", None)
        if not path or not changed:
            continue
        with open(path, encoding="utf-8") as file:
            source = file.read()
        if not any(name in source for name in changed):
            continue
        scratch_name = f"_pytest_aoti_reread_{module.__name__.replace('.', '_')}"
        spec = importlib.util.spec_from_file_location(scratch_name, path)
        if spec is None or spec.loader is None:
            continue
        fresh = importlib.util.module_from_spec(spec)
        sys.modules[scratch_name] = fresh
        try:
            spec.loader.exec_module(fresh)
            fresh = sys.modules[scratch_name]  # install_config_module swapped in its ConfigModule
        finally:
            del sys.modules[scratch_name]
        for key, entry in fresh._config.items():
            live = module._config.get(key)
            if live is not None:
                live.default = entry.default
                live.env_value_default = entry.env_value_default
                live.env_value_force = entry.env_value_force
        reread.append(module.__name__)
    if any(name.startswith(("TORCH_LOGS", "TORCH_TRACE")) for name in changed):
        from torch._logging._internal import _init_logs

        _init_logs()
    return reread


@dataclass
class IsaCheckMemo:
    """What Inductor's ISA probe builds answered in this process, each check by its key (the ISA, its build flags
    and the probe's code, hashed): ``answers`` are the verdicts (a recorded pass, or a probe's), ``labels`` name each
    check probed here, ``failures`` say why each one that failed here failed."""

    answers: dict[str, bool]
    labels: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


_probe_load_seen = threading.local()
_CHECK_KERNEL = re.compile(r'extern "C" [^(]*?(\w+)\(')


def memoize_isa_checks(passed: set[str]) -> IsaCheckMemo | None:
    """Make Inductor's ISA probe builds (``VecISA.check_build``: the base probe and the avx512-bf16, avx512-vnni,
    AMX and AMX-fp16 ones) answer True where ``passed`` holds the same check, probe the others (a failure is never
    an answer: it is probed again), and note each verdict and why a check failed. Returns the memo the answers go
    to, or None where this torch has no such hook (it then probes as before). A check is named by the ISA, its build
    flags and the probe's code, so a changed probe is probed afresh."""
    try:
        from torch._inductor.cpu_vec_isa import VecISA
    except ImportError:
        return None
    original = getattr(VecISA, "check_build", None)
    if original is None:
        return None
    known: IsaCheckMemo | None = getattr(original, "_pytest_aoti_memo", None)
    if known is not None:
        known.answers.update(dict.fromkeys(passed, True))
        return known
    memo = IsaCheckMemo(dict.fromkeys(passed, True))
    _observe_probe_loads(VecISA)

    def check_build(self: Any, code: str) -> bool:
        flags = self.build_arch_flags()
        key = hashlib.sha256(f"{self}\0{flags}\0{code}".encode()).hexdigest()[:32]
        if memo.answers.get(key) is not True:
            _probe_load_seen.loaded = None
            verdict = bool(original(self, code))
            kernel = _CHECK_KERNEL.search(code)
            memo.labels[key] = f"{self} [{flags}] {kernel.group(1) if kernel else 'probe'}"
            memo.answers[key] = verdict
            if verdict:
                memo.failures.pop(key, None)
            else:
                memo.failures[key] = _why_the_check_failed(getattr(_probe_load_seen, "loaded", None))
        return memo.answers[key]

    check_build._pytest_aoti_memo = memo  # type: ignore[attr-defined]
    VecISA.check_build = check_build  # type: ignore[method-assign]
    return memo


def _observe_probe_loads(vec_isa: Any) -> None:
    """Note whether a probe's built library was loaded (``VecISA._probe_load``, torch >= 2.12), to say why a check
    failed: its build, or loading what it built."""
    load = getattr(vec_isa, "_probe_load", None)
    if load is None:
        return

    def probe_load(self: Any, output_path: str) -> bool:
        loaded = bool(load(self, output_path))
        _probe_load_seen.loaded = loaded
        return loaded

    vec_isa._probe_load = probe_load


def _why_the_check_failed(loaded: bool | None) -> str:
    if loaded is False:
        return "its test library was built but did not load in a fresh Python (a failed or timed-out dlopen)"
    return "its test program did not build (the compiler failed, was killed, or could not write its output)"


def picked_vec_isa() -> str:
    """The vector ISA Inductor picks for CPU code in this process, with the flags it builds with
    (``avx512 avx512_vnni [-mavx512f ... -mavx512vnni]``); ``none`` for scalar code."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    isa = pick_vec_isa()
    return f"{isa} [{isa.build_arch_flags()}]" if isa else "none"


# Deprecation warnings torch's compile raises from its own code (torch.utils.mkldnn's import, Inductor's deepcopy of
# pytree specs): nothing a test's author can act on, yet they fill every report's warnings summary. Only these
# messages, only while Inductor compiles or is imported: the model's own code ran at export.
_TORCH_INTERNAL_DEPRECATIONS = (
    (r"`torch\.jit\.script_method` is deprecated", DeprecationWarning),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
)


@contextlib.contextmanager
def torch_internal_deprecations_silenced() -> Iterator[None]:
    with warnings.catch_warnings():
        for message, category in _TORCH_INTERNAL_DEPRECATIONS:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield
