"""A content-addressed cache of compiled ``.pt2`` packages, shared by tests, runs, checkouts and xdist workers.

AOTInductor has no whole-artifact cache (the FX graph cache is off in AOT mode), so every compile re-runs codegen and
the C++ compiler. The key covers what changes the artifact and nothing about where the code lives or which GPU of a
kind built it (``core.cache_key``); each entry keeps the parts of its key, so a miss says what changed
(``core.cache_miss``). Entries are written atomically, checksummed (loading a package dlopens native code: a corrupt
one must never load) and evicted least-recently-used. The cache deletes only what it wrote, in a directory it marked
as its own: a user's directory given by mistake is refused, never emptied.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from pytest_aoti.core import isa_verdicts
from pytest_aoti.core.cache_files import (
    MARKER_FILE,
    SIDECAR_LIMIT,
    AOTICacheWarning,
    RefusedCacheFile,
    open_cache_file,
    read_cache_file,
    warn_once,
)
from pytest_aoti.core.cache_key import KeyParts, key_parts, package_key

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.core.cache_miss import Entry
    from pytest_aoti.core.remote_cache import RemoteSettings, RemoteStore

_MARKER_TEXT = "This directory is pytest-aoti's package cache: pytest-aoti may delete the entries it wrote here.\n"
_ENTRY_DIR = re.compile(r"^[0-9a-f]{2}$")
_PARTIAL = ".partial-"
_ENTRY_FILE = re.compile(r"^[0-9a-f]{64}\.(pt2|json|lock)$|^\.partial-")


class _NotFetched(Exception):
    """The remote cache had no good entry: nothing is installed."""


@dataclass
class CacheStats:
    hits: int = 0  # remote hits included
    misses: int = 0
    compile_seconds: float = 0.0
    saved_seconds: float = 0.0
    corrupt: int = 0
    remote_hits: int = 0
    uploaded: int = 0
    refused: list[str] = field(default_factory=list)  # "<key[:12]>: <reason>" of each remote entry refused
    remote_problem: str = ""  # why the remote cache stopped (or stopped storing), as the warning said
    remote_in_use: bool = False  # a remote cache is configured for this process
    # What the summary says of the remote cache besides its hits: why it is not used, or that it is unsigned or
    # read-only (the header says so too, but -q hides the header).
    remote_state: str = ""
    missed: list[str] = field(default_factory=list)  # each miss: "<test> missed: <what differs>" (core.cache_miss)
    misses_without_entry: int = 0  # misses with no earlier entry to compare with: counted, not named

    def as_dict(self) -> dict[str, Any]:
        """Plain values (xdist sends them from each worker to the controller)."""
        return {**vars(self), "refused": list(self.refused), "missed": list(self.missed)}


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _intact_package(package: Path, root: Path, size: int, sha256: str) -> bool:
    """Whether ``package`` is a regular file (reached without a symlink below ``root``) of ``size`` bytes whose
    checksum is ``sha256``. No more than ``size`` bytes and one are read, whatever the file does meanwhile."""
    with open_cache_file(package, sys.maxsize, root=root) as stream:
        if os.fstat(stream.fileno()).st_size != size:
            return False
        digest, left = hashlib.sha256(), size + 1
        while left > 0 and (chunk := stream.read(min(left, 1 << 20))):
            digest.update(chunk)
            left -= len(chunk)
    return left == 1 and digest.hexdigest() == sha256


def _intact_entry_seconds(package: Path, sidecar: Path, root: Path) -> float | None:
    """The compile seconds a local entry saves when its package matches its sidecar (size and checksum) and the
    sidecar's fields are of their types (an older version copied a remote manifest's ``-1e308`` into one); None
    when it does not. A sidecar or package that is not a regular file in ``root`` is refused with one line."""
    from pytest_aoti.core.remote_cache import plausible_seconds

    try:
        record = json.loads(read_cache_file(sidecar, SIDECAR_LIMIT, root=root))
        size, sha256, seconds = record["size"], record["sha256"], record.get("compile_seconds", 0.0)
        if type(size) is not int or not isinstance(sha256, str) or not plausible_seconds(seconds):
            return None
        intact = _intact_package(package, root, size, sha256)
    except RefusedCacheFile as refused:
        warn_once(refused, "read as a corrupt entry: the package is compiled again")
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return float(seconds) if intact else None


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-aoti"


def _warn(message: str) -> None:
    warnings.warn(AOTICacheWarning(f"pytest-aoti: {message}"), stacklevel=3)


def _is_entry(path: Path) -> bool:
    """A file the cache writes: ``<2 hex>/<64 hex>.pt2|.json|.lock`` (or a partial write)."""
    return _ENTRY_DIR.match(path.parent.name) is not None and _ENTRY_FILE.match(path.name) is not None


def _looks_like_a_cache(root: Path) -> bool:
    """A dir holding only what this cache writes: one made by a pytest-aoti that wrote no marker yet."""
    for child in root.iterdir():
        if child.name == MARKER_FILE:
            continue
        if not (child.is_dir() and not child.is_symlink() and _ENTRY_DIR.match(child.name)):
            return False
        if not all(entry.is_file() and _is_entry(entry) for entry in child.iterdir()):
            return False
    return True


def is_marked(root: Path) -> bool:
    return (root / MARKER_FILE).is_file()


def clear_cache_dir(root: Path) -> int:
    """Delete the entries this cache wrote (``--aoti-cache-clear``) and return how many; a dir that is not marked
    as pytest-aoti's is left alone, with a warning."""
    if not root.exists():
        return 0
    if not root.is_dir() or not is_marked(root):
        _warn(f"--aoti-cache-clear: {root} is not a pytest-aoti cache (no {MARKER_FILE} in it); nothing was deleted")
        return 0
    removed = 0
    isa_verdicts.forget(root)  # the ISA probes' verdicts go with the packages
    for folder in root.iterdir():
        if not (folder.is_dir() and not folder.is_symlink() and _ENTRY_DIR.match(folder.name)):
            continue
        for entry in folder.iterdir():
            if entry.is_file() and _is_entry(entry):
                entry.unlink(missing_ok=True)
                removed += entry.suffix == ".pt2"
        try:
            folder.rmdir()  # only if nothing else is in it
        except OSError:
            pass
    return removed


