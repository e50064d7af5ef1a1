"""The project's own suite on a busy machine: two busy-loop processes hold both CPUs while ``pytest tests -n 2`` runs.
Prints the suite's outcome and wall time; exits with the suite's status. No test asserts on speed, so the outcome
must be the quiet machine's.

    python bench/suite_under_load.py [extra pytest args]
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time


def spin_forever() -> None:
    """A CPU hog (also ``benchmark_fail_rule.py``'s)."""
    while True:
        pass


def main() -> int:
    hogs = [multiprocessing.Process(target=spin_forever, daemon=True) for _ in range(2)]
    for hog in hogs:
        hog.start()
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "tests", "-n", "2", "-q", "-p", "no:cacheprovider", *sys.argv[1:]]
        )
    finally:
        for hog in hogs:
            hog.kill()
    print(f"suite under two CPU hogs: exit {done.returncode} in {time.perf_counter() - started:.0f} s")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
