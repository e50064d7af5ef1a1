"""Temp directories that live as long as the process that made them: the fork server's, and the scratch directory of
the interpreter that verifies packages. Each holds its owner, the pid namespace and pid of the process that made it
(``owner``), because a process killed with SIGKILL cannot remove its own: the next process that makes one of the same
kind removes those whose owner is dead, and nothing else. Imports neither torch nor pytest."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path

# Not in the directory's name: a Unix socket's path (the fork server's) has room for ~107 bytes, and TMPDIR takes its
# share.
OWNER = "owner"
_PID_MAX = 2**22  # Linux's largest pid_max


def pid_namespace() -> int:
    """This process's pid namespace: a pid of another one (another container sharing this tmp directory) says
    nothing about whether that process runs."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def make_owned_dir(prefix: str, *, contents: Collection[str] | None = None) -> Path:
    """A new directory ``<tmp>/<prefix>XXXX`` owned by this process, after removing those of the same prefix whose
    owner is dead. ``contents``: all that such a directory ever holds, besides its owner file (None: anything, for
    a directory that is another process's TMPDIR); one holding anything else is never removed."""
    remove_dirs_of_dead_owners(prefix, contents=contents)
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    (directory / OWNER).write_text(f"{pid_namespace()} {os.getpid()}")
    return directory


def _dead_owner(directory: Path, contents: Collection[str] | None) -> bool:
    """Whether ``directory`` is one of this user's owned directories whose owner no longer runs: it holds nothing but
    ``contents`` and its owner file, which names a pid of this namespace that no process has."""
    status = directory.lstat()
    if status.st_uid != os.getuid() or not stat.S_ISDIR(status.st_mode):
        return False
    owner = directory / OWNER
    if not stat.S_ISREG(owner.lstat().st_mode):
        return False
    if contents is not None and not {entry.name for entry in directory.iterdir()} <= {*contents, OWNER}:
        return False
    fields = owner.read_text()[:64].split()
    if len(fields) != 2 or not all(field.isdigit() for field in fields):
        return False
    namespace, pid = (int(field) for field in fields)
    if namespace != pid_namespace() or not 1 < pid <= _PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def remove_dirs_of_dead_owners(prefix: str, *, contents: Collection[str] | None = None) -> None:
    """Remove the directories ``<tmp>/<prefix>*`` of processes that died without removing them (SIGKILL)."""
    for directory in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            dead = _dead_owner(directory, contents)
        except (OSError, UnicodeDecodeError):  # gone meanwhile, unreadable, no owner (an older release's), alive
            continue
        if dead:
            shutil.rmtree(directory, ignore_errors=True)
