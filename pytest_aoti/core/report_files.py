"""The files a session writes at its end (pytest-aoti's page and JSON, pytest's and its plugins' reports): where
each goes, and whether it can go there. Checked when the session starts, so a path that cannot be written, or two
reports sharing one file, is a usage error before the tests run rather than a note (or a lost report) after them.
Plain functions over paths and option values: no pytest."""

from __future__ import annotations

import os
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
    """Why a file cannot be written at ``path`` (its missing parent directories would be created); None if it can."""
    if path.is_dir():
        return f"{path} is a directory"
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot write {path}: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"cannot write {path}: permission denied"
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
    if path.is_dir():
        return f"{path} is a directory; expected the path of {kind} to write"
    problem = write_problem(path)
    if problem is None:
        other = shared_with(path, own_dest, option, base)
        if other is not None:
            problem = f"{path} is also {other}'s file; give each report a file of its own"
    return problem
