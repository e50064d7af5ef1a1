"""pytest-aoti's exceptions: one base, :class:`AOTIError`, and the core's own errors. Torch-free, so the plugin can
import them at load time.

Each error class mixes in the builtin its users catch (``AssertionError`` for a check that failed, ``TypeError`` and
``ValueError`` for a bad argument), as Hypothesis does, and declares its kind of failure (``failure_kind``), which
:func:`failure_kind` reads from the class. A feature defines its errors in its own package, with its kind and why a
debug rerun of such a failure cannot tell more (``not_rerun``); :func:`not_rerun_of` finds that by the kind, which
is what crosses a process boundary."""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Iterator
from typing import ClassVar, Literal

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


class AOTIError(Exception):
    """The base of every exception and warning pytest-aoti raises or warns with.

    ``failure_kind``: what kind of failure it makes of a test (a :class:`~pytest_aoti.core.protocol.FailureKind`
    value, or a feature's own kind). ``not_rerun``: why a debug rerun of a test that failed with it cannot tell more
    than the error did; None when a rerun may."""

    failure_kind: ClassVar[str] = FailureKind.OTHER
    not_rerun: ClassVar[str | None] = None


class AOTIWarning(AOTIError, UserWarning):
    """The base of pytest-aoti's warnings: ``-W ignore::pytest_aoti.AOTIWarning`` silences them all."""


class AOTIDtypeFromEagerWarning(AOTIWarning):
    """An output's dtype is held to what eager returns, where the exported program's metadata says another (a torch
    bug, e.g. ``torch.unique``'s inverse on CUDA in torch 2.11)."""


# The plugin's own frames, and pluggy's between a fixture and the hooks it fires.
_NOT_THE_USERS = ("pytest_aoti.", "pluggy.")


