"""What a package's outputs depend on besides the model: torch and its compilers, the CPU, the GPU. Recorded beside
golden outputs and inside self-verifying packages, and diffed against the machine that checks them."""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path

import torch

# The package a record was made with is worth showing, not diffing: a weight edit changes it by design.
PACKAGE_KEY = "package"


@functools.cache
def _compiler() -> str:
    try:
        from pytest_aoti.core.torch_private import cpp_compiler

        compiler = cpp_compiler()
        first = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
        return first.splitlines()[0].strip() if first else compiler
    except Exception as error:  # private API or no compiler: say so rather than fail a test over a record
        return f"unknown ({type(error).__name__})"


@functools.cache
def cpu_description() -> tuple[str, str]:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    # ATen's CPU capability (AVX2, AVX512, …): what Inductor's ISA probe finds, without compiling test programs.
    isa = torch.backends.cpu.get_cpu_capability()
    return model, isa


def environment(device_type: str, package_key: str | None = None) -> dict[str, str]:
    """What a golden's values depend on besides the model: torch and its compilers, the CPU, the GPU."""
    cpu, isa = cpu_description()
    env = {"torch": torch.__version__, "cpu": cpu, "cpu isa": isa, "compiler": _compiler()}
    if device_type == "cuda":
        env["cuda"] = str(torch.version.cuda)
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        env["gpu"] = f"{torch.cuda.get_device_name(index)} (sm_{major}{minor})"
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            env["triton"] = "not installed"
    if package_key:
        env[PACKAGE_KEY] = package_key
    return env


def environment_diff(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """``torch 2.11.0+cu130 → 2.13.0`` for each recorded fact that changed (the package key aside)."""
    keys = [key for key in {**recorded, **now} if key != PACKAGE_KEY]
    return [
        f"{key} {recorded.get(key, '(not recorded)')} → {now.get(key, '(none)')}"
        for key in keys
        if recorded.get(key) != now.get(key)
    ]
