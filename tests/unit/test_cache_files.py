"""Files read from a cache dir (pytest_aoti/core/cache_files.py): a FIFO, a symlink to /dev/zero or /dev/urandom, an
oversized file or a symlinked entry dir under a record's name is refused with one line, never read or waited on
(issue 62, item 2). Real FIFOs and device files; each read runs in a thread with a deadline, so a read that blocks
fails the test instead of hanging it."""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.core import isa_verdicts
from pytest_aoti.core.cache import PackageCache
from pytest_aoti.core.cache_files import (
    RECORD_LIMIT,
    AOTICacheWarning,
    RefusedCacheFile,
    read_cache_file,
)

KEY = "ab" * 32


def _within_deadline(call: Callable[[], Any], seconds: float = 20.0) -> Any:
    """``call()``'s result, or a failure if it has not returned within ``seconds`` (a blocked read)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still reading after {seconds} s: the read blocked"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _record_bytes() -> bytes:
    return json.dumps({"checks": {"0" * 32: True}}).encode()


def _plant(path: Path, kind: str) -> None:
    """Put what ``kind`` names at ``path``: a FIFO, a symlink to a device, a file over a record's limit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("/dev/zero", "/dev/urandom"):
        path.symlink_to(kind)
    elif kind == "oversized":
        path.write_bytes(b" " * (RECORD_LIMIT + 1))
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "oversized"])
def test_a_record_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    record = tmp_path / "isa-checks-0123.json"
    _plant(record, kind)
    with pytest.raises(RefusedCacheFile) as refused:
        _within_deadline(lambda: read_cache_file(record, RECORD_LIMIT))
    assert str(refused.value).startswith(str(record)) and "\n" not in str(refused.value)
    symlink = "is a symlink, not a regular file"
    expected = {"fifo": "is a FIFO, not a regular file", "oversized": "more than the", "/dev/zero": symlink}
    expected["/dev/urandom"] = symlink
    assert expected[kind] in str(refused.value)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "oversized"])
def test_an_isa_record_that_is_refused_answers_nothing_and_says_so_once(tmp_path: Path, kind: str) -> None:
    record = tmp_path / f"isa-checks-{kind.strip('/').replace('/', '-')}.json"
    _plant(record, kind)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert _within_deadline(lambda: isa_verdicts.read_record(record)) == isa_verdicts.IsaRecord()
        assert _within_deadline(lambda: isa_verdicts.read_record(record)) == isa_verdicts.IsaRecord()
    lines = [str(w.message) for w in seen if issubclass(w.category, AOTICacheWarning)]
    assert len(lines) == 1 and "; refused: the ISA probes run instead" in lines[0], lines


def test_a_regular_record_reached_through_a_symlinked_dir_below_the_cache_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "record.json").write_bytes(_record_bytes())
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "ab").symlink_to(elsewhere)
    with pytest.raises(RefusedCacheFile, match="is reached through ab, a symlink or no directory, which is not"):
        read_cache_file(cache / "ab" / "record.json", RECORD_LIMIT, root=cache)
    # The cache dir itself may be a symlink (the user's choice), and a plain record in it is read.
    linked_root = tmp_path / "linked-cache"
    linked_root.symlink_to(elsewhere)
    assert read_cache_file(linked_root / "record.json", RECORD_LIMIT, root=linked_root) == _record_bytes()


def _stored_entry(cache: PackageCache) -> tuple[Path, Path]:
    """A real entry of the cache: a package and its sidecar, as ``store`` writes them."""
    built = cache.root / "built.pt2"
    built.write_bytes(b"a package")
    stored = cache.store(KEY, built, compile_seconds=2.0)
    return stored, stored.with_suffix(".json")


@pytest.mark.parametrize("which", ["sidecar", "package"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom"])
def test_an_entry_that_is_not_a_regular_file_is_a_corrupt_entry_refused_at_once(
    tmp_path: Path, which: str, kind: str
) -> None:
    cache = PackageCache.open(tmp_path / "cache", max_bytes=1 << 30)
    assert cache is not None
    package, sidecar = _stored_entry(cache)
    assert cache.lookup(KEY) == package  # the entry as written is a hit
    target = sidecar if which == "sidecar" else package
    target.unlink()
    _plant(target, kind)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert _within_deadline(lambda: cache.lookup(KEY)) is None
    assert cache.stats.corrupt == 1 and cache.stats.misses == 1
    lines = [str(w.message) for w in seen if issubclass(w.category, AOTICacheWarning)]
    assert len(lines) == 1 and "; refused: read as a corrupt entry" in lines[0], lines
    assert Path("/dev/zero").exists() and not os.path.lexists(target)  # the link went, never what it points to
    # The next store writes a good entry in its place.
    built = cache.root / "again.pt2"
    built.write_bytes(b"a package")
    assert cache.store(KEY, built, compile_seconds=1.0) == package and cache.lookup(KEY) == package


def test_a_sidecar_that_is_a_fifo_is_skipped_when_a_miss_is_explained(tmp_path: Path) -> None:
    """Explaining a miss reads every sidecar in the cache for the nearest entry: a FIFO among them is skipped."""
    cache = PackageCache.open(tmp_path / "cache", max_bytes=1 << 30)
    assert cache is not None
    fifo = cache.root / "cd" / f"{'cd' * 32}.json"
    _plant(fifo, "fifo")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert _within_deadline(lambda: list(cache._entries_with_parts())) == []
    assert any("; refused: not compared with" in str(w.message) for w in seen)


def test_a_package_that_grew_past_its_recorded_size_is_corrupt_without_a_warning(tmp_path: Path) -> None:
    cache = PackageCache.open(tmp_path / "cache", max_bytes=1 << 30)
    assert cache is not None
    package, _ = _stored_entry(cache)
    package.write_bytes(b"a package, and more")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.lookup(KEY) is None
    assert cache.stats.corrupt == 1
