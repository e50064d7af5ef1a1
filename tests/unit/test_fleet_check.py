"""``bench/fleet.py --check``, the bench's smoke form in .ci/run: what fails it, from each run's summary line (the
runs themselves: .ci/run's `bench/fleet.py --models bert -n 2 --check`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _fleet() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_bench", BENCH / "fleet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fleet_bench", module)
    spec.loader.exec_module(module)
    return module


def test_a_clean_run_passes_and_each_fault_fails_it() -> None:
    fleet = _fleet()
    run = fleet.Measured
    clean = [
        run("(b) hand-written loop", 1, 1, "2 passed, 0 failed; 3.0 s per model summed"),
        run("(a) pytest-aoti cold", 1, 1, "2 passed; aoti cache: 0 hits (0 remote), 2 misses, 9.1 s compiling"),
        run("(c) pytest-aoti warm", 1, 1, "2 passed; aoti cache: 2 hits (0 remote), 0 misses, 0.0 s compiling"),
        run("(d) fresh runner, Redis", 1, 1, "2 passed; aoti cache: 2 hits (2 remote), 0 misses, 0.0 s compiling"),
    ]
    assert fleet._problems(clean, 2) == []
    faults = {
        0: "1 passed, 1 failed; 3.0 s per model summed",  # a model the loop could not compile
        1: "1 failed, 1 passed; aoti cache: 0 hits (0 remote), 2 misses",
        2: "2 passed; aoti cache: 1 hits (0 remote), 1 misses",  # a key moved between two runs of one tree
        3: "2 passed; aoti cache: 2 hits (1 remote), 0 misses",  # a package the fresh runner compiled itself
    }
    for index, note in faults.items():
        faulty = [*clean]
        faulty[index] = run(clean[index].name, 1, 1, note)
        problems = fleet._problems(faulty, 2)
        assert len(problems) == 1 and problems[0].startswith(clean[index].name), (index, problems)
    assert fleet._problems(clean[:3], 2) == ["(d) did not run (no redis-server)"]
