"""Where the session's report files go, the checks as plain functions: a path that cannot be written is named with
its reason, and two reports sharing one file are found however the path is spelled. (The usage errors and failures
they make in a pytest run: tests/test_report_files.py.)"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pytest_aoti.shared.report_files import os_reason, shared_with, target_path, write_problem


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


def test_a_read_only_mount_is_named_as_such(read_only_dir: Path) -> None:
    assert write_problem(read_only_dir / "page.html") == (
        f"cannot write {read_only_dir / 'page.html'}: read-only file system (EROFS)"
    )
    assert write_problem(read_only_dir / "sub" / "page.html") == (
        f"cannot write {read_only_dir / 'sub' / 'page.html'}: cannot create a directory in {read_only_dir}: "
        "read-only file system (EROFS)"
    )


def kernel_refusal(directory: str) -> str:
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
    reason = kernel_refusal(directory)
    target = Path(directory) / "pytest-aoti" / "page.html"
    assert write_problem(target) == f"cannot write {target}: cannot create a directory in {directory}: {reason}"


def test_os_reasons_read_as_text_with_their_errno() -> None:
    assert os_reason(OSError(errno.EROFS, os.strerror(errno.EROFS))) == "read-only file system (EROFS)"
    assert os_reason(PermissionError(errno.EACCES, "Permission denied")) == "permission denied (EACCES)"
