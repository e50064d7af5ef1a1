"""The fail rule, on plain numbers: a run of a benchmark against the last runs recorded on this machine.

Each run is summarized by its **normalized latency**: the package's fastest block over the calibration's fastest block
(:mod:`pytest_aoti.benchmark.timing` times them in interleaved rounds). Interference on a shared machine only adds time,
so each side's fastest block is its least disturbed one (what ``timeit`` recommends); on a busy machine block medians
swing where the fastest blocks' ratio holds (docs/benchmarks.md#the-benchmark-gate-on-a-shared-machine). A machine that
got slower (clocks, placement, load) slows both sides; a package that got slower slows only the package. Runs, not
blocks, are the sample: the baseline keeps the last K runs, each its own process, and the spread between them is what a
new run is held against. A run fails only when both hold:

- its normalized latency is more than the tolerance above the baseline runs' geometric mean;
- it lies above the upper bound of a one-sided 99 % prediction interval for one more run, from the baseline runs'
  normalized latencies on a log scale (Student's t, SciPy: ``mean + t(0.99, k-1) * sd * sqrt(1 + 1/k)``).

Normalizing cancels most of a machine's move, not all of it: the package and the calibration do different work, and a
busy neighbour slows them unalike. So when the calibration moved more than the tolerance since the baseline, both
limits are widened by the square root of that move past the tolerance (:func:`widening`); a machine within the
tolerance is judged as before.

A **disturbed** run is one whose calibration moved more than the tolerance within the run (first half against second
half; the plugin measures once more first), or more than 4x (or 1 + the tolerance, if larger) since the baseline,
past what normalizing stands for. Its normalized latency may read off, either way, by those moves in full
(:func:`disturbance`): it fails only above the limit times that factor (a slowdown that no such move explains), passes
only at or below the limit over it, and in between, where the verdict could go either way, it is not judged.

A run that cannot be judged at all says why and passes: too few blocks, no baseline, or a baseline of one run (no
spread yet).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_aoti.benchmark.timing import MIN_BLOCKS, OVERRUN_FACTOR, OVERRUN_SECONDS, Figures

CONFIDENCE = 0.99  # of the prediction interval a run must lie above to fail
# Past this, the calibration no longer stands for what the machine does to the package: a calibration slowed that much
# (OpenMP threads waiting for descheduled peers) hid a slower op
# (docs/benchmarks.md#the-benchmark-gate-on-a-shared-machine).
MAX_MACHINE_MOVE = 4.0
MIN_BASELINE_RUNS = 2  # a spread between runs needs two of them
# The share of the calibration's move (on a log scale) that normalizing may leave in a run's normalized latency: half,
# a margin over the largest share measured (docs/benchmarks.md#the-benchmark-gate-on-a-shared-machine).
MOVE_SHARE = 0.5


@dataclass(frozen=True)
class Run:
    """One run of one benchmark: block times (seconds per call) of the package, eager and the calibration, aligned
    by round; what it ran with; and which pytest run it was (runs of one session replace each other)."""

    package: tuple[float, ...]
    eager: tuple[float, ...]
    calibration: tuple[float, ...]
    torch: str = ""
    package_key: str | None = None
    run_id: str = ""

    @classmethod
    def of(cls, figures: Figures, *, torch: str, package_key: str | None, run_id: str) -> Run:
        return cls(tuple(figures.package), tuple(figures.eager), tuple(figures.calibration), torch, package_key, run_id)

    @property
    def normalized(self) -> float:
        """The package's fastest block over the calibration's."""
        return min(self.package) / min(self.calibration)


class Verdict(enum.Enum):
    RECORDED = "recorded"
    PASSED = "ok"
    SLOWER = "slower"
    NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class Judgment:
    """How a run compares with its baseline. Ratios are this run over the baseline's; ``bound`` is the normalized
    ratio above which the run lies outside the baseline's between-run spread."""

    verdict: Verdict
    text: str
    normalized: float | None = None
    package: float | None = None
    eager: float | None = None
    calibration: float | None = None
    bound: float | None = None
    baseline_runs: int = 0
    widened: float = 1.0  # both limits' factor for the machine's move since the baseline (see widening())
    limit: float | None = None  # the normalized ratio above which this run fails
    passes_at_most: float | None = None  # the normalized ratio at or below which it passes; between: not judged
    disturbed: float = 1.0  # how far either way a disturbed run's normalized latency may read off (disturbance())


def calibration_drift(calibration: Sequence[float]) -> float:
    """The calibration's fastest block in the second half of a run over the first half's."""
    half = len(calibration) // 2
    return min(calibration[half:]) / min(calibration[:half])


def moved_within(calibration: Sequence[float], tolerance: float) -> bool:
    """Whether the machine changed under the measurement: the calibration moved more than the tolerance between the
    run's halves. What measuring again may cure."""
    return _move(calibration_drift(calibration)) > 1 + tolerance


