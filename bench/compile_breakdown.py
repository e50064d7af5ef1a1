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

    python bench/compile_breakdown.py [--device cpu|cuda] [--builds plain,kernels,tensors]
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


def _time_commands(totals: dict[str, float]) -> None:
    """The seconds of each external command the compile runs (by program name): compilers, linkers, objcopy."""
    import subprocess

    for name in ("run", "check_call", "check_output"):
        original = getattr(subprocess, name)

        def timed(*args: Any, __original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            command = args[0] if args else kwargs.get("args", "?")
            program = os.path.basename(command.split()[0] if isinstance(command, str) else str(command[0]))
            started = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                totals[program] = totals.get(program, 0.0) + time.perf_counter() - started

        setattr(subprocess, name, timed)


def child(device: str, package_dir: str, started: float) -> None:
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
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--package-dir", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.device, args.package_dir, args.started)
        return
    print(f"device {args.device}" + (" (debug builds skip the CPU vector-ISA probe)" if args.skip_isa_probe else ""))

    def probe_skipped(build: str) -> dict[str, str]:
        return {"TORCHINDUCTOR_VEC_ISA_OK": "1"} if args.skip_isa_probe and build != "plain" else {}

    with tempfile.TemporaryDirectory(prefix="compile-breakdown-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor-cache")}
        for build in args.builds.split(","):
            command = [sys.executable, __file__, "--child", "--device", args.device, "--package-dir", tmp]
            wall = time.perf_counter()
            done = subprocess.run(
                [*command, "--started", f"{time.time():.6f}"],
                env={**env, **_build_env(build), **probe_skipped(build)},
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - wall
            if done.returncode != 0:
                print(done.stdout[-2000:], done.stderr[-4000:], sep="\n")
                raise SystemExit(f"build {build} failed ({done.returncode})")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            seconds = result["seconds"]
            seconds["exit"] = wall - sum(seconds.values())  # interpreter shutdown: the GC over torch's objects
            parts = ", ".join(f"{name} {value:.1f}" for name, value in seconds.items())
            steps = ", ".join(f"{name} {result['steps'][name]:.1f}" for name in STEPS if name in result["steps"])
            print(f"{build}: {wall:.1f} s in all: {parts}")
            print(f"{' ' * len(build)}  inside compile: {steps}")
            commands = ", ".join(f"{name} {value:.1f}" for name, value in sorted(result["commands"].items()))
            print(f"{' ' * len(build)}  external commands: {commands or 'none'}")


if __name__ == "__main__":
    main()
