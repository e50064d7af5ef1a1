"""Where a session's debug children keep their logs (``children_dir``): under pytest's basetemp, found without a
pytest private, by what each process knows; and the directory of pytest-aoti's own for a plain session whose aoti
tests so far ran isolated (no aoti fixture has run in it, so pytest has not named its basetemp)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_aoti import roles
from pytest_aoti.debug.controller import XdistController
from pytest_aoti.debug.crash_route import stamp
from pytest_aoti.debug.options import DebugRequest
from pytest_aoti.debug.parent import (
    OWN_DIR_KEPT_SECONDS,
    beside_given_basetemp,
    children_dir,
    children_note_key,
    own_children_dir,
)


def test_each_session_gets_a_new_private_directory(tmp_path: Path) -> None:
    first, second = own_children_dir(tmp_path), own_children_dir(tmp_path)
    assert first != second and first.parent == second.parent
    assert first.parent.name.startswith("pytest-aoti-of-") and first.name.startswith("children-")
    assert first.parent.stat().st_mode & 0o777 == 0o700


def test_only_directories_older_than_a_week_are_removed(tmp_path: Path) -> None:
    now = time.time()
    old, recent = own_children_dir(tmp_path, now=now), own_children_dir(tmp_path, now=now)
    (old / "child.log").write_text("an old session's log")
    stranger = old.parent / "not-ours"  # not a children-* directory: never touched
    stranger.mkdir()
    for path in (old, stranger):
        os.utime(path, (now - OWN_DIR_KEPT_SECONDS - 60, now - OWN_DIR_KEPT_SECONDS - 60))
    newest = own_children_dir(tmp_path, now=now)
    assert not old.exists()
    assert recent.is_dir() and newest.is_dir() and stranger.is_dir()


def test_a_base_directory_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    own_base = own_children_dir(root).parent
    for child in own_base.iterdir():
        child.rmdir()
    own_base.rmdir()
    own_base.symlink_to(elsewhere)
    path = own_children_dir(root)
    assert path.parent == root and path.name.startswith("pytest-aoti-children-")
    assert not list(elsewhere.iterdir())


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a directory another user owns")
def test_a_base_directory_of_another_user_is_not_used(tmp_path: Path) -> None:
    own_base = own_children_dir(tmp_path).parent
    os.chown(own_base, 12345, 12345)
    path = own_children_dir(tmp_path)
    assert path.parent == tmp_path


@pytest.fixture
def config(pytester: pytest.Pytester, tmp_path: Path) -> Iterator[pytest.Config]:
    config = pytester.parseconfigure("-p", "no:cacheprovider", "-p", "no:terminal", f"--basetemp={tmp_path}/popen-gw3")
    yield config
    config._ensure_unconfigure()


def test_an_xdist_worker_keeps_them_in_its_controllers_basetemp(config: pytest.Config, tmp_path: Path) -> None:
    config.workerinput = {"workerid": "gw3"}  # type: ignore[attr-defined]  # what xdist gives a worker's config
    assert roles.settle(config) is roles.Role.WORKER  # as a worker's role is decided at its configure
    assert children_dir(config) == tmp_path / "aoti-children-gw3"
    assert (tmp_path / "aoti-children-gw3").is_dir() and not (tmp_path / "popen-gw3").exists()  # pytest's to make


def test_the_controller_keeps_them_in_the_basetemp_its_workers_name(config: pytest.Config, tmp_path: Path) -> None:
    """The controller runs no fixture: a worker's setup report names the basetemp (the worker's --basetemp's
    parent), and the controller reruns the tests that crash their worker under it."""
    controller = XdistController(config, supervising=True)
    config.pluginmanager.register(controller, "aoti-xdist-controller-under-test")
    report = pytest.TestReport("test_user.py::test_crash", ("test_user.py", 3, "test_crash"), {}, "passed", None,
                               "setup")  # type: ignore[arg-type]  # fmt: skip
    stamp(report, debug_request=DebugRequest(timeout=60.0, env={}, kernels=(), stages=None), temp_root=str(tmp_path))
    config.hook.pytest_runtest_logreport(report=report)
    assert children_dir(config) == tmp_path / "aoti-children"


def test_a_plain_session_before_any_fixture_uses_a_directory_of_its_own(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    config = pytester.parseconfigure("-p", "no:cacheprovider", "-p", "no:terminal")
    config.option.basetemp = None  # pytester gives every config one: a user's session has none by default
    try:
        path = children_dir(config)
    finally:
        config._ensure_unconfigure()
    assert path.parent.parent == tmp_path / "tmp" and path.name.startswith("children-")


def test_beside_a_given_basetemp_emptied_once_per_session_as_pytest_empties_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    basetemp = tmp_path / "pytest-tmp"
    first = beside_given_basetemp(basetemp)
    assert first == tmp_path / "pytest-tmp-aoti-children" and not basetemp.exists()  # pytest's to make
    (first / "child.log").write_text("the last session's")
    assert beside_given_basetemp(basetemp) == first and not (first / "child.log").exists()
    # A directory of that name that pytest-aoti did not make is never emptied.
    users = tmp_path / "mine" / "data-aoti-children"
    users.mkdir(parents=True)
    (users / "keep.txt").write_text("the user's")
    with pytest.raises(FileExistsError, match="did not make"):
        beside_given_basetemp(tmp_path / "mine" / "data")
    assert (users / "keep.txt").read_text() == "the user's"


@pytest.mark.parametrize("case", ["not ours", "name too long"])
def test_where_beside_the_basetemp_cannot_be_a_directory_of_its_own_says_why(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    basetemp = tmp_path / "bt" if case == "not ours" else tmp_path / ("b" * 245)  # pytest takes it; +14 is too long
    if case == "not ours":
        (tmp_path / "bt-aoti-children").mkdir()
    config = pytester.parseconfigure("-p", "no:cacheprovider", "-p", "no:terminal", f"--basetemp={basetemp}")
    try:
        path = children_dir(config)
        note = config.stash[children_note_key]
    finally:
        config._ensure_unconfigure()
    assert path.parent.parent == tmp_path / "tmp"
    assert note.startswith(f"not {basetemp}-aoti-children: ")
    assert ("did not make" in note) if case == "not ours" else ("too long" in note)


def test_a_plain_session_with_a_given_basetemp_keeps_them_beside_it(tmp_path: Path, pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure("-p", "no:cacheprovider", "-p", "no:terminal", f"--basetemp={tmp_path}/bt")
    try:
        assert children_dir(config) == tmp_path / "bt-aoti-children"
    finally:
        config._ensure_unconfigure()
