"""The package cache's directory (pytest_aoti/core/cache.py), without a compile: a directory that is not a cache
is never cleared, one that cannot be a cache or that others can write is refused with a warning, an older one is
adopted, a new one is private, and a killed writer's partial files are reclaimed. (With real packages:
tests/test_cache.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_aoti.core.cache import MARKER_FILE, AOTICacheWarning, PackageCache, clear_cache_dir


def user_project(root: Path) -> list[Path]:
    """A user's project: what a cache must never delete."""
    files = [root / ".git" / "HEAD", root / "src" / "model.py", root / "artifacts" / "shipped_model.pt2"]
    files.append(root / "artifacts" / "shipped_model.json")
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"user data")
    return files


def test_an_unmarked_project_dir_is_never_cleared(tmp_path: Path) -> None:
    files = user_project(tmp_path)
    entry_shaped = tmp_path / "ab" / ("f" * 64 + ".pt2")  # named like an entry, but the dir is not marked
    entry_shaped.parent.mkdir()
    entry_shaped.write_bytes(b"user data")
    files.append(entry_shaped)
    with pytest.warns(AOTICacheWarning, match="is not a pytest-aoti cache"):
        assert clear_cache_dir(tmp_path) == 0
    assert all(path.read_bytes() == b"user data" for path in files)
    with pytest.warns(AOTICacheWarning, match="holds files that are not pytest-aoti's"):
        assert PackageCache.open(tmp_path, max_bytes=1) is None
    assert not (tmp_path / MARKER_FILE).exists()


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_an_impossible_cache_dir_warns_and_runs_without(tmp_path: Path, kind: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    root = blocker if kind == "a file" else blocker / "cache"
    with pytest.warns(AOTICacheWarning, match="not using the package cache"):
        assert PackageCache.open(root, max_bytes=1 << 30) is None


def test_a_cache_dir_from_before_the_marker_is_adopted(tmp_path: Path) -> None:
    (tmp_path / "cache" / "ab").mkdir(parents=True)
    (tmp_path / "cache" / "ab" / ("a" * 64 + ".json")).write_text("{}")
    assert PackageCache.open(tmp_path / "cache", max_bytes=1 << 30) is not None
    assert (tmp_path / "cache" / MARKER_FILE).is_file()


def test_cache_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.warns(AOTICacheWarning, match="others can write to it"):
        assert PackageCache.open(shared, max_bytes=1 << 30) is None


def test_new_cache_dir_is_private(tmp_path: Path) -> None:
    PackageCache.open(tmp_path / "new", max_bytes=1 << 30)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


def test_partial_writes_of_a_killed_writer_are_reclaimed(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    assert PackageCache.open(cache_dir, max_bytes=1 << 30) is not None
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    shard = cache_dir / "ab"
    shard.mkdir()
    dead = shard / f".partial-{finished.pid}-x1"
    alive = shard / f".partial-{os.getpid()}-x2"
    old, new = shard / ".partial-x3", shard / ".partial-x4"  # no pid: by age
    for path in (dead, alive, old, new):
        path.write_bytes(b"half a package")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert PackageCache.open(cache_dir, max_bytes=1 << 30) is not None
    assert sorted(p.name for p in shard.iterdir()) == sorted([alive.name, new.name])
