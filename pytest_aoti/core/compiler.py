"""Export, compile, load: the plain-Python core behind the ``aoti_compile`` / ``aoti_check`` fixtures."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import difflib
import functools
import math
import os
import re
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument

from pytest_aoti.core import phases
from pytest_aoti.core.accuracy import float64_outputs, judge
from pytest_aoti.core.cache import PackageCache
from pytest_aoti.core.cache_key import KeyParts
from pytest_aoti.core.dims import ExportCall, declared_ranges, dim_names, refuse_specialized
from pytest_aoti.core.errors import (
    AOTICompileError,
    AOTIDtypeFromEagerWarning,
    AOTIExportError,
    AOTIInvariantError,
    AOTIMismatchError,
    AOTIOutputSpecError,
    AOTIPackageRunError,
    AOTITypeError,
    AOTIValueError,
    hide_usage_errors,
    warn_at_users_line,
)
from pytest_aoti.core.export_paths import first_node_off_eagers_path
from pytest_aoti.core.invariants import (
    ProgramSpec,
    check_call_outputs,
    check_inputs,
    flatten_inputs,
    program_spec,
)
from pytest_aoti.core.observers import NO_OBSERVERS, CallCapture, CallObservers
from pytest_aoti.core.source_lines import torch_install_dir, user_line
from pytest_aoti.core.torch_private import (
    AOTICompiledModel,
    OpOverload,
    inductor_config_defaults,
    inductor_load_package,
    package_loader,
    package_metadata,
    torch_internal_deprecations_silenced,
)

_LEAF_TYPES = (torch.Tensor, int, float, bool, str, type(None), torch.dtype, torch.device)


def one_line(error: BaseException) -> str:
    """The first non-empty line of an exception, prefixed by its type: the summary line of a failure."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def full_traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


