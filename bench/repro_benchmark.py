"""What ``python repro.py`` costs, measured in one run: a repro bundle of a NaN made inside a compiled kernel (as the
debug child writes one), reproduced three times on the package that failed (the default where this machine's torch
built it) and three times with ``--recompile`` (the path on another machine or torch). Prints the median seconds of
each, from the command to its exit, and their ratio.

    python bench/repro_benchmark.py

Both start an interpreter that imports torch and runs the call; only ``--recompile`` compiles. On CPU a compile of
this graph takes a few seconds; on a GPU machine one takes a minute or more (docs/gpu-validation.md), so the ratio
there is larger.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pytest_aoti.debug.bundle import write_inputs, write_program
from pytest_aoti.debug.child import private_tmpdir

ROUNDS = 3


class LogModel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x) * 2


def bundle(directory: Path, scratch: Path) -> Path:
    """A bundle as the debug child writes one (no custom ops, no debug environment)."""
    program = torch.export.export(LogModel(), (torch.rand(4, 3) + 0.5,))
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(scratch / "built.pt2"))
    write_program(directory, program, Path(package), {}, [])
    write_inputs(directory, (-torch.ones(4, 3),), {})
    return directory


def reproduce(repro: Path, *args: str) -> tuple[float, str]:
    started = time.monotonic()
    run = subprocess.run([sys.executable, str(repro), *args], capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - started
    assert run.returncode == 1 and "reproduced: output 0 holds 12 NaN/Inf" in run.stderr, run.stdout + run.stderr
    return seconds, run.stdout.splitlines()[0]


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        os.environ["TMPDIR"] = str(private_tmpdir(root))  # what the loads extract goes away with the scratch dir
        repro = bundle(root / "bundle", root) / "repro.py"
        results: dict[str, list[float]] = {}
        for label, args in (("the package that failed", ()), ("--recompile", ("--recompile",))):
            for _ in range(ROUNDS):
                seconds, said = reproduce(repro, *args)
                results.setdefault(label, []).append(seconds)
            print(f"{label}: {said}")
        run, recompile = (statistics.median(times) for times in results.values())
        print(f"python repro.py, median of {ROUNDS}: {run:.2f} s on the package that failed")
        print(f"python repro.py --recompile, median of {ROUNDS}: {recompile:.2f} s")
        print(f"ratio: recompiling takes {recompile / run:.1f}x as long")


if __name__ == "__main__":
    main()
