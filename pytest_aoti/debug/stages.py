"""The debug rerun PyTorch's AOTI guide prescribes for illegal memory accesses, done automatically, and its verdict.

Stage ``kernels``: synchronous, uncached CUDA memory, runtime input checks, NaN asserts and printer mode 3 (kernel
names). A kernel with ``before_launch`` and no ``after_launch`` is where the process died; otherwise the last kernel
that completed is named. Stage ``tensors``: printer mode 2, for the suspects' tensors' stats and the first kernel
whose output holds NaN/Inf. Both flags are codegen-time, so each stage compiles its own package. The guide filters
mode 2 to the suspects at codegen (``AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT``), which makes stage tensors wait for
stage kernels' log: here stage tensors prints every kernel and runs beside stage kernels, and its log is read for
the suspects, so the two stages cost one compile's wall time. The package cache keys on the flags, so an unchanged
failure debugged again loads its debug packages instead. Stage
``sanitizer``: compute-sanitizer memcheck over the test. Stage ``numerics`` (package-vs-eager mismatches): printer
mode 1 and provenance tracking, and :mod:`pytest_aoti.debug.numerics` in the child names the first kernel that diverges.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import pytest

from pytest_aoti.core.protocol import (
    BUNDLE_ENV,
    MINIFY_RESULT,
    NUMERICS_ENV,
    ORIGIN_RESULT,
    Finding,
    MinifyResult,
    NonfiniteOrigin,
    Outcome,
    Stage,
)
from pytest_aoti.core.source_lines import SourceLine, torch_install_dir, user_line
from pytest_aoti.debug import kernel_log, provenance
from pytest_aoti.debug.bundle import custom_op_modules, read_node_sources
from pytest_aoti.debug.child import ChildRun, StartedChild, private_tmpdir, run_process, start_child
from pytest_aoti.debug.options import DebugRequest
from pytest_aoti.debug.triage import Triage
from pytest_aoti.debug.triton_source import TritonKernel, kernel_at

SANITY_ENV = {
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
    "CUDA_LAUNCH_BLOCKING": "1",
    "AOTI_RUNTIME_CHECK_INPUTS": "1",
    "TORCHINDUCTOR_NAN_ASSERTS": "1",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}
PRINTER_ENV = "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER"
# memcheck needs every allocation to be its own (no caching allocator) to see an out-of-bounds access.
SANITIZER_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "CUDA_LAUNCH_BLOCKING": "1"}
SANITIZER_ARGS = ("--tool", "memcheck", "--print-limit", "3")


def sanitizer_path() -> str | None:
    found = shutil.which("compute-sanitizer")
    default = Path("/usr/local/cuda/bin/compute-sanitizer")
    return found or (str(default) if default.exists() else None)


FILTER_ENV = "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT"
# Stage numerics: every kernel's arguments saved before and after its launch, and the kernel -> graph node map.


@dataclass(frozen=True)
class LogSignals:
    """What a stage's log says stopped the package: the first line of each kind, or None."""

    nan_assert: str | None = None
    runtime_check: str | None = None
    cuda_error: str | None = None
    device_assert: str | None = None
    bounds_check: str | None = None  # a CPU kernel's failed index check (the device-side assert's CPU twin)
    assert_site: kernel_log.AssertSite | None = None  # the device-side assert's kernel source file and line

    @classmethod
    def read(cls, log: str) -> LogSignals:
        return cls(
            nan_assert=kernel_log.nan_assert(log),
            runtime_check=kernel_log.runtime_check_error(log),
            cuda_error=kernel_log.cuda_error(log),
            device_assert=kernel_log.device_assert(log),
            bounds_check=kernel_log.bounds_check(log),
            assert_site=kernel_log.device_assert_site(log),
        )


@dataclass(frozen=True)
class KernelsResult:
    """Stage kernels' run and what its log said: the kernels launched, where the package was when it stopped, what
    stopped it, and for a crash the pytest phase and the user's innermost Python frame."""

    run: ChildRun
    launches: tuple[kernel_log.Launch, ...]
    died_in: str | None
    last_completed: str | None
    suspects: tuple[str, ...]  # the kernel that died (else the last that completed) and the one before it
    signals: LogSignals
    crashed_in: str | None = None
    crash_frame: SourceLine | None = None

    @classmethod
    def read(cls, run: ChildRun) -> KernelsResult:
        log = run.log
        crashed = run.outcome is Outcome.CRASHED
        return cls(
            run=run,
            launches=tuple(kernel_log.launches(log)),
            died_in=kernel_log.died_in(log),
            last_completed=kernel_log.last_completed(log),
            suspects=kernel_log.suspect_kernels(log),
            signals=LogSignals.read(log),
            crashed_in=run.unreported_phase if crashed else None,
            crash_frame=provenance.user_frame(kernel_log.crash_frames(log)) if crashed else None,
        )

    def launch_count(self, kernel: str, when: str) -> int:
        return sum(1 for launch in self.launches if launch.kernel == kernel and launch.when == when)


