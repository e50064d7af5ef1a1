"""Exceptions raised by pytest-aoti's core. Torch-free, so the plugin can import them at load time."""

from __future__ import annotations

from typing import Literal

Invariant = Literal[
    "input_structure",
    "input_device",
    "input_dtype",
    "input_shape",
    "output_device",
    "output_dtype",
    "output_shape",
    "output_nonfinite",
]


class AOTIInvariantError(AssertionError):
    """A compiled model was called with, or returned, a tensor that breaks one of its invariants.

    ``invariant`` says which check failed, ``side`` whether it was an input or an output, ``index`` the tensor's
    position among the flat inputs/outputs and ``name`` its argument name (inputs) when known.
    """

    def __init__(
        self,
        invariant: Invariant,
        *,
        side: Literal["input", "output"],
        index: int,
        name: str | None,
        expected: str,
        actual: str,
        detail: str = "",
    ) -> None:
        self.invariant: Invariant = invariant
        self.side = side
        self.index = index
        self.name = name
        self.expected = expected
        self.actual = actual
        self.detail = detail
        label = f"{side} {index}" + (f" ({name!r})" if name else "")
        what = invariant.split("_", 1)[1]
        message = f"{label}: {what} invariant violated: expected {expected}, got {actual}"
        if detail:
            message += f"; {detail}"
        if side == "input":
            message += " (the compiled package was not run)"
        super().__init__(message)


class AOTIExportError(Exception):
    """``torch.export.export`` rejected the model. ``summary`` is a one-line description."""

    def __init__(self, summary: str) -> None:
        self.summary = summary
        super().__init__(f"export failed: {summary}")


class AOTICompileError(Exception):
    """``aoti_compile_and_package`` (or loading its result) failed. ``summary`` is a one-line description."""

    def __init__(self, summary: str, *, stage: str = "compile") -> None:
        self.summary = summary
        self.stage = stage
        super().__init__(f"AOTI {stage} failed: {summary}")
