"""Exceptions raised by pytest-aoti's core. Torch-free, so the plugin can import them at load time."""

from __future__ import annotations

import re
from typing import Literal

from pytest_aoti.core.protocol import FailureKind

Invariant = Literal[
    "input_structure",
    "input_value",
    "input_device",
    "input_dtype",
    "input_shape",
    "input_stride",
    "input_nonfinite",
    "input_index",
    "output_device",
    "output_dtype",
    "output_shape",
    "output_nonfinite",
]


class AOTIInvariantError(AssertionError):
    """A compiled model was called with, or returned, a tensor that breaks one of its invariants.

    ``invariant`` says which check failed, ``side`` whether it was an input or an output, ``index`` the tensor's
    position among the flat inputs/outputs and ``name`` its argument name (inputs) when known, ``where`` its path
    in the nest of inputs for a structure error.
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
        where: str | None = None,
    ) -> None:
        self.invariant: Invariant = invariant
        self.side = side
        self.index = index
        self.name = name
        self.expected = expected
        self.actual = actual
        self.detail = detail
        self.where = where
        # ``where`` names a position in a nest of inputs (``args[1]['mask']``) when that says more than an index.
        label = f"input {where}" if where else f"{side} {index}" + (f" ({name!r})" if name else "")
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


class AOTISpecializationError(AOTIExportError):
    """Export made static a dim that ``dynamic_shapes`` asked to be dynamic: the package accepts only one size."""

    def __init__(self, summary: str) -> None:
        self.summary = summary
        Exception.__init__(self, summary)


class AOTICompileError(Exception):
    """``aoti_compile_and_package`` (or loading its result) failed. ``summary`` is a one-line description."""

    def __init__(self, summary: str, *, stage: str = "compile") -> None:
        self.summary = summary
        self.stage = stage
        super().__init__(f"AOTI {stage} failed: {summary}")


class AOTIMismatchError(AssertionError):
    """``aoti_check``: the package's outputs differ from eager's (``torch.testing.assert_close``'s message).

    ``random_ops`` names the graph's random ops when it has any: the package and eager draw different random
    numbers, so no compile can match, and the failure is not Inductor's."""

    def __init__(self, message: str, *, random_ops: tuple[str, ...] = ()) -> None:
        self.random_ops = random_ops
        super().__init__(message)


class AOTISnapshotError(AssertionError):
    """A golden file disagrees with this run: different outputs, a golden missing where none may be recorded, or a
    file that is not a readable golden file."""


class AOTIVerifyError(AssertionError):
    """A package with bundled I/O does not verify on this machine, or is not such a package; names the file."""


class AOTIDeployError(AssertionError):
    """A deployment check (``@pytest.mark.aoti_deploy``, ``--aoti-deploy-check``) found what breaks where the
    package is deployed: it does not run in a fresh interpreter, or not from several threads."""


_CUDA_ERROR = re.compile(r"CUDA error|illegal memory access|device-side assert|cudaError", re.IGNORECASE)
_NAN_ASSERT = re.compile(r"At least one (NaN|INF|Inf) in \S+")
# AOTI's wrapper around a failed run: "run_func_( container_handle_, ...) API call failed at ...model_container_runner"
_PACKAGE_ERROR = re.compile(_CUDA_ERROR.pattern + r"|run_func_\(|API call failed at", re.IGNORECASE)


def failure_kind(error: BaseException) -> FailureKind:
    """Classify a test's exception. ``input_invariant`` means the package never ran: a rerun cannot tell more. The
    fixtures turn export and compile errors into pytest failures that carry the kind (``aoti_failure_kind``)."""
    carried = getattr(error, "aoti_failure_kind", None)
    if carried in (FailureKind.EXPORT, FailureKind.COMPILE, FailureKind.BENCHMARK):
        return FailureKind(carried)
    if isinstance(error, AOTIInvariantError):
        if error.side == "input":
            return FailureKind.INPUT_INVARIANT
        nonfinite = error.invariant == "output_nonfinite"
        return FailureKind.OUTPUT_NONFINITE if nonfinite else FailureKind.OUTPUT_INVARIANT
    if isinstance(error, AOTIMismatchError):
        return FailureKind.RANDOM_MISMATCH if error.random_ops else FailureKind.MISMATCH
    for kind, errors in _KIND_OF_ERROR.items():
        if isinstance(error, errors):
            return kind
    if isinstance(error, AOTICompileError):
        # Autotuning runs Triton kernels while compiling: a CUDA error there is worth the debug environment.
        return FailureKind.PACKAGE_ERROR if _CUDA_ERROR.search(str(error)) else FailureKind.COMPILE
    if _NAN_ASSERT.search(str(error)):  # TORCHINDUCTOR_NAN_ASSERTS (debug stages): a NaN/Inf made inside
        return FailureKind.OUTPUT_NONFINITE
    return FailureKind.PACKAGE_ERROR if _PACKAGE_ERROR.search(str(error)) else FailureKind.OTHER


_KIND_OF_ERROR: dict[FailureKind, type[BaseException]] = {
    FailureKind.SNAPSHOT: AOTISnapshotError,
    FailureKind.DEPLOY: AOTIDeployError,
    FailureKind.EXPORT: AOTIExportError,
}