class _FunctionModule(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def as_module(model: Any) -> torch.nn.Module:
    __tracebackhide__ = hide_usage_errors
    if isinstance(model, type):
        raise AOTITypeError(f"model: got the class {model.__name__}, not an instance: pass {model.__name__}(...)")
    if isinstance(model, torch.nn.Module):
        return model
    if callable(model):
        return _FunctionModule(model)
    raise AOTITypeError(f"model: expected a torch.nn.Module or a callable, got {type(model).__name__}")


def validate_inputs(
    args: Any, kwargs: dict[str, Any] | None, *, what: str = "args"
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Check the shape of an ``(args, kwargs)`` pair before it reaches torch.export, naming the bad leaf."""
    __tracebackhide__ = hide_usage_errors
    if isinstance(args, torch.Tensor) or not isinstance(args, tuple | list):
        raise AOTITypeError(
            f"{what}: expected a tuple of positional inputs, got {type(args).__name__} (wrap one input as (x,))"
        )
    if kwargs is not None and not isinstance(kwargs, dict):
        raise AOTITypeError(f"kwargs: expected a dict of keyword inputs, got {type(kwargs).__name__}")
    # No tensor at all is fine: a model of no inputs (``forward(self)`` returning its weights) compiles and runs.
    leaves, _ = pytree.tree_flatten_with_path((tuple(args), kwargs or {}))
    for path, leaf in leaves:
        if not isinstance(leaf, _LEAF_TYPES):
            where = ("args" if path[0].idx == 0 else "kwargs") + pytree.keystr(path[1:])  # type: ignore[attr-defined]
            raise AOTITypeError(
                f"{where}: expected a tensor (or a Python scalar), got {type(leaf).__module__}.{type(leaf).__name__}"
            )
    return tuple(args), dict(kwargs or {})


def validate_inductor_configs(configs: dict[str, Any] | None) -> dict[str, Any]:
    """Reject unknown Inductor config keys up front (torch fails late, with an AttributeError mid-compile), and
    values Inductor would fail on late or read other than they say (:func:`_config_value_problem`)."""
    __tracebackhide__ = hide_usage_errors
    if not configs:
        # Not on a cache hit without configs: importing torch._inductor.config is slow
        # (docs/benchmarks.md#importing-inductor).
        return {}
    if not isinstance(configs, dict):
        raise AOTITypeError(f"inductor_configs: expected a dict, got {type(configs).__name__}")
    known = inductor_config_defaults()
    for key in configs:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise AOTIValueError(f"inductor_configs: unknown Inductor config key {key!r}{hint}")
        problem = _config_value_problem(configs[key], known[key])
        if problem is not None:
            raise AOTITypeError(f"inductor_configs[{key!r}]: {problem}")
    # aoti_compile_and_package mutates the dict it is given.
    return dict(configs)


# Strings that say "off": Inductor reads a flag by its truth value, and each of these is a non-empty string, so
# Inductor would turn the flag on.
_SAYS_OFF = frozenset({"0", "false", "no", "off", "none"})


def _config_value_problem(value: Any, default: Any) -> str | None:
    """What is wrong with ``value`` for a key whose default is ``default``, or None. Inductor's config checks no
    type (``config.patch`` sets anything): a flag is read by its truth value (``if config.profile_bandwidth:``), so
    an int or a string that says "on" (``"1"``, as PyTorch's own tests pass) works as it does in torch, and a string
    that says "off" would turn the flag on. A number where a number is expected, a string where a string is: other
    values fail late in the compile, or are read wrongly."""
    given = f"got {type(value).__name__} {value!r}"
    if isinstance(default, bool):
        if isinstance(value, str) and value.strip().lower() in _SAYS_OFF:
            return (
                f"{given}, which turns the flag on (Inductor reads a flag by its truth value, and a non-empty string "
                "is true): pass False"
            )
        if isinstance(value, bool | int | str):
            return None
    elif isinstance(default, int | float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return None
    elif not isinstance(default, str) or isinstance(value, str):
        return None
    kind = type(default).__name__
    return f"expected {'an' if kind[0] in 'aeiou' else 'a'} {kind} (the default is {default!r}), {given}"


def check_flag(value: Any, name: str) -> bool:
    """A keyword flag of the public API: a real bool (``"false"`` is truthy, and would silently turn a check off)."""
    __tracebackhide__ = hide_usage_errors
    if not isinstance(value, bool):
        raise AOTITypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")
    return value


def tolerance_value(value: Any, name: str) -> float | None:
    """``value`` as a tolerance (a finite number >= 0; None stays None), or a ValueError naming ``name``."""
    __tracebackhide__ = hide_usage_errors
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise AOTIValueError(f"{name}: expected a finite number >= 0, got {type(value).__name__} {value!r}")
    return float(value)


def _input_sets(
    args: Any, kwargs: dict[str, Any] | None, more_inputs: Any
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The example inputs and each entry of ``more_inputs`` (a tuple of args, or ``{"args": ..., "kwargs": ...}``)
    as ``(args, kwargs)`` pairs; a malformed entry is named by its index."""
    __tracebackhide__ = hide_usage_errors
    if isinstance(more_inputs, torch.Tensor | str | bytes | dict) or not isinstance(more_inputs, Iterable):
        raise AOTITypeError(
            f"more_inputs: expected a list of input sets (each a tuple of args, or a dict with 'args' and 'kwargs'), "
            f"got {type(more_inputs).__name__}"
        )
    input_sets = [validate_inputs(args, kwargs)]
    for number, extra in enumerate(more_inputs):
        what = f"more_inputs[{number}]"
        if isinstance(extra, dict):
            unknown = set(extra) - {"args", "kwargs"}
            if unknown:
                raise AOTITypeError(
                    f"{what}: a dict input set takes the keys 'args' and 'kwargs', got {sorted(unknown)}"
                )
            input_sets.append(validate_inputs(extra.get("args", ()), extra.get("kwargs"), what=what))
        else:
            input_sets.append(validate_inputs(extra, None, what=what))
    return input_sets


def compile_device(args: tuple[Any, ...], kwargs: dict[str, Any], module: torch.nn.Module) -> torch.device:
    """The device the package is compiled for: that of the example tensors (else the parameters), else CPU."""
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    for tensor in [*module.parameters(), *module.buffers()]:
        return tensor.device
    return torch.device("cpu")


def cuda_context_problem() -> str | None:
    """None when CUDA still works; else the error that says the context is unusable (e.g. after an IMA)."""
    try:
        torch.cuda.synchronize()
        (torch.ones(1, device="cuda") + 1).cpu()
    except Exception as error:  # any error here means the context is gone
        return str(error).splitlines()[0]
    return None


@dataclass(frozen=True)
class PoisonedContext:
    """The call that left the device unusable: its error, and the Hypothesis draw that made its inputs if any."""

    draw: Any
    error: BaseException
    problem: str


@dataclass(frozen=True)
class ComparedCall:
    """A call whose package outputs did not match eager's: what stage numerics needs to explain it."""

    package_path: Path
    program: ExportedProgram
    flat_inputs: Sequence[Any]
    tolerance: tuple[float, float] | None
    package_outputs: Any = None
    eager_outputs: Any = None


@dataclass
class CompiledModel:
    """A loaded AOTI package that checks its invariants on every call.

    Call it like the model. ``call(..., allow_nonfinite=True)`` skips the NaN/Inf check for one call.
    """

    package_path: Path
    exported_program: ExportedProgram
    device: torch.device
    compile_seconds: float
    from_cache: bool
    runner: Any = field(repr=False)
    spec: ProgramSpec = field(repr=False)
    allow_nonfinite: bool = False
    restride_inputs: bool = False
    allow_out_of_range: bool = False
    inductor_configs: dict[str, Any] = field(default_factory=dict, repr=False)
    # Says what is wrong with the device after a failed call (a CUDA error is sticky), or None when it is healthy.
    health_check: Callable[[], str | None] | None = field(default=None, repr=False)
    poisoned: PoisonedContext | None = field(default=None, repr=False)
    last_draw: Any = field(default=None, repr=False)  # set by pytest_aoti.core.strategies before each example
    observers: CallObservers = field(default=NO_OBSERVERS, repr=False)
    # aoti_check's input sets that differed from eager beyond assert_close's defaults and were accepted as no less
    # accurate than eager against a float64 run (:mod:`pytest_aoti.core.accuracy`), with its numbers.
    accepted_by_float64: list[str] = field(default_factory=list, repr=False)
    # Outputs whose dtype aoti_check holds to eager's, where the exported program's metadata said another.
    eager_over_metadata: list[str] = field(default_factory=list, repr=False)
    # Why the package missed the cache (core.cache_miss: what differs from the test's nearest entry); None on a hit
    # and on a miss with no entry to compare with.
    cache_miss: str | None = field(default=None, repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return self.call(args, kwargs)

    def call(
        self,
        args: Sequence[Any],
        kwargs: dict[str, Any] | None = None,
        *,
        allow_nonfinite: bool | None = None,
        restride_inputs: bool | None = None,
        allow_out_of_range: bool | None = None,
    ) -> Any:
        __tracebackhide__ = True
        nonfinite_ok = (
            self.allow_nonfinite if allow_nonfinite is None else check_flag(allow_nonfinite, "allow_nonfinite")
        )
        restride = self.restride_inputs if restride_inputs is None else check_flag(restride_inputs, "restride_inputs")
        out_of_range_ok = (
            self.allow_out_of_range
            if allow_out_of_range is None
            else check_flag(allow_out_of_range, "allow_out_of_range")
        )
        outputs, bound = self._run_checked_inputs(args, kwargs or {}, nonfinite_ok, restride, out_of_range_ok)
        self._check_outputs(outputs, bound, nonfinite_ok)
        return outputs

    def _run_checked_inputs(
        self, args: Sequence[Any], kwargs: dict[str, Any], nonfinite_ok: bool, restride: bool, out_of_range_ok: bool
    ) -> tuple[Any, dict[Any, int]]:
        """The package's outputs on inputs that passed their checks, and the dynamic-dim values they bound; the
        outputs are not checked yet."""
        __tracebackhide__ = True
        if self.runner is None:
            raise RuntimeError(f"{self.package_path.name}: this compiled model was released at the end of its test")
        if self.poisoned is not None and self.poisoned.draw is not None and self.poisoned.draw == self.last_draw:
            raise self.poisoned.error  # the Hypothesis example that poisoned the device, replayed
        in_spec = self.exported_program.call_spec.in_spec
        flat_inputs = flatten_inputs(in_spec, args, kwargs)
        bound, run_with = check_inputs(
            self.spec,
            flat_inputs,
            self.device,
            allow_nonfinite=nonfinite_ok,
            restride=restride,
            allow_out_of_range=out_of_range_ok,
        )
        # Rebuilt from the checked leaves: dicts in the exported key order, restrided copies in place.
        run_args, run_kwargs = pytree.tree_unflatten(run_with, in_spec)
        if self.observers.before_run is not None:  # a debug child: record the call first, it may not survive it
            self.observers.before_run(self, run_args, run_kwargs)
        phases.mark("run", str(self.package_path))
        try:
            outputs = self.runner(*run_args, **run_kwargs)
            if self.device.type == "cuda":
                # Kernel errors are asynchronous: make them surface here, in the call that caused them.
                torch.cuda.synchronize(self.device)
            phases.mark("ran", str(self.package_path))
        except ValueError as error:
            self._note_poisoned(error)
            spec_error = output_spec_error(error, self.exported_program.call_spec.out_spec)
            if spec_error is None:
                raise
            raise spec_error from None  # torch's frames say nothing the message does not
        except RuntimeError as error:
            run_error = package_run_error(error)
            # What a poisoned device's failing example raises again (core.strategies) is what it raised first.
            self._note_poisoned(run_error or error)
            if run_error is None:
                raise
            raise run_error from None  # torch's C++ frames say nothing the message does not
        except Exception as error:
            self._note_poisoned(error)
            raise
        return outputs, bound

    def _check_outputs(
        self, outputs: Any, bound: dict[Any, int], nonfinite_ok: bool, eager_outputs: Any = None
    ) -> None:
        """Hold a call's outputs to the package's spec (:func:`pytest_aoti.core.invariants.check_call_outputs`).
        With ``eager_outputs``, the dtypes eager returns where the exported program's metadata says another hold for
        this call and every later one; a note for each, also given as a warning."""
        __tracebackhide__ = True
        try:
            checked = check_call_outputs(
                self.spec, outputs, self.device, bound, allow_nonfinite=nonfinite_ok, eager_outputs=eager_outputs
            )
        except Exception as error:  # the device failed under the check (a CUDA error is sticky)
            self._note_poisoned(error)
            raise
        self.spec = checked.spec
        for note in checked.dtype_notes:
            warn_at_users_line(f"pytest-aoti: {self.package_path.name}: {note}", AOTIDtypeFromEagerWarning)
        self.eager_over_metadata.extend(checked.dtype_notes)
        checked.raise_if_broken()

    def release(self) -> None:
        """Unload the package (its extraction dir goes with it); calls after this raise."""
        if self.runner is not None and self.health_check is not None and self.health_check() is not None:
            # On a CUDA context broken by a device-side assert, the container's destructor (it frees device memory)
            # aborts the process: keep this package loaded for the life of the process instead.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.runner))
        self.runner = None

    def _note_poisoned(self, error: BaseException) -> None:
        if self.poisoned is not None or self.health_check is None or isinstance(error, AOTIInvariantError):
            return
        problem = self.health_check()
        if problem is not None:
            self.poisoned = PoisonedContext(draw=self.last_draw, error=error, problem=problem)

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.runner.get_metadata())


def export_model(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
) -> ExportedProgram:
    phases.mark("export")
    try:
        return torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    except Exception as error:
        raise AOTIExportError(one_line(error)) from error


@contextlib.contextmanager
def _extracting_into(directory: Path) -> Iterator[None]:
    """The loader extracts each package into a fresh ``$TMPDIR/aotinductor_*`` dir (read from the environment at
    load time) and removes it only when the loader is destroyed: put it where pytest (or the caller) cleans up, so
    neither a reference kept alive by a traceback nor a crash leaves it in /tmp."""
    directory.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(directory)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = previous


def load_package(
    path: Path,
    device: torch.device,
    extract_dir: Path,
    *,
    num_runners: int = 1,
    run_single_threaded: bool = False,
) -> Any:
    with _extracting_into(extract_dir):
        return _load_package(path, device, num_runners, run_single_threaded)


# x86 vector ISAs in the order a CPU that has one has the ones before it.
_ISA_RANK = {"": 0, "DEFAULT": 0, "INVALIDVECISA": 0, "AVX2": 1, "AVX512": 2}


def package_device_problem(path: Path, device: torch.device) -> str | None:
    """Why this machine cannot run the package as built, from the metadata AOTI records at compile time (platform,
    CPU architecture and vector ISA, device, GPU compute capability), or None. torch itself only logs a warning for
    a mismatch and goes on to crash or fail later; this is checked before loading."""
    import platform
    import sys

    try:
        metadata = package_metadata(str(path))
    except Exception:  # an older or unusual package: the loader itself says what is wrong with it
        return None
    built_for = metadata.get("AOTI_DEVICE_KEY", "")
    if built_for and built_for != device.type:
        return f"the package was built for {built_for}, asked to load on {device}"
    machine = {"AOTI_PLATFORM": sys.platform, "AOTI_MACHINE": platform.machine()}
    for key, here in machine.items():
        if metadata.get(key) and metadata[key] != here:
            return (
                f"the package was built for {key.removeprefix('AOTI_').lower()} {metadata[key]}; this machine is {here}"
            )
    isa, here_isa = metadata.get("AOTI_CPU_ISA", ""), torch.backends.cpu.get_cpu_capability().upper()
    if isa in _ISA_RANK and here_isa in _ISA_RANK and _ISA_RANK[isa] > _ISA_RANK[here_isa]:
        return f"the package was built for CPU ISA {isa}; this CPU supports {here_isa}"
    capability = metadata.get("AOTI_COMPUTE_CAPABILITY", "").replace(".", "")
    if device.type == "cuda" and capability and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device)
        if capability != f"{major}{minor}":
            name = torch.cuda.get_device_name(device)
            return f"the package's kernels were built for compute capability {capability}; {name} is {major}{minor}"
    return None


def _load_package(path: Path, device: torch.device, num_runners: int = 1, run_single_threaded: bool = False) -> Any:
    phases.mark("load", str(path))
    device_index = device.index if device.type == "cuda" and device.index is not None else -1
    problem = package_device_problem(path, device)
    if problem is not None:
        raise AOTICompileError(f"{path.name}: {problem}", stage="load")
    try:
        # The package loader aoti_load_package ends up in, without importing Inductor: that import is most of a warm
        # cached run (docs/benchmarks.md#importing-inductor). Anything it cannot load goes through aoti_load_package
        # itself.
        runner = AOTICompiledModel(package_loader(str(path), run_single_threaded, num_runners, device_index))
    except RuntimeError:
        try:
            runner = inductor_load_package(
                str(path),
                run_single_threaded=run_single_threaded,
                num_runners=num_runners,
                device_index=device_index,
            )
        except Exception as error:
            raise AOTICompileError(one_line(error), stage="load") from error
    phases.mark("loaded", str(path))
    return runner


_UNFLATTEN = re.compile(
    r"['`]leaves['`] has length (?P<returned>\d+) but the spec refers to a pytree that holds (?P<held>\d+)"
)


def output_spec_error(error: ValueError, out_spec: Any) -> AOTIOutputSpecError | None:
    """torch's package call failing to rebuild the outputs (``treespec.unflatten``), said as what happened; None for
    any other ValueError."""
    found = _UNFLATTEN.search(str(error))
    if found is None:
        return None
    returned, held = int(found["returned"]), int(found["held"])
    structure = getattr(getattr(out_spec, "type", None), "__name__", None) or "its outputs"
    return AOTIOutputSpecError(
        f"the package returned {returned} output{'s' if returned != 1 else ''}, but its exported output spec "
        f"({structure}) holds {held}: torch could not rebuild the model's outputs from them. The compiled graph "
        "and the output structure export recorded disagree (a model that returns a custom container, or a "
        "cache object, is a known cause): return plain tensors or a registered pytree type from forward, or "
        f"compare torch.export.export(model, ...).module()'s outputs with the model's. (torch: {error})"
    )


# A CPU kernel's failed TORCH_CHECK: "index out of bounds: tmp6 < 32L\nException raised from cpp_fused_…_1 at
# /tmp/…/c….kernel.cpp:83 (most recent call first):". A Python op's error raised through the package: "ValueError: …"
# then "At:" and its frames, innermost first, as "  /path/file.py(8): function".
_KERNEL_RAISED = re.compile(r"Exception raised from (?P<kernel>\w+) at (?P<file>\S+\.cpp):(?P<line>\d+)")
# Inductor's generated source ("c" and a hash, ".kernel.cpp" or ".wrapper.cpp"), where a package's own kernels are.
# A check that failed elsewhere is an op the package calls: ATen's ("…/aten/src/ATen/native/BatchLinearAlgebra.cpp",
# raised from _linalg_check_errors) or a C++ extension's.
_GENERATED_SOURCE = re.compile(r"\.(?:kernel|wrapper)\.cpp$|(?:^|/)c[a-z0-9]{20,}\.cpp$")
# A file's path may hold spaces ("/home/me/My Project/ops.py"): up to the ".py(" of the frame.
_PYTHON_FRAME = re.compile(r"^\s+(?P<file>\S.*?\.py)\((?P<line>\d+)\): (?P<function>\S+)$", re.MULTILINE)
# pytest-aoti's own frames (the call into the package) are never the op's.
_PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def package_run_error(error: RuntimeError) -> AOTIPackageRunError | None:
    """torch's error from a package's run said as what happened: the kernel whose check failed, or the Python op
    that raised and its line; None for any other error (a CUDA error, AOTI's generic wrapper), which stays torch's."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    kernel = _KERNEL_RAISED.search(text)
    if kernel is not None and not _GENERATED_SOURCE.search(kernel["file"]):
        return AOTIPackageRunError(
            f"an op the package calls (not one of its kernels) raised in {kernel['kernel']}: {first.rstrip('.')}. "
            "--aoti-debug names the op and its line in your model"
        )
    if kernel is not None:
        condition = re.sub(r"(\d)L\b", r"\1", first)
        why = (
            " (an index that reads a table is outside it: an index the model computes, such as position ids past "
            "its positions, or an input's)"
            if "index out of bounds" in first
            else ""
        )
        # The generated source's place is kept: torch's frames are dropped (``from None``), and it is where a reader
        # of Inductor's output (TORCHINDUCTOR_CACHE_DIR on the compiling machine) finds the check that failed.
        return AOTIPackageRunError(
            f"the package raised in kernel {kernel['kernel']}: {condition}{why}. --aoti-debug names the op and "
            f"its line in your model (the check is at {kernel['file']}:{kernel['line']}, Inductor's generated source)"
        )
    head, _, frames = text.partition("\n\nAt:\n")
    if not frames:
        return None
    torch_dir = torch_install_dir() or "\0"
    found = (m for m in _PYTHON_FRAME.finditer(frames) if not m["file"].startswith((torch_dir, _PLUGIN_DIR)))
    frame = next(found, None)
    at = f" at {frame['file']}:{frame['line']} in {frame['function']}" if frame is not None else ""
    return AOTIPackageRunError(f"a Python op the package calls (a custom op) raised{at}: {head.strip()}")


def _build_package(
    exported: ExportedProgram, configs: dict[str, Any], package_dir: Path, stem: str
) -> tuple[Path, float]:
    package_dir.mkdir(parents=True, exist_ok=True)
    package_path = package_dir / f"{stem}-{uuid.uuid4().hex[:8]}.pt2"
    phases.mark("compile", str(package_path))
    from pytest_aoti.core import isa_verdicts

    started = time.perf_counter()
    try:
        # The ISA probes (answered from the record, else run beside the import of Inductor's compile path, and
        # recorded at once), where the lookup before has not run them: counted as compile time.
        isa_verdicts.ready_for_compile()
        with torch_internal_deprecations_silenced():
            torch._inductor.aoti_compile_and_package(exported, package_path=str(package_path), inductor_configs=configs)
    except Exception as error:
        raise AOTICompileError(one_line(error)) from error
    return package_path, time.perf_counter() - started


_COMPILE_FLAGS = (
    "strict",
    "allow_nonfinite",
    "restride_inputs",
    "allow_out_of_range",
    "allow_specialized_dims",
)


def _exported_for_aoti(
    call: ExportCall, *, strict: bool, allow_specialized_dims: bool
) -> tuple[ExportedProgram, ProgramSpec]:
    """The exported program, once its outputs are ones a package can return and every dim asked to be dynamic is,
    and what its package accepts and returns. The spec is read before the compile: Inductor adds guards of its own
    to the program's shape environment, and a package taken from the cache had no compile."""
    exported = export_model(call.module, call.args, call.kwargs, dynamic_shapes=call.dynamic_shapes, strict=strict)
    _check_tensor_outputs(exported)
    spec = program_spec(exported)
    if not allow_specialized_dims:
        refuse_specialized(call, spec)
    spec = dataclasses.replace(spec, dim_names=dim_names(call, spec), ranges=declared_ranges(call, spec, exported))
    return exported, spec


def compile_model(
    model: Any,
    args: Any,
    kwargs: dict[str, Any] | None = None,
    *,
    package_dir: Path,
    dynamic_shapes: Any = None,
    inductor_configs: dict[str, Any] | None = None,
    strict: bool = False,
    cache: PackageCache | None = None,
    allow_nonfinite: bool = False,
    restride_inputs: bool = False,
    allow_out_of_range: bool = False,
    observers: CallObservers = NO_OBSERVERS,
    allow_specialized_dims: bool = False,
) -> CompiledModel:
    """Export ``model`` on ``args``/``kwargs``, compile it with AOTInductor into ``package_dir`` (or take it from
    ``cache``), load it, and return a :class:`CompiledModel` that checks its invariants on every call.

    A dim asked to be dynamic that export made static fails before compiling (:func:`specialized_dims`) unless
    ``allow_specialized_dims=True``. (Bundled I/O is ``pytest_aoti.verify.bundle_io``'s.)"""
    __tracebackhide__ = hide_usage_errors
    module = as_module(model)
    args, kwargs = validate_inputs(args, kwargs)
    flags = (strict, allow_nonfinite, restride_inputs, allow_out_of_range, allow_specialized_dims)
    for name, flag in zip(_COMPILE_FLAGS, flags, strict=True):
        check_flag(flag, name)
    configs = validate_inductor_configs(inductor_configs)
    device = compile_device(args, kwargs, module)
    call = ExportCall(module, args, kwargs, dynamic_shapes)
    exported, spec = _exported_for_aoti(call, strict=strict, allow_specialized_dims=allow_specialized_dims)
    if observers.exported is not None:  # a debug child: the program's source lines, before a compile that may fail
        observers.exported(exported)
    parts = cache.parts_for(exported, configs, device) if cache is not None else None
    package_path, compile_seconds, from_cache, cache_miss = _built_or_cached(
        exported, configs, package_dir, type(module).__name__, cache, parts
    )
    # The key leaves out the GPU index (core.cache_key): a package another worker compiled on another GPU of the same
    # kind is loaded for this test's GPU (device_index), and computes there.
    runner = load_package(package_path, device, extract_dir=package_dir)
    if weights_outside_the_package(configs):
        load_exported_weights(runner, exported)
    compiled = CompiledModel(
        package_path=package_path,
        exported_program=exported,
        device=device,
        compile_seconds=compile_seconds,
        from_cache=from_cache,
        runner=runner,
        spec=spec,
        allow_nonfinite=allow_nonfinite,
        restride_inputs=restride_inputs,
        allow_out_of_range=allow_out_of_range,
        inductor_configs=dict(inductor_configs or {}),
        health_check=cuda_context_problem if device.type == "cuda" else None,
        observers=observers,
        cache_miss=cache_miss,
    )
    return compiled


def _built_or_cached(
    exported: ExportedProgram,
    configs: dict[str, Any],
    package_dir: Path,
    stem: str,
    cache: PackageCache | None,
    parts: KeyParts | None,
) -> tuple[Path, float, bool, str | None]:
    """The package's path, its compile seconds, whether it came from ``cache`` (built under its lock), and why it
    missed the cache (None for a hit, or without a cache)."""
    if cache is None or parts is None:
        return (*_build_package(exported, configs, package_dir, stem), False, None)
    with cache.locked(parts.key):
        cached = cache.lookup(parts.key, parts, count_miss=False)
        if cached is not None:
            return cached, 0.0, True, None
        # A miss: a compile comes, and with it Inductor's ISA probes. Run here, before the compile, they say which
        # ISA it will build for: where one failed, a lesser one, whose packages have a key of their own.
        picked = _picked_isa(parts)
        if picked is None:
            return _compiled_into(cache, parts, exported, configs, package_dir, stem)
        lesser = parts.for_isa(picked)
        with cache.locked(lesser.key):
            cached = cache.lookup(lesser.key, lesser, count_miss=False)
            if cached is not None:
                return cached, 0.0, True, None
            return _compiled_into(cache, lesser, exported, configs, package_dir, stem)


def _picked_isa(parts: KeyParts) -> str | None:
    """The ISA the CPU package of ``parts`` will be built for, where one of Inductor's probes failed in this
    process (``core.isa_verdicts``); None where every probe passed, or for a GPU package."""
    from pytest_aoti.core import isa_verdicts

    try:
        isa = isa_verdicts.ready_for_compile()
    except Exception:  # the compile meets it again, and reports it as a compile error
        return None
    cpu = parts.shown.get("device", "").startswith("cpu")
    return isa.isa if cpu and isa.degraded else None


def _compiled_into(
    cache: PackageCache,
    parts: KeyParts,
    exported: ExportedProgram,
    configs: dict[str, Any],
    package_dir: Path,
    stem: str,
) -> tuple[Path, float, bool, str | None]:
    """Compile the package of ``parts`` and store it in ``cache``: a miss, counted and explained."""
    cache.count_miss()
    cache_miss = cache.explain_miss(parts)
    built, compile_seconds = _build_package(exported, configs, package_dir, stem)
    return cache.store(parts.key, built, compile_seconds, parts), compile_seconds, False, cache_miss


def weights_outside_the_package(configs: dict[str, Any]) -> bool:
    """``aot_inductor.package_constants_in_so=False``: the package's weights are loaded at run time."""
    value = configs.get("aot_inductor.package_constants_in_so", configs.get("aot_inductor", {}))
    if isinstance(value, dict):
        value = value.get("package_constants_in_so", True)
    return value is False


def load_exported_weights(runner: Any, exported: ExportedProgram) -> None:
    """A package built with its weights outside the .so has none until they are loaded, and a call before that
    segfaults (torch 2.13): load the exported program's own."""
    known = {**exported.state_dict, **exported.constants}
    runner.load_constants(
        {fqn: known[fqn] for fqn in runner.get_constant_fqns() if fqn in known}, check_full_update=True
    )


def _check_tensor_outputs(exported: ExportedProgram) -> None:
    """An AOTI package returns tensors, and None where the model returned None (an unused optional output, as in a
    Hugging Face ``ModelOutput``): a Python scalar among the outputs would come back as a tensor."""
    for number, output in enumerate(exported.graph_signature.output_specs):
        if output.kind.name != "USER_OUTPUT" or isinstance(output.arg, TensorArgument):
            continue
        value = getattr(output.arg, "value", None)
        if value is not None:
            raise AOTIExportError(
                f"output {number} is a Python {type(value).__name__} ({value!r}), not a tensor: an AOTI package "
                "returns tensors only (and None); return torch.tensor(...) instead"
            )
        kind = type(output.arg).__name__  # SymIntArgument, SymFloatArgument, SymBoolArgument
        if kind.startswith("Sym"):
            scalar = kind.removeprefix("Sym").removesuffix("Argument").lower()
            raise AOTIExportError(
                f"output {number} is a symbolic {scalar} (a size of a dynamic dim, such as x.shape[0]), not a "
                f"tensor: eager returns a Python {scalar} and the package a 0-dim tensor, so the two cannot be "
                "compared as one output; return torch.tensor(...) of it, or compute it outside the model"
            )


def copied_inputs(value: Any) -> Any:
    """``value`` with every tensor cloned, strides kept; a tensor whose strides a clone cannot keep (an expanded
    view, which no model can mutate in place) is shared."""

    def copy(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        clone = leaf.clone()
        return clone if clone.stride() == leaf.stride() else leaf

    return pytree.tree_map(copy, value)


def _mismatch_message(label: str, text: str) -> str:
    return f"compiled vs eager on {label}: {text}"


def check_model(
    model: Any,
    args: Any,
    kwargs: dict[str, Any] | None = None,
    *,
    package_dir: Path,
    more_inputs: Iterable[Any] = (),
    rtol: float | None = None,
    atol: float | None = None,
    on_matched: Callable[[str, Any, CompiledModel], None] | None = None,
    **compile_options: Any,
) -> CompiledModel:
    """Compile ``model`` (``compile_options`` are :func:`compile_model`'s) and compare the package with eager on the
    example inputs and on each of ``more_inputs`` (each a tuple of args, or an ``(args, kwargs)`` pair given as a dict
    ``{"args": ..., "kwargs": ...}``).

    ``on_matched`` is then given the package's outputs of each input set that matched eager (``example``,
    ``more_inputs[0]``, …): the fixtures hand them to the features (golden outputs)."""
    __tracebackhide__ = True  # a failure shows the test's line and the message, not this function's body
    rtol, atol = tolerance_value(rtol, "rtol"), tolerance_value(atol, "atol")
    if (rtol is None) != (atol is None):
        raise AOTIValueError("rtol and atol: give both or neither (torch.testing.assert_close requires it)")
    input_sets = _input_sets(args, kwargs, more_inputs)
    compiled = compile_model(model, args, kwargs, package_dir=package_dir, **compile_options)
    module, allow_nonfinite, observers = as_module(model), compiled.allow_nonfinite, compiled.observers
    tolerance = (rtol, atol) if rtol is not None and atol is not None else None
    for number, (call_args, call_kwargs) in enumerate(input_sets):
        label = "example inputs" if number == 0 else f"more_inputs[{number - 1}]"
        # The numerics debug stage captures both sides of every compared call.
        capture = observers.capture(number) if observers.capture is not None else None
        actual, accepted = _compare_input_set(
            compiled, module, label, (call_args, call_kwargs), tolerance, allow_nonfinite, capture
        )
        if accepted is not None:
            compiled.accepted_by_float64.append(f"{label}: {accepted}")
        if on_matched is not None:
            on_matched("example" if number == 0 else f"more_inputs[{number - 1}]", actual, compiled)
    return compiled


def _compare_input_set(
    compiled: CompiledModel,
    module: torch.nn.Module,
    label: str,
    inputs: tuple[Any, dict[str, Any]],
    tolerance: tuple[float, float] | None,
    allow_nonfinite: bool,
    capture: CallCapture | None,
) -> tuple[Any, str | None]:
    """The package against eager on one input set; returns the package's outputs and, when they differed from eager
    but were judged as accurate against a float64 run, that judgement. Raises :class:`AOTIMismatchError` (or the
    call's :class:`AOTIInvariantError`, naming the input set)."""
    __tracebackhide__ = True
    rtol, atol = tolerance if tolerance is not None else (None, None)
    # Each side gets its own copy: a model that mutates an input in place must not feed eager what the package
    # left behind. What each side left in its inputs is compared too.
    package_args, package_kwargs = copied_inputs(inputs)
    eager_args, eager_kwargs = copied_inputs(inputs)
    try:
        actual, expected = _package_then_eager(
            compiled, module, (package_args, package_kwargs), (eager_args, eager_kwargs), allow_nonfinite, capture
        )
    except AOTIInvariantError as error:
        if label != "example inputs":  # which input set broke the invariant
            error.args = (f"{label}: {error}",)
        raise
    accepted = None
    try:
        try:
            torch.testing.assert_close(
                actual,
                expected,
                rtol=rtol,
                atol=atol,
                equal_nan=allow_nonfinite,
                msg=functools.partial(_mismatch_message, label),
            )
        except AssertionError as mismatch:
            if tolerance is not None:  # the test's own tolerance is held strictly
                raise
            accepted = _judge_against_float64(mismatch, compiled.exported_program, module, inputs, actual, expected)
        torch.testing.assert_close(
            (package_args, package_kwargs),
            (eager_args, eager_kwargs),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=functools.partial(_mismatch_message, f"{label}, as the model left them (mutated in place)"),
        )
    except AssertionError as mismatch:
        if capture is not None:
            flat = flatten_inputs(compiled.exported_program.call_spec.in_spec, *inputs)
            program = compiled.exported_program
            capture.explain(ComparedCall(compiled.package_path, program, flat, tolerance, actual, expected))
        export_changed = _export_changed_the_model(
            compiled.exported_program, module, inputs, actual, expected, tolerance
        )
        raise _mismatch_error(mismatch, compiled.exported_program, module, export_changed) from None
    return actual, accepted


def _export_changed_the_model(
    program: ExportedProgram,
    module: torch.nn.Module,
    inputs: tuple[Any, dict[str, Any]],
    actual: Any,
    expected: Any,
    tolerance: tuple[float, float] | None,
) -> str | None:
    """The first triage question of a mismatch: does the exported program, run eagerly, already differ from eager
    while the package matches it? Then export changed the model (a branch on ``torch.compiler.is_exporting()``, a
    Python value frozen at export), not the compile. A graph that draws random numbers or updates buffers has its
    own explanation; a program that does not run eagerly is not judged here."""
    if _random_ops(program) or _updated_buffers(program):
        return None
    rtol, atol = tolerance if tolerance is not None else (None, None)
    args, kwargs = copied_inputs(inputs)
    try:
        with torch.no_grad():
            exported = program.module()(*args, **kwargs)
    except Exception:  # the program's own eager run: no answer, not a test error
        return None
    if _close_enough(exported, expected, rtol, atol) or not _close_enough(actual, exported, rtol, atol):
        return None
    worst = _max_abs_difference(exported, expected)
    differs = (
        "the exported program run eagerly (torch.export.export(model, ...).module()) already differs from eager"
        f"{f' (max abs difference {worst:.3g})' if worst is not None else ''}, and the package matches the exported "
        "program. The difference is export's, not the compiled package's"
    )
    cause = "(torch.compiler.is_exporting(), a Python value or a data-dependent branch frozen at export)"
    off_path = first_node_off_eagers_path(program, module, *copied_inputs(inputs))
    if off_path is None:
        return f"export changed the model: {differs}: look for code that takes another path under export {cause}"
    # The place first: a verdict's headline keeps the start of the message.
    return (
        f"export changed the model at graph node {off_path.node} ({off_path.target}), made at "
        f"{off_path.line.describe(Path.cwd())}, a line eager did not run: {differs}. Export took another path "
        f"there {cause}"
    )


def _close_enough(actual: Any, expected: Any, rtol: float | None, atol: float | None) -> bool:
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    except (AssertionError, TypeError, ValueError):
        return False
    return True


def _max_abs_difference(actual: Any, expected: Any) -> float | None:
    pairs = zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected), strict=False)
    differences = [
        (a.double() - e.double()).abs().max().item()
        for a, e in pairs
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and a.shape == e.shape and a.numel()
    ]
    return max(differences) if differences else None


def _package_then_eager(
    compiled: CompiledModel,
    module: torch.nn.Module,
    package_inputs: tuple[Any, dict[str, Any]],
    eager_inputs: tuple[Any, dict[str, Any]],
    allow_nonfinite: bool,
    capture: CallCapture | None,
) -> tuple[Any, Any]:
    """The package's outputs (its inputs checked first) and eager's, each on its own copy of the inputs. The
    package's outputs are checked once eager has said what they are: the exported program's metadata can be wrong
    about a dtype (:func:`pytest_aoti.core.invariants.check_call_outputs`)."""
    __tracebackhide__ = True
    restride, out_of_range_ok = compiled.restride_inputs, compiled.allow_out_of_range
    with capture.package() if capture else contextlib.nullcontext():
        actual, bound = compiled._run_checked_inputs(*package_inputs, allow_nonfinite, restride, out_of_range_ok)
    with torch.no_grad(), capture.eager() if capture else contextlib.nullcontext():
        expected = module(*eager_inputs[0], **eager_inputs[1])
    compiled._check_outputs(actual, bound, allow_nonfinite, eager_outputs=expected)
    return actual, expected


def _judge_against_float64(
    mismatch: AssertionError,
    program: ExportedProgram,
    module: torch.nn.Module,
    inputs: tuple[Any, dict[str, Any]],
    actual: Any,
    expected: Any,
) -> str:
    """The judgement when the package is as accurate as eager against a float64 run of the model
    (:mod:`pytest_aoti.core.accuracy`); else raise ``mismatch`` with what the float64 run showed. A graph that draws
    random numbers or updates buffers is not judged: its difference has another cause, which the mismatch names."""
    __tracebackhide__ = True
    if _random_ops(program) or _updated_buffers(program):
        raise mismatch
    args, kwargs = copied_inputs(inputs)
    judgement = judge(actual, expected, lambda: float64_outputs(module, args, kwargs))
    if not judgement.accepted:
        raise AssertionError(f"{mismatch}\n\n{judgement.text}") from None
    return judgement.text


_FLOAT64_PART = "\n\nfloat64 reference"  # where the float64 judge's text starts in a mismatch's message


def _mismatch_error(
    mismatch: AssertionError, program: ExportedProgram, module: torch.nn.Module, export_changed: str | None = None
) -> AOTIMismatchError:
    """The mismatch, led by ``export_changed`` when export already changed the model, with the graph's random ops
    named when it has any (then eager and package draw differently), and the buffers it updates (then eager and
    package hold different state after the first call)."""
    random_ops = _random_ops(program)
    explanations = [_random_explanation(random_ops, module)] if random_ops else []
    if export_changed is not None:  # the float64 judge's "less accurate" would blame the package
        return AOTIMismatchError("\n\n".join([export_changed, str(mismatch).split(_FLOAT64_PART)[0]]))
    updated = _updated_buffers(program)
    if updated:
        explanations.append(_state_explanation(updated))
    return AOTIMismatchError("\n\n".join([str(mismatch), *explanations]), random_ops=random_ops)


def _updated_buffers(program: ExportedProgram) -> dict[str, str]:
    """The buffers the model writes in forward (``self.calls += 1``, a running mean, a cache), each with the user's
    line that writes it when export recorded one. Export's default IR keeps the write in the graph (an in-place op
    or ``copy_`` into the buffer's placeholder); a decomposed program lists it in ``buffers_to_mutate`` instead."""
    signature = program.graph_signature
    buffer_of = {
        spec.arg.name: spec.target
        for spec in signature.input_specs
        if spec.kind == InputKind.BUFFER and isinstance(spec.arg, TensorArgument) and spec.target is not None
    }
    found: dict[str, str] = {name: "" for name in signature.buffers_to_mutate.values()}
    torch_dir = torch_install_dir()
    for node in program.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, OpOverload) or not target._schema.is_mutable:
            continue
        for position, argument in enumerate(target._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            written = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
            if isinstance(written, torch.fx.Node) and written.name in buffer_of:
                line = user_line(node.meta.get("stack_trace") or "", torch_dir)
                buffer = buffer_of[written.name]
                found[buffer] = found.get(buffer) or (line.describe(Path.cwd()) if line else "")
    return found


def _state_explanation(updated: dict[str, str]) -> str:
    named = ", ".join(f"{name} ({line})" if line else name for name, line in updated.items())
    return (
        f"The model updates buffer(s) in forward: {named}. Eager carries each update into its next call; the package "
        "does not hold the same state, so calls after the first can differ whatever the kernels do. Pass the state "
        "in and return it, or give each input set a fresh model."
    )


def _random_ops(program: ExportedProgram) -> tuple[str, ...]:
    """The graph's ops that draw random numbers (torch tags them ``nondeterministic_seeded``), each with the
    module it came from when export recorded one: ``aten::native_dropout (drop)``."""
    found: dict[str, None] = {}
    for node in program.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded not in target.tags or not _draws(node, target):
            continue
        stack = node.meta.get("nn_module_stack") or {}
        where = next(reversed(stack.values()))[0] if stack else ""
        found[f"{target._schema.name}" + (f" ({where})" if where else "")] = None
    return tuple(found)


def _draws(node: torch.fx.Node, target: OpOverload) -> bool:
    """Whether a seeded op really draws: a dropout exported in eval mode (``train=False``) or with ``p=0`` stays in
    the graph, tagged, and returns its input; so does attention with ``dropout_p=0`` (what every model passes in
    eval mode: ``scaled_dot_product_attention`` is tagged whatever its dropout)."""
    arguments = target._schema.arguments
    values = {
        argument.name: node.args[i]
        if i < len(node.args)
        else node.kwargs.get(argument.name, argument.default_value if argument.has_default_value() else None)
        for i, argument in enumerate(arguments)
    }
    if values.get("train") is not None and not values["train"]:  # native_dropout's ``train=None`` trains
        return False
    return all(values[name] != 0 for name in ("p", "dropout_p") if name in values)


# The random ops that eval() turns off: dropout's family. Other draws (torch.randn in forward) stay in eval mode.
_TRAINING_ONLY_RANDOM = ("dropout", "bernoulli", "rrelu")


def _random_explanation(random_ops: tuple[str, ...], module: torch.nn.Module) -> str:
    if not all(any(name in op for name in _TRAINING_ONLY_RANDOM) for op in random_ops):
        training = (
            " model.eval() does not remove such a draw: pass the noise in as an input, or check these outputs by "
            "their statistics in the test."
        )
    elif module.training:
        training = " The model is in training mode: call model.eval() before aoti_check."
    else:
        training = ""
    return (
        f"The exported graph draws random numbers: {', '.join(random_ops)}. The package and eager draw different "
        "ones (Inductor has its own generator), so this comparison cannot tell a wrong kernel from different "
        "draws." + training
    )
