"""What stage numerics costs, measured in one run: a package-vs-eager mismatch (the planted call-counter model of
tests/test_numerics.py) run with an empty package cache, first plainly, then under ``--aoti-debug`` with another
empty cache. Prints both times, their ratio, the stage's own seconds and the number of compiles each run made.

    python bench/numerics_benchmark.py [--device cpu|cuda]

The stage is one extra compile (printer mode 1 and provenance tracking change codegen) plus the comparison.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SUITE = textwrap.dedent(
    """
    import torch


    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Linear(64, 128)
            self.second = torch.nn.Linear(128, 32)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            h = torch.relu(self.first(x)) * self.calls + 0.5
            return torch.softmax(self.second(h), dim=-1)


    def test_counter(aoti_check, aoti_device):
        x = torch.randn(16, 64, device=aoti_device)
        aoti_check(Counter(), (x,), more_inputs=[(torch.randn(16, 64, device=aoti_device),)])
    """
)


def _plugin_args() -> list[str]:
    installed = any(ep.value == "pytest_aoti.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_aoti.plugin"]


def _run(directory: Path, cache: Path, device: str, *extra: str) -> tuple[float, str]:
    command = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "-q"]
    command += [f"--aoti-cache-dir={cache}", f"--aoti-device={device}", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    device = parser.parse_args().device
    with tempfile.TemporaryDirectory(prefix="numerics-bench-") as tmp:
        root = Path(tmp)
        (root / "test_counter.py").write_text(SUITE)
        plain, plain_out = _run(root, root / "cache-plain", device)
        debug, debug_out = _run(root, root / "cache-debug", device, "--aoti-debug")
    stage = re.search(r"^stage numerics \(.*\): .* \[([\d.]+) s\]$", debug_out, re.MULTILINE)
    verdict = re.search(r"first divergent kernel: \S+", debug_out)
    misses = [int(m) for m in re.findall(r"^aoti cache: \d+ hits, (\d+) misses", debug_out, re.MULTILINE)]
    print(f"device {device}")
    print(f"plain run (1 compile): {plain:.1f} s")
    print(f"--aoti-debug run: {debug:.1f} s ({sum(misses)} compiles: parent {misses[:1]}, numerics child {misses[1:]})")
    print(f"stage numerics: {stage.group(1) if stage else '?'} s; verdict: {verdict.group(0) if verdict else '?'}")
    print(f"ratio debug/plain: {debug / plain:.2f}")
    if verdict is None:
        print(plain_out[-2000:], debug_out[-4000:], sep="\n")


if __name__ == "__main__":
    main()
