"""The package cache's statistics in a session: this process's (``core.cache.CacheStats``), its xdist workers' merged
into the controller, and the lines that tell them: the cache line of the ``aoti`` terminal summary (a child writes
its own in its log), the CI summary and the ``--aoti-html`` page, and a line per miss under ``-v``.

A worker's statistics reach the controller twice: with each teardown report (attribute :data:`WORKER_STATS`), so a
worker that crashes still counts as of its last test, and in its ``workeroutput`` (key :data:`WORKER_STATS`) when
it ends; the controller keeps the last it has of each worker (:class:`WorkerStats`)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_aoti import roles
from pytest_aoti.cache.session import cache_key

# A worker's statistics as plain values: the attribute of its teardown reports and the key of its workeroutput.
WORKER_STATS = "aoti_cache_stats"

worker_stats_key = pytest.StashKey[list[dict[str, Any]]]()


def cache_stats(config: pytest.Config) -> list[dict[str, Any]]:
    """This process's cache statistics and, in an xdist controller, its workers'."""
    cache = config.stash.get(cache_key, None)
    own = [cache.stats.as_dict()] if cache is not None else []
    return [*config.stash.get(worker_stats_key, []), *own]


def summary_line(config: pytest.Config) -> str | None:
    """The cache line over this process's statistics and its workers' (:func:`cache_summary`); None when no
    process of the session had a cache."""
    stats = cache_stats(config)
    return cache_summary(stats) if stats else None


class WorkerStats:
    """Each xdist worker's statistics, sent by the worker and merged by the controller (registered by the cache's
    plugin in every process that has a cache)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.last_reported: dict[int, dict[str, Any]] = {}  # each worker's, by id(node), from its teardown reports

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        cache = item.config.stash.get(cache_key, None)
        if report.when == "teardown" and cache is not None and roles.is_worker(item.config):
            setattr(report, WORKER_STATS, cache.stats.as_dict())  # xdist sends a report's attributes along
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        stats = getattr(report, WORKER_STATS, None)
        node = getattr(report, "node", None)  # the worker, on a report the controller received
        if isinstance(stats, dict) and node is not None:
            self.last_reported[id(node)] = stats

    # First: the debug rerun's controller may end the session here (pytest.exit) once it has read the worker's end.
    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker ended: its final statistics, or those of its last teardown report if it crashed (a worker that
        crashes sends no ``workeroutput``)."""
        last_reported = self.last_reported.pop(id(node), None)
        stats = getattr(node, "workeroutput", {}).get(WORKER_STATS) or last_reported
        if stats:
            self.config.stash.setdefault(worker_stats_key, []).append(stats)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = self.config.stash.get(cache_key, None)
        workeroutput = getattr(self.config, "workeroutput", None)  # an xdist worker's, sent to the controller
        if cache is not None and isinstance(workeroutput, dict):
            workeroutput[WORKER_STATS] = cache.stats.as_dict()


# Refused entries named per reason in the summary: the first few keys, then how many more.
_KEYS_SHOWN = 3
# This many entries signed with another secret, and more of them than entries this run's secret verified: the
# runner's own secret is the likely cause (it differs from the one the fleet signs with).
_OTHER_SECRET_HINT_AT = 2


def cache_summary(stats: list[dict[str, Any]]) -> str:
    """One line over the cache statistics of this process and of every xdist worker:
    ``aoti cache: 5 hits (3 remote), 1 misses, ...``; refused remote entries are named, with the remote cache's
    state when it is not used or not the usual (signed, read-write)."""
    total = {
        key: sum(s.get(key, 0) for s in stats)
        for key in (
            "hits",
            "misses",
            "compile_seconds",
            "saved_seconds",
            "corrupt",
            "remote_hits",
            "uploaded",
            "misses_without_entry",
        )
    }
    remote = any(s.get("remote_in_use") for s in stats)
    hits = f"{int(total['hits'])} hits" + (f" ({int(total['remote_hits'])} remote)" if remote else "")
    line = (
        f"aoti cache: {hits}, {int(total['misses'])} misses, "
        f"{total['compile_seconds']:.1f} s compiling, {total['saved_seconds']:.1f} s saved"
    )
    if total["misses_without_entry"]:
        line += f", {int(total['misses_without_entry'])} of them new (no earlier entry)"
    if total["uploaded"]:
        line += f", {int(total['uploaded'])} uploaded"
    if total["corrupt"]:
        line += f", {int(total['corrupt'])} corrupt entries recompiled"
    line += _refused_text([entry for s in stats for entry in s.get("refused", [])], int(total["remote_hits"]))
    problems = sorted({s["remote_problem"] for s in stats if s.get("remote_problem")})
    if problems:
        line += f"; the remote cache {'; '.join(problems)}"
    states = sorted({s["remote_state"] for s in stats if s.get("remote_state")})
    if states and not problems:
        line += f"; remote cache {'; '.join(states)}"
    return line


def _refused_text(refused: list[str], remote_hits: int) -> str:
    """``, 3 remote entries refused and recompiled (ab12…, cd34…: tampered (…))``: the keys grouped by reason,
    and a hint at the runner's own secret when most of what it read was signed with another."""
    from pytest_aoti.core.remote_cache import OTHER_SECRET, SECRET_ENV

    if not refused:
        return ""
    by_reason: dict[str, list[str]] = {}
    for entry in refused:
        key, _, reason = entry.partition(": ")
        by_reason.setdefault(reason, []).append(key)
    groups = []
    for reason, keys in by_reason.items():
        more = f" and {len(keys) - _KEYS_SHOWN} more" if len(keys) > _KEYS_SHOWN else ""
        groups.append(f"{', '.join(keys[:_KEYS_SHOWN])}{more}: {reason}")
    entries = "remote entry" if len(refused) == 1 else "remote entries"
    text = f", {len(refused)} {entries} refused and recompiled ({'; '.join(groups)})"
    other_secret = len(by_reason.get(OTHER_SECRET, []))
    if other_secret >= _OTHER_SECRET_HINT_AT and other_secret > remote_hits:
        text += (
            f"; {other_secret} signed with another secret and {remote_hits} verified: check {SECRET_ENV} (this "
            "runner's secret likely differs from the one that signed the entries)"
        )
    return text


def miss_lines(stats: list[dict[str, Any]]) -> list[str]:
    """``aoti cache: <test> missed: <what differs>`` for each miss of this process and of every xdist worker."""
    return [f"aoti cache: {line}" for s in stats for line in s.get("missed", []) if isinstance(line, str)]
