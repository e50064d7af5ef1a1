"""Where the session's report files go, in a pytest run of its own: two reports sharing one file, or a path that
cannot be made, is a usage error when the session starts; a report that cannot be written at the end fails the run.
(The checks themselves, as plain functions: tests/unit/test_report_files.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import plugin_args
from tests.unit.test_report_files import kernel_refusal


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
        (
            ["--aoti-html=notes.txt/page.html"],
            "--aoti-html: cannot write */notes.txt/page.html: a parent is a file: */notes.txt is not a directory",
        ),
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


REPORT_OPTIONS = {"page": ("--aoti-html={}",), "json": ("--aoti-benchmark", "--aoti-benchmark-json={}")}


@pytest.mark.parametrize("report", REPORT_OPTIONS)
@pytest.mark.parametrize("where", ["under a file", "read-only mount", "/proc"])
def test_a_report_path_that_cannot_be_made_is_a_usage_error_at_start(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, report: str, where: str
) -> None:
    pytester.makepyfile(test_one="def test_one(): pass\n")
    pytester.path.joinpath("notes.txt").write_text("a file")
    if where == "under a file":
        target, cause = pytester.path / "notes.txt" / "sub" / "r.out", "a parent is a file: */notes.txt is not a dir*"
    elif where == "read-only mount":
        mount_point = request.getfixturevalue("read_only_dir")
        target, cause = mount_point / "sub" / "r.out", f"cannot create a directory in {mount_point}: read-only file*"
    else:
        target, cause = (
            Path("/proc/pytest-aoti/r.out"),
            f"cannot create a directory in /proc: {kernel_refusal('/proc')}",
        )
    *flags, path_flag = REPORT_OPTIONS[report]
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", *flags, path_flag.format(target))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{path_flag.split('=')[0]}: cannot write {target}: {cause}"])
    assert "permission denied" not in result.stderr.str()


# The test takes the report's directory away while the session runs: the check at start passed, the write fails.
TAKES_THE_DIRECTORY = """
import shutil


def test_takes_the_directory():
    shutil.rmtree("out")
    with open("out", "w") as file:
        file.write("a file where the report's directory was")
"""


@pytest.mark.parametrize("report", REPORT_OPTIONS)
def test_a_report_that_cannot_be_written_at_the_end_fails_the_run(pytester: pytest.Pytester, report: str) -> None:
    pytester.makepyfile(test_one=TAKES_THE_DIRECTORY)
    (pytester.path / "out").mkdir()
    *flags, path_flag = REPORT_OPTIONS[report]
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", *flags, path_flag.format("out/r"))
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    line = "aoti html" if report == "page" else "--aoti-benchmark-json"
    result.stdout.fnmatch_lines([f"{line}: cannot write */out/r: a parent is a file: */out is not a directory"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
