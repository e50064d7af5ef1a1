"""Phase markers a child process writes so the parent knows where it died (export, compile, load, run).

Each marker goes to the child's phase file (``PYTEST_AOTI_PHASE_FILE``, opened and closed per write, so it survives
a crash whatever pytest's output capture does) and, in a debug stage, to file descriptor 2, so it also sits in the
stage's log between the printer's kernel lines. Only inside a pytest-aoti child.
"""

from __future__ import annotations

import os
import re

from pytest_aoti.protocol import CHILD_ENV, PHASE_FILE_ENV

_PREFIX = "[pytest-aoti] phase: "
_PHASE_LINE = re.compile(r"^\[pytest-aoti\] phase: (?P<phase>\w+)(?: (?P<detail>.*))?$", re.MULTILINE)
# The last phase this process announced since forget(): whether the current test got as far as pytest-aoti at all.
_announced: str | None = None


def forget() -> None:
    global _announced
    _announced = None


def announced() -> str | None:
    return _announced


def mark(phase: str, detail: str = "") -> None:
    global _announced
    _announced = phase
    if not os.environ.get(CHILD_ENV):
        return
    line = f"{_PREFIX}{phase}{' ' + detail if detail else ''}\n"
    phase_file = os.environ.get(PHASE_FILE_ENV)
    if phase_file:
        with open(phase_file, "a") as stream:
            stream.write(line)
    if os.environ.get(CHILD_ENV) != "isolate":
        # In a debug stage's log, between the printer's kernel lines. (An isolated test's output is captured into
        # its report, where the markers would be noise.) Leading newline: the printer's last line may lack one.
        os.write(2, ("\n" + line).encode())


def last_phase(log: str) -> str | None:
    """The last phase a child announced: 'export', 'compile', 'load', 'loaded', 'run' or 'ran'."""
    matches = list(_PHASE_LINE.finditer(log))
    return matches[-1].group("phase") if matches else None
