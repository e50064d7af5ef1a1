"""Package-cache benchmark, everything measured in one run:

- a reference suite (MLP, conv net, attention block) run cold in checkout A, then warm in checkout B (a copy of the
  same files in another directory, the model source shifted by a comment block), same cache dir: warm/cold and hits;
- a failing test under ``--aoti-debug`` run twice with the same cache dir: repeated/first;
- the per-call overhead of a cache hit over a bare ``export`` + ``aoti_load_package``.

    python bench/cache_benchmark.py

Cold means an empty pytest-aoti cache (Inductor's own caches and precompiled headers stay as they are, as on a CI
machine that already compiled once).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from pytest_aoti.debug.child import private_tmpdir

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


    # (comment block: checkout B shifts every line below)
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

DEBUG_SUITE = textwrap.dedent(
    """
    import torch


    class LogModel(torch.nn.Module):
        def forward(self, x):
            return torch.log(x) * 2


    def test_nan(aoti_compile):
        aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))(-torch.ones(4, 3))
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


def run_suite(suite_dir: Path, cache_dir: Path, *extra: str) -> tuple[float, str]:
    """Run pytest in ``suite_dir`` (its own cwd and rootdir) and return the wall time and the aoti cache line."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--aoti-cache-dir={cache_dir}", *extra]
    output = subprocess.run(command, cwd=suite_dir, stdout=subprocess.PIPE, text=True).stdout
    seconds = time.perf_counter() - started
    cache_line = next((line for line in output.splitlines() if line.startswith("aoti cache:")), "no cache line")
    return seconds, cache_line


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        checkout_a, checkout_b = root / "checkout-a" / "suite", root / "elsewhere" / "checkout-b" / "suite"
        for checkout, shift in ((checkout_a, ""), (checkout_b, "# an edit that moves every line\n" * 7)):
            checkout.mkdir(parents=True)
            (checkout / "test_reference.py").write_text(shift + REFERENCE_SUITE)
        cold, cold_line = run_suite(checkout_a, root / "cache")
        warm, warm_line = run_suite(checkout_b, root / "cache")
        print(f"reference suite (3 models): cold in checkout A {cold:.1f} s ({cold_line})")
        print(f"                            warm in checkout B {warm:.1f} s ({warm_line})")
        print(f"warm/cold ratio across checkouts: {warm / cold:.3f}  (target <= 0.2)")

        debug_suite = root / "debug"
        debug_suite.mkdir()
        (debug_suite / "test_debug.py").write_text(DEBUG_SUITE)
        first, _ = run_suite(debug_suite, root / "debug-cache", "--aoti-debug")
        repeated, repeated_line = run_suite(debug_suite, root / "debug-cache", "--aoti-debug")
        print(f"--aoti-debug on one failing test: first {first:.1f} s, repeated {repeated:.1f} s ({repeated_line})")
        print(f"repeated/first debug ratio: {repeated / first:.3f}  (target <= 0.3)")

        script = root / "hit_overhead.py"
        script.write_text(HIT_OVERHEAD)
        # Each bare aoti_load_package extracts the package under TMPDIR and leaves it there: a private one (still
        # sharing Inductor's headers) goes away with the scratch dir.
        tmpdir = private_tmpdir(root)
        output = subprocess.run(
            [sys.executable, str(script), str(root / "cache2"), str(root / "build")],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "TMPDIR": str(tmpdir)},
        ).stdout
        medians = dict(line.split() for line in output.splitlines() if line.startswith(("bare", "hit")))
        bare, hit = float(medians["bare"]), float(medians["hit"])
        print(
            f"per test: export + bare aoti_load_package {bare * 1000:.1f} ms, cache hit {hit * 1000:.1f} ms, "
            f"overhead {(hit - bare) * 1000:.1f} ms (target <= 100 ms)"
        )


if __name__ == "__main__":
    main()
