"""Where golden files live: ``__aoti_snapshots__/<test file stem>/<test id>.safetensors`` beside the test file.
Torch-free: the session's summary lists unused golden files without importing torch."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

SNAPSHOT_DIR = "__aoti_snapshots__"
# What a file name holds as it is, on every system; anything else is %-escaped (UTF-8 bytes), '%' included, so two
# test ids never share a golden file (``test[x*2]`` and ``test[x/2]`` once both became ``test[x_2]``).
_KEPT = re.compile(r"[A-Za-z0-9_\-\[\]=,+.]")
_KEPT_IN_NAMES = re.compile(r"[A-Za-z0-9_\-\[\]=,+]")  # a test's own names: '.' joins them, so it is escaped
_MAX_NAME = 200  # file names end at 255 bytes; keep the start readable and the whole id in a hash


def _escaped(text: str, kept: re.Pattern[str]) -> str:
    return "".join(char if kept.fullmatch(char) else "".join(f"%{byte:02X}" for byte in char.encode()) for char in text)


def file_name(test_id: str) -> str:
    """The golden file's name (without ``.safetensors``) of the test ``test_id``: its names joined by ``.``
    (``TestA.test_b``), then its parameter id, characters a file name cannot hold escaped. One test id, one name."""
    names, bracket, parameters = test_id.partition("[")
    path = ".".join(_escaped(part, _KEPT_IN_NAMES) for part in names.split("::"))
    name = path + _escaped(bracket + parameters, _KEPT)
    if len(name) > _MAX_NAME:
        name = name[: _MAX_NAME - 20] + "-" + hashlib.sha256(test_id.encode()).hexdigest()[:16]
    return name


def snapshot_path(test_file: Path, test_id: str) -> Path:
    """Where the golden file of the test ``test_id`` (its node id without the file: ``TestA::test_b[x]``) lives."""
    return test_file.parent / SNAPSHOT_DIR / test_file.stem / f"{file_name(test_id)}.safetensors"


def golden_files(directory: Path) -> Iterator[Path]:
    """The golden files under one test file's snapshot directory."""
    if directory.is_dir():
        yield from sorted(path for path in directory.glob("*.safetensors") if not path.name.startswith(".partial-"))