def _drift_text(calibration: Sequence[float], tolerance: float) -> str:
    return (
        f"the calibration itself ran {_times(calibration_drift(calibration))} in the second half of this run than "
        f"in the first (tolerance {tolerance:.0%})"
    )


def unjudgeable(run: Run, min_run_time: float) -> str | None:
    """Why this run says nothing about the package, whatever the baseline; None when it can be judged."""
    if len(run.package) < MIN_BLOCKS:
        return (
            f"too few blocks ({len(run.package)} of the {MIN_BLOCKS} a run needs) in {OVERRUN_FACTOR}x the planned "
            f"time (at least {OVERRUN_SECONDS:g} s): one call takes too long for a min run time of {min_run_time:g} "
            "s, or the machine is that busy; raise it (--aoti-benchmark-min-time or min_run_time=)"
        )
    return None


def unrecordable(run: Run, tolerance: float, min_run_time: float) -> str | None:
    """Why this run must not join a baseline (None: it may): one that cannot be judged, or one the machine changed
    under, which would only widen the spread that later runs are held against."""
    reason = unjudgeable(run, min_run_time)
    if reason is None and moved_within(run.calibration, tolerance):
        reason = f"{_drift_text(run.calibration, tolerance)}: the machine changed under the measurement"
    return reason


def disturbance(calibration: Sequence[float], moved: float, tolerance: float) -> tuple[float, list[str]]:
    """How far either way a run's normalized latency may read off past what its (widened) limit allows for, and why:
    1 and no cause for a run judged as usual. ``calibration`` is the run's calibration blocks, ``moved`` its fastest
    block over the baseline's. Each move counts in full: within the run (the package's fastest block and the
    calibration's may come from halves the machine treated unalike), and since the baseline past
    :data:`MAX_MACHINE_MOVE` (what normalizing stands for; only the part past it: the widening covers the rest).
    Beside six bursty hogs a package 18x slower read 18x with the calibration 1.20x faster in the run's second half:
    far past 1.20x times the limit, so it fails; an unchanged package reading 1.05x there is not judged."""
    factor, causes = 1.0, []
    drift = _move(calibration_drift(calibration))
    if drift > 1 + tolerance:
        factor *= drift
        causes.append(_drift_text(calibration, tolerance))
    most = max(MAX_MACHINE_MOVE, 1 + tolerance)  # a tolerance wider than that accepts wider moves too
    if _move(moved) > most:
        factor *= _move(moved) / most
        causes.append(
            f"this machine ran the calibration {_times(moved)} than when the baseline was recorded, past the "
            f"{most:g}x that normalizing stands for"
        )
    return factor, causes


def _ratio(run: Run, runs: Sequence[Run], side: str) -> float:
    """This run's fastest block of ``side`` over the median of the baseline runs' fastest blocks."""
    return float(min(getattr(run, side)) / statistics.median(min(getattr(old, side)) for old in runs))


def _move(ratio: float) -> float:
    """How far a ratio is from 1, either way: 2.0 for 2x slower and for 2x faster."""
    return max(ratio, 1 / ratio)


def widening(calibration: float, tolerance: float) -> float:
    """The factor both limits grow by on a machine whose calibration ran ``calibration`` times its baseline time: 1
    within the tolerance, else the move past the tolerance to the power :data:`MOVE_SHARE` (1.88x slower at a 10 %
    tolerance: 1.31x, so a run then fails above 1.44x instead of 1.10x)."""
    past = _move(calibration) / (1 + tolerance)
    return past**MOVE_SHARE if past > 1 else 1.0


def _upper_bound(levels: list[float]) -> float:
    """exp of the one-sided prediction interval's upper bound for one more log-level, over the levels' mean."""
    from scipy.stats import t as student_t

    count = len(levels)
    quantile = float(student_t.ppf(CONFIDENCE, count - 1))
    return math.exp(quantile * statistics.stdev(levels) * math.sqrt(1 + 1 / count))


