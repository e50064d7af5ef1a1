"""The session's aoti findings as one self-contained HTML page (``--aoti-html``): no script, no network, images as
data URIs. Also the HTML of one test's findings that pytest-html shows in the test's row.

Pure rendering over :class:`Findings`: the analysis (what each test found) is done before. Which section a
property goes in, and how it is shown, is what its part publishes (:class:`pytest_aoti.hookspecs.ReportProperties`).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pytest_aoti.hookspecs import PropertyRole, ReportProperties, ReportSection
from pytest_aoti.pictures.render import Picture
from pytest_aoti.shared.figure_data import FIGURE_PROPERTY, BenchmarkTimes, FigureData, GoldenErrors


@dataclass
class Findings:
    """What one test left for the page: its outcome, the one line of its failure, its ``aoti_*`` properties and
    its pictures (each tagged with the section it belongs in)."""

    nodeid: str
    outcome: str = "passed"
    failure: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    pictures: list[tuple[ReportSection, Picture]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # figure data that could not be read

    def in_section(self, section: ReportSection, known: ReportProperties) -> tuple[dict[str, str], list[Picture]]:
        properties = {name: value for name, value in self.properties.items() if known.section_of(name) is section}
        return properties, [picture for where, picture in self.pictures if where is section]


def shown_as_text(name: str, known: ReportProperties) -> bool:
    """Whether the page shows a property's value: the machine-readable records are shown as pictures and tables."""
    return name != FIGURE_PROPERTY and known.role_of(name) is not PropertyRole.RECORD


def record_section(record: FigureData) -> ReportSection:
    """The page section a figure-data record belongs in."""
    if isinstance(record, GoldenErrors):
        return ReportSection.GOLDENS
    if isinstance(record, BenchmarkTimes):
        return ReportSection.BENCHMARKS
    return ReportSection.VERDICTS


def _take(properties: dict[str, str], role: PropertyRole, known: ReportProperties) -> str | None:
    """The first property of ``role``, taken out of ``properties``."""
    name = next((name for name in properties if known.role_of(name) is role), None)
    return properties.pop(name) if name is not None else None


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 70em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
.test { border: 1px solid #ddd; border-radius: 6px; padding: .8em 1em; margin: 1em 0; }
.nodeid { font-family: monospace; font-weight: bold; }
.outcome { display: inline-block; padding: 0 .5em; border-radius: 4px; color: white; margin-right: .5em; }
.failed, .error { background: #c0392b; } .passed { background: #27ae60; } .skipped { background: #7f8c8d; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: .5em 0; font-size: .9em; }
td, th { border: 1px solid #ddd; padding: .2em .6em; text-align: left; vertical-align: top; }
figure { margin: 1em 0; } figcaption { font-size: .9em; color: #444; }
img { max-width: 100%; } .note { color: #8a6d3b; background: #fcf8e3; padding: .3em .6em; }
"""


# Inline, for pytest-html's page, which has its own style sheet: a long reproduce line wraps instead of widening
# the row past the pictures beside it.
_WRAP = "white-space: pre-wrap; overflow-wrap: anywhere"


def _e(text: object) -> str:
    return html.escape(str(text))


def _table(rows: Sequence[Sequence[str]], header: bool = True) -> str:
    if not rows:
        return ""
    head = f"<tr>{''.join(f'<th>{_e(cell)}</th>' for cell in rows[0])}</tr>" if header else ""
    body = "".join(f"<tr>{''.join(f'<td>{_e(cell)}</td>' for cell in row)}</tr>" for row in rows[1 if header else 0 :])
    return f"<table>{head}{body}</table>"


def picture_html(picture: Picture, *, with_image: bool = True) -> str:
    """A picture as a figure: the image (or why there is none), the caption, the numbers."""
    parts = [f"<figure><figcaption><b>{_e(picture.title)}</b></figcaption>"]
    if picture.png is not None and with_image:
        data = base64.b64encode(picture.png).decode()
        parts.append(f'<img src="data:image/png;base64,{data}" alt="{_e(picture.title)}">')
    if picture.note:
        parts.append(f'<p class="note">{_e(picture.note)}</p>')
    parts.append(f"<figcaption>{_e(picture.caption)}</figcaption>")
    if len(picture.table) > 1:
        parts.append(f"<details><summary>the numbers</summary>{_table(picture.table)}</details>")
    parts.append("</figure>")
    return "".join(parts)


def findings_html(
    test: Findings, known: ReportProperties, section: ReportSection | None = None, *, with_images: bool = True
) -> str:
    """One test's findings (in one section of the page, or all of them): the verdict with its reproduce line, the
    other properties as a table, the pictures."""
    if section is None:
        properties, pictures = dict(test.properties), [picture for _, picture in test.pictures]
    else:
        properties, pictures = test.in_section(section, known)
    parts = []
    verdict = _take(properties, PropertyRole.HEADLINE, known)
    reproduce = _take(properties, PropertyRole.REPRODUCE, known)
    if verdict:
        parts.append(f"<p><b>verdict:</b> {_e(verdict)}</p>")
    if reproduce:
        parts.append(f'<p>reproduce:</p><pre style="{_WRAP}">{_e(reproduce)}</pre>')
    if properties:
        parts.append(_table([(name, value) for name, value in properties.items()], header=False))
    parts += [picture_html(picture, with_image=with_images) for picture in pictures]
    parts += [f'<p class="note">{_e(note)}</p>' for note in test.notes if section in (None, ReportSection.VERDICTS)]
    return f'<div style="overflow-wrap: anywhere">{"".join(parts)}</div>'


def _card(test: Findings, section: ReportSection, known: ReportProperties) -> str:
    failure = f"<pre>{_e(test.failure)}</pre>" if test.failure and section is ReportSection.VERDICTS else ""
    return (
        f'<div class="test"><span class="outcome {_e(test.outcome)}">{_e(test.outcome)}</span>'
        f'<span class="nodeid">{_e(test.nodeid)}</span>{failure}{findings_html(test, known, section)}</div>'
    )


def _has(test: Findings, section: ReportSection, known: ReportProperties) -> bool:
    properties, pictures = test.in_section(section, known)
    if section is ReportSection.VERDICTS:
        return bool(properties or pictures or test.notes or test.outcome in ("failed", "error"))
    return bool(properties or pictures)


def page_html(
    tests: Iterable[Findings],
    known: ReportProperties,
    cache_summary: str | None,
    title: str = "pytest-aoti findings",
) -> str:
    """The whole page."""
    tests = list(tests)
    sections = []
    for section in ReportSection:
        cards = [_card(test, section, known) for test in tests if _has(test, section, known)]
        body = "".join(cards) or "<p>none in this session</p>"
        sections.append(f'<h2 id="{section.value.lower()}">{section.value}</h2>{body}')
    counts: dict[str, int] = {}
    for test in tests:
        counts[test.outcome] = counts.get(test.outcome, 0) + 1
    summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())) or "no aoti findings"
    cache = f'<h2 id="cache">Cache</h2><p>{_e(cache_summary)}</p>' if cache_summary else ""
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1><p>tests with aoti findings: {_e(summary)}</p>"
        f"{''.join(sections)}{cache}</body></html>\n"
    )