@dataclass(frozen=True)
class TensorsResult:
    """Stage tensors' run and what its log said: the printer's stats blocks, in order, and what stopped it."""

    run: ChildRun
    stats: tuple[kernel_log.TensorStats, ...]
    signals: LogSignals

    @classmethod
    def read(cls, run: ChildRun) -> TensorsResult:
        log = run.log
        return cls(run=run, stats=tuple(kernel_log.tensor_stats(log)), signals=LogSignals.read(log))

    def of(self, kernels: tuple[str, ...]) -> list[kernel_log.TensorStats]:
        """The stats of ``kernels`` and of the model inputs: the log is read for the suspects only."""
        return [block for block in self.stats if block.kernel in (None, *kernels)]


@dataclass(frozen=True)
class StageResults:
    """What the stages said, once they ran: every run in order (the first stage's reruns included), stage numerics'
    run, stage kernels' and stage tensors' readings of their logs, the sanitizer's error, the kernels stage tensors
    was read for, and why a stage did not run."""

    runs: tuple[ChildRun, ...] = ()
    notes: tuple[str, ...] = ()
    numerics: ChildRun | None = None
    kernels: KernelsResult | None = None
    tensors: TensorsResult | None = None
    sanitizer: kernel_log.SanitizerError | None = None
    suspects: tuple[str, ...] = ()

    @property
    def reproduced(self) -> bool:
        return any(run.reproduced for run in self.runs)

    @property
    def signals(self) -> LogSignals:
        """Stage kernels' signals, each completed by stage tensors' (which runs without the NaN asserts)."""
        kernels = self.kernels.signals if self.kernels is not None else LogSignals()
        tensors = self.tensors.signals if self.tensors is not None else LogSignals()
        return LogSignals(
            nan_assert=kernels.nan_assert or tensors.nan_assert,
            runtime_check=kernels.runtime_check,
            cuda_error=kernels.cuda_error or tensors.cuda_error,
            device_assert=kernels.device_assert or tensors.device_assert,
            bounds_check=kernels.bounds_check or tensors.bounds_check,
            assert_site=kernels.assert_site or tensors.assert_site,
        )

    @property
    def first_nonfinite(self) -> kernel_log.TensorStats | None:
        """The first model input or suspect's output stage tensors' printer saw holding NaN/Inf."""
        return kernel_log.first_nonfinite(self.tensors.of(self.suspects)) if self.tensors is not None else None

    @property
    def phase(self) -> str | None:
        """The last pytest-aoti phase the verdict's run reached: stage kernels', else stage numerics', else stage
        tensors'."""
        main = self.kernels.run if self.kernels is not None else self.numerics
        tensors = self.tensors.run.phase if self.tensors is not None else None
        return (main.phase if main is not None else None) or tensors


@dataclass(frozen=True)
class MinifyOutcome:
    """Stage minify's answer (None when it left none), its log, and why there is no answer."""

    result: MinifyResult | None
    log: Path | None
    note: str | None = None


@dataclass(frozen=True)
class BundleFacts:
    """What the repro bundle tells the verdict: the package's launches with the user's source lines (provenance
    data, launch order), the bundle itself when it holds a ``repro.py``, and the custom ops that imports."""

    source_root: Path  # where the user ran pytest: source files are shown relative to it
    launches: tuple[provenance.KernelSource, ...] = ()
    bundle: Path | None = None
    custom_ops: tuple[tuple[str, str], ...] = ()  # (module, import root)
    node_traces: Mapping[str, str] = field(default_factory=dict)  # graph node -> its stack trace at export


