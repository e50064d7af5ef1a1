"""Where golden files live: ``__aoti_snapshots__/<test file stem>/<test id>.safetensors`` beside the test file.
Torch-free: the session's summary lists unused golden files without importing torch."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

SNAPSHOT_DIR = "__aoti_snapshots__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-\[\]=,+]")


def snapshot_path(test_file: Path, test_id: str) -> Path:
    """Where the golden file of the test ``test_id`` (its node id without the file: ``TestA::test_b[x]``) lives."""
    name = _UNSAFE.sub("_", test_id.replace("::", "."))
    if len(name) > 200:  # file names end at 255 bytes; keep the start readable and the whole id in a hash
        name = name[:180] + "-" + hashlib.sha256(test_id.encode()).hexdigest()[:16]
    return test_file.parent / SNAPSHOT_DIR / test_file.stem / f"{name}.safetensors"


def golden_files(directory: Path) -> Iterator[Path]:
    """The golden files under one test file's snapshot directory."""
    if directory.is_dir():
        yield from sorted(path for path in directory.glob("*.safetensors") if not path.name.startswith(".partial-"))
