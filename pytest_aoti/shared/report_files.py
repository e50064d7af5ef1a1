"""The files a session writes at its end (pytest-aoti's page and JSON, pytest's and its plugins' reports): where
each goes, and whether it can go there. Checked when the session starts, so a path that cannot be written, or two
reports sharing one file, is a usage error before the tests run rather than a note (or a lost report) after them.
Plain functions over paths and option values: no pytest."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

# The report files of pytest and its common plugins, by option dest: --junitxml, pytest-html, pytest-reportlog,
# pytest-json-report; and pytest-aoti's own.
REPORT_OPTIONS = {
    "xmlpath": "--junitxml",
    "htmlpath": "--html",
    "report_log": "--report-log",
    "json_report_file": "--json-report-file",
    "aoti_html": "--aoti-html",
    "aoti_benchmark_json": "--aoti-benchmark-json",
}


def target_path(raw: str, base: Path) -> Path:
    """``raw`` as a path (``~`` expanded, as a shell would), relative to ``base`` unless absolute."""
    path = Path(raw).expanduser()
    return path if path.is_absolute() else base / path


def write_problem(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` (its missing parent directories would be created); None if it can.

    The answer is the file system's own: what is missing is probed with an entry of a unique name, made and removed
    at once (so xdist workers probing the same path at the same time never meet each other's), and an existing file
    is opened for appending without writing. Permission bits alone would say "permission denied" for a read-only
    mount and nothing at all for root under /proc."""
    if os.path.isdir(path):  # os.path's tests answer False where a stat fails: the probe then says why
        return f"{path} is a directory"
    existing = path.parent
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not os.path.isdir(existing):
        return f"cannot write {path}: {_not_a_directory(existing)}"
    too_long = _name_too_long(path, existing)
    problem = too_long or (_probe_file(path) if existing == path.parent else _probe_directory(existing))
    return f"cannot write {path}: {problem}" if problem else None


def os_reason(error: OSError) -> str:
    """An OS error's cause as a person reads it, with its errno's name: "read-only file system (EROFS)"."""
    if error.errno is None:
        return str(error)
    text = error.strerror or os.strerror(error.errno)
    return f"{text[:1].lower()}{text[1:]} ({errno.errorcode.get(error.errno, error.errno)})"


def _not_a_directory(existing: Path) -> str:
    if os.path.isfile(existing):
        return f"a parent is a file: {existing} is not a directory"
    if os.path.islink(existing) and not os.path.exists(existing):
        return f"a parent is a symbolic link to a path that does not exist: {existing} is not a directory"
    return f"{existing} is not a directory"


def _name_too_long(path: Path, existing: Path) -> str | None:
    try:
        most = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return None
    for name in path.relative_to(existing).parts:
        if len(os.fsencode(name)) > most:
            return f"the name {name[:40]!r}... is longer than the {most} bytes a name may have there"
    return None


def _probe_directory(existing: Path) -> str | None:
    """Whether a directory can be made in ``existing`` (the first missing parent goes there)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".pytest-aoti-probe-", dir=existing))
    except OSError as error:
        return f"cannot create a directory in {existing}: {os_reason(error)}"
    return None


def _probe_file(path: Path) -> str | None:
    """Whether ``path``, whose directory exists, can be written: opened for appending (nothing written) if it
    exists, else a file of a unique name made beside it."""
    try:
        if os.path.lexists(path):
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        else:
            handle, probe = tempfile.mkstemp(prefix=".pytest-aoti-probe-", dir=path.parent)
            os.close(handle)
            os.unlink(probe)
    except OSError as error:
        return os_reason(error)
    return None


def write_report(path: Path, text: str) -> str | None:
    """Write ``text`` to ``path`` (its missing parents made); None, or why it could not be written (what is in the
    way, where :func:`write_problem` sees it: "file exists" alone would not say which)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        return write_problem(path) or f"cannot write {path}: {os_reason(error)}"
    return None


def shared_with(path: Path, own_dest: str, option: Callable[[str], object], base: Path) -> str | None:
    """The other report option (``--junitxml``, ...) that writes ``path`` too, if one does: the last to write would
    silently replace the other's file. ``option(dest)``: an option's value (None where unset or unknown)."""
    mine = os.path.realpath(path)
    for dest, flag in REPORT_OPTIONS.items():
        value = option(dest) if dest != own_dest else None
        if isinstance(value, str | os.PathLike) and str(value).strip():
            if os.path.realpath(target_path(str(value), base)) == mine:
                return flag
    return None


def report_target(
    raw: str, relative_to: Path, own_dest: str, option: Callable[[str], object], base: Path, kind: str
) -> tuple[Path, str | None]:
    """The path an option's ``raw`` value names (relative to ``relative_to``), and why the report ``own_dest``
    (``kind``: "a JSON file") cannot be written there, or None: the caller makes that a usage error."""
    path = target_path(raw, relative_to)
    return path, report_target_problem(path, own_dest, option, base, kind)


def report_target_problem(
    path: Path, own_dest: str, option: Callable[[str], object], base: Path, kind: str
) -> str | None:
    """Why the report ``own_dest`` (``kind``: "a JSON file") cannot be written at ``path`` (a directory is there, it
    cannot be written, or another report writes it too); None when it can."""
    if os.path.isdir(path):
        return f"{path} is a directory; expected the path of {kind} to write"
    problem = write_problem(path)
    if problem is None:
        other = shared_with(path, own_dest, option, base)
        if other is not None:
            problem = f"{path} is also {other}'s file; give each report a file of its own"
    return problem
