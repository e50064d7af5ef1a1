"""What a debug verdict can show as pictures (:mod:`pytest_aoti.shared.figure_data`): stage numerics' kernel errors in
launch order, and the kernel timeline of a NaN/Inf or a crash. Analysis, done once when the verdict is attached to
its report: the stages' logs are read here, the pictures are drawn from these records by the session that shows
them."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_aoti.core.protocol import Outcome, Stage
from pytest_aoti.debug import kernel_log, provenance
from pytest_aoti.debug.stages import Verdict
from pytest_aoti.shared.figure_builders import kernel_errors, kernel_timeline
from pytest_aoti.shared.figure_data import Divergence, FigureData, KernelTimeline


def _source(verdict: Verdict, role: str) -> str:
    source = verdict.sources.get(role)
    return provenance.where(source, verdict.source_root) if source is not None else ""


def _stage_log(verdict: Verdict, stage: Stage) -> str | None:
    run = next((run for run in verdict.stages if run.stage == stage), None)
    return run.log if run is not None else None


def divergence(verdict: Verdict) -> Divergence | None:
    """Stage numerics' kernel errors, when it compared any kernel."""
    finding = verdict.numerics
    if finding is None or not finding.kernel_errors:
        return None
    diverged = finding.diverged
    return Divergence(
        kernels=kernel_errors(finding.kernel_errors),
        diverged_launch=diverged.launch if diverged is not None else None,
        source=_source(verdict, "divergent"),
        tolerance=finding.test_tolerance,
    )


def _stats(
    blocks: Sequence[kernel_log.TensorStats],
) -> list[tuple[str, str | None, str | None, str | None, str | None]]:
    return [(block.arg, block.minimum, block.maximum, block.mean, block.size) for block in blocks]


def timeline(verdict: Verdict) -> KernelTimeline | None:
    """The kernels stage's launches, marked where the first NaN/Inf appeared or where the run crashed."""
    log = _stage_log(verdict, Stage.KERNELS)
    events = [(launch.when, launch.kernel) for launch in kernel_log.launches(log or "")]
    if not events:
        return None
    nonfinite = verdict.first_nonfinite
    if nonfinite is not None and nonfinite.kernel is not None:
        tensors = kernel_log.tensor_stats(_stage_log(verdict, Stage.TENSORS) or "")
        inputs = _stats(kernel_log.kernel_inputs(tensors, nonfinite.kernel, nonfinite.launch))
        source = _source(verdict, "nonfinite")
        return kernel_timeline("nonfinite", events, marked=nonfinite.kernel, inputs=inputs, source=source)
    first = verdict.first
    if first is not None and first.outcome is Outcome.CRASHED and not verdict.crashed_after_run:
        inputs = _stats(verdict.suspect_inputs)
        return kernel_timeline(
            "crash", events, marked=verdict.died_in, inputs=inputs, source=_source(verdict, "suspect")
        )
    return None


def verdict_figures(verdict: Verdict) -> list[FigureData]:
    """The records of every picture this verdict has data for; none when its logs cannot be read as expected (the
    verdict's text stands without pictures)."""
    try:
        return [record for record in (divergence(verdict), timeline(verdict)) if record is not None]
    except Exception:  # a picture is never worth losing the verdict it illustrates
        return []
