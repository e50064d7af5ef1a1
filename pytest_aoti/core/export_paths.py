"""Where an exported program took a path its model's eager run did not.

When the exported program run eagerly already differs from eager (``compiler``'s first triage question of a
mismatch), the usual cause is code that runs differently under export: a branch on
``torch.compiler.is_exporting()``, a Python value or a data-dependent branch frozen at trace time. The first of these
is cheap to find when export ran a line that eager does not: every graph node carries the stack trace of the line that
made it, and one eager run under a line tracer says which lines of those files eager ran. The first node (in graph
order) on a line eager never reached is where the two part. A difference that takes no other line (a value frozen
at export) has no such node, and nothing is named.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram

from pytest_aoti.core.source_lines import SourceLine, torch_install_dir, user_line


@dataclass(frozen=True)
class OffPathNode:
    """The first graph node made on a line the eager run did not reach."""

    node: str
    target: str
    line: SourceLine


def _node_lines(program: ExportedProgram) -> list[tuple[torch.fx.Node, SourceLine]]:
    torch_dir = torch_install_dir()
    lines = []
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        line = user_line(node.meta.get("stack_trace") or "", torch_dir)
        if line is not None:
            lines.append((node, line))
    return lines


Tracer = Callable[[types.FrameType, str, Any], Any]


class LinesRun(set[tuple[str, int]]):
    """The (file, line) pairs a call ran, and the functions it entered."""

    def __init__(self) -> None:
        super().__init__()
        self.functions: set[types.CodeType] = set()

    def entered(self, line: SourceLine) -> bool:
        """Whether the call entered the function that holds ``line`` (by its name and the lines its code spans)."""
        return any(
            code.co_filename == line.file
            and code.co_name == line.function
            and code.co_firstlineno <= line.line <= max((end for _, _, end in code.co_lines() if end), default=0)
            for code in self.functions
        )


def lines_run(call: Callable[[], object], files: frozenset[str]) -> LinesRun:
    """The (file, line) pairs of ``files`` that ``call`` ran, read per bytecode so that a line number is the one
    a stack trace of that moment shows (export's node traces are such). Other files are not traced. The tracer in
    place before (coverage's) is put back afterwards; it misses this one run."""
    ran = LinesRun()

    def each_opcode(frame: types.FrameType, event: str, arg: Any) -> Tracer:
        ran.add((frame.f_code.co_filename, frame.f_lineno))
        return each_opcode

    def on_call(frame: types.FrameType, event: str, arg: Any) -> Tracer | None:
        if frame.f_code.co_filename not in files:
            return None
        frame.f_trace_opcodes = True
        ran.functions.add(frame.f_code)
        ran.add((frame.f_code.co_filename, frame.f_lineno))
        return each_opcode

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        call()
    finally:
        sys.settrace(previous)
    return ran


def first_node_off_eagers_path(
    program: ExportedProgram, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> OffPathNode | None:
    """The first graph node whose line, in a function the eager run of ``module`` on these inputs entered, that run
    never reached; or None: where the eager run raises, and where every such line was run."""
    node_lines = _node_lines(program)
    files = frozenset(line.file for _, line in node_lines)
    if not files:
        return None

    def eager() -> None:
        with torch.no_grad():
            module(*args, **kwargs)

    try:
        ran = lines_run(eager, files)
    except Exception:  # the model's own eager run: no answer here, the mismatch is reported as it is
        return None
    for node, line in node_lines:
        # Only a line of a function eager ran counts as a line eager did not run: where the tracer saw nothing of
        # the function (another thread, compiled code), there is nothing to say.
        if (line.file, line.line) not in ran and ran.entered(line):
            return OffPathNode(node.name, str(node.target), line)
    return None