@dataclass(frozen=True)
class Verdict:
    """What the debug rerun found (or why there was none), made once by :func:`make_verdict` from the stages'
    results. Frozen: rendering reads it and nothing else, no file."""

    nodeid: str
    stages: tuple[ChildRun, ...] = ()
    not_rerun: str | None = None  # why the test was not rerun at all
    notes: tuple[str, ...] = ()  # stages not run, and why
    died_in: str | None = None
    last_completed: str | None = None
    suspects: tuple[str, ...] = ()
    first_nonfinite: kernel_log.TensorStats | None = None
    nan_assert: str | None = None
    runtime_check: str | None = None
    cuda_error: str | None = None
    device_assert: str | None = None
    bounds_check: str | None = None  # a CPU kernel's failed index check (the device-side assert's CPU twin)
    suspect_inputs: tuple[kernel_log.TensorStats, ...] = ()
    phase: str | None = None
    bundle: Path | None = None  # the repro bundle, when the failing call got as far as the package
    sanitizer: kernel_log.SanitizerError | None = None
    numerics: Finding | None = None  # stage numerics' answer, as the child wrote it
    minified: MinifyResult | None = None  # stage minify's answer
    minify_log: Path | None = None
    test_failure: str | None = None  # the test's own kind of failure, when the rerun failed another way
    # The user's source lines of the kernels the verdict names, by role: "suspect" (died in or last completed),
    # "next" (the call after the last completed kernel, for a crash between kernels), "nonfinite", "divergent",
    # "origin" (the launch that computes the op the eager replay found making the NaN/Inf).
    sources: Mapping[str, provenance.KernelSource] = field(default_factory=dict)
    source_root: Path | None = None  # where the user ran pytest: source files are shown relative to it
    custom_ops: tuple[tuple[str, str], ...] = ()  # (module, import root) repro.py imports
    seconds: float | None = None  # the debug stages' wall time, all of them
    # A crash's innermost Python frame in the user's code (faulthandler's dump in stage kernels' log), with its line.
    crash_frame: SourceLine | None = None
    crashed_in: str | None = None  # the pytest phase (setup, call, teardown) stage kernels crashed in
    # Each stage's log, trimmed, in the order of ``stages``: read once the stages ran, so rendering reads no file.
    trimmed_logs: tuple[str, ...] = ()
    origin: NonfiniteOrigin | None = None  # the eager replay's op that made the NaN/Inf
    origin_line: SourceLine | None = None  # that op's line in the user's model
    # A device-side assert's site (CUDA's message) and the Triton kernel whose source holds it: the kernel, when no
    # launch was printed (it ran while Inductor autotuned at compile time) or the process died inside it.
    assert_site: kernel_log.AssertSite | None = None
    assert_kernel: TritonKernel | None = None

    @property
    def reproduced(self) -> bool:
        return any(run.reproduced for run in self.stages)

    @property
    def first(self) -> ChildRun | None:
        """The run the verdict describes: the first that reproduced the failure, else the first run."""
        return next((run for run in self.stages if run.reproduced), self.stages[0] if self.stages else None)

    @property
    def rerun_counts(self) -> tuple[int, int]:
        """(failed, run): the reruns of the test, each a fresh interpreter under a debug environment (the test's own
        failing run is not counted; neither is a sanitizer run, which is not the test as it ran)."""
        runs = [run for run in self.stages if run.stage != Stage.SANITIZER]
        return sum(run.reproduced for run in runs), len(runs)

    @property
    def reproduction(self) -> str | None:
        """``consistent (2 of 2 reruns)``, ``flaky (1 of 3 reruns)`` or ``did not reproduce (0 of 3 reruns)``."""
        failed, total = self.rerun_counts
        if not total:
            return None
        word = "consistent" if failed == total else "did not reproduce" if failed == 0 else "flaky"
        return f"{word} ({failed} of {total} rerun{'' if total == 1 else 's'})"

    @property
    def crashed(self) -> bool:
        """The run the verdict describes crashed."""
        first = self.first
        return first is not None and first.outcome is Outcome.CRASHED

    @property
    def crashed_after_run(self) -> bool:
        """A crash while no kernel ran: the package was loaded but had not run, or its last run had returned (a
        crash in the test's own code or a fixture's teardown, unless the package corrupted memory used later)."""
        return self.crashed and self.died_in is None and self.phase in ("loaded", "ran")

    @property
    def crashed_between_kernels(self) -> bool:
        """A crash after the last kernel that completed and before the next one launched (a custom op or an
        extern call): the next call in the package is where it was."""
        return self.crashed and self.died_in is None and self.last_completed is not None and not self.crashed_after_run

    @property
    def suspect_kernel(self) -> str | None:
        """The kernel the failure is blamed on: the one that never finished; for a NaN/Inf (no crash), the one that
        wrote the first non-finite buffer, since the NaN asserts can stop the package after a later kernel that only
        read it (on CPU, the extern matmul after the fused kernel), and before it the launch computing the op the
        eager replay found making it; else the last one that completed. None for a crash while no kernel ran."""
        if self.crashed_after_run:
            return None
        if self.died_in is not None:
            return self.died_in
        if self.assert_kernel is not None:
            return self.assert_kernel.name
        origin = self.sources.get("origin") if not self.crashed else None
        writer = self.first_nonfinite.kernel if self.first_nonfinite is not None and not self.crashed else None
        return (origin.name if origin is not None else None) or writer or self.last_completed


