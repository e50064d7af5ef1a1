"""The package cache's statistics across xdist workers (``cache/stats.py``), in-process: the controller's side fed
the reports a worker would send, with a fake worker node (as tests/unit/test_crash_route.py does). The real workers
are in tests/test_isa_verdicts.py and tests/test_remote_cache_runs.py (the controller's cache line counts theirs)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pytest_aoti
from pytest_aoti.cache.stats import WORKER_STATS, WorkerStats, cache_stats, summary_line, worker_stats_key

PACKAGE = Path(pytest_aoti.__file__).parent
NODEID = "test_user.py::test_model"


class FakeNode:
    """What the controller reads of xdist's ``WorkerController``: no gateway (no process), its output dict."""

    def __init__(self) -> None:
        self.workeroutput: dict[str, Any] = {}


@pytest.fixture
def config(pytester: pytest.Pytester, tmp_path: Path) -> Iterator[pytest.Config]:
    """A real configured session's config with the cache on (the cache plugin registers :class:`WorkerStats`)."""
    config = pytester.parseconfigure("-p", "no:cacheprovider", "-p", "no:terminal", "--aoti-cache-dir", str(tmp_path))
    yield config
    config._ensure_unconfigure()


def _worker_teardown(node: FakeNode, stats: dict[str, Any]) -> pytest.TestReport:
    """A teardown report as the controller receives it from ``node``: xdist sets ``report.node``."""
    report = pytest.TestReport(NODEID, ("test_user.py", 3, "test_model"), {}, "passed", None, "teardown")  # type: ignore[arg-type]
    report.node = node  # type: ignore[attr-defined]
    setattr(report, WORKER_STATS, stats)
    return report


def _registered(config: pytest.Config) -> WorkerStats:
    plugin = config.pluginmanager.get_plugin("aoti-cache-stats")
    assert isinstance(plugin, WorkerStats)
    return plugin


def test_a_crashed_workers_cache_statistics_are_its_last_reported(config: pytest.Config) -> None:
    """A worker that crashes sends no workeroutput: the aoti cache line still counts what it did, as of the last
    teardown report it sent. A worker that ends normally reports its final figures."""
    stats = _registered(config)
    crashed, ended = FakeNode(), FakeNode()
    as_of_teardown = {"hits": 1, "misses": 0, "refused": []}
    config.hook.pytest_runtest_logreport(report=_worker_teardown(crashed, as_of_teardown))
    config.hook.pytest_runtest_logreport(report=_worker_teardown(ended, {"hits": 5}))
    ended.workeroutput[WORKER_STATS] = {"hits": 6, "misses": 1, "refused": []}
    stats.pytest_testnodedown(node=crashed, error="Not properly terminated")
    stats.pytest_testnodedown(node=ended, error=None)
    assert config.stash[worker_stats_key] == [as_of_teardown, {"hits": 6, "misses": 1, "refused": []}]
    assert stats.last_reported == {}
    assert cache_stats(config) == config.stash[worker_stats_key]  # no compile in this process: no cache opened
    assert summary_line(config) == "aoti cache: 7 hits, 1 misses, 0.0 s compiling, 0.0 s saved"


def test_no_cache_in_any_process_has_no_line(config: pytest.Config) -> None:
    assert cache_stats(config) == [] and summary_line(config) is None


def test_the_statistics_survive_pytests_serialization(config: pytest.Config) -> None:
    """xdist moves reports with pytest_report_to_serializable / _from_serializable: the statistics go with them."""
    report = _worker_teardown(FakeNode(), {"hits": 2, "misses": 0, "refused": ["ab12: tampered"]})
    del report.node  # type: ignore[attr-defined]  # a worker's own report: xdist sets the node on arrival
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    received = config.hook.pytest_report_from_serializable(config=config, data=data)
    assert getattr(received, WORKER_STATS) == {"hits": 2, "misses": 0, "refused": ["ab12: tampered"]}


def test_only_the_cache_writes_the_name_its_workers_send_their_statistics_under() -> None:
    """The workeroutput key and report attribute is published by its owner (``cache.stats.WORKER_STATS``): a
    literal of it elsewhere couples two parts the import linter cannot see."""
    owner = PACKAGE / "cache" / "stats.py"
    literals = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != owner
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value == WORKER_STATS
    ]
    assert literals == []
    assert WORKER_STATS == "aoti_cache_stats"  # the wire name between a worker and its controller


def test_nothing_of_the_cache_statistics_is_in_the_debug_rerun() -> None:
    """The debug rerun's record of a report carries no cache statistics; the aoti section asks the cache for its
    line (``cache.stats.summary_line``) and reads no statistics itself."""
    from pytest_aoti.debug.crash_route import ReportRecord

    assert not any("cache" in name for name in ReportRecord.__dataclass_fields__)
    debug = PACKAGE / "debug"
    for path in sorted(debug.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for name in ("cache_stats", "worker_stats_key", "cache_summary", "CacheStats", "WorkerStats"):
            assert name not in source, f"{path.relative_to(PACKAGE)} names {name}"
