"""Package-cache benchmark: a reference suite (MLP, conv net, attention block) run cold and warm, each in a fresh
pytest process, and the per-call overhead of a cache hit over a bare ``aoti_load_package``.

    python bench/cache_benchmark.py

Cold means an empty pytest-aoti cache (Inductor's own caches and precompiled headers stay as they are, as on a CI
machine that already compiled once). Prints the wall times and the warm/cold ratio measured in this run.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REFERENCE_SUITE = textwrap.dedent(
    """
    import pytest
    import torch


    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))

        def forward(self, x):
            return self.layers(x)


    class ConvNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.head = torch.nn.Linear(16, 10)

        def forward(self, x):
            return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = torch.nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x):
            return self.attention(x, x, x, need_weights=False)[0]


    @pytest.mark.parametrize(
        "make",
        [
            lambda: (MLP(), (torch.randn(8, 64),)),
            lambda: (ConvNet(), (torch.randn(2, 3, 32, 32),)),
            lambda: (Attention(), (torch.randn(2, 16, 32),)),
        ],
        ids=["mlp", "conv", "attention"],
    )
    def test_reference(aoti_check, make):
        model, args = make()
        aoti_check(model.eval(), args)
    """
)

HIT_OVERHEAD = textwrap.dedent(
    """
    import statistics, sys, time
    from pathlib import Path
    import torch
    from pytest_aoti import PackageCache, compile_model

    cache_dir, build_dir = Path(sys.argv[1]), Path(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).eval()
    args = (torch.randn(8, 64),)
    cache = PackageCache.open(cache_dir, 1 << 30)
    package = compile_model(model, args, package_dir=build_dir, cache=cache).package_path  # fill the cache
    torch._inductor.aoti_load_package(str(package))  # the first load in a process imports Inductor lazily

    def bare():
        torch.export.export(model, args)
        torch._inductor.aoti_load_package(str(package))

    def hit():
        assert compile_model(model, args, package_dir=build_dir, cache=cache).from_cache

    for name, fn in (("bare", bare), ("hit", hit)):
        samples = []
        for _ in range(15):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        print(name, statistics.median(samples))
    """
)


def run_suite(suite_dir: Path, cache_dir: Path) -> float:
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--aoti-cache-dir={cache_dir}"]
    subprocess.run([*command, str(suite_dir)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        suite = root / "suite"
        suite.mkdir()
        (suite / "test_reference.py").write_text(REFERENCE_SUITE)
        cold = run_suite(suite, root / "cache")
        warm = statistics.median(run_suite(suite, root / "cache") for _ in range(2))
        print(f"reference suite (3 models), fresh pytest process each: cold {cold:.1f} s, warm {warm:.1f} s")
        print(f"warm/cold ratio: {warm / cold:.3f}  (target <= 0.2)")

        script = root / "hit_overhead.py"
        script.write_text(HIT_OVERHEAD)
        output = subprocess.run(
            [sys.executable, str(script), str(root / "cache2"), str(root / "build")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        medians = dict(line.split() for line in output.splitlines() if line.startswith(("bare", "hit")))
        bare, hit = float(medians["bare"]), float(medians["hit"])
        print(
            f"per test: export + bare aoti_load_package {bare * 1000:.1f} ms, cache hit {hit * 1000:.1f} ms, "
            f"overhead {(hit - bare) * 1000:.1f} ms (target <= 100 ms)"
        )


if __name__ == "__main__":
    main()
