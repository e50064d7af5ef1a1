"""What verifying packages outside the process that asks costs ``python -m pytest_aoti.verify`` and ``pytest
--aoti-verify``, measured in one run.

Verifying a package in the process that loads it let a package with a garbage library take the verifier down (and
every package after it); packages are verified in an interpreter of their own instead, one for as many packages as
it gets through (``server.VerifyServer``). This builds one bundled package (a small MLP) and times, interleaved,
``--rounds`` of: ``verify_package`` in this process (warm: torch and the loader already imported), ``verify_with``
a warm verifying interpreter (what ``pytest --aoti-verify`` does per package after its first), ``verify_in_child``
(a fresh interpreter for one package), and the whole CLI as a deployment script runs it, on the package and on a
directory of 4 copies. It prints the medians, the ratios and how many interpreters the warm side started (1).

    python bench/verify_isolation_cost.py [--rounds 5] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_aoti.core.compiler import compile_model
from pytest_aoti.verify import bundle_io, verify_in_child, verify_package
from pytest_aoti.verify.bundled import verify_with
from pytest_aoti.verify.server import VerifyServer
from tests.aoti_models import MLP


def _seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="verify-isolation-") as work, VerifyServer() as server:
        device = torch.device(options.device)
        args = (torch.randn(4, 8, device=device),)
        compiled = compile_model(MLP().eval().to(device), args, package_dir=Path(work) / "build")
        package = Path(work) / "mlp.pt2"
        bundle_io(compiled.package_path, compiled.exported_program, args, output=package)
        compiled.release()
        copies = Path(work) / "copies"
        copies.mkdir()
        for number in range(4):
            shutil.copy(package, copies / f"copy{number}.pt2")
        cli = [sys.executable, "-m", "pytest_aoti.verify"]
        sides: dict[str, Callable[[], object]] = {
            "in process": lambda: verify_package(package),
            "warm child": lambda: verify_with(server, package),
            "in a child": lambda: verify_in_child(package),
            "CLI": lambda: subprocess.run([*cli, str(package)], check=True, capture_output=True),
            "CLI x4": lambda: subprocess.run([*cli, str(copies)], check=True, capture_output=True),
        }
        for action in sides.values():  # warm-up: imports, the loader, the OS's file cache
            action()
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(options.rounds):
            for name, action in sides.items():
                times[name].append(_seconds(action))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        spread = f"{min(times[name]):.3f}-{max(times[name]):.3f}"
        print(f"{name:>10}: median {median:.3f} s per package (range {spread} s, {options.rounds} rounds)")
    print(f"in a child / in process: {medians['in a child'] / medians['in process']:.1f}x")
    print(f"in a child: +{medians['in a child'] - medians['in process']:.3f} s per package")
    print(f"warm child: +{medians['warm child'] - medians['in process']:.3f} s per package")
    print(f"warm child: {server.started} interpreter(s) started for {options.rounds + 1} packages")
    print(f"CLI, 4 packages / 1 package: {medians['CLI x4'] / medians['CLI']:.2f}x")


if __name__ == "__main__":
    main()
