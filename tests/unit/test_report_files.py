"""Where the session's report files go: a path that cannot be written, or two reports sharing one file, is a usage
error when the session starts."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_aoti.shared.report_files import os_reason, shared_with, target_path, write_problem
from tests.conftest import plugin_args


def test_write_problem_names_what_is_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file")
    (tmp_path / "out").mkdir()
    assert write_problem(tmp_path / "page.html") is None
    assert write_problem(tmp_path / "new" / "deeper" / "page.html") is None  # parents are created
    assert write_problem(tmp_path / "out") == f"{tmp_path / 'out'} is a directory"
    assert write_problem(tmp_path / "notes.txt" / "page.html") == (
        f"cannot write {tmp_path / 'notes.txt' / 'page.html'}: a parent is a file: {tmp_path / 'notes.txt'} is not a "
        "directory"
    )
    assert write_problem(tmp_path / "notes.txt" / "sub" / "page.html") == (
        f"cannot write {tmp_path / 'notes.txt' / 'sub' / 'page.html'}: a parent is a file: {tmp_path / 'notes.txt'} "
        "is not a directory"
    )
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    assert write_problem(tmp_path / "gone" / "page.html") == (
        f"cannot write {tmp_path / 'gone' / 'page.html'}: a parent is a symbolic link to a path that does not exist: "
        f"{tmp_path / 'gone'} is not a directory"
    )
    long_name = "x" * 300
    assert write_problem(tmp_path / long_name / "page.html") == (
        f"cannot write {tmp_path / long_name / 'page.html'}: the name {long_name[:40]!r}... is longer than the 255 "
        "bytes a name may have there"
    )
    assert not [entry for entry in os.listdir(tmp_path) if entry.startswith(".pytest-aoti-probe")]


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


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """An empty tmpfs mounted read-only: root's permission bits allow everything, the mount does not."""
    mount_point = tmp_path / "read-only"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_read_only_mount_is_named_as_such(read_only_dir: Path) -> None:
    assert write_problem(read_only_dir / "page.html") == (
        f"cannot write {read_only_dir / 'page.html'}: read-only file system (EROFS)"
    )
    assert write_problem(read_only_dir / "sub" / "page.html") == (
        f"cannot write {read_only_dir / 'sub' / 'page.html'}: cannot create a directory in {read_only_dir}: "
        "read-only file system (EROFS)"
    )


def _kernel_refusal(directory: str) -> str:
    """What the kernel itself answers when a directory is made in ``directory`` (it differs between machines)."""
    try:
        os.mkdir(os.path.join(directory, "pytest-aoti-never-made"))
    except OSError as error:
        return os_reason(error)
    os.rmdir(os.path.join(directory, "pytest-aoti-never-made"))
    pytest.skip(f"{directory} accepts new directories here")


@pytest.mark.parametrize("directory", ["/proc", "/sys"])
def test_a_directory_the_kernel_will_not_make_is_named_with_its_reason(directory: str) -> None:
    # Root passes every permission check (os.access says yes) under /proc and /sys, yet nothing can be made there.
    reason = _kernel_refusal(directory)
    target = Path(directory) / "pytest-aoti" / "page.html"
    assert write_problem(target) == f"cannot write {target}: cannot create a directory in {directory}: {reason}"


def test_os_reasons_read_as_text_with_their_errno() -> None:
    assert os_reason(OSError(errno.EROFS, os.strerror(errno.EROFS))) == "read-only file system (EROFS)"
    assert os_reason(PermissionError(errno.EACCES, "Permission denied")) == "permission denied (EACCES)"


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
            f"cannot create a directory in /proc: {_kernel_refusal('/proc')}",
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
