"""The benchmarks' errors."""

from __future__ import annotations

from typing import ClassVar

from pytest_aoti.core.errors import AOTIError

_KIND = "benchmark"


class AOTIBenchmarkError(AOTIError, AssertionError):
    """``aoti_benchmark``: the package ran slower than this machine's baseline, or could not be judged against it
    (a baseline file it cannot use, no SciPy)."""

    failure_kind: ClassVar[str] = _KIND
    not_rerun: ClassVar[str | None] = (
        "a benchmark slower than its baseline: the debug environment would only slow it further"
    )


class BaselineError(AOTIError):
    """A baseline file, or one benchmark's entry in it, that cannot be used. ``aoti_benchmark`` fails the test
    with its message, as an :class:`AOTIBenchmarkError`."""

    failure_kind: ClassVar[str] = _KIND
