"""A Markdown summary of the run for the CI page: where ``GITHUB_STEP_SUMMARY`` names a file (GitHub Actions sets it
in every step), the session the user started appends the tests that did not pass with their debug verdicts, the
golden-output results, the benchmark table and the cache line.

Everything is read where pytest keeps it: the reports in ``terminalreporter.stats`` and their ``user_properties``
(what the features put in JUnit: ``aoti_verdict``, ``aoti_snapshot``, ``aoti_latency_ms``, …), so no feature is
imported and the xdist workers' results are there too."""

from __future__ import annotations

import os
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_aoti.core.protocol import CHILD_ENV

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
# The benchmark columns, as the benchmark feature names its JUnit properties.
BENCHMARK_COLUMNS = (
    ("latency (ms)", "aoti_latency_ms"),
    ("vs baseline", "aoti_vs_baseline"),
    ("vs eager", "aoti_speedup_vs_eager"),
    ("load (ms)", "aoti_load_ms"),
    ("memory", "aoti_memory"),
)


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get(STEP_SUMMARY_ENV, "").strip()
    if target and not os.environ.get(CHILD_ENV) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(StepSummary(target), "aoti-step-summary")


# Which of a test's reports decides its line: a failure outweighs a skip, which outweighs a pass.
_RANK = {"passed": 0, "xfailed": 1, "xpassed": 1, "skipped": 1, "failed": 2, "error": 3}


@dataclass
class _Test:
    outcome: str = "passed"
    properties: dict[str, str] = field(default_factory=dict)


def _tests(stats: dict[str, list[Any]]) -> dict[str, _Test]:
    """Each test's outcome (its worst phase: a failure outside the call is an error, as pytest counts it) and the
    properties of all its reports."""
    tests: dict[str, _Test] = {}
    for category, reports in stats.items():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            test = tests.setdefault(report.nodeid, _Test())
            test.properties.update({str(name): str(value) for name, value in report.user_properties})
            outcome = "error" if category == "failed" and report.when != "call" else category
            if _RANK.get(outcome, 0) > _RANK[test.outcome]:
                test.outcome = outcome
    return tests


def folded_line(text: str) -> str:
    """One line: a table row ends at a line break, so line breaks (and runs of spaces) become one space."""
    return " ".join(text.split())


def cell_text(value: str) -> str:
    """``value`` as literal text in a GitHub-flavoured Markdown table cell. CommonMark lets any ASCII punctuation be
    backslash-escaped and then reads it as itself, so escaping all of it leaves no emphasis (``__init__``), link,
    image, HTML tag, entity or code span able to start; an escaped ``|`` stays in its cell."""
    return "".join(f"\\{char}" if char in string.punctuation else char for char in folded_line(value))


def cell_code(value: str) -> str:
    """``value`` as a code span: fenced with one backtick more than its longest run of backticks (a shorter fence
    would close inside it), padded with the one space each side that CommonMark strips (so a backtick at either end
    stays content). Only ``|`` is escaped: GFM takes ``\\|`` out of a cell, code spans included, before the span."""
    folded = folded_line(value)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", folded)), default=0) + 1)
    in_cell = folded.replace("|", "\\|")
    return f"{fence} {in_cell} {fence}"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Each row's first cell (a test id) as a code span, the others as text."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    body = ["| " + " | ".join([cell_code(row[0]), *(cell_text(cell) for cell in row[1:])]) + " |" for row in rows]
    return [*lines, *body, ""]


def markdown(stats: dict[str, list[Any]], exitstatus: int, cache_line: str | None) -> str:
    tests = _tests(stats)
    counts: dict[str, int] = {}
    for test in tests.values():
        counts[test.outcome] = counts.get(test.outcome, 0) + 1
    tally = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())) or "no tests ran"
    lines = ["## pytest-aoti", "", f"**{tally}** (exit status {exitstatus})", ""]
    failures = [
        (nodeid, test.outcome, test.properties.get("aoti_verdict", ""))
        for nodeid, test in tests.items()
        if test.outcome in ("failed", "error")
    ]
    if failures:
        lines += ["### Failures", "", *_table(("test", "outcome", "debug verdict"), failures)]
    goldens = [
        (nodeid, test.properties["aoti_snapshot"])
        for nodeid, test in tests.items()
        if "aoti_snapshot" in test.properties
    ]
    if goldens:
        lines += ["### Golden outputs", "", *_table(("test", "goldens"), goldens)]
    benchmarks = [
        (nodeid, *(test.properties.get(name, "") for _, name in BENCHMARK_COLUMNS))
        for nodeid, test in tests.items()
        if "aoti_latency_ms" in test.properties
    ]
    if benchmarks:
        lines += ["### Benchmarks", "", *_table(("test", *(title for title, _ in BENCHMARK_COLUMNS)), benchmarks)]
    if cache_line:
        lines += [cell_text(cache_line), ""]
    return "\n".join(lines) + "\n"


@dataclass(eq=False)  # a plugin object: pluggy keeps plugins in sets, by identity
class StepSummary:
    target: str

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        from pytest_aoti.core.cache import cache_summary
        from pytest_aoti.fixtures import cache_stats

        stats = cache_stats(config)
        text = markdown(terminalreporter.stats, int(exitstatus), cache_summary(stats) if stats else None)
        try:
            with open(self.target, "a", encoding="utf-8") as summary:
                summary.write(text)
        except OSError as error:
            terminalreporter.write_line(f"aoti: could not write ${STEP_SUMMARY_ENV} ({self.target}): {error}")
