"""Repro bundles: one directory per debugged failure that reproduces it without pytest and without the test file.

The debug child writes it before each call of a compiled model (a crash leaves nothing to write afterwards): the
exported program (``torch.export.save``), the call's inputs, the Inductor configs, the codegen environment, versions,
the package, the modules that define the custom ops the graph calls, and ``repro.py``. The parent adds the stages'
logs. ``python repro.py`` re-executes itself under the recorded environment (codegen flags are read when torch is
imported) and runs the failing call: on the package that failed when this machine's torch built it (the same
binary, in seconds), else (or with ``--recompile``) on a package it recompiles from the exported program.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.core.machine import cpu_model, inductor_cache_dir, machine_identity

if TYPE_CHECKING:
    import torch

    from pytest_aoti.core.compiler import CompiledModel

_RECORDED_ENV_PREFIXES = ("TORCHINDUCTOR_", "AOT_INDUCTOR_", "AOTI_", "INDUCTOR_", "TORCH_", "CUDA_", "PYTORCH_")

REPRO_SCRIPT = '''"""Reproduce a failure pytest-aoti debugged, without pytest: python repro.py [--recompile]

Runs the failing call under the recorded debug environment. On package.pt2, the package that failed, when this
machine's torch built it (versions.json: the same torch, CUDA, GPU and CPU): the same binary, in seconds. Otherwise,
or with --recompile (to try another torch, or to send upstream), on a package recompiled from the exported program.
Exit status 0 means the failure did not reproduce.
"""

import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = json.loads((HERE / "env.json").read_text())

# pytest_aoti.core.machine


def run_in_child():
    """Run this script again in a child, under the recorded environment (Inductor reads its codegen flags when torch
    is imported), with a TMPDIR of its own that is removed however the child ends: the loader extracts the package
    into $TMPDIR and never removes it, and a crash leaves it behind. Inductor's per-user cache stays shared."""
    import shutil
    import signal
    import subprocess
    import tempfile

    private = tempfile.mkdtemp(prefix="pytest-aoti-repro-")
    try:
        inductor_cache = inductor_cache_dir()
        inductor_cache.mkdir(exist_ok=True)
        (Path(private) / inductor_cache.name).symlink_to(inductor_cache)
        env = {**os.environ, **ENV, "PYTEST_AOTI_REPRO": "1", "TMPDIR": private}
        returncode = subprocess.run([sys.executable, "-u", __file__, *sys.argv[1:]], env=env).returncode
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if returncode < 0:  # killed by a signal: say which, and exit as a shell reports it (128 + the signal)
        print(f"reproduced: crashed with {signal.Signals(-returncode).name}", file=sys.stderr)
        return 128 - returncode
    return returncode


if os.environ.get("PYTEST_AOTI_REPRO") != "1":
    sys.exit(run_in_child())

import importlib  # noqa: E402
import tempfile  # noqa: E402

for module in json.loads((HERE / "custom_ops.json").read_text()):
    # Custom ops the graph calls must be registered before the program loads.
    sys.path.insert(0, module["path"])
    importlib.import_module(module["module"])

import torch  # noqa: E402


def load_built_here(package, device_index):
    """The runner of a package this machine's torch built, from the loader aoti_load_package ends in. Before it,
    aoti_load_package compares the package's vector ISA with this CPU's, which Inductor finds by building and running
    a probe per ISA (a Python each: tens of seconds on a GPU machine): versions.json has answered that already."""
    try:
        try:
            from torch.export.pt2_archive._package import AOTICompiledModel
        except ImportError:
            from torch._inductor.package.package import AOTICompiledModel
        loader = torch._C._aoti.AOTIModelPackageLoader
    except (ImportError, AttributeError):  # moved by a torch release: the public way, probe and all
        return torch._inductor.aoti_load_package(package, device_index=device_index)
    return AOTICompiledModel(loader(package, "model", False, 1, device_index))


def why_recompile():
    """Why the recorded package cannot run here (None: it can). A CPU package is built for this CPU (-march=native),
    a CUDA one for this GPU, both against this torch."""
    if "--recompile" in sys.argv[1:]:
        return "--recompile"
    if not (HERE / "package.pt2").exists():
        return "no package.pt2 in the bundle"
    recorded = json.loads((HERE / "versions.json").read_text())
    here = {"torch": torch.__version__, "cuda": torch.version.cuda, "cpu": cpu_model()}
    if torch.cuda.is_available():
        here["gpu"] = torch.cuda.get_device_name()
    for key, value in here.items():
        if recorded.get(key) != value:
            return f"package.pt2 was built with {key} {recorded.get(key)}, this machine has {value}"
    return None