def failure_if_different(original: str | None, verdict: Verdict) -> str | None:
    """The test's own kind of failure when the rerun failed another way (a fixture a child cannot find, another
    exception), None otherwise: such a verdict explains the rerun's failure, not the test's. The debug environment
    turns some failures into others, which are the same failure: a CUDA error raised to the caller aborts a
    launch-blocking process instead, and the NaN asserts stop the package at the NaN the test found in an output."""
    first = verdict.first
    rerun = first.failure if first is not None else None
    if original is None or rerun is None or rerun == original:
        return None
    if {original, rerun} == {"package_error", "crash"}:
        return None
    if original == "output_nonfinite" and verdict.nan_assert is not None:
        return None
    return original


# Provenance tracking only adds comments and kernel_information.json to the package (the kernel -> graph node ->
# source line map that names the user's line in the verdict): the stages' kernels are the same.
PROVENANCE_ENV = {"INDUCTOR_PROVENANCE": "1"}
# Debug builds run once: their C++ wrapper (the model's launch sequence, ~1000 lines of templates) needs no
# optimization, and -O0 compiles it faster. The kernels themselves keep their flags.
DEBUG_BUILD_ENV = {**PROVENANCE_ENV, "AOT_INDUCTOR_COMPILE_WRAPPER_OPT_LEVEL": "O0"}


def kernels_env(extra: Mapping[str, str]) -> dict[str, str]:
    return {**SANITY_ENV, **DEBUG_BUILD_ENV, PRINTER_ENV: "3", **extra}


def tensors_env(kernels: tuple[str, ...], extra: Mapping[str, str]) -> dict[str, str]:
    """Printer mode 2 for ``kernels``, or for every kernel when none are given."""
    # No NaN asserts here: on CUDA they stop the run at the first NaN buffer, before the printer shows it.
    sanity = {k: v for k, v in SANITY_ENV.items() if k != "TORCHINDUCTOR_NAN_ASSERTS"}
    only = {FILTER_ENV: ",".join(kernels)} if kernels else {}
    return {**sanity, **DEBUG_BUILD_ENV, PRINTER_ENV: "2", **only, **extra}


# What every debug stage sets that torch reads once, when it is imported: a fork server started with it forks them all
# (forkserver/server.py starts fresh a child whose value differs from the server's).
READ_ONCE_STAGE_ENV = {"TORCH_SHOW_CPP_STACKTRACES": SANITY_ENV["TORCH_SHOW_CPP_STACKTRACES"]}


def numerics_env(directory: Path, extra: Mapping[str, str]) -> dict[str, str]:
    return {PRINTER_ENV: "1", **DEBUG_BUILD_ENV, **READ_ONCE_STAGE_ENV, NUMERICS_ENV: str(directory), **extra}


class Started(Protocol):
    """A stage's child, running: :class:`pytest_aoti.debug.child.StartedChild`."""

    def wait(self) -> ChildRun: ...

    def discard(self) -> None: ...


class Launcher(Protocol):
    """Starts one child for a stage: :func:`pytest_aoti.debug.child.start_child` bound to the test."""

    def __call__(self, stage: str, env: dict[str, str], prefix: tuple[str, ...], attempt: int) -> Started: ...


