"""The pictures feature: ``--aoti-html=PATH`` (one self-contained page of the session's aoti findings) and, when
pytest-html writes a report, the same findings in each test's row through pytest-html's ``extras``.

Only the session the user started collects (an xdist controller sees every worker's reports; a debug child's
reports reach its parent as the test's own). Records arrive on reports as the ``aoti_figure_data`` user property
(:mod:`pytest_aoti.shared.figure_data`); each is drawn once, when its report is logged, and both outputs use that
drawing. Importing this module imports neither torch nor matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.cache.stats import summary_line
from pytest_aoti.debug.records import PROPERTIES as DEBUG_PROPERTIES
from pytest_aoti.hookspecs import PropertyRole, ReportProperties, report_properties
from pytest_aoti.pictures.page import Findings, findings_html, page_html, record_section, shown_as_text
from pytest_aoti.pictures.render import NOT_DRAWN, Picture, draw
from pytest_aoti.roles import writes_user_reports
from pytest_aoti.settings import add_option, option_value
from pytest_aoti.shared.figure_data import FigureDataError, decode, figure_properties

HTML_DESC = (
    "write the session's aoti findings (verdicts with reproduce lines and pictures, goldens, benchmarks, the cache "
    "summary) to one self-contained HTML page at this path"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "html", HTML_DESC, default="", metavar="PATH")


def html_target(config: pytest.Config) -> Path | None:
    """Where ``--aoti-html`` (relative to the invocation dir) or the ini's ``aoti_html`` (relative to the ini file)
    puts the page; a usage error when that is a directory."""
    from pytest_aoti.shared.report_files import report_target

    value, where = option_value(config, "aoti_html")
    raw = str(value or "").strip()
    if config.getoption("aoti_html") is not None:
        if not raw:
            raise pytest.UsageError("--aoti-html: expected the path of the HTML file to write, got ''")
        raw, relative_to = str(value), config.invocation_params.dir
    else:
        if not raw:
            return None
        relative_to = config.inipath.parent if config.inipath is not None else config.rootpath
    path, problem = report_target(raw, relative_to, "aoti_html", lambda dest: config.getoption(dest, None),
                                  config.invocation_params.dir, "an HTML file")  # fmt: skip
    if problem is not None:
        raise pytest.UsageError(f"{where}: {problem}")
    return path


def pytest_configure(config: pytest.Config) -> None:
    if not writes_user_reports(config):
        return  # the session the user started draws; children and workers only carry the records on reports
    target = html_target(config)
    with_pytest_html = bool(config.getoption("htmlpath", None)) and config.pluginmanager.hasplugin("html")
    if target is not None or with_pytest_html:
        collector = FindingsCollector(config, target, with_pytest_html, report_properties(config, DEBUG_PROPERTIES))
        config.pluginmanager.register(collector, "aoti-pictures")


def _failure_line(report: pytest.TestReport) -> str | None:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return str(message)
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else None


def _outcome(report: pytest.TestReport, before: str) -> str:
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped and before == "passed":
        return "skipped"
    return before


@dataclass(eq=False)  # a plugin object: pluggy keeps plugins in sets, by identity
class FindingsCollector:
    """The session's findings, one :class:`Findings` per test, drawn as their reports are logged."""

    config: pytest.Config
    target: Path | None
    with_pytest_html: bool
    known: ReportProperties  # the properties the parts publish: their sections and roles
    tests: dict[str, Findings] = field(default_factory=dict)
    seen: dict[str, set[str]] = field(default_factory=dict)  # per test: figure data and verdicts already taken
    written: str | None = None  # the terminal line about the page

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.tests.setdefault(report.nodeid, Findings(report.nodeid))
        seen = self.seen.setdefault(report.nodeid, set())
        test.outcome = _outcome(report, test.outcome)
        if report.failed and test.failure is None:
            test.failure = _failure_line(report)
        new = Findings(report.nodeid)
        for name, value in report.user_properties:
            shown = name.startswith("aoti_") and shown_as_text(name, self.known)
            if shown and test.properties.get(name) != str(value):
                test.properties[name] = new.properties[name] = str(value)
        for text in figure_properties(report.user_properties):
            if text not in seen:
                seen.add(text)
                self._draw(text, test, new)
        if self.with_pytest_html and (new.pictures or self._has_headline(new) or new.notes):
            _add_extras(report, new, self.known)

    def _has_headline(self, new: Findings) -> bool:
        return any(
            value and self.known.role_of(name) is PropertyRole.HEADLINE for name, value in new.properties.items()
        )

    @staticmethod
    def _draw(text: str, *tests: Findings) -> None:
        try:
            records = decode(text)
        except FigureDataError as error:
            for test in tests:
                test.notes.append(f"figure data that could not be read: {error}")
            return
        for record in records:
            picture = draw(record)
            for test in tests:
                test.pictures.append((record_section(record), picture))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.target is None:
            return
        from pytest_aoti.shared.report_files import write_report

        shown = [test for test in self.tests.values() if test.properties or test.pictures or test.notes]
        problem = write_report(self.target, page_html(shown, self.known, summary_line(self.config)))
        if problem is not None:  # checked at start; the disk may have changed since
            self.written = f"aoti html: {problem}"
            _lost_report(session)
            return
        self.written = f"aoti html: {self.target} ({_counts(shown)})"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.written:
            terminalreporter.write_line(self.written)


def _counts(shown: list[Findings]) -> str:
    """``N tests, K pictures``: the pictures drawn, and those that could not be (no matplotlib, a broken one) with
    why, where one reason holds for all; the page holds each one's note and numbers."""
    pictures = [picture for test in shown for _, picture in test.pictures]
    drawn = sum(1 for picture in pictures if picture.png is not None)
    counts = f"{len(shown)} tests, {drawn} pictures"
    notes = {picture.note or "" for picture in pictures if picture.png is None}
    if notes:
        why = next(iter(notes)).removeprefix(NOT_DRAWN) if len(notes) == 1 and "" not in notes else "the page says why"
        counts += f"; {len(pictures) - drawn} could not be drawn: {why}"
    return counts


def _lost_report(session: pytest.Session) -> None:
    """A report that could not be written makes a run that would pass exit non-zero (pytest's own exit status for
    an error outside the tests), so a CI job does not pass without the report it publishes."""
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def _add_extras(report: pytest.TestReport, new: Findings, known: ReportProperties) -> None:
    """pytest-html's extras for what this report brought: the verdict and the numbers as HTML, each picture as an
    image (pytest-html embeds or links it as its own ``--self-contained-html`` says)."""
    from pytest_html import extras

    added: list[dict[str, Any]] = [extras.html(findings_html(new, known, with_images=False))]
    added += [extras.png(_base64(picture), name=picture.title) for _, picture in new.pictures if picture.png]
    report.extras = [*getattr(report, "extras", []), *added]  # type: ignore[attr-defined]


def _base64(picture: Picture) -> str:
    import base64

    assert picture.png is not None
    return base64.b64encode(picture.png).decode()
