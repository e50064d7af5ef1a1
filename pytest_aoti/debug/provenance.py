"""Which line of the user's model each kernel of a package computes.

A package compiled with Inductor's provenance tracking (``INDUCTOR_PROVENANCE=1``, which the debug stages set) holds
``kernel_information.json``: for every kernel launch and extern call, keyed ``<name>:<debug handle>`` in launch order,
the graph nodes it computes and their stack traces at export. This module reads it from the package (a zip: no torch
import) and keeps the innermost frame outside torch of each trace: the user's line. A crash's Python stack (a
faulthandler dump) gets its user's line here too: its innermost frame outside the standard library, installed
packages and pytest-aoti.
"""

from __future__ import annotations

import json
import linecache
import os
import re
import sysconfig
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The source-line helpers live in core (its messages name the user's line too); re-exported for the debug rerun.
from pytest_aoti.core.source_lines import SourceLine, torch_install_dir, user_line
from pytest_aoti.debug.kernel_log import CrashFrame


@dataclass(frozen=True)
class KernelSource:
    """One launch (or extern call) of the package, in launch order."""

    name: str
    nodes: tuple[str, ...]
    lines: tuple[SourceLine, ...]
    # The lines of its nodes that read a table by index (an embedding, a gather): where an index check fails.
    index_lines: tuple[SourceLine, ...] = ()


# Graph node names (the op's name, numbered: ``embedding_2``) of the ops an out-of-bounds index check guards.
_INDEX_READ = re.compile(r"(embedding|index_select|index|gather|take)(_\d+)?$")


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives: the standard library, installed packages, pytest-aoti itself."""
    paths = sysconfig.get_paths()
    dirs = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths}
    # The whole package, not this subpackage: an editable install of pytest-aoti is outside site-packages.
    dirs.add(str(Path(__file__).parents[1]))
    return tuple(os.path.join(directory, "") for directory in dirs)


def user_frame(frames: list[CrashFrame]) -> SourceLine | None:
    """The innermost frame of a crash's Python stack in the user's code (not the standard library, an installed
    package or pytest-aoti), with its source line read here: the child ran on this machine, from these files."""
    library = _library_dirs()
    for frame in frames:
        if not frame.file.startswith(("<", *library)):
            text = linecache.getline(frame.file, frame.line).strip()
            return SourceLine(frame.file, frame.line, frame.function, text)
    return None


def read_kernel_sources(package: Path, node_traces: Mapping[str, str] | None = None) -> list[KernelSource]:
    """The package's launches with their nodes and user lines; empty when the package has no provenance data.
    ``node_traces`` (graph node -> stack trace, from this run's export) take the place of the traces the package
    recorded when it was compiled, which a cached package may have got from another checkout."""
    try:
        with zipfile.ZipFile(package) as archive:
            name = next((n for n in archive.namelist() if n.endswith("kernel_information.json")), None)
            info: Any = json.loads(archive.read(name)) if name else {}
    except (OSError, ValueError, zipfile.BadZipFile):
        return []
    if not isinstance(info, dict):
        return []
    torch_dir = torch_install_dir()

    def handle(key: str) -> int:
        number = key.rsplit(":", 1)[-1]
        return int(number) if number.isdigit() else 0

    sources = []
    for key in sorted(info, key=handle):
        entry = info[key] if isinstance(info[key], dict) else {}
        nodes = entry.get("pre_grad_nodes") or entry.get("post_grad_nodes") or ()
        recorded = [trace for trace in entry.get("stack_traces", ()) if isinstance(trace, str)]
        sources.append(kernel_source(key.rsplit(":", 1)[0], nodes, node_traces or {}, recorded, torch_dir))
    return sources


def kernel_source(
    name: str,
    nodes: Any,
    node_traces: Mapping[str, str],
    recorded: list[str] | None = None,
    torch_dir: str | None = None,
) -> KernelSource:
    """One kernel's nodes and user lines: from this run's ``node_traces`` (graph node -> stack trace at export),
    else from the traces the package ``recorded`` when it was compiled."""
    torch_dir = torch_dir if torch_dir is not None else torch_install_dir()
    traces = [node_traces[node] for node in nodes if node in node_traces] or list(recorded or ())
    lines = [user_line(trace, torch_dir) for trace in traces]
    index_traces = [node_traces[n] for n in nodes if n in node_traces and _INDEX_READ.match(n)]
    index_lines = [user_line(trace, torch_dir) for trace in index_traces]
    return KernelSource(
        name,
        tuple(str(node) for node in nodes),
        tuple(dict.fromkeys(line for line in lines if line is not None)),
        tuple(dict.fromkeys(line for line in index_lines if line is not None)),
    )


def launch_of(sources: list[KernelSource], kernel: str, occurrence: int = 1) -> int | None:
    """Index of the ``occurrence``-th launch of ``kernel`` (1-based), or None."""
    seen = 0
    for index, source in enumerate(sources):
        if source.name == kernel:
            seen += 1
            if seen == occurrence:
                return index
    return None


def where(
    source: KernelSource,
    relative_to: Path | None = None,
    limit: int = 2,
    *,
    indexing: bool = False,
    first: SourceLine | None = None,
) -> str:
    """``at model.py:42 in forward: h = …`` for a kernel, or which op it runs when no user line is known;
    ``indexing``: its index reads' lines first (it failed an index check); ``first``: that line before all, when the
    kernel computes it (the op the failure was traced to)."""
    lines = source.lines
    if indexing and source.index_lines:
        lines = (*source.index_lines, *(line for line in source.lines if line not in source.index_lines))
    if first is not None and first in lines:
        lines = (first, *(line for line in lines if line != first))
    if lines:
        shown = "; ".join(line.describe(relative_to) for line in lines[:limit])
        more = f" (and {len(lines) - limit} more)" if len(lines) > limit else ""
        return f"at {shown}{more}"
    ops = ", ".join(source.nodes) or source.name
    return f"no source line recorded (op: {ops})"