@dataclass
class StagePipeline:
    """The debug stages of one failing test, in order, each run through ``launch``: each stage's method returns
    what its run said, and the runs and the notes on stages not run gather here for :meth:`results`. ``launch`` is
    the one way a stage reaches a process, so the pipeline runs as well on a fake one."""

    launch: Launcher
    workdir: Path
    extra_env: Mapping[str, str]
    flaky_reruns: int = 0
    runs: list[ChildRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped: bool = False  # a stage timed out: later ones would hang the same way

    @property
    def bundle(self) -> Path:
        return self.workdir / "bundle"

    def results(
        self,
        numerics: ChildRun | None,
        kernels: KernelsResult | None,
        tensors: TensorsResult | None,
        suspects: tuple[str, ...],
        sanitizer: kernel_log.SanitizerError | None = None,
    ) -> StageResults:
        """What the stages run so far said, frozen."""
        return StageResults(tuple(self.runs), tuple(self.notes), numerics, kernels, tensors, sanitizer, suspects)

    def stage(self, name: str, env: dict[str, str], prefix: tuple[str, ...] = ()) -> ChildRun:
        """Run stage ``name``; the first stage runs again, up to ``flaky_reruns`` times, until it reproduces the
        failure (its package is cached by then), and records the failing call in the repro bundle."""
        is_first_stage = not self.runs
        attempt = 1
        while True:
            run_env = {**env, BUNDLE_ENV: str(self.bundle)} if is_first_stage else env
            run = self.launch(name, run_env, prefix, attempt).wait()
            self.runs.append(run)
            if not is_first_stage or run.reproduced or attempt > self.flaky_reruns:
                return run
            attempt += 1

    def numerics(self, mismatch: bool) -> ChildRun | None:
        if not mismatch:
            self.notes.append(
                "stage numerics not run: it explains a package-vs-eager mismatch from aoti_check, and this failure "
                "is not one"
            )
            return None
        run = self.stage(Stage.NUMERICS, numerics_env(self.workdir / "numerics", self.extra_env))
        if run.finding is None and run.outcome is Outcome.FAILED:
            self.notes.append("stage numerics found no mismatch to explain (the failure in this run was another)")
        return run

    def kernels(self, later_stages: bool) -> KernelsResult:
        found = KernelsResult.read(self.stage(Stage.KERNELS, kernels_env(self.extra_env)))
        if found.run.outcome is Outcome.TIMED_OUT and later_stages:
            self.stopped = True
            self.notes.append("later stages not run: stage kernels timed out, and they would hang the same way")
        return found

    def start_tensors(self, kernels: tuple[str, ...]) -> Started:
        """Stage tensors, started beside stage kernels: printing ``kernels`` when the user named them, else every
        kernel (the suspects are not known yet)."""
        return self.launch(Stage.TENSORS, tensors_env(kernels, self.extra_env), (), 1)

    def tensors(self, suspects: tuple[str, ...], started: Started | None) -> TensorsResult:
        """Stage tensors: from ``started`` when it ran beside stage kernels, else from a child filtered to
        ``suspects``."""
        if started is None:
            return TensorsResult.read(self.stage(Stage.TENSORS, tensors_env(suspects, self.extra_env)))
        run = started.wait()
        self.runs.append(run)
        return TensorsResult.read(run)

    def sanitizer(self) -> kernel_log.SanitizerError | None:
        tool = sanitizer_path()
        if tool is None:
            self.notes.append("stage sanitizer not run: compute-sanitizer is not on PATH (nor in /usr/local/cuda/bin)")
            return None
        run = self.stage(Stage.SANITIZER, {**SANITIZER_ENV, **self.extra_env}, prefix=(tool, *SANITIZER_ARGS))
        return kernel_log.sanitizer_error(run.log)

    def read_bundle(self, source_root: Path) -> BundleFacts:
        """The repro bundle's facts, with the stages' logs copied into it."""
        bundle = self.bundle
        launches: tuple[provenance.KernelSource, ...] = ()
        traces = read_node_sources(bundle)
        if (bundle / "package.pt2").exists():
            launches = tuple(provenance.read_kernel_sources(bundle / "package.pt2", traces))
        if not (bundle / "repro.py").exists():
            return BundleFacts(source_root, launches, node_traces=traces)
        for run in self.runs:
            if run.log_path.exists():
                shutil.copyfile(run.log_path, bundle / run.log_path.name)
        return BundleFacts(source_root, launches, bundle, tuple(custom_op_modules(bundle)), traces)


def debug_rerun(
    config: pytest.Config,
    nodeid: str,
    *,
    test_path: Path | None,
    workdir: Path,
    request: DebugRequest,
    plan: Triage,
    failure: str | None,
) -> Verdict:
    """Rerun ``nodeid`` through the stages triage chose (``plan``), as the test's marker and the session's options
    ask (``request``), and make the verdict of what they found; ``failure`` is the test's own kind of failure.

    A NaN/Inf failure widens the tensors stage to every launched kernel: a NaN propagates, so the last kernel is a
    poor suspect for where it was made. A first stage that does not reproduce the failure runs up to
    ``request.flaky_reruns`` more times (its package is cached by then): a flaky failure is told from one that needs
    the tests before it.
    """
    start = functools.partial(
        start_child,
        config,
        nodeid,
        test_path=test_path,
        timeout=request.timeout,
        workdir=workdir,
        compiles=request.compiles,
    )

    def launch(stage: str, env: dict[str, str], prefix: tuple[str, ...], attempt: int) -> StartedChild:
        # A stage's extra runs (its first did not reproduce the failure) start fresh: each draws a string-hash seed
        # of its own, as the test's own run did, where forks of one server all share one (a set's order).
        return start(stage=stage, env=env, capture=False, prefix=prefix, attempt=attempt, fresh=attempt > 1)

    pipeline = StagePipeline(launch, workdir, request.env, request.flaky_reruns)
    started = time.monotonic()
    results = run_stages(
        pipeline,
        plan.stages,
        kernels=request.kernels,
        mismatch=plan.mismatch,
        nonfinite_failure=plan.nonfinite_failure,
        sanitizer_on_cuda_error=request.sanitizer_on_cuda_error,
    )
    minify = None
    if Stage.MINIFY in plan.stages and not pipeline.stopped:
        minify = _minify(results, pipeline.bundle, workdir, budget=request.minify_budget, mismatch=plan.mismatch)
    origin = None
    if wants_origin(results, nonfinite_failure=plan.nonfinite_failure) and not pipeline.stopped:
        origin = explaining_origin(
            nonfinite_origin(pipeline.bundle, workdir, timeout=request.timeout), results, plan.nonfinite_failure
        )
    seconds = time.monotonic() - started
    bundle = pipeline.read_bundle(config.invocation_params.dir)
    return make_verdict(nodeid, results, minify=minify, bundle=bundle, seconds=seconds, failure=failure, origin=origin)


def explaining_origin(
    origin: NonfiniteOrigin | None, results: StageResults, nonfinite_failure: bool
) -> NonfiniteOrigin | None:
    """The replay's answer where it explains the failure: where it stopped, or of a NaN/Inf failure what made it.
    A replay that ran through tells nothing of an error the package raised (its "stays finite" speaks of a NaN)."""
    if origin is None or origin.outputs == "raised" or nonfinite_failure_found(results, nonfinite_failure):
        return origin
    return None


def nonfinite_failure_found(results: StageResults, nonfinite_failure: bool) -> bool:
    """The test found a NaN/Inf in an output, or a stage's NaN assert or printer did."""
    return nonfinite_failure or results.signals.nan_assert is not None or results.first_nonfinite is not None


def raised_in_package(results: StageResults) -> bool:
    """A rerun failed while the package ran, with an error rather than a crash: a CPU kernel's index check, a custom
    op that raised. The eager replay stops at the op too, and names it."""
    return results.phase == "run" and any(run.outcome is Outcome.FAILED for run in results.runs)


def wants_origin(results: StageResults, *, nonfinite_failure: bool) -> bool:
    """Whether the failure is one the repro bundle's eager replay explains (a NaN/Inf, or an error the package
    raised) and the rerun that recorded the bundle reproduced it, with no crash (which the replay would repeat)."""
    crashed = any(run.outcome is Outcome.CRASHED for run in results.runs)
    wanted = nonfinite_failure_found(results, nonfinite_failure) or raised_in_package(results)
    return wanted and not crashed and results.reproduced


def nonfinite_origin(bundle: Path, workdir: Path, *, timeout: float) -> NonfiniteOrigin | None:
    """The op that made the NaN/Inf: ``python -m pytest_aoti.debug.origin`` replays the bundle's exported program in
    eager, in its own process (torch's state in this one stays the session's). None without a bundle to replay."""
    if not (bundle / "exported_program.pt2").exists() or not (bundle / "inputs.pt").exists():
        return None
    (bundle / ORIGIN_RESULT).unlink(missing_ok=True)
    log_path = workdir / "origin.log"
    command = [sys.executable, "-u", "-m", "pytest_aoti.debug.origin", str(bundle)]
    tmpdir = private_tmpdir(workdir)
    try:
        returncode, timed_out, _ = run_process(
            command, env={**os.environ, "TMPDIR": str(tmpdir)}, cwd=workdir, log_path=log_path, timeout=timeout
        )
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    try:
        return NonfiniteOrigin.from_json((bundle / ORIGIN_RESULT).read_text())
    except (OSError, ValueError, TypeError):
        how = "timed out" if timed_out else f"exited with {returncode}"
        return NonfiniteOrigin("unknown", error=f"the eager replay {how} without a result (log: {log_path})")


def run_stages(
    pipeline: StagePipeline,
    stages: tuple[str, ...],
    *,
    kernels: tuple[str, ...],
    nonfinite_failure: bool,
    sanitizer_on_cuda_error: bool,
    mismatch: bool,
) -> StageResults:
    """Numerics, kernels, tensors and sanitizer, each when asked for and when what came before allows it; returns
    what they said. Stage tensors runs beside stage kernels when both are asked for."""
    numerics = pipeline.numerics(mismatch) if Stage.NUMERICS in stages else None
    beside = pipeline.start_tensors(kernels) if {Stage.KERNELS, Stage.TENSORS} <= set(stages) else None
    try:
        ran = pipeline.kernels(later_stages=len(stages) > 1) if Stage.KERNELS in stages else None
        launched = tuple(dict.fromkeys(launch.kernel for launch in ran.launches)) if ran is not None else ()
        suspects = kernels or (launched if nonfinite_failure else ran.suspects if ran is not None else ())
        reproduced = not pipeline.runs or any(run.reproduced for run in pipeline.runs)
        tensors = None
        if beside is not None and not pipeline.stopped:
            tensors = pipeline.tensors(suspects, beside)
        elif Stage.TENSORS in stages and suspects and reproduced and not pipeline.stopped:
            tensors = pipeline.tensors(suspects, None)
    finally:
        if beside is not None:
            beside.discard()  # stage kernels timed out (it would hang the same way), or this process is stopping
    so_far = pipeline.results(numerics, ran, tensors, suspects)
    cuda_failure = so_far.signals.cuda_error is not None or so_far.signals.device_assert is not None
    wanted = Stage.SANITIZER in stages or (sanitizer_on_cuda_error and cuda_failure)
    if not wanted or not (not so_far.runs or so_far.reproduced) or pipeline.stopped:
        return so_far
    sanitizer = pipeline.sanitizer()
    return pipeline.results(numerics, ran, tensors, suspects, sanitizer)


def shared_hash_seed_note(runs: tuple[ChildRun, ...]) -> tuple[str, ...]:
    """A note when two or more of the reruns counted for the reproduction were forked warm: they shared one
    string-hash seed, so a failure that depends on the order of a set or dict of strings could not differ between
    them, and ``consistent`` says less than it seems."""
    shared = [run for run in runs if run.stage != Stage.SANITIZER and run.shared_hash_seed]
    if len(shared) < 2:
        return ()
    return (
        f"{len(shared)} reruns ({', '.join(run.label for run in shared)}) were forked warm and shared one string-hash "
        "seed: a failure that depends on the order of a set or dict could not differ between them (a stage's extra "
        "runs start fresh, each with a seed of its own; PYTEST_AOTI_FORK_SERVER=0 starts every rerun fresh)",
    )


def make_verdict(
    nodeid: str,
    results: StageResults,
    *,
    minify: MinifyOutcome | None = None,
    bundle: BundleFacts | None = None,
    seconds: float | None = None,
    failure: str | None = None,
    origin: NonfiniteOrigin | None = None,
) -> Verdict:
    """The verdict, made once the stages ran: from what each said (``results``), stage minify's answer, the repro
    bundle, the stages' wall time (``seconds``), the test's own kind of failure (``failure``) and the eager
    replay's origin of a NaN/Inf (``origin``)."""
    kernels, tensors, signals = results.kernels, results.tensors, results.signals
    seed_note = shared_hash_seed_note(results.runs)
    facts = Verdict(
        nodeid,
        stages=results.runs,
        notes=(*results.notes, *([] if minify is None or minify.note is None else [minify.note]), *seed_note),
        died_in=kernels.died_in if kernels is not None else None,
        last_completed=kernels.last_completed if kernels is not None else None,
        suspects=results.suspects,
        first_nonfinite=results.first_nonfinite,
        nan_assert=signals.nan_assert,
        runtime_check=signals.runtime_check,
        cuda_error=signals.cuda_error,
        device_assert=signals.device_assert,
        bounds_check=signals.bounds_check,
        phase=results.phase,
        bundle=bundle.bundle if bundle is not None else None,
        sanitizer=results.sanitizer,
        numerics=results.numerics.finding if results.numerics is not None else None,
        minified=minify.result if minify is not None else None,
        minify_log=minify.log if minify is not None else None,
        source_root=bundle.source_root if bundle is not None else None,
        custom_ops=bundle.custom_ops if bundle is not None else (),
        seconds=seconds,
        crash_frame=kernels.crash_frame if kernels is not None else None,
        crashed_in=kernels.crashed_in if kernels is not None else None,
        trimmed_logs=tuple(kernel_log.trim(run.log) for run in results.runs),
        origin=origin,
        origin_line=origin_line(origin, bundle.node_traces) if bundle is not None else None,
        assert_site=signals.assert_site,
        assert_kernel=kernel_at(Path(signals.assert_site.file), signals.assert_site.line)
        if signals.assert_site is not None
        else None,
    )
    # What rests on the facts above: the launches they name, and which kernel is the suspect (a crash while no
    # kernel ran has none).
    sources = kernel_sources(facts, list(bundle.launches), kernels, bundle.node_traces) if bundle is not None else {}
    facts = replace(facts, sources=sources)
    suspect = facts.suspect_kernel
    inputs = tensors.of(results.suspects) if tensors is not None and suspect is not None else []
    return replace(
        facts,
        suspect_inputs=tuple(kernel_log.kernel_inputs(inputs, suspect)) if suspect is not None else (),
        test_failure=failure_if_different(failure, facts),
    )


def kernel_sources(
    verdict: Verdict,
    sources: list[provenance.KernelSource],
    kernels: KernelsResult | None,
    node_traces: Mapping[str, str] | None = None,
) -> dict[str, provenance.KernelSource]:
    """The launches the verdict names, found in the package's provenance data (launch order): a kernel launched
    several times is matched by how often stage kernels (``kernels``) saw it launch."""
    found: dict[str, provenance.KernelSource] = {}
    node_traces = node_traces or {}

    def find(role: str, kernel: str, occurrence: int = 1) -> int | None:
        index = provenance.launch_of(sources, kernel, max(1, occurrence))
        if index is not None:
            found[role] = sources[index]
        return index

    def count(kernel: str, when: str) -> int:
        return kernels.launch_count(kernel, when) if kernels is not None else 0

    if verdict.died_in is not None:
        find("suspect", verdict.died_in, count(verdict.died_in, "before"))
    elif verdict.assert_kernel is not None:
        # The kernel Triton's assert names: the package's launch of it, else (it ran while Inductor compiled, and no
        # package exists) its own source's nodes, mapped to the user's lines by this run's export.
        kernel = verdict.assert_kernel
        if find("suspect", kernel.name) is None:
            found["suspect"] = provenance.kernel_source(kernel.name, kernel.nodes, node_traces)
    elif verdict.last_completed is not None and not verdict.crashed_after_run:
        index = find("suspect", verdict.last_completed, count(verdict.last_completed, "after"))
        # The call after it is the answer only for a crash between the two; in any other failure it never ran.
        if verdict.crashed_between_kernels and index is not None and index + 1 < len(sources):
            found["next"] = sources[index + 1]
    nonfinite = verdict.first_nonfinite
    if nonfinite is not None and nonfinite.kernel is not None:
        # The launch that wrote it (a kernel reused by several blocks has a line per launch).
        find("nonfinite", nonfinite.kernel, nonfinite.launch)
    diverged = verdict.numerics.diverged if verdict.numerics is not None else None
    if diverged is not None:
        # A kernel launched several times (an extern addmm per linear) is the launch that computes the finding's
        # nodes, whose lines are its own; by name alone, the first launch's lines would stand in for them.
        same = next((s for s in sources if s.name == diverged.kernel and s.nodes == tuple(diverged.nodes)), None)
        if same is not None:
            found["divergent"] = same
        else:
            find("divergent", diverged.kernel)
    origin = verdict.origin.node if verdict.origin is not None else None
    # The call of the op alone (a custom op's extern call) before a kernel that fused it among others.
    holding = next((source for source in sources if origin is not None and source.nodes == (origin,)), None)
    holding = holding or next((source for source in sources if origin is not None and origin in source.nodes), None)
    if holding is not None:
        found["origin"] = holding
    return found


def origin_line(origin: NonfiniteOrigin | None, node_traces: Mapping[str, str]) -> SourceLine | None:
    """The user's line of the op that made the NaN/Inf (its node's stack trace at export)."""
    trace = node_traces.get(origin.node) if origin is not None and origin.node is not None else None
    return user_line(trace, torch_install_dir()) if trace is not None else None


def _minify_target(results: StageResults) -> str:
    """How a minified candidate must fail to count as the same failure."""
    if any(run.outcome is Outcome.CRASHED for run in results.runs):
        return "crash"
    if results.first_nonfinite is not None or results.signals.nan_assert is not None:
        return "nonfinite"
    return "error"


def _minify(results: StageResults, bundle: Path, workdir: Path, *, budget: float, mismatch: bool) -> MinifyOutcome:
    """Stage minify: ``python -m pytest_aoti.debug.minify`` over the bundle, in its own process (it starts one per
    candidate); the result lands in ``bundle/minified``."""
    if mismatch:
        return MinifyOutcome(
            None, None, "stage minify not run: a package-vs-eager mismatch needs eager to judge candidates"
        )
    if not (bundle / "exported_program.pt2").exists() or not results.reproduced:
        return MinifyOutcome(None, None, "stage minify not run: no repro bundle of a reproduced failure to minify")
    log_path = workdir / "minify.log"
    command = [
        sys.executable,
        "-u",
        "-m",
        "pytest_aoti.debug.minify",
        str(bundle),
        "--want",
        _minify_target(results),
        "--budget",
        f"{budget:g}",
    ]
    tmpdir = private_tmpdir(workdir)  # what the candidates' loads leave (a judge stopped at the budget) goes with it
    try:
        # The search itself stops at the budget; the margin covers its start-up and the last candidate's judge.
        returncode, timed_out, _ = run_process(
            command, env={**os.environ, "TMPDIR": str(tmpdir)}, cwd=workdir, log_path=log_path, timeout=budget + 120
        )
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    try:
        return MinifyOutcome(MinifyResult.from_json((bundle / "minified" / MINIFY_RESULT).read_text()), log_path)
    except (OSError, ValueError, TypeError):
        how = "timed out" if timed_out else f"exited with {returncode}"
        return MinifyOutcome(None, log_path, f"stage minify {how} without a result (log: {log_path})")