def judge(run: Run, baseline: Sequence[Run], tolerance: float, min_run_time: float) -> Judgment:
    """This run against the baseline's runs of the same benchmark on the same machine (see the module's rule)."""
    reason = unjudgeable(run, min_run_time)
    if reason is not None:
        return Judgment(Verdict.NOT_JUDGED, f"not judged: {reason}")
    if not baseline:
        return Judgment(Verdict.NOT_JUDGED, "not judged: no baseline for this machine (record runs with "
                        "--aoti-benchmark-update, each its own pytest run)")  # fmt: skip
    if len(baseline) < MIN_BASELINE_RUNS:
        return Judgment(
            Verdict.NOT_JUDGED,
            f"not judged: the baseline has {len(baseline)} run, and the spread between runs needs "
            f"{MIN_BASELINE_RUNS}: record another with --aoti-benchmark-update",
            baseline_runs=len(baseline),
        )
    levels = [math.log(old.normalized) for old in baseline]
    normalized = math.exp(math.log(run.normalized) - statistics.fmean(levels))
    bound = _upper_bound(levels)
    calibration = _ratio(run, baseline, "calibration")
    # The widening stops at what normalizing stands for; past it, the disturbance counts the rest in full.
    widened = widening(min(_move(calibration), max(MAX_MACHINE_MOVE, 1 + tolerance)), tolerance)
    limit = max(1 + tolerance, bound) * widened
    disturbed, causes = disturbance(run.calibration, calibration, tolerance)
    fails_above, passes_at_most = limit * disturbed, limit / disturbed
    if normalized > fails_above:
        verdict = Verdict.SLOWER
    else:
        verdict = Verdict.PASSED if normalized <= passes_at_most else Verdict.NOT_JUDGED
    judgment = Judgment(
        verdict,
        "",
        normalized=normalized,
        package=_ratio(run, baseline, "package"),
        eager=_ratio(run, baseline, "eager"),
        calibration=calibration,
        bound=bound,
        baseline_runs=len(baseline),
        widened=widened,
        limit=fails_above,
        passes_at_most=passes_at_most,
        disturbed=disturbed,
    )
    return _with_text(judgment, tolerance, causes, _changes(run, baseline[-1]))


def _times(ratio: float) -> str:
    return f"{ratio:.2f}x slower" if ratio >= 1 else f"{1 / ratio:.2f}x faster"


def machine_moved(judgment: Judgment, tolerance: float) -> str | None:
    """``this machine ran the calibration 1.80x slower than when the baseline was recorded; normalized, the package
    is 1.02x (pass)``, when the calibration moved more than the tolerance since the baseline."""
    moved = judgment.calibration
    if moved is None or judgment.normalized is None or _move(moved) <= 1 + tolerance:
        return None
    outcome = {Verdict.SLOWER: "FAIL", Verdict.NOT_JUDGED: "not judged"}.get(judgment.verdict, "pass")
    return (
        f"this machine ran the calibration {_times(moved)} than when the baseline was recorded; normalized, "
        f"the package is {judgment.normalized:.2f}x ({outcome})"
    )


def _limits_text(judgment: Judgment, tolerance: float) -> str:
    """``above 1.10x (tolerance 10%) and above 1.05x (the spread ...)``, and the widening if any."""
    assert judgment.bound is not None and judgment.calibration is not None and judgment.limit is not None
    limits = (
        f"above {1 + tolerance:.2f}x (tolerance {tolerance:.0%}) and above {judgment.bound:.2f}x (the spread of "
        f"{judgment.baseline_runs} baseline runs, {CONFIDENCE:.0%} prediction bound)"
    )
    if judgment.widened > 1:
        moved, most = _move(judgment.calibration), max(MAX_MACHINE_MOVE, 1 + tolerance)
        which = f"the calibration's {moved:.2f}x move" if moved <= most else f"the first {most:g}x of its move"
        limits = (
            f"above {judgment.limit / judgment.disturbed:.2f}x: {limits}, widened {judgment.widened:.2f}x for "
            f"{which} (normalizing does not cancel all of a move)"
        )
    return limits


def _with_text(judgment: Judgment, tolerance: float, causes: list[str], changes: list[str]) -> Judgment:
    assert judgment.normalized is not None and judgment.limit is not None and judgment.passes_at_most is not None
    text = (
        f"normalized by the calibration, {judgment.normalized:.2f}x the baseline (fastest blocks: package "
        f"{judgment.package:.2f}x, eager {judgment.eager:.2f}x, calibration {judgment.calibration:.2f}x); "
        f"{'an undisturbed run ' if causes else ''}fails {_limits_text(judgment, tolerance)}"
    )
    if causes:
        text += (
            f"; {' and '.join(causes)}, so normalizing may be off by {judgment.disturbed:.2f}x either way: this "
            f"run fails above {judgment.limit:.2f}x and passes at or below {judgment.passes_at_most:.2f}x"
        )
    if judgment.verdict is Verdict.NOT_JUDGED:
        text = (
            f"not judged: {judgment.normalized:.2f}x could be a pass or a failure (it lies between "
            f"{judgment.passes_at_most:.2f}x and {judgment.limit:.2f}x): {text}"
        )
    else:
        moved = machine_moved(judgment, tolerance)
        if moved is not None:
            text = f"{moved}: {text}"
    if changes:
        text += "; since the baseline: " + ", ".join(changes)
    return dataclasses.replace(judgment, text=text)


def _changes(run: Run, last: Run) -> list[str]:
    changed = []
    if last.torch and run.torch and last.torch != run.torch:
        changed.append(f"torch {last.torch} → {run.torch}")
    if last.package_key and run.package_key and last.package_key != run.package_key:
        changed.append("the package changed (model, weights or compile options)")
    return changed
