"""docs/torch-private-apis.md names every private torch API of core/torch_private.py (its ``__all__``) with the
releases it was tested on: a name added there without a row fails here, and so does a row left for a name gone.
Both files are read as text (``__all__`` through ``ast``): nothing of torch is imported."""

from __future__ import annotations

import ast
from pathlib import Path

from pytest_aoti.core.torch_versions import TESTED

ROOT = Path(__file__).parents[2]


def _torch_private_all() -> list[str]:
    tree = ast.parse((ROOT / "pytest_aoti" / "core" / "torch_private.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [str(ast.literal_eval(element)) for element in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError("torch_private.py has no __all__")


def _table_rows() -> dict[str, list[str]]:
    """The table's rows by the function in their first cell (in backticks): each row's cells."""
    rows: dict[str, list[str]] = {}
    for line in (ROOT / "docs" / "torch-private-apis.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith("`") and cells[0].endswith("`"):
            name = cells[0].strip("`")
            assert name not in rows, f"{name} has two rows"
            rows[name] = cells
    return rows


def test_every_private_api_has_a_row_and_every_row_an_api() -> None:
    names, rows = _torch_private_all(), _table_rows()
    assert sorted(set(names) - set(rows)) == [], "docs/torch-private-apis.md lacks a row for each of these"
    assert sorted(set(rows) - set(names)) == [], "docs/torch-private-apis.md has rows for names torch_private lacks"


def test_each_row_names_its_symbols_purpose_the_releases_tested_and_the_fallback() -> None:
    for name, cells in _table_rows().items():
        assert len(cells) == 5 and all(cells), f"{name}: {cells}"
        assert cells[3] == ", ".join(TESTED), f"{name}: tested on {cells[3]!r}, .ci/run tests {TESTED}"
