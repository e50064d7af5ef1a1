"""Phase markers a child process writes so the parent knows where it died (export, compile, load, run).

Written straight to file descriptor 2, unbuffered, so they survive a crash; only inside a pytest-aoti child.
"""

from __future__ import annotations

import os
import re

CHILD_ENV = "PYTEST_AOTI_CHILD"
_PREFIX = "[pytest-aoti] phase: "
_PHASE_LINE = re.compile(r"^\[pytest-aoti\] phase: (?P<phase>\w+)(?: (?P<detail>.*))?$", re.MULTILINE)


def mark(phase: str, detail: str = "") -> None:
    if os.environ.get(CHILD_ENV):
        # Leading newline: the printer's last line may lack one, and the marker must start its own line.
        os.write(2, f"\n{_PREFIX}{phase}{' ' + detail if detail else ''}\n".encode())


def last_phase(log: str) -> str | None:
    """The last phase a child announced: 'export', 'compile', 'load', 'loaded', 'run' or 'ran'."""
    matches = list(_PHASE_LINE.finditer(log))
    return matches[-1].group("phase") if matches else None
