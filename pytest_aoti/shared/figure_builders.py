"""Builders of the picture records (:mod:`pytest_aoti.shared.figure_data`) from what the features hold: tensors,
kernel-log events, stage numerics' rows, benchmark block times.

Torch is imported inside :func:`golden_errors` only, where the caller already has tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_aoti.shared.figure_data import BenchmarkTimes, GoldenErrors, InputStats, KernelError, KernelTimeline

if TYPE_CHECKING:
    import torch

HISTOGRAM_BINS = 40


def golden_errors(name: str, got: torch.Tensor, golden: torch.Tensor, rtol: float, atol: float) -> GoldenErrors:
    """The per-element absolute error of ``got`` against ``golden``, binned on a log scale (NaN matching NaN and an
    Inf matching the same Inf count as no error, as the golden comparison counts them)."""
    import torch

    wide = torch.complex128 if got.is_complex() or golden.is_complex() else torch.float64
    got64 = got.detach().to("cpu", wide).flatten()
    golden64 = golden.detach().to("cpu", wide).flatten()
    if got64.shape != golden64.shape:
        raise ValueError(f"{name}: shapes differ ({tuple(got.shape)} vs {tuple(golden.shape)})")
    same = (got64 == golden64) | (got64.isnan() & golden64.isnan())
    error = torch.where(same, torch.zeros((), dtype=torch.float64), (got64 - golden64).abs())
    magnitude = golden64.abs().nan_to_num(posinf=0.0)
    nonfinite = ~error.isfinite()
    mismatched = nonfinite | (error > atol + rtol * magnitude)
    finite_error = error[~nonfinite]
    positive = finite_error[finite_error > 0]
    edges, counts = _log_bins(positive)
    needed = (finite_error - rtol * magnitude[~nonfinite]).clamp_min(0)
    return GoldenErrors(
        name=name,
        elements=int(error.numel()),
        mismatched=int(mismatched.sum()),
        nonfinite=int(nonfinite.sum()),
        zero=int((finite_error == 0).sum()),
        bin_edges=edges,
        counts=counts,
        max_abs=float(error.max()) if error.numel() else 0.0,
        rtol=float(rtol),
        atol=float(atol),
        needed_atol=math.inf if bool(nonfinite.any()) else float(needed.max()) if needed.numel() else 0.0,
    )


def _log_bins(positive: torch.Tensor) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Log-spaced bins over the positive errors (one decade wide at least)."""
    import torch

    if not positive.numel():
        return (), ()
    low = math.floor(math.log10(float(positive.min())))
    high = max(math.ceil(math.log10(float(positive.max()))), low + 1)
    edges = torch.logspace(low, high, HISTOGRAM_BINS + 1, dtype=torch.float64)
    counts = torch.histogram(positive, bins=edges).hist
    return tuple(float(edge) for edge in edges), tuple(int(count) for count in counts)


def kernel_errors(rows: Sequence[Sequence[object]]) -> tuple[KernelError, ...]:
    """``(launch, kernel, max_abs, max_rel)`` rows, as stage numerics lists each output it compared, as one record
    per launch: a fused kernel that finishes several nodes keeps its worst errors."""
    worst: dict[int, KernelError] = {}
    for launch, kernel, max_abs, max_rel in rows:
        number = int(str(launch))
        seen = worst.get(number)
        abs_err, rel_err = float(str(max_abs)), float(str(max_rel))
        if seen is not None:
            abs_err, rel_err = max(abs_err, seen.max_abs), max(rel_err, seen.max_rel)
        worst[number] = KernelError(number, str(kernel), abs_err, rel_err)
    return tuple(worst[number] for number in sorted(worst))


def kernel_timeline(
    problem: str,
    events: Sequence[tuple[str, str]],
    *,
    marked: str | None,
    inputs: Sequence[tuple[str, str | None, str | None, str | None, str | None]] = (),
    source: str = "",
) -> KernelTimeline:
    """A timeline from the kernel log's ``(when, kernel)`` events (``before``/``after``, in order); ``inputs``:
    ``(arg, min, max, mean, size)`` of the marked kernel's inputs."""
    kernels = tuple(kernel for when, kernel in events if when == "before")
    completed = [kernel for when, kernel in events if when == "after"]
    stats = tuple(InputStats(arg, *(value or "?" for value in values)) for arg, *values in inputs)
    return KernelTimeline(
        problem=problem,
        kernels=kernels,
        completed=len(completed),
        marked=marked,
        last_completed=completed[-1] if completed else None,
        inputs=stats,
        source=source,
    )


def benchmark_times(
    name: str, now: Sequence[float], baseline_runs: Sequence[Sequence[float]], verdict: str
) -> BenchmarkTimes:
    """A benchmark's package block times now and in each recorded baseline run (oldest first)."""
    runs = tuple(tuple(float(t) for t in run) for run in baseline_runs)
    labels = tuple(f"run {number}" for number in range(1, len(runs) + 1))
    return BenchmarkTimes(name, tuple(float(t) for t in now), runs, labels, verdict)
