"""What a package's outputs depend on besides the model: torch and its compilers, the CPU, the GPU. Recorded beside
golden outputs and inside self-verifying packages, and diffed against the machine that checks them. The CPU, the
C++ compiler and torch's versions are the machine's one identity (:func:`pytest_aoti.core.machine.machine_identity`),
which the package cache reads too."""

from __future__ import annotations

import functools

import torch

from pytest_aoti.core.machine import machine_identity

# The package a record was made with is worth showing, not diffing: a weight edit changes it by design.
PACKAGE_KEY = "package"


@functools.cache
def cpu_description() -> tuple[str, str]:
    # ATen's CPU capability (AVX2, AVX512, …): what Inductor's ISA probe finds, without compiling test programs.
    return machine_identity().cpu_model, torch.backends.cpu.get_cpu_capability()


def environment(device_type: str, package_key: str | None = None) -> dict[str, str]:
    """What a golden's values depend on besides the model: torch and its compilers, the CPU, the GPU."""
    cpu, isa = cpu_description()
    machine = machine_identity()
    env = {"torch": machine.torch, "cpu": cpu, "cpu isa": isa, "compiler": machine.cxx.version}
    if device_type == "cuda":
        env["cuda"] = str(machine.cuda)
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
