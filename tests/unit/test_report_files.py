"""Where the session's report files go: a path that cannot be written, or two reports sharing one file, is a usage
error when the session starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_aoti.core.report_files import shared_with, target_path, write_problem
from tests.conftest import plugin_args


def test_write_problem_names_what_is_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file")
    (tmp_path / "out").mkdir()
    assert write_problem(tmp_path / "page.html") is None
    assert write_problem(tmp_path / "new" / "deeper" / "page.html") is None  # parents are created
    assert write_problem(tmp_path / "out") == f"{tmp_path / 'out'} is a directory"
    assert write_problem(tmp_path / "notes.txt" / "page.html") == (
        f"cannot write {tmp_path / 'notes.txt' / 'page.html'}: {tmp_path / 'notes.txt'} is not a directory"
    )


def test_a_shared_file_is_found_however_its_path_is_spelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    options = {"xmlpath": "r.xml", "htmlpath": "~/report.html", "aoti_html": None}
    assert shared_with(tmp_path / "r.xml", "aoti_html", options.get, tmp_path) == "--junitxml"
    assert shared_with(tmp_path / "sub" / ".." / "r.xml", "aoti_html", options.get, tmp_path) == "--junitxml"
    assert shared_with(target_path("~/report.html", tmp_path), "aoti_html", options.get, tmp_path) == "--html"
    assert shared_with(tmp_path / "page.html", "aoti_html", options.get, tmp_path) is None
    assert target_path("~/page.html", tmp_path) == tmp_path / "page.html"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--aoti-html=same.xml", "--junitxml=same.xml"], "--aoti-html: */same.xml is also --junitxml's file; give *"),
        (["--aoti-html=same.html", "--html=same.html"], "--aoti-html: */same.html is also --html's file; give *"),
        (
            ["--aoti-benchmark", "--aoti-benchmark-json=r.xml", "--junitxml=r.xml"],
            "--aoti-benchmark-json: */r.xml is also --junitxml's file; give each report a file of its own",
        ),
        (
            ["--aoti-benchmark", "--aoti-benchmark-json=page.html", "--aoti-html=page.html"],
            "--aoti-benchmark-json: */page.html is also --aoti-html's file*",
        ),
        (["--aoti-html=notes.txt/page.html"], "--aoti-html: cannot write */notes.txt/page.html: */notes.txt is not a*"),
    ],
    ids=["page and junit", "page and pytest-html", "json and junit", "json and page", "a file as a directory"],
)
def test_reports_that_would_overwrite_each_other_are_a_usage_error(
    pytester: pytest.Pytester, args: list[str], error: str
) -> None:
    pytester.makepyfile(test_one="def test_one(): pass\n")
    pytester.path.joinpath("notes.txt").write_text("a file")
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{error}"])
    assert not any(name.endswith((".xml", ".html")) for name in os.listdir(pytester.path))
