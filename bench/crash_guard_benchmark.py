"""What crash survival costs a healthy suite, measured in one run: the 3-model CPU reference suite (no crash) under
``pytest --aoti-debug`` (one supervised xdist worker) against plain ``pytest``, both with a cold package cache
(``--aoti-no-cache``: every model compiles, as in a CI job without a kept cache) and both warm (cache hits).
Runs alternate, several rounds, medians compared.

    python bench/crash_guard_benchmark.py [rounds]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cache_benchmark import REFERENCE_SUITE  # bench/ is on sys.path when this script runs


def _run(suite: Path, cache: Path, *extra: str) -> float:
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--aoti-cache-dir={cache}", *extra]
    done = subprocess.run(command, cwd=suite, stdout=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    return time.perf_counter() - started


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as scratch:
        suite, cache = Path(scratch) / "suite", Path(scratch) / "cache"
        suite.mkdir()
        (suite / "test_reference.py").write_text(REFERENCE_SUITE)
        _run(suite, cache)  # warm the cache and Inductor's own caches once
        for label, extra in (("cold (--aoti-no-cache)", ("--aoti-no-cache",)), ("warm (cache hits)", ())):
            plain, debug = [], []
            for _ in range(rounds):
                plain.append(_run(suite, cache, *extra))
                debug.append(_run(suite, cache, "--aoti-debug", *extra))
            ratio = statistics.median(debug) / statistics.median(plain)
            print(
                f"{label}: plain {statistics.median(plain):.1f} s, --aoti-debug {statistics.median(debug):.1f} s "
                f"(median of {rounds}): ratio {ratio:.3f}"
            )


if __name__ == "__main__":
    main()
