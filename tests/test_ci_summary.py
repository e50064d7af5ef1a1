"""The Markdown summary written where ``GITHUB_STEP_SUMMARY`` points: read from the reports' properties, so a real
golden result shows up beside the properties other plugins record (a verdict, a benchmark row: recorded here with
``record_property`` under the names the features use, to keep the run free of debug reruns and timing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunPytest, plugin_args

SUITE = """
import torch
from aoti_models import MLP

def test_golden(aoti_check):
    aoti_check(MLP(), (torch.randn(2, 8),), snapshot=True)

def test_fails(record_property):
    record_property("aoti_verdict", "failed: output 0 | nonfinite in cpp_fused_log_mul_0")
    assert False

def test_benchmarked(record_property):
    record_property("aoti_latency_ms", "0.153")
    record_property("aoti_vs_baseline", "1.020")

def test_skipped():
    import pytest
    pytest.skip("no GPU")
"""


def test_the_step_summary_lists_failures_goldens_and_benchmarks(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    summary = tmp_path / "step_summary.md"
    summary.write_text("# an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run_pytest("--aoti-snapshot=write")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    text = summary.read_text()
    assert text.startswith("# an earlier step's summary\n## pytest-aoti\n"), text  # appended
    assert "**1 failed, 2 passed, 1 skipped** (exit status 1)" in text
    # Ids as code spans, the other cells as text with every ASCII punctuation escaped (rendered: the text itself).
    assert (
        "| ` test_suite.py::test_fails ` | failed | failed\\: output 0 \\| nonfinite in cpp\\_fused\\_log\\_mul\\_0 |"
        in text
    )
    assert "| ` test_suite.py::test_golden ` | check0\\.example\\: written |" in text, text
    assert "| ` test_suite.py::test_benchmarked ` | 0\\.153 | 1\\.020 |  |  |  |" in text
    assert "aoti cache\\: 1 hits\\, 0 misses" in text or "aoti cache\\: 0 hits\\, 1 misses" in text

    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    run_pytest("--aoti-snapshot=write", "-k", "benchmarked").assert_outcomes(passed=1)
    assert summary.read_text() == text  # not on GitHub: nothing written


HOSTILE_IDS = ["`", "`` [x](http://evil) ``", "a|b", "<script>alert(1)</script>", "__init__ *bold*"]
HOSTILE_SUITE = f"""
import pytest


@pytest.mark.parametrize("name", {HOSTILE_IDS!r}, ids={HOSTILE_IDS!r})
def test_hostile(name, record_property):
    record_property("aoti_verdict", "first NaN in __init__ at [x](http://evil) <b>bold</b> `code` | pipe\\nline two")
    record_property("aoti_snapshot", "check0.__init__: mismatched")
    assert False
"""


def test_hostile_ids_and_verdicts_render_as_text_in_the_step_summary(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test ids with backticks, pipes, a Markdown link, HTML and ``__init__``, and a verdict holding all of them: the
    summary, parsed as GitHub reads it (CommonMark with GFM tables), has no link, emphasis or HTML, and each cell's
    text is the id or the verdict (on one line)."""
    markdown_it = pytest.importorskip("markdown_it")
    pytester.makepyfile(test_suite=HOSTILE_SUITE)
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(failed=len(HOSTILE_IDS))
    tokens = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(summary.read_text())
    inline = [child for token in tokens if token.type == "inline" for child in token.children or []]
    allowed = {"text", "code_inline", "strong_open", "strong_close", "softbreak"}
    assert {child.type for child in inline} <= allowed, {child.type for child in inline} - allowed
    assert [child.content for child in inline if child.type == "strong_open"] == [""]  # the tally's, only
    rows = _table_rows(tokens)
    verdict = "first NaN in __init__ at [x](http://evil) <b>bold</b> `code` | pipe line two"
    assert [row for row in rows if len(row) == 3] == [
        ["test", "outcome", "debug verdict"],
        *([f"test_suite.py::test_hostile[{name}]", "failed", verdict] for name in HOSTILE_IDS),
    ]
    goldens = [row for row in rows if len(row) == 2]
    assert goldens[1:] == [
        [f"test_suite.py::test_hostile[{name}]", "check0.__init__: mismatched"] for name in HOSTILE_IDS
    ]


def _table_rows(tokens: list[Any]) -> list[list[str]]:
    """Each table row's cells, as the text a reader sees (code spans and text joined)."""
    rows: list[list[str]] = []
    row: list[str] | None = None
    for token in tokens:
        if token.type == "tr_open":
            row = []
            rows.append(row)
        elif token.type == "tr_close":
            row = None
        elif token.type == "inline" and row is not None:
            row.append("".join(child.content for child in token.children or []))
    return rows