reason = why_recompile()
if reason is None:
    print("repro: running package.pt2, the package that failed (--recompile to rebuild it)", flush=True)
else:
    print(f"repro: recompiling the exported program under the recorded environment ({reason})", flush=True)
program = torch.export.load(HERE / "exported_program.pt2")
inputs = torch.load(HERE / "inputs.pt", weights_only=False)
configs = json.loads((HERE / "inductor_configs.json").read_text())
with tempfile.TemporaryDirectory() as build:
    package = str(HERE / "package.pt2")
    if reason is not None:
        package = torch._inductor.aoti_compile_and_package(
            program, package_path=os.path.join(build, "repro.pt2"), inductor_configs=configs
        )
    # A CUDA package runs on the GPU it is loaded for (the current one unless told): the failing call's, which an
    # xdist worker's share of a multi-GPU host makes cuda:N.
    on_gpu = [t for t in torch.utils._pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor) and t.is_cuda]
    device_index = on_gpu[0].device.index if on_gpu else -1
    if reason is None:
        runner = load_built_here(package, device_index)
    else:
        runner = torch._inductor.aoti_load_package(package, device_index=device_index)
    outputs = runner(*inputs["args"], **inputs["kwargs"])
    if any(t.is_cuda for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)):
        torch.cuda.synchronize()
for number, output in enumerate(torch.utils._pytree.tree_leaves(outputs)):
    if isinstance(output, torch.Tensor) and output.is_floating_point() and not torch.isfinite(output).all():
        bad = int((~torch.isfinite(output)).sum())
        sys.exit(f"reproduced: output {number} holds {bad} NaN/Inf value(s) of {output.numel()}")
with torch.no_grad():
    expected = program.module()(*inputs["args"], **inputs["kwargs"])
try:
    torch.testing.assert_close(outputs, expected)
except AssertionError as mismatch:
    sys.exit(f"reproduced: the package differs from the exported program run eagerly: {mismatch}")
