"""Triage of a failed test: from its kind of failure (:func:`pytest_aoti.core.errors.failure_kind`) to whether a debug
rerun can tell more than the failure did, and with which stages. Every such decision is made here, from the core's
kinds and what a feature's error class says of its own (``not_rerun``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_aoti.core.errors import not_rerun_of
from pytest_aoti.core.protocol import FailureKind, Outcome, Stage

if TYPE_CHECKING:
    from pytest_aoti.debug.child import ChildRun
    from pytest_aoti.debug.options import DebugRequest

# Without stages=, the failure picks them: a package-vs-eager mismatch gets ``numerics`` (which kernel diverged), any
# other failure ``kernels`` and ``tensors`` (where it crashed, which tensor went bad).
DEFAULT_STAGES = (Stage.KERNELS, Stage.TENSORS)
MISMATCH_STAGES = (Stage.NUMERICS,)


@dataclass(frozen=True)
class Triage:
    """What triage decided for one failed test."""

    not_rerun: str | None  # why a debug rerun cannot tell more; None: rerun it through ``stages``
    stages: tuple[str, ...] = ()
    mismatch: bool = False  # a package-vs-eager mismatch: stage numerics explains it
    nonfinite_failure: bool = False  # a NaN/Inf: stage tensors reads every launched kernel


# The core's failure kinds (errors.failure_kind) a debug rerun cannot explain, and why. A feature's error class
# says so of its own kind (its ``not_rerun``: a golden mismatch, a deployment check, a slow benchmark).
_NOT_WORTH_A_RERUN: dict[FailureKind, str] = {
    FailureKind.INPUT_INVARIANT: (
        "the failure is an input check raised before the package ran; a debug rerun cannot tell more"
    ),
    FailureKind.EXPORT: "torch.export rejected the model: no package was built, so a debug rerun cannot tell more",
    # An exception, not a crash: a compile that crashes (a Triton autotune run reading out of bounds) ends its
    # process, and that failure is debugged as a crash.
    FailureKind.COMPILE: (
        "the package failed to compile or load with an error; recompiling under the debug environment would fail "
        "the same way"
    ),
    FailureKind.RANDOM_MISMATCH: (
        "the graph draws random numbers, which the package and eager draw differently: a debug rerun cannot tell a "
        "wrong kernel from different draws"
    ),
    FailureKind.USAGE: (
        "pytest-aoti was called wrongly (an unknown or mistyped Inductor config key, a bad fixture argument): a "
        "debug rerun would repeat the same error"
    ),
}


def not_rerun_reason(
    failure_kind: str | None, isolated_run: ChildRun | None, *, setup_failed_before_aoti: bool = False
) -> str | None:
    """Why a failed test is not worth a debug rerun, or None when it is.

    An input invariant is raised before the package runs: a rerun under the debug environment (two recompiles)
    would print the same message; so would an export error, a compile or load that raised, or a usage error. A
    feature's error class says why of its own kind. A failing fixture that ran before the test reached pytest-aoti
    (no export, compile, load or call yet) is not pytest-aoti's to debug: a suite's broken data fixture must not
    cost a child per test. An isolated run that timed out would time out the
    same way in every stage. A graph that draws random numbers cannot match eager whatever the kernels do."""
    if failure_kind in _NOT_WORTH_A_RERUN:  # a kind from a report that crossed xdist is a plain str: same hash
        return _NOT_WORTH_A_RERUN[FailureKind(failure_kind)]
    declared = not_rerun_of(failure_kind)
    if declared is not None:
        return declared
    if setup_failed_before_aoti:
        return (
            "the test's setup failed before it exported, compiled or ran a model through pytest-aoti; "
            "a debug rerun cannot tell more"
        )
    if isolated_run is not None and isolated_run.outcome is Outcome.TIMED_OUT:
        return (
            f"the isolated run timed out after {isolated_run.timeout:g} s; the debug stages would hang the same way "
            "(raise the timeout or fix the hang first)"
        )
    return None


def stages_for(request: DebugRequest, failure: str | None) -> tuple[str, ...]:
    """The marker's stages, else those the failure's kind calls for; stage minify too under ``--aoti-minify``."""
    stages = request.stages
    if stages is None:
        stages = MISMATCH_STAGES if failure == FailureKind.MISMATCH else DEFAULT_STAGES
    return (*stages, Stage.MINIFY) if request.minify and Stage.MINIFY not in stages else stages


def triage(
    failure: str | None,
    request: DebugRequest,
    *,
    isolated_run: ChildRun | None = None,
    setup_failed_before_aoti: bool = False,
    no_children_reason: str | None = None,
) -> Triage:
    """Whether failed test (its failure's kind ``failure``; None after a crash, where no kind is known) gets a debug
    rerun, and with which stages. ``no_children_reason``: why this session cannot start children at all."""
    reason = no_children_reason or not_rerun_reason(
        failure, isolated_run, setup_failed_before_aoti=setup_failed_before_aoti
    )
    if reason is not None:
        return Triage(reason)
    mismatch, nonfinite = failure == FailureKind.MISMATCH, failure == FailureKind.OUTPUT_NONFINITE
    return Triage(None, stages_for(request, failure), mismatch=mismatch, nonfinite_failure=nonfinite)
