"""How xdist workers share the host (pytest_aoti/cache/fleet.py, issue 63), in real pytest runs with real workers:
``--aoti-compile-threads per-worker`` gives each worker's Inductor its share of the cores and never overrides the
user's ``TORCHINDUCTOR_COMPILE_THREADS``; ``--aoti-schedule longest-first`` sends the tests whose packages took
longest to compile (the cache's sidecars) first. Two workers compiling the same key: tests/test_cache.py's
``test_two_processes_compile_once``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_aoti.core.cache import PackageCache
from tests.conftest import RunPytest

THREADS_TESTS = """
import os
from pathlib import Path


def _record(name):
    import torch._inductor.config as config

    line = f"{os.environ.get('TORCHINDUCTOR_COMPILE_THREADS')} {config.compile_threads}"
    Path(f"threads-{os.environ.get('PYTEST_XDIST_WORKER', 'none')}-{name}").write_text(line)


def test_one():
    _record("one")


def test_two():
    _record("two")
"""


def _threads_seen(directory: Path) -> set[str]:
    return {path.read_text() for path in directory.glob("threads-*")}


def test_each_worker_compiles_with_its_share_of_the_cores_unless_the_user_chose(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_threads=THREADS_TESTS)
    cores = len(os.sched_getaffinity(0))
    share = max(1, min(32, cores // 2))
    run_pytest("-n", "2", "-p", "no:randomly", "--aoti-compile-threads=per-worker").assert_outcomes(passed=2)
    assert _threads_seen(pytester.path) == {f"{share} {share}"}
    for path in pytester.path.glob("threads-*"):
        path.unlink()
    run_pytest("-n", "2", "-p", "no:randomly").assert_outcomes(passed=2)  # the default: Inductor's own choice
    assert _threads_seen(pytester.path) == {f"None {min(32, cores)}"}
    for path in pytester.path.glob("threads-*"):
        path.unlink()
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "3")
    run_pytest("-n", "2", "--aoti-compile-threads=per-worker", fresh=True).assert_outcomes(passed=2)
    assert _threads_seen(pytester.path) == {"3 3"}
    for path in pytester.path.glob("threads-*"):
        path.unlink()
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS")
    pytester.makeconftest("import torch._inductor.config\n\ntorch._inductor.config.compile_threads = 5\n")
    run_pytest("-n", "2", "--aoti-compile-threads=per-worker", fresh=True).assert_outcomes(passed=2)
    assert _threads_seen(pytester.path) == {f"{share} 5"}  # the conftest's value; the variable is for children


def test_a_bad_compile_threads_or_schedule_value_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makepyfile(test_threads=THREADS_TESTS)
    result = run_pytest("--aoti-compile-threads=8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--aoti-compile-threads: expected one of inductor, per-worker, got '8'" in result.stderr.str()
    pytester.makeini("[pytest]\naoti_schedule = shortest\n")
    result = run_pytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini option aoti_schedule: expected one of longest-first, collection, got 'shortest'" in result.stderr.str()


ORDER_TESTS = """
import os
from pathlib import Path


def _ran(name):
    with Path("order.log").open("a") as log:
        log.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'none')} {name}\\n")


def test_short():
    _ran("short")


def test_new():
    _ran("new")


def test_long():
    _ran("long")


def test_middle():
    _ran("middle")
"""


def _cache_with_records(root: Path, seconds: dict[str, float]) -> Path:
    """A cache dir whose sidecars say which test built each entry and how long it compiled."""
    assert PackageCache.open(root, max_bytes=1 << 30) is not None
    for index, (owner, took) in enumerate(seconds.items()):
        key = f"{index:02x}" * 32
        (root / key[:2]).mkdir(mode=0o700, exist_ok=True)
        (root / key[:2] / f"{key}.json").write_text(json.dumps({"owner": owner, "compile_seconds": took}))
    return root


def _per_worker(log: Path) -> set[tuple[str, ...]]:
    """The tests each worker ran, in its order (which worker got which share is not the point)."""
    ran: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        worker, name = line.split()
        ran.setdefault(worker, []).append(name)
    log.unlink()
    return {tuple(names) for names in ran.values()}


def test_the_longest_recorded_compiles_are_sent_first_under_dist_load(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path
) -> None:
    """xdist's load scheduling hands each worker a run of consecutive tests from the front (two each here): the
    longest recorded compiles are at the front (the new test before them), and each worker runs its run in order."""
    pytester.makepyfile(test_order=ORDER_TESTS)
    records = {"test_order.py::test_short": 2.0, "test_order.py::test_long": 40.0, "test_order.py::test_middle": 9.0}
    cache = _cache_with_records(tmp_path / "cache", records)
    log = pytester.path / "order.log"
    run_pytest("-n", "2", "-p", "no:randomly", cache=cache).assert_outcomes(passed=4)
    assert _per_worker(log) == {("new", "long"), ("middle", "short")}  # the order: new, long, middle, short
    run_pytest("-n", "2", "-p", "no:randomly", "--aoti-schedule=collection", cache=cache).assert_outcomes(passed=4)
    assert _per_worker(log) == {("short", "new"), ("long", "middle")}  # pytest's order: short, new, long, middle
    run_pytest("-n", "1", "-p", "no:randomly", cache=cache).assert_outcomes(passed=4)  # one worker: pytest's order
    assert _per_worker(log) == {("short", "new", "long", "middle")}
