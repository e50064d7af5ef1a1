"""One GPU per xdist worker against every worker on cuda:0, measured in one run on a multi-GPU host.

A suite of 8 CUDA models (distinct widths: 8 packages), each test compiling and checking its model with
``aoti_check`` and then calling the package 500 times on a large batch (GPU-bound matmuls). The packages are
compiled first for every GPU (warm-up runs pinned to each GPU, in parallel; compiling is CPU work and the same either
way), then the suite runs under ``-n 2`` twice: ``--aoti-device=auto`` (gw0 on cuda:0, gw1 on cuda:1) and
``--aoti-device=cuda:0`` (both workers on one GPU). Prints both wall times, their ratio and the GPU each test ran
on (the JUnit property ``aoti_device``).

    LD_PRELOAD=libstdc++.so.6 python bench/multi_gpu_benchmark.py [--dir DIR --phase warm|timed]

(``--phase warm`` then ``--phase timed`` with one ``--dir``: the compiles can overlap other work, the timed runs not.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from numerics_benchmark import _plugin_args  # bench/ is on sys.path when this script runs

SUITE = textwrap.dedent(
    """
    import pytest
    import torch


    class Tower(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x = torch.tanh(layer(x))
            return x


    @pytest.mark.parametrize("width", [3072, 3200, 3328, 3456, 3584, 3712, 3840, 3968])
    def test_model(aoti_check, aoti_device, width):
        batch = torch.randn(4096, width, device=aoti_device)
        compiled = aoti_check(Tower(width).eval(), (batch,), rtol=1e-3, atol=1e-3)
        for _ in range(500):
            compiled(batch)
        torch.cuda.synchronize(aoti_device)
    """
)


def _pytest(root: Path, cache: Path, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "-q", "-p", "no:logging"]
    command += [f"--aoti-cache-dir={cache}", *extra]
    return subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finished(process: subprocess.Popen[str]) -> str:
    """The run's output; all of its end when a test did not pass (the numbers would not mean anything)."""
    output, _ = process.communicate()
    if process.returncode != 0:
        print(output[-6000:])
    return output


def _timed(root: Path, cache: Path, *extra: str) -> tuple[float, str]:
    started = time.perf_counter()
    output = _finished(_pytest(root, cache, *extra))
    return time.perf_counter() - started, output


def _devices(junit: Path) -> list[str]:
    cases = ET.parse(junit).getroot().iter("testcase")
    return [
        f"{case.get('name')}: "
        + next((p.get("value", "?") for p in case.iter("property") if p.get("name") == "aoti_device"), "?")
        for case in cases
    ]


def warm_up(root: Path, cache: Path) -> None:
    started = time.perf_counter()
    warmups = [_pytest(root, cache, "-n", "8", f"--aoti-device=cuda:{index}") for index in (0, 1)]
    for warmup in warmups:
        output = _finished(warmup)
        print("warm-up:", output.strip().splitlines()[-1])
    print(f"warm-up (8 packages x 2 GPUs, compiled in parallel): {time.perf_counter() - started:.1f} s")


def timed(root: Path, cache: Path) -> None:
    spread, spread_out = _timed(root, cache, "-n", "2", "--aoti-device=auto", f"--junitxml={root / 'spread.xml'}")
    pinned, pinned_out = _timed(root, cache, "-n", "2", "--aoti-device=cuda:0", f"--junitxml={root / 'pinned.xml'}")
    print(f"-n 2, one GPU per worker (auto): {spread:.1f} s; {spread_out.strip().splitlines()[-1]}")
    print(f"-n 2, both workers on cuda:0:   {pinned:.1f} s; {pinned_out.strip().splitlines()[-1]}")
    print(f"ratio pinned / spread: {pinned / spread:.2f}")
    print("devices (auto):", *_devices(root / "spread.xml"), sep="\n  ")
    print("devices (pinned):", *_devices(root / "pinned.xml"), sep="\n  ")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, help="work dir kept between phases (default: a temporary one)")
    parser.add_argument("--phase", choices=("all", "warm", "timed"), default="all")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="multi-gpu-bench-") as tmp:
        root = options.dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        cache = root / "cache"
        (root / "test_models.py").write_text(SUITE)
        if options.phase in ("all", "warm"):
            warm_up(root, cache)
        if options.phase in ("all", "timed"):
            timed(root, cache)


if __name__ == "__main__":
    main()