print(
    "not reproduced: no crash, no NaN/Inf, and the package matches the exported program run eagerly "
    "(a mismatch the test saw against the model itself comes from export, not from the package)"
)
'''
# repro.py runs with only torch installed: it gets the machine's functions themselves, so that it reads the CPU and
# finds Inductor's cache as the bundle's writer did.
REPRO_SCRIPT = REPRO_SCRIPT.replace(
    "# pytest_aoti.core.machine\n",
    "\n\n".join(inspect.getsource(function) for function in (cpu_model, inductor_cache_dir)),
)


def _custom_op_modules(compiled: CompiledModel) -> list[dict[str, str]]:
    """The modules defining the non-aten ops the graph calls, each with the directory to import it from."""
    from pytest_aoti.core.cache_key import custom_op_function, custom_op_names

    program = compiled.exported_program
    defining = [getattr(custom_op_function(name), "__module__", "") for name in custom_op_names(program)]
    modules: dict[str, str] = {}
    for name in [*defining, *_pytree_type_modules(program)]:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if module is not None and path:
            importable, root = import_root(module.__name__, Path(path))
            modules[importable] = str(root)
    return [{"module": name, "path": path} for name, path in modules.items()]


def _pytree_type_modules(program: torch.export.ExportedProgram) -> list[str]:
    """The modules that register the pytree node types of the program's inputs and outputs (transformers' output
    classes): ``torch.export.load`` cannot read the program back in a process that has not imported them."""
    import torch.utils._pytree as pytree

    modules: list[str] = []
    pending = [program.call_spec.in_spec, program.call_spec.out_spec]
    while pending:
        spec = pending.pop()
        if spec is None:
            continue
        kind = getattr(spec, "type", None)
        module = getattr(kind, "__module__", "builtins")
        if kind is not None and kind not in pytree.BUILTIN_TYPES and module != "builtins":
            modules.append(module)
        pending.extend(getattr(spec, "children_specs", ()))
    return list(dict.fromkeys(modules))


def import_root(module: str, file: Path) -> tuple[str, Path]:
    """How a fresh interpreter imports ``module`` (defined in ``file``): its dotted name and the directory to put
    on ``sys.path``. ``tests.ops`` in ``/proj/tests/ops.py`` is imported from ``/proj``; a name that does not mirror
    the directories (pytest's importlib mode makes such names) is imported by its file's stem from its directory."""
    file = file.resolve()
    parts = module.split(".")
    package_depth = len(parts) if file.name == "__init__.py" else len(parts) - 1
    root = file.parent
    for _ in range(package_depth):
        root = root.parent
    expected = root.joinpath(*parts)
    if expected.with_suffix(".py") == file or expected / "__init__.py" == file:
        return module, root
    if file.name == "__init__.py":
        return file.parent.name, file.parent.parent
    return file.stem, file.parent


def _versions() -> dict[str, Any]:
    import torch

    versions: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu": cpu_model(),  # what repro.py's copy of it says before it runs the recorded package
    }
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = None
    if torch.cuda.is_available():
        versions["gpu"] = torch.cuda.get_device_name()
    cxx = machine_identity().cxx
    versions["compiler"] = f"{cxx.path or cxx.command}: {cxx.version}"
    return versions


def write_call(bundle: Path, compiled: CompiledModel, args: Any, kwargs: dict[str, Any]) -> None:
    """Record a call about to run (the program, package and metadata once per package; the inputs every call)."""
    stamp = bundle / "package.txt"
    if not stamp.exists() or stamp.read_text() != str(compiled.package_path):
        configs = {key: value for key, value in compiled.inductor_configs.items() if key != "aot_inductor.package"}
        write_program(bundle, compiled.exported_program, compiled.package_path, configs, _custom_op_modules(compiled))
        write_node_sources(bundle, compiled.exported_program)
        stamp.write_text(str(compiled.package_path))
    write_inputs(bundle, args, kwargs)


def write_program(
    bundle: Path,
    program: torch.export.ExportedProgram,
    package: Path,
    inductor_configs: dict[str, Any],
    custom_ops: list[dict[str, str]],
) -> None:
    """What ``repro.py`` runs (the package) or recompiles (the program, under the configs, with the custom ops'
    modules imported), the recorded environment it runs under, the versions that decide which, and the script."""
    import torch

    bundle.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, bundle / "exported_program.pt2")
    shutil.copyfile(package, bundle / "package.pt2")
    (bundle / "inductor_configs.json").write_text(json.dumps(inductor_configs, indent=2, default=repr))
    (bundle / "env.json").write_text(json.dumps(recorded_environment(), indent=2, sort_keys=True))
    (bundle / "versions.json").write_text(json.dumps(_versions(), indent=2))
    (bundle / "custom_ops.json").write_text(json.dumps(custom_ops, indent=2))
    (bundle / "repro.py").write_text(REPRO_SCRIPT)


def recorded_environment() -> dict[str, str]:
    """The torch, Inductor and CUDA variables ``repro.py`` runs under, less any that may hold a credential (a URL,
    as ``TORCHINDUCTOR_REDIS_URL`` with its password; a token): a bundle is attached to bug reports, and
    ``repro.py`` runs under the environment it is started in besides these, so such a setting still applies where
    it is set."""
    from pytest_aoti.core.remote_cache import may_hold_secret

    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith(_RECORDED_ENV_PREFIXES) and not may_hold_secret(name, value)
    }


def write_inputs(bundle: Path, args: Any, kwargs: dict[str, Any]) -> None:
    """The call's inputs, as ``repro.py`` and minify read them."""
    import torch

    torch.save({"args": tuple(args), "kwargs": dict(kwargs)}, bundle / "inputs.pt")


# The exported program's node -> stack trace, from this run's export. A cached package's provenance data holds the
# traces of the export that compiled it (another checkout, other line numbers: the cache key leaves locations out);
# its node names are the graph's, which the key does include.
NODE_SOURCES = "node_sources.json"


def write_node_sources(bundle: Path, program: torch.export.ExportedProgram) -> None:
    """The program's node -> stack trace, written when it is exported: a compile that fails (a device-side assert
    while Inductor autotunes) leaves no call to record, and its verdict still names the user's line."""
    bundle.mkdir(parents=True, exist_ok=True)
    traces = {
        node.name: trace for node in program.graph.nodes if isinstance(trace := node.meta.get("stack_trace"), str)
    }
    (bundle / NODE_SOURCES).write_text(json.dumps(traces, indent=2))


def read_node_sources(bundle: Path) -> dict[str, str]:
    try:
        sources = json.loads((bundle / NODE_SOURCES).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in sources.items() if isinstance(v, str)} if isinstance(sources, dict) else {}


def custom_op_modules(bundle: Path) -> list[tuple[str, str]]:
    """The modules ``repro.py`` imports (the custom ops the graph calls) and the directory each is imported from,
    as recorded in the bundle."""
    try:
        return [(entry["module"], entry["path"]) for entry in json.loads((bundle / "custom_ops.json").read_text())]
    except (OSError, ValueError, KeyError, TypeError):
        return []
