"""Reading a file from a cache dir: only a regular file of bounded size, never through a symlink, never waited on.

A cache dir is shared with whatever else writes there: a restored CI cache, a shared ``XDG_CACHE_HOME``, a tmp
cleaner. A FIFO under a record's name would block its read forever, and a record symlinked to ``/dev/zero`` would be
read until memory runs out. So every file pytest-aoti reads from a cache dir is opened here:

- each component below the cache dir with ``O_NOFOLLOW`` (a symlink out of the dir is refused, not followed);
- with ``O_NONBLOCK``, so opening a FIFO returns at once, and refused unless ``fstat`` says it is a regular file;
- refused when larger than the limit its caller gives, before anything is read (and if it grows meanwhile).

A refused file is :class:`RefusedCacheFile`, whose text is one line saying what was found; callers treat it as they
treat a corrupt entry (recompile, probe again), and say so once (:func:`warn_once`): ``pytest-aoti: <path> is a FIFO,
not a regular file; refused: the ISA probes run instead``.
"""

from __future__ import annotations

import errno
import os
import stat
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from pytest_aoti.core.errors import AOTIWarning

# Limits of what a record may weigh. A sidecar keeps a digest per weight (tens of bytes each): 16 MiB is far past a
# model with 100k weights. An ISA record holds a few dozen verdicts.
SIDECAR_LIMIT = 16 << 20
RECORD_LIMIT = 1 << 20
# Written into a cache dir when pytest-aoti creates (or adopts) it: clearing, eviction and records happen only there.
MARKER_FILE = ".pytest-aoti-cache"

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symlink"),
)
_warned: set[str] = set()


class AOTICacheWarning(AOTIWarning):
    """The package cache cannot be used safely and was turned off, or an entry of it was refused."""


class RefusedCacheFile(OSError):
    """A file in a cache dir that is not read: not a regular file, a symlink, or over its size limit."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _open_below(root: Path, path: Path) -> int:
    """``path`` opened read-only, each component below ``root`` without following a symlink (``root`` itself is the
    user's choice, a symlink or not). A path outside ``root`` is opened alone, its last component not followed."""
    try:
        parts = path.relative_to(root).parts
        directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except ValueError:
        parts, directory = (path.name,), os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    problem = f"{path} is reached through {part}, a symlink or no directory, which is not followed"
                    raise RefusedCacheFile(problem) from error
                raise
            os.close(directory)
            directory = below
        try:
            return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.EMLINK):
                raise RefusedCacheFile(f"{path} is a symlink, not a regular file") from error
            raise
    finally:
        os.close(directory)


@contextmanager
def open_cache_file(path: Path, limit: int, *, root: Path | None = None) -> Iterator[BinaryIO]:
    """``path`` open for reading, once it is known to be a regular file of at most ``limit`` bytes reached without a
    symlink below ``root`` (default: its own dir). :class:`RefusedCacheFile` otherwise; FileNotFoundError and other
    OSErrors as ``open`` raises them."""
    fd = _open_below(root if root is not None else path.parent, path)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedCacheFile(f"{path} is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise RefusedCacheFile(f"{path} holds {info.st_size} bytes, more than the {limit} such a file may")
        os.set_blocking(fd, True)
        stream = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with stream:
        yield stream


def read_cache_file(path: Path, limit: int, *, root: Path | None = None) -> bytes:
    """The bytes of ``path``, read through :func:`open_cache_file`; a file that grew past ``limit`` while it was
    read is refused too."""
    with open_cache_file(path, limit, root=root) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise RefusedCacheFile(f"{path} grew past {limit} bytes while it was read")
    return data


def warn_once(refused: RefusedCacheFile, consequence: str) -> None:
    """One line per refused file and process: what was found, and what pytest-aoti does instead."""
    text = str(refused)
    if text in _warned:
        return
    _warned.add(text)
    warnings.warn(AOTICacheWarning(f"pytest-aoti: {text}; refused: {consequence}"), stacklevel=3)
