"""Where a session's debug children keep their logs when pytest's basetemp is not known yet (the session's first aoti
test ran isolated, so no aoti fixture has run in this process): a directory of pytest-aoti's own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pytest_aoti.debug.parent import OWN_DIR_KEPT_SECONDS, own_children_dir


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