def unsafe_reason(directory: Path) -> str | None:
    """Why a cache dir must not be trusted with native code, or None when it is private to this user."""
    info = directory.stat()
    if info.st_uid != os.getuid():
        return f"it is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write to it (mode {stat.filemode(info.st_mode)})"
    return None


@dataclass
class PackageCache:
    """Compiled packages under ``root/<key[:2]>/<key>.pt2`` with a JSON sidecar holding their checksum; with a
    ``remote`` store behind it, a local miss is looked up there (and kept here), and a package built here is
    uploaded there."""

    root: Path
    max_bytes: int
    stats: CacheStats = field(default_factory=CacheStats)
    store_problem: str | None = None  # why storing stopped (ENOSPC, EROFS…): said once, then lookups only
    remote: RemoteStore | None = None
    refused_keys: set[str] = field(default_factory=set)  # remote entries refused here: an upload may replace them
    owner: str = ""  # the test building now (building_for): named by the entries it writes and by its misses

    @classmethod
    def open(
        cls, root: Path, max_bytes: int, remote: RemoteSettings | None = None, remote_off: str | None = None
    ) -> PackageCache | None:
        """The cache at ``root``, created private to the user and marked as pytest-aoti's, in front of the
        ``remote`` cache when given (``remote_off``: why the one named is not used, for the summary). Where ``root``
        cannot be used safely (not a dir, not writable, not ours, writable by others) warn and return None: the run
        goes on compiling without a cache."""
        problem = _open_problem(root)
        if problem is not None:
            _warn(f"not using the package cache at {root}: {problem}; compiling without a cache")
            return None
        _reclaim_partials(root)
        cache = cls(root, max_bytes)
        cache.stats.remote_state = remote_off or ""
        if remote is not None:
            from pytest_aoti.core.remote_cache import RemoteStore

            cache.remote = RemoteStore(remote)
            cache.stats.remote_in_use = True
            unusual = ["UNSIGNED" if remote.secret is None else "", "read-only" if remote.readonly else ""]
            cache.stats.remote_state = ", ".join(filter(None, unusual))
        return cache

    def key_for(self, ep: ExportedProgram, inductor_configs: dict[str, Any], device: torch.device) -> str:
        return package_key(ep, inductor_configs, device)

    def parts_for(self, ep: ExportedProgram, inductor_configs: dict[str, Any], device: torch.device) -> KeyParts:
        return key_parts(ep, inductor_configs, device)

    @contextmanager
    def building_for(self, owner: str) -> Iterator[None]:
        """Name the test whose packages are built meanwhile: its entries say so, and its misses name it."""
        before, self.owner = self.owner, owner
        try:
            yield
        finally:
            self.owner = before

    def explain_miss(self, parts: KeyParts) -> str | None:
        """Why ``parts`` missed (``<test> missed: <what differs from the nearest entry>``, :mod:`core.cache_miss`),
        also kept for the summary; None where no entry was there to compare with, only counted (a cold run's every
        compile: a line each would say nothing)."""
        from pytest_aoti.core.cache_miss import miss_line

        line = miss_line(self.owner, parts.record(), self._entries_with_parts())
        if line is None:
            self.stats.misses_without_entry += 1
        else:
            self.stats.missed.append(line)
        return line

    def _entries_with_parts(self) -> Iterator[Entry]:
        """The local entries whose sidecars keep the parts of their key (an older version's keep none)."""
        from pytest_aoti.core.cache_miss import Entry, valid_record

        for sidecar in self.root.glob("*/*.json"):
            if not _is_entry(sidecar):
                continue
            try:
                raw = json.loads(read_cache_file(sidecar, SIDECAR_LIMIT, root=self.root))
                mtime = sidecar.stat().st_mtime
            except RefusedCacheFile as refused:
                warn_once(refused, "not compared with")
                continue
            except (OSError, ValueError, RecursionError):
                continue
            record = valid_record(raw.get("parts")) if isinstance(raw, dict) else None
            if record is not None:
                owner = raw.get("owner")
                yield Entry(owner if isinstance(owner, str) else "", record, mtime)

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.pt2", folder / f"{key}.json"

    @contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Hold the entry's lock: a second process asking for the same package waits, then hits. A cache that cannot
        store (read-only, full) is read without a lock."""
        lock: FileLock | None = None
        if self.store_problem is None:
            try:
                folder = self.root / key[:2]
                folder.mkdir(mode=0o700, exist_ok=True)
                lock = FileLock(str(folder / f"{key}.lock"))
                lock.acquire()
            except OSError as error:
                self._cannot_store(error)
                lock = None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    def lookup(self, key: str, parts: KeyParts | None = None, *, count_miss: bool = True) -> Path | None:
        """The package of ``key`` from this dir, else from the remote cache (kept here, with ``parts``, the parts of
        ``key``), else None: a miss (counted, unless the caller looks under another key next: :meth:`count_miss`)."""
        package = self._local(key)
        if package is None and self.remote is not None:
            package = self._fetch(key, parts)
        if package is None and count_miss:
            self.count_miss()
        return package

    def count_miss(self) -> None:
        self.stats.misses += 1

    def _local(self, key: str) -> Path | None:
        package, sidecar = self._paths(key)
        if not os.path.lexists(package) or not os.path.lexists(sidecar):
            return None
        seconds = _intact_entry_seconds(package, sidecar, self.root)
        if seconds is None:
            self.stats.corrupt += 1
            package.unlink(missing_ok=True)  # a symlink goes, never what it points to
            sidecar.unlink(missing_ok=True)
            return None
        os.utime(package)  # least-recently-used eviction goes by mtime
        self.stats.hits += 1
        self.stats.saved_seconds += seconds
        return package

    def _fetch(self, key: str, parts: KeyParts | None) -> Path | None:
        """The remote entry of ``key``, checked (checksum, signature) as it is written here, then kept here."""
        from pytest_aoti.core.remote_cache import Refused

        assert self.remote is not None
        if self.store_problem is not None:
            return None  # nowhere to put it
        package, sidecar = self._paths(key)
        result: Any = None

        def fetch(tmp: str) -> None:
            nonlocal result
            assert self.remote is not None
            result = self.remote.fetch(key, Path(tmp), max_bytes=self.max_bytes)
            if result is None or isinstance(result, Refused):
                raise _NotFetched

        try:
            package.parent.mkdir(mode=0o700, exist_ok=True)
            self._install(package, fetch)
            record = self._sidecar(result.sha256, result.size, result.compile_seconds, parts)
            self._install(sidecar, lambda tmp: Path(tmp).write_text(json.dumps(record)))
        except _NotFetched:
            self._remote_problem()
            if isinstance(result, Refused):
                if result.replaceable:
                    self.refused_keys.add(key)
                self.stats.refused.append(f"{key[:12]}: {result.reason}")
            return None
        except OSError as error:
            self._cannot_store(error)
            package.unlink(missing_ok=True)
            return None
        self.stats.hits += 1
        self.stats.remote_hits += 1
        self.stats.saved_seconds += result.compile_seconds
        return package

    def _remote_problem(self) -> None:
        if self.remote is not None:
            self.stats.remote_problem = self.remote.problem or self.remote.write_problem or ""

    @staticmethod
    def _install(target: Path, write: Any) -> None:
        """Write ``target`` through a partial file beside it, renamed into place when ``write(tmp)`` returns."""
        # The writer's pid in the name: a later run reclaims what a killed writer left.
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f"{_PARTIAL}{os.getpid()}-")
        os.close(fd)
        try:
            write(tmp)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def store(self, key: str, built: Path, compile_seconds: float, parts: KeyParts | None = None) -> Path:
        """Move a freshly built package into the cache atomically, with ``parts`` (the parts of ``key``) beside it,
        and return its cached path; ``built`` itself when the cache cannot store (it warns once, and the run goes on
        without storing). Then upload it to the remote cache, if any."""
        self.stats.compile_seconds += compile_seconds
        stored = self._store_local(key, built, compile_seconds, parts)
        if self.remote is not None:
            digests = parts.short_digests() if parts is not None else {}
            if self.remote.upload(key, stored, compile_seconds, replace=key in self.refused_keys, parts=digests):
                self.stats.uploaded += 1
            self._remote_problem()
        return stored

    def _sidecar(self, sha256: str, size: int, compile_seconds: float, parts: KeyParts | None) -> dict[str, Any]:
        """An entry's sidecar: its package's checksum and size, its compile time, and the parts of its key with the
        test that built it (for the misses of later runs)."""
        record: dict[str, Any] = {"sha256": sha256, "size": size, "compile_seconds": compile_seconds}
        if parts is not None:
            record.update(owner=self.owner, parts=parts.record())
        return record

    def _store_local(self, key: str, built: Path, compile_seconds: float, parts: KeyParts | None) -> Path:
        if self.store_problem is not None:
            return built
        package, sidecar = self._paths(key)
        try:
            package.parent.mkdir(mode=0o700, exist_ok=True)
            record = self._sidecar(_file_sha256(built), built.stat().st_size, compile_seconds, parts)
            self._install(package, lambda tmp: shutil.copyfile(built, tmp))
            self._install(sidecar, lambda tmp: Path(tmp).write_text(json.dumps(record)))
            self.evict(keep=package)
        except OSError as error:  # a full disk, a read-only mount, permissions changed mid-run
            self._cannot_store(error)
            package.unlink(missing_ok=True)
            return built
        return package

    def _cannot_store(self, error: OSError) -> None:
        if self.store_problem is None:
            self.store_problem = error.strerror or str(error)
            _warn(
                f"the package cache at {self.root} cannot store packages ({self.store_problem}); "
                "going on without storing"
            )

    def evict(self, keep: Path | None = None) -> None:
        """Delete least-recently-used packages until the cache fits ``max_bytes`` (``keep`` always stays). Only
        entries the cache wrote are considered; one another process evicts meanwhile is skipped."""
        sized: list[tuple[float, int, Path]] = []
        for package in self.root.glob("*/*.pt2"):
            if not _is_entry(package):
                continue
            try:
                status = package.stat()
            except FileNotFoundError:
                continue
            sized.append((status.st_mtime, status.st_size, package))
        total = sum(size for _, size, _ in sized)
        for _, size, oldest in sorted(sized):
            if total <= self.max_bytes:
                break
            if oldest == keep:
                continue
            total -= size
            oldest.unlink(missing_ok=True)
            oldest.with_suffix(".json").unlink(missing_ok=True)


def _reclaim_partials(root: Path) -> None:
    """Remove the partial writes of writers that are gone (killed mid-store): ``.partial-<pid>-…`` whose pid is
    not running. A partial without a pid (an older version's) goes once it is an hour old."""
    for partial in root.glob(f"*/{_PARTIAL}*"):
        if not _is_entry(partial):
            continue
        writer = partial.name[len(_PARTIAL) :].split("-", 1)[0]
        try:
            gone = not _running(int(writer)) if writer.isdigit() else time.time() - partial.stat().st_mtime > 3600
            if gone:
                partial.unlink()
        except OSError:
            continue


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _open_problem(root: Path) -> str | None:
    """Why ``root`` cannot serve as the cache (after creating and marking it where it may), or None."""
    try:
        if root.exists() and not root.is_dir():
            return "it is not a directory"
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        reason = unsafe_reason(root)
        if reason is not None:
            return reason
        if not os.access(root, os.W_OK | os.X_OK):
            return "it is not writable"
        if not is_marked(root):
            if not _looks_like_a_cache(root):
                return (
                    f"it holds files that are not pytest-aoti's and has no {MARKER_FILE} marker; pick an empty or "
                    "new directory (pytest-aoti deletes old entries there)"
                )
            (root / MARKER_FILE).write_text(_MARKER_TEXT)
    except OSError as error:
        return f"it cannot be created or used ({error.strerror or error})"
    return None
