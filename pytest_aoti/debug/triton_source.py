"""A Triton kernel's generated source file, read for the verdict of a device-side assert: which kernel holds the
assert's line, the graph nodes it computes and the assert's own line.

CUDA's message for a failed ``tl.device_assert`` names the kernel's source file in Inductor's cache and the line.
The kernel may have run while Inductor compiled (it autotunes by running kernels): then no package exists, no launch
was printed, and this file is all that says which kernel it was. Inductor heads each kernel with the nodes it fuses
(``# Topologically Sorted Source Nodes: [embedding_1, add], Original ATen: [aten.embedding, aten.add]``); those are
the exported program's node names, which the repro bundle maps to the user's lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pytest_aoti.core.cache_files import RefusedCacheFile, read_cache_file

_KERNEL_SOURCE_LIMIT = 4 << 20  # a generated kernel file is a few kB
_DEF = re.compile(r"^def (?P<name>triton_\w+)\(", re.MULTILINE)
_SOURCE_NODES = re.compile(r"^# Topologically Sorted Source Nodes: \[(?P<nodes>[^\]]*)\]", re.MULTILINE)


@dataclass(frozen=True)
class TritonKernel:
    """The kernel whose source holds an assert's line: its name, the graph nodes it computes, and the line."""

    name: str
    nodes: tuple[str, ...]
    assert_line: str


def kernel_at(path: Path, line: int) -> TritonKernel | None:
    """The kernel in ``path`` (a generated Triton source) that holds ``line``; None when the file is gone (another
    machine's cache, a cleaned tmp), is not a regular file of a kernel's size, or holds no kernel there."""
    try:
        text = read_cache_file(path, _KERNEL_SOURCE_LIMIT).decode(errors="replace")
    except (OSError, RefusedCacheFile):
        return None
    lines = text.splitlines()
    if not 0 < line <= len(lines):
        return None
    offset = sum(len(text_line) + 1 for text_line in lines[: line - 1])
    definitions = [match for match in _DEF.finditer(text) if match.start() <= offset]
    if not definitions:
        return None
    definition = definitions[-1]
    heads = [match for match in _SOURCE_NODES.finditer(text) if match.start() <= definition.start()]
    nodes = tuple(node.strip() for node in heads[-1]["nodes"].split(",") if node.strip()) if heads else ()
    return TritonKernel(definition["name"], nodes, lines[line - 1].strip())
