"""The user's line behind a graph node: the innermost frame of an export stack trace that is not inside torch.

The core names the user's line in its own messages (the buffer a model updates, the embedding an index reads), and
the debug rerun's provenance names it for each kernel: both read it here.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)\n[ \t]*(?P<text>[^\n]*)')


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    function: str
    text: str

    def describe(self, relative_to: Path | None = None) -> str:
        shown = self.file
        if relative_to is not None:
            try:
                shown = os.path.relpath(self.file, relative_to)
            except ValueError:  # another drive (Windows)
                shown = self.file
            if shown.startswith(".."):
                shown = self.file
        text = self.text.strip()
        return f"{shown}:{self.line} in {self.function}{': ' + text if text else ''}"


def torch_install_dir() -> str | None:
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    if spec is None or spec.origin is None:
        return None
    return str(Path(spec.origin).parent) + os.sep


def user_line(stack_trace: str, torch_dir: str | None) -> SourceLine | None:
    """The innermost frame of a trace that is not inside torch: where the user's model called what became the
    kernel (``F.linear`` inside ``nn.Linear`` is torch's; the ``self.fc(x)`` that called it is the user's)."""
    frames = [SourceLine(m["file"], int(m["line"]), m["function"], m["text"]) for m in _FRAME.finditer(stack_trace)]
    mine = [frame for frame in frames if torch_dir is None or not frame.file.startswith(torch_dir)]
    return mine[-1] if mine else None