def warn_at_users_line(message: str, category: type[AOTIWarning]) -> None:
    """Warn at the first frame outside pytest-aoti (the user's line that called a fixture or the core), so that the
    warnings summary names the test's line rather than the plugin's."""
    frame, level = inspect.currentframe(), 1
    while frame is not None and f"{frame.f_globals.get('__name__', '')}.".startswith(_NOT_THE_USERS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def hide_usage_errors(excinfo: object) -> bool:
    """A ``__tracebackhide__`` for the core's argument checks: pytest leaves their frames out of a usage error's
    traceback, which then ends at the user's line; any other error keeps them."""
    errisinstance = getattr(excinfo, "errisinstance", None)
    return bool(callable(errisinstance) and errisinstance(AOTIUsageError))


class AOTIUsageError(AOTIError):
    """pytest-aoti was called wrongly: a bad argument to a fixture or to the core (an unknown or mistyped Inductor
    config key, a tolerance below zero, a keyword a fixture does not take). Raised as :class:`AOTITypeError` or
    :class:`AOTIValueError`, which are also the builtin a caller catches."""

    failure_kind: ClassVar[str] = FailureKind.USAGE


class AOTITypeError(AOTIUsageError, TypeError):
    """An argument of the wrong type."""


class AOTIValueError(AOTIUsageError, ValueError):
    """An argument of the right type and a wrong value."""


class AOTIInvariantError(AOTIError, AssertionError):
    """A compiled model was called with, or returned, a tensor that breaks one of its invariants.

    ``invariant`` says which check failed, ``side`` whether it was an input or an output, ``index`` the tensor's
    position among the flat inputs/outputs and ``name`` its argument name (inputs) when known, ``where`` its path
    in the nest of inputs for a structure error. Its failure kind is ``input_invariant``, ``output_nonfinite`` or
    ``output_invariant``, by its side and invariant.
    """

    failure_kind: ClassVar[str] = FailureKind.OUTPUT_INVARIANT

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


class AOTIExportError(AOTIError):
    """``torch.export.export`` rejected the model. ``summary`` is a one-line description."""

    failure_kind: ClassVar[str] = FailureKind.EXPORT

    def __init__(self, summary: str) -> None:
        self.summary = summary
        super().__init__(f"export failed: {summary}")


class AOTISpecializationError(AOTIExportError):
    """Export made static a dim that ``dynamic_shapes`` asked to be dynamic: the package accepts only one size."""

    def __init__(self, summary: str) -> None:
        self.summary = summary
        Exception.__init__(self, summary)


class AOTICompileError(AOTIError):
    """``aoti_compile_and_package`` (or loading its result) failed. ``summary`` is a one-line description. Its
    failure kind is ``compile``, or ``package_error`` for a CUDA error (autotuning runs kernels while compiling)."""

    failure_kind: ClassVar[str] = FailureKind.COMPILE

    def __init__(self, summary: str, *, stage: str = "compile") -> None:
        self.summary = summary
        self.stage = stage
        super().__init__(f"AOTI {stage} failed: {summary}")


class AOTIOutputSpecError(AOTIError, ValueError):
    """The package ran, but torch could not rebuild the model's outputs from what it returned: the package returned
    another number of outputs than its exported output spec holds (torch's ``treespec.unflatten`` error). A package
    defect from export or the compile, which a rerun repeats (failure kind ``compile``). A ``ValueError`` still, as
    torch's own error was."""

    failure_kind: ClassVar[str] = FailureKind.COMPILE


class AOTIPackageRunError(AOTIError, RuntimeError):
    """The package raised while it ran: one of its CPU kernels failed its index check, or a Python op it calls (a
    custom op) raised. Said as what happened, with the kernel or the op's line, without torch's C++ frames (failure
    kind ``package_error``). A ``RuntimeError`` still, as torch's own error was."""

    failure_kind: ClassVar[str] = FailureKind.PACKAGE_ERROR


class AOTIMismatchError(AOTIError, AssertionError):
    """``aoti_check``: the package's outputs differ from eager's (``torch.testing.assert_close``'s message).

    ``random_ops`` names the graph's random ops when it has any: the package and eager draw different random
    numbers, so no compile can match, and the failure is not Inductor's (failure kind ``random_mismatch``)."""

    failure_kind: ClassVar[str] = FailureKind.MISMATCH

    def __init__(self, message: str, *, random_ops: tuple[str, ...] = ()) -> None:
        self.random_ops = random_ops
        super().__init__(message)


_CUDA_ERROR = re.compile(r"CUDA error|illegal memory access|device-side assert|cudaError", re.IGNORECASE)
_NAN_ASSERT = re.compile(r"At least one (NaN|INF|Inf) in \S+")
# AOTI's wrapper around a failed run: "run_func_( container_handle_, ...) API call failed at ...model_container_runner"
_PACKAGE_ERROR = re.compile(_CUDA_ERROR.pattern + r"|run_func_\(|API call failed at", re.IGNORECASE)


def failure_kind(error: BaseException) -> str:
    """Classify a test's exception: the kind its class declares (``failure_kind``), or the kind of the pytest-aoti
    error it was raised from or in place of (the fixtures fail a test on an export or compile error with a message
    of their own, ``raise ... from None``). ``input_invariant`` means the package never ran: a rerun cannot tell
    more. An exception of another library is told by its message: a CUDA error, AOTI's run wrapper, a NaN assert."""
    error = _raised_for(error)
    if isinstance(error, AOTIInvariantError):
        if error.side == "input":
            return FailureKind.INPUT_INVARIANT
        nonfinite = error.invariant == "output_nonfinite"
        return FailureKind.OUTPUT_NONFINITE if nonfinite else FailureKind.OUTPUT_INVARIANT
    if isinstance(error, AOTIMismatchError):
        return FailureKind.RANDOM_MISMATCH if error.random_ops else FailureKind.MISMATCH
    if isinstance(error, AOTICompileError) and _CUDA_ERROR.search(str(error)):
        return FailureKind.PACKAGE_ERROR  # autotuning runs Triton kernels while compiling: worth the debug stages
    if isinstance(error, AOTIError) and type(error).failure_kind != FailureKind.OTHER:
        return type(error).failure_kind  # the class's, or the nearest base's that declares one
    if _NAN_ASSERT.search(str(error)):  # TORCHINDUCTOR_NAN_ASSERTS (debug stages): a NaN/Inf made inside
        return FailureKind.OUTPUT_NONFINITE
    return FailureKind.PACKAGE_ERROR if _PACKAGE_ERROR.search(str(error)) else FailureKind.OTHER


def _raised_for(error: BaseException) -> BaseException:
    """The pytest-aoti error ``error`` was raised from (``raise ... from aoti_error``) or in place of (``raise ...
    from None`` while handling it), where ``error`` is no pytest-aoti error itself; else ``error``."""
    if isinstance(error, AOTIError):
        return error
    if isinstance(error.__cause__, AOTIError):
        return error.__cause__
    if error.__suppress_context__ and isinstance(error.__context__, AOTIError):
        return error.__context__
    return error


def not_rerun_of(kind: str | None) -> str | None:
    """Why a debug rerun cannot tell more of a failure of ``kind``, as the error class that declares the kind says
    (``not_rerun``); None when none does. A kind is what crosses xdist and a child's report, not the class."""
    for error_class in _error_classes(AOTIError):
        if error_class.failure_kind == kind and error_class.not_rerun is not None:
            return error_class.not_rerun
    return None


def _error_classes(base: type[AOTIError]) -> Iterator[type[AOTIError]]:
    """``base`` and every subclass of it defined so far (each package's errors are imported with ``pytest_aoti``)."""
    yield base
    for subclass in base.__subclasses__():
        yield from _error_classes(subclass)
