"""The golden outputs' errors."""

from __future__ import annotations

from typing import ClassVar

from pytest_aoti.core.errors import AOTIError


class AOTISnapshotError(AOTIError, AssertionError):
    """A golden file disagrees with this run: different outputs, a golden missing where none may be recorded, or a
    file that is not a readable golden file."""

    # Eager agreed with the package, or was not asked: what changed is the environment or the model, not a kernel
    # a debug rerun could point at.
    failure_kind: ClassVar[str] = "snapshot"
    not_rerun: ClassVar[str | None] = (
        "the outputs differ from golden outputs recorded earlier, or none may be recorded: a debug rerun compares "
        "kernels with eager, which is not what changed (see the report's environment diff)"
    )
