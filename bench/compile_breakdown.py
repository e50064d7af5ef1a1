"""Where a debug stage's time goes, against a plain compile of the same model, measured in one run: the model of
bench/debug_stages_benchmark.py (a 3-layer MLP that makes NaN inside a kernel) is exported, compiled, loaded and
run in a fresh interpreter per build, one after another with one Inductor cache (as in ``--aoti-debug``: the
failing run's compile first, then each stage's):

- ``plain``: the test's own build;
- ``kernels``: stage kernels' build (printer mode 3, NaN asserts, provenance, wrapper at -O0);
- ``tensors``: stage tensors' build (printer mode 2 over every kernel, provenance, wrapper at -O0).

Each line gives interpreter start and imports, export, compile, load and run, and inside the compile the seconds of
Inductor's own steps (inclusive; steps nest, and the kernel compiles run in Inductor's worker processes, so only
the time the compile waited for them shows).

``--isa-verdict``: a fresh worker's first compile (fresh interpreter, empty Inductor cache) without and with the CPU
vector-ISA probes' verdicts recorded in pytest-aoti's cache dir: each build calls
``core.isa_verdicts.ready_for_compile`` first, as pytest-aoti's compile does, with ``PYTEST_AOTI_ISA_RECORD`` naming
the record; the first build probes and records the verdicts, the second answers its probes from them, as a later
session's xdist workers and debug children do. The pair is repeated ``--repeats`` times.

    python bench/compile_breakdown.py [--device cpu|cuda] [--builds plain,kernels,tensors]
    python bench/compile_breakdown.py --isa-verdict [--device cpu|cuda] [--repeats N]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Inductor's steps inside aoti_compile_and_package, as module:qualified name (those this torch lacks are left out).
STEPS = {
    "all of Inductor (compile_fx_aot)": "torch._inductor.compile_fx:compile_fx_aot",
    "lowering": "torch._inductor.graph:GraphLowering.run",
    "wrapper and kernel codegen": "torch._inductor.graph:GraphLowering.codegen_with_cpp_wrapper",
    "scheduling": "torch._inductor.scheduler:Scheduler.__init__",
    "kernel codegen": "torch._inductor.scheduler:Scheduler.codegen",
    "waiting for kernel compiles": "torch._inductor.async_compile:AsyncCompile.wait",
    "Triton precompile": "torch._inductor.runtime.triton_heuristics:CachingAutotuner.precompile",
    "autotuning": "torch._inductor.runtime.triton_heuristics:CachingAutotuner.benchmark_all_configs",
    "loading generated Python": "torch._inductor.codecache:PyCodeCache.load_by_key_path",
    "AOT compile and link": "torch._inductor.codecache:AotCodeCompiler.compile",
    "C++ compiles": "torch._inductor.cpp_builder:CppBuilder.build",
}


def _time_step(totals: dict[str, float], step: str, target: str) -> None:
    module_name, qualified = target.split(":")
    try:
        owner: Any = importlib.import_module(module_name)
        *path, name = qualified.split(".")
        for part in path:
            owner = getattr(owner, part)
        original: Callable[..., Any] = getattr(owner, name)
    except (ImportError, AttributeError):
        return
    depth = [0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:  # a step calling itself counts once
                totals[step] = totals.get(step, 0.0) + time.perf_counter() - started

    if isinstance(inspect.getattr_static(owner, name), (classmethod, staticmethod)):
        setattr(owner, name, staticmethod(timed))  # ``original`` is bound to the class already
    else:
        setattr(owner, name, timed)


def _command_name(command: Any) -> str:
    """A command by its program (compilers, linkers, objcopy); a Python by what it runs (``-c`` code, ``-m`` module
    or script), so that the Pythons a compile starts can be told apart."""
    parts = command.split() if isinstance(command, str) else [str(part) for part in command]
    program = os.path.basename(parts[0]) if parts else "?"
    if program.startswith("python") and len(parts) > 1:
        runs = parts[2] if parts[1] in ("-c", "-m") and len(parts) > 2 else os.path.basename(parts[1])
        program += f" {parts[1] if parts[1] in ('-c', '-m') else ''} {' '.join(runs.split())[:70]!r}"
    return program


def _time_commands(totals: dict[str, float]) -> None:
    """The seconds of each external command the compile runs (:func:`_command_name`)."""
    import subprocess

    for name in ("run", "check_call", "check_output"):
        original = getattr(subprocess, name)

        def timed(*args: Any, __original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            program = _command_name(args[0] if args else kwargs.get("args", "?"))
            started = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                totals[program] = totals.get(program, 0.0) + time.perf_counter() - started

        setattr(subprocess, name, timed)


def child(device: str, package_dir: str, started: float, record_isa_to: str | None) -> None:
    """One build, in this fresh interpreter (the build's environment was set before torch was imported)."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from debug_stages_benchmark import log_mlp

    seconds: dict[str, float] = {"start and imports": time.time() - started}
    steps: dict[str, float] = {}
    for step, target in STEPS.items():
        _time_step(steps, step, target)
    commands: dict[str, float] = {}
    _time_commands(commands)
    model = log_mlp().to(device)
    example = (torch.rand(16, 64, device=device) + 0.5,)
    mark = time.perf_counter()
    exported = torch.export.export(model, example)
    seconds["export"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if record_isa_to is not None:  # what pytest-aoti's compile does first: the ISA probes, answered from the record
        from pytest_aoti.core import isa_verdicts

        os.environ[isa_verdicts.ISA_RECORD_ENV] = str(isa_verdicts.record_path(Path(record_isa_to)))
        isa_verdicts.ready_for_compile()
    path = torch._inductor.aoti_compile_and_package(exported, package_path=os.path.join(package_dir, "model.pt2"))
    seconds["compile"] = time.perf_counter() - mark
    mark = time.perf_counter()
    loaded = torch._inductor.aoti_load_package(path)
    seconds["load"] = time.perf_counter() - mark
    mark = time.perf_counter()
    try:
        loaded(-torch.ones(16, 64, device=device))  # the NaN the test finds
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except RuntimeError:
        pass  # NaN asserts on CUDA
    seconds["run"] = time.perf_counter() - mark
    print(json.dumps({"seconds": seconds, "steps": steps, "commands": commands}))


def _build_env(build: str) -> dict[str, str]:
    from pytest_aoti.debug.stages import kernels_env, tensors_env

    return {"plain": {}, "kernels": kernels_env({}), "tensors": tensors_env((), {})}[build]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--builds", default="plain,kernels,tensors")
    parser.add_argument(
        "--skip-isa-probe",
        action="store_true",
        help="debug builds with TORCHINDUCTOR_VEC_ISA_OK=1, as a debug child whose parent's compile probed gets them",
    )
    parser.add_argument(
        "--isa-verdict",
        action="store_true",
        help="a fresh worker's first compile without, then with, the ISA probe's verdict recorded by the first",
    )
    parser.add_argument("--repeats", type=int, default=1, help="pairs of builds with --isa-verdict")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--record-isa-to", help=argparse.SUPPRESS)
    parser.add_argument("--package-dir", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.device, args.package_dir, args.started, args.record_isa_to)
        return
    if args.isa_verdict:
        isa_verdict(args.device, args.repeats)
        return
    print(f"device {args.device}" + (" (debug builds skip the CPU vector-ISA probe)" if args.skip_isa_probe else ""))

    def probe_skipped(build: str) -> dict[str, str]:
        return {"TORCHINDUCTOR_VEC_ISA_OK": "1"} if args.skip_isa_probe and build != "plain" else {}

    with tempfile.TemporaryDirectory(prefix="compile-breakdown-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor-cache")}
        for build in args.builds.split(","):
            wall, result = _build(args.device, tmp, {**env, **_build_env(build), **probe_skipped(build)}, build)
            _print_build(build, wall, result)


def _build(device: str, package_dir: str, env: dict[str, str], label: str, *extra: str) -> tuple[float, dict[str, Any]]:
    """One build in a fresh interpreter with ``env``: its wall time and what the child measured."""
    command = [sys.executable, __file__, "--child", "--device", device, "--package-dir", package_dir, *extra]
    wall = time.perf_counter()
    done = subprocess.run([*command, "--started", f"{time.time():.6f}"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-4000:], sep="\n")
        raise SystemExit(f"build {label} failed ({done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"]["exit"] = wall - sum(result["seconds"].values())  # shutdown: the GC over torch's objects
    return wall, result


def _print_build(label: str, wall: float, result: dict[str, Any]) -> None:
    parts = ", ".join(f"{name} {value:.1f}" for name, value in result["seconds"].items())
    steps = ", ".join(f"{name} {result['steps'][name]:.1f}" for name in STEPS if name in result["steps"])
    print(f"{label}: {wall:.1f} s in all: {parts}")
    print(f"{' ' * len(label)}  inside compile: {steps}")
    commands = ", ".join(f"{name} {value:.1f}" for name, value in sorted(result["commands"].items()))
    print(f"{' ' * len(label)}  external commands: {commands or 'none'}")


def isa_verdict(device: str, repeats: int) -> None:
    """A fresh worker's first compile (empty Inductor cache each) probing, then given the verdict it recorded."""
    from pytest_aoti.core import isa_verdicts
    from pytest_aoti.core.cache import PackageCache

    print(f"device {device}: a fresh worker's first compile, without and with the recorded ISA-probe verdict")
    env = {key: value for key, value in os.environ.items() if key != "TORCHINDUCTOR_VEC_ISA_OK"}
    compiles: dict[str, list[float]] = {"probing": [], "recorded verdict": []}
    with tempfile.TemporaryDirectory(prefix="compile-breakdown-") as tmp:
        for repeat in range(repeats):
            verdict_dir = Path(tmp) / f"aoti-cache-{repeat}"
            assert PackageCache.open(verdict_dir, max_bytes=1 << 30) is not None  # marked: a verdict may go there
            for label in compiles:
                recorded = bool(isa_verdicts.read_record(isa_verdicts.record_path(verdict_dir)).passed)
                if (label == "recorded verdict") != recorded:
                    raise SystemExit(
                        f"{label}: the verdicts were {'' if recorded else 'not '}recorded before this build"
                    )
                inductor_cache = os.path.join(tmp, f"inductor-{repeat}-{label.replace(' ', '-')}")
                build_env = {**env, "TORCHINDUCTOR_CACHE_DIR": inductor_cache}
                wall, result = _build(device, tmp, build_env, label, "--record-isa-to", str(verdict_dir))
                _print_build(f"{label} (pair {repeat + 1})", wall, result)
                compiles[label].append(result["seconds"]["compile"])
    probing, given = min(compiles["probing"]), min(compiles["recorded verdict"])
    print(f"first compile: probing {probing:.1f} s, with the recorded verdict {given:.1f} s ({given / probing:.2f}x)")


if __name__ == "__main__":
    main()
