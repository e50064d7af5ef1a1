"""A Markdown summary of the run for the CI page: where ``GITHUB_STEP_SUMMARY`` names a file (GitHub Actions sets it
in every step), the session the user started appends the tests that did not pass with their debug verdicts, the
golden-output results, the benchmark table and the cache line.

Everything is read where pytest keeps it: the reports in ``terminalreporter.stats`` and their ``user_properties``
(what the parts put in JUnit), so the xdist workers' results are there too. Which properties make a table's columns
is what each part publishes (:class:`pytest_aoti.hookspecs.ReportProperty`): the features through the hook
``pytest_aoti_report_properties``, the debug rerun below them in :mod:`pytest_aoti.debug.records`. No feature is
imported, and no property name is written here."""

from __future__ import annotations

import os
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_aoti.debug.records import PROPERTIES as DEBUG_PROPERTIES
from pytest_aoti.hookspecs import ReportProperties, ReportProperty, ReportSection, report_properties
from pytest_aoti.roles import writes_user_reports

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
# Each section's heading. The verdicts' table lists the tests that did not pass; the others, the tests that wrote
# one of the section's columns.
_HEADINGS = {
    ReportSection.VERDICTS: "Failures",
    ReportSection.GOLDENS: "Golden outputs",
    ReportSection.BENCHMARKS: "Benchmarks",
}


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get(STEP_SUMMARY_ENV, "").strip()
    if target and writes_user_reports(config):
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


def _section(section: ReportSection, columns: Sequence[ReportProperty], tests: dict[str, _Test]) -> list[str]:
    """One section's table, or nothing where no test belongs in it."""
    if section is ReportSection.VERDICTS:
        shown: dict[str, tuple[str, ...]] = {
            nodeid: (test.outcome,) for nodeid, test in tests.items() if test.outcome in ("failed", "error")
        }
        header: tuple[str, ...] = ("test", "outcome")
    else:
        shown = {nodeid: () for nodeid, test in tests.items() if any(c.name in test.properties for c in columns)}
        header = ("test",)
    rows = [
        (nodeid, *first, *(tests[nodeid].properties.get(c.name, "") for c in columns))
        for nodeid, first in shown.items()
    ]
    if not rows:
        return []
    return [f"### {_HEADINGS[section]}", "", *_table((*header, *(str(c.column) for c in columns)), rows)]


def markdown(stats: dict[str, list[Any]], exitstatus: int, cache_line: str | None, properties: ReportProperties) -> str:
    tests = _tests(stats)
    counts: dict[str, int] = {}
    for test in tests.values():
        counts[test.outcome] = counts.get(test.outcome, 0) + 1
    tally = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())) or "no tests ran"
    lines = ["## pytest-aoti", "", f"**{tally}** (exit status {exitstatus})", ""]
    for section in ReportSection:
        columns = properties.columns(section)
        if columns or section is ReportSection.VERDICTS:
            lines += _section(section, columns, tests)
    if cache_line:
        lines += [cell_text(cache_line), ""]
    return "\n".join(lines) + "\n"


@dataclass(eq=False)  # a plugin object: pluggy keeps plugins in sets, by identity
class StepSummary:
    target: str

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        from pytest_aoti.cache.stats import summary_line

        properties = report_properties(config, DEBUG_PROPERTIES)
        text = markdown(terminalreporter.stats, int(exitstatus), summary_line(config), properties)
        try:
            with open(self.target, "a", encoding="utf-8") as summary:
                summary.write(text)
        except OSError as error:
            terminalreporter.write_line(f"aoti: could not write ${STEP_SUMMARY_ENV} ({self.target}): {error}")
