"""The step summary's table cells as a Markdown parser reads them: whatever a test id or a verdict holds comes back as
that text (folded onto one line), never as a link, emphasis, HTML or another cell. markdown-it-py (CommonMark with
GFM tables; in the venv through rich) stands in for GitHub's renderer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_aoti.ci_summary import cell_code, cell_text, folded_line

markdown_it = pytest.importorskip("markdown_it")

HOSTILE = [
    "test_a.py::test_x[`]",
    "test_a.py::test_x[`` [x](http://evil) ``]",
    "test_a.py::test_x[a|b]",
    "test_a.py::test_x[a\\|b]",
    "test_a.py::test_x[<script>alert(1)</script>]",
    "test_a.py::Test__init__::test_x[__init__ *bold* ~~gone~~]",
    "test_a.py::test_x[![img](http://evil/x.png) <http://evil> &amp; &#60;b&#62;]",
    "test_a.py::test_x[line one\nline two\\]",
    "`starts and ends with a backtick`",
]


def _cell_tokens(markdown: str) -> list[Any]:
    """The inline tokens of the one body cell of a one-column table whose cell is ``markdown``."""
    parser = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])
    tokens = parser.parse(f"| h |\n|---|\n| {markdown} |\n")
    cells = [token for token in tokens if token.type == "inline"]
    assert [token.type for token in tokens].count("td_open") == 1, markdown
    return list(cells[-1].children or [])


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_ids_and_verdicts_stay_text(value: str) -> None:
    as_text = _cell_tokens(cell_text(value))
    assert [token.type for token in as_text] == ["text"] and as_text[0].content == folded_line(value)
    as_code = _cell_tokens(cell_code(value))
    assert [token.type for token in as_code] == ["code_inline"] and as_code[0].content == folded_line(value)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1).filter(lambda t: t.split()))
def test_any_text_round_trips_through_a_cell(value: str) -> None:
    as_text = _cell_tokens(cell_text(value))
    assert "".join(token.content for token in as_text) == folded_line(value)
    assert {token.type for token in as_text} <= {"text"}
    as_code = _cell_tokens(cell_code(value))
    assert [(token.type, token.content) for token in as_code] == [("code_inline", folded_line(value))]
