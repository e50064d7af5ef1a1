"""Phase markers a child process writes so the parent knows where it died (export, compile, load, run).

The core marks each phase (:func:`mark`); where the marks go is set by the child's session (:func:`report_to`,
from the environment its parent gave it), so the core reads no environment variable. In a child, each marker is an
event of its report stream (``protocol.Event.PHASE``, appended per write, so it survives a crash whatever pytest's
output capture does) and, in a debug stage, also goes to file descriptor 2, so it sits in the stage's log between
the printer's kernel lines. In every
process, the last mark tells whether the current test got as far as pytest-aoti at all (:func:`announced`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from pytest_aoti.core.protocol import Event, append_event

_PREFIX = "[pytest-aoti] phase: "
_PHASE_LINE = re.compile(r"^\[pytest-aoti\] phase: (?P<phase>\w+)(?: (?P<detail>.*))?$", re.MULTILINE)


@dataclass
class _Marks:
    announced: str | None = None  # the last phase since forget()
    event_file: str | None = None  # a child's report stream
    to_stderr: bool = False  # a debug stage: also into its log


# One per process: a process is in one phase at a time, and a child reports to one parent.
_marks = _Marks()


def report_to(event_file: str | None, *, to_stderr: bool) -> None:
    """A child's session: send every later mark to ``event_file`` and, with ``to_stderr``, to file descriptor 2."""
    _marks.event_file, _marks.to_stderr = event_file, to_stderr


def forget() -> None:
    _marks.announced = None


def announced() -> str | None:
    return _marks.announced


def mark(phase: str, detail: str = "") -> None:
    _marks.announced = phase
    line = f"{_PREFIX}{phase}{' ' + detail if detail else ''}\n"
    if _marks.event_file:
        append_event(_marks.event_file, Event.PHASE, {"phase": phase, "detail": detail})
    if _marks.to_stderr:
        # Leading newline: the printer's last line may lack one.
        os.write(2, ("\n" + line).encode())


def last_phase(log: str) -> str | None:
    """The last phase a child announced: 'export', 'compile', 'load', 'loaded', 'run' or 'ran'."""
    matches = list(_PHASE_LINE.finditer(log))
    return matches[-1].group("phase") if matches else None
