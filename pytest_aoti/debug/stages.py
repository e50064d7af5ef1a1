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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest

from pytest_aoti.core.protocol import (
    BUNDLE_ENV,
    MINIFY_RESULT,
    NUMERICS_ENV,
    Finding,
    MinifyResult,
    Outcome,
    Stage,
)
from pytest_aoti.debug import kernel_log, provenance
from pytest_aoti.debug.bundle import custom_op_modules, read_node_sources
from pytest_aoti.debug.child import ChildRun, StartedChild, private_tmpdir, run_process, start_child
from pytest_aoti.debug.triage import Triage
from pytest_aoti.settings import DebugRequest

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


@dataclass
class Verdict:
    """What the debug rerun found (or why there was none), read off the stages' logs."""

    nodeid: str
    stages: list[ChildRun] = field(default_factory=list)
    not_rerun: str | None = None  # why the test was not rerun at all
    notes: list[str] = field(default_factory=list)  # stages not run, and why
    died_in: str | None = None
    last_completed: str | None = None
    suspects: tuple[str, ...] = ()
    first_nonfinite: kernel_log.TensorStats | None = None
    nan_assert: str | None = None
    runtime_check: str | None = None
    cuda_error: str | None = None
    device_assert: str | None = None
    bounds_check: str | None = None  # a CPU kernel's failed index check (the device-side assert's CPU twin)
    suspect_inputs: list[kernel_log.TensorStats] = field(default_factory=list)
    phase: str | None = None
    bundle: Path | None = None  # the repro bundle, when the failing call got as far as the package
    sanitizer: kernel_log.SanitizerError | None = None
    numerics: Finding | None = None  # stage numerics' answer, as the child wrote it
    minified: MinifyResult | None = None  # stage minify's answer
    minify_log: Path | None = None
    test_failure: str | None = None  # the test's own kind of failure, when the rerun failed another way
    # The user's source lines of the kernels the verdict names, by role: "suspect" (died in or last completed),
    # "next" (the call after the last completed kernel, for a crash between kernels), "nonfinite", "divergent".
    sources: dict[str, provenance.KernelSource] = field(default_factory=dict)
    source_root: Path | None = None  # where the user ran pytest: source files are shown relative to it
    custom_ops: list[tuple[str, str]] = field(default_factory=list)  # (module, import root) repro.py imports
    seconds: float | None = None  # the debug stages' wall time, all of them
    # A crash's innermost Python frame in the user's code (faulthandler's dump in stage kernels' log), with its line.
    crash_frame: provenance.SourceLine | None = None
    crashed_in: str | None = None  # the pytest phase (setup, call, teardown) stage kernels crashed in
    # Each stage's log, trimmed, in the order of ``stages``: read once the stages ran, so rendering reads no file.
    trimmed_logs: list[str] = field(default_factory=list)

    def read_logs(self) -> None:
        self.trimmed_logs = [kernel_log.trim(run.log) for run in self.stages]

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
    def crashed_after_run(self) -> bool:
        """A crash while no kernel ran: the package was loaded but had not run, or its last run had returned (a
        crash in the test's own code or a fixture's teardown, unless the package corrupted memory used later)."""
        first = self.first
        crashed = first is not None and first.outcome is Outcome.CRASHED
        return crashed and self.died_in is None and self.phase in ("loaded", "ran")

    @property
    def crashed_between_kernels(self) -> bool:
        """A crash after the last kernel that completed and before the next one launched (a custom op or an
        extern call): the next call in the package is where it was."""
        first = self.first
        crashed = first is not None and first.outcome is Outcome.CRASHED
        return crashed and self.died_in is None and self.last_completed is not None and not self.crashed_after_run

    @property
    def suspect_kernel(self) -> str | None:
        if self.crashed_after_run:
            return None
        return self.died_in or self.last_completed


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


def numerics_env(directory: Path, extra: Mapping[str, str]) -> dict[str, str]:
    return {PRINTER_ENV: "1", **DEBUG_BUILD_ENV, NUMERICS_ENV: str(directory), **extra}


class Started(Protocol):
    """A stage's child, running: :class:`pytest_aoti.debug.child.StartedChild`."""

    def wait(self) -> ChildRun: ...

    def discard(self) -> None: ...


class Launcher(Protocol):
    """Starts one child for a stage: :func:`pytest_aoti.debug.child.start_child` bound to the test."""

    def __call__(self, stage: str, env: dict[str, str], prefix: tuple[str, ...], attempt: int) -> Started: ...


@dataclass
class StagePipeline:
    """The debug stages of one failing test, in order, each run through ``launch``; what each found goes into
    ``verdict``. ``launch`` is the one way a stage reaches a process, so the pipeline runs as well on a fake one."""

    launch: Launcher
    workdir: Path
    extra_env: Mapping[str, str]
    flaky_reruns: int = 0
    verdict: Verdict = field(default_factory=lambda: Verdict(""))
    stopped: bool = False  # a stage timed out: later ones would hang the same way

    @property
    def bundle(self) -> Path:
        return self.workdir / "bundle"

    def stage(self, name: str, env: dict[str, str], prefix: tuple[str, ...] = ()) -> ChildRun:
        """Run stage ``name``; the first stage runs again, up to ``flaky_reruns`` times, until it reproduces the
        failure (its package is cached by then), and records the failing call in the repro bundle."""
        is_first_stage = not self.verdict.stages
        attempt = 1
        while True:
            run_env = {**env, BUNDLE_ENV: str(self.bundle)} if is_first_stage else env
            run = self.launch(name, run_env, prefix, attempt).wait()
            self.verdict.stages.append(run)
            if not is_first_stage or run.reproduced or attempt > self.flaky_reruns:
                return run
            attempt += 1

    def numerics(self, mismatch: bool) -> None:
        if not mismatch:
            self.verdict.notes.append(
                "stage numerics not run: it explains a package-vs-eager mismatch from aoti_check, and this failure "
                "is not one"
            )
            return
        run = self.stage(Stage.NUMERICS, numerics_env(self.workdir / "numerics", self.extra_env))
        self.verdict.phase = run.phase
        self.verdict.numerics = run.finding
        if self.verdict.numerics is None and run.outcome is Outcome.FAILED:
            self.verdict.notes.append(
                "stage numerics found no mismatch to explain (the failure in this run was another)"
            )

    def kernels(self, later_stages: bool) -> str:
        """Stage kernels; returns its log."""
        verdict = self.verdict
        first = self.stage(Stage.KERNELS, kernels_env(self.extra_env))
        log = first.log
        verdict.phase = first.phase
        verdict.died_in = kernel_log.died_in(log)
        verdict.last_completed = kernel_log.last_completed(log)
        verdict.nan_assert = kernel_log.nan_assert(log)
        verdict.runtime_check = kernel_log.runtime_check_error(log)
        verdict.cuda_error = kernel_log.cuda_error(log)
        verdict.device_assert = kernel_log.device_assert(log)
        verdict.bounds_check = kernel_log.bounds_check(log)
        if first.outcome is Outcome.CRASHED:
            verdict.crashed_in = first.unreported_phase
            verdict.crash_frame = provenance.user_frame(kernel_log.crash_frames(log))
        if first.outcome is Outcome.TIMED_OUT and later_stages:
            self.stopped = True
            verdict.notes.append("later stages not run: stage kernels timed out, and they would hang the same way")
        return log

    def start_tensors(self, kernels: tuple[str, ...]) -> Started:
        """Stage tensors, started beside stage kernels: printing ``kernels`` when the user named them, else every
        kernel (the suspects are not known yet)."""
        return self.launch(Stage.TENSORS, tensors_env(kernels, self.extra_env), (), 1)

    def tensors(self, suspects: tuple[str, ...], started: Started | None) -> None:
        """Stage tensors' stats of ``suspects``: from ``started`` when it ran beside stage kernels, else from a
        child filtered to them."""
        verdict = self.verdict
        if started is not None:
            second = started.wait()
            verdict.stages.append(second)
        else:
            second = self.stage(Stage.TENSORS, tensors_env(suspects, self.extra_env))
        log = second.log
        stats = [block for block in kernel_log.tensor_stats(log) if block.kernel in (None, *suspects)]
        verdict.first_nonfinite = kernel_log.first_nonfinite(stats)
        if verdict.suspect_kernel is not None:
            verdict.suspect_inputs = kernel_log.kernel_inputs(stats, verdict.suspect_kernel)
        verdict.device_assert = verdict.device_assert or kernel_log.device_assert(log)
        verdict.bounds_check = verdict.bounds_check or kernel_log.bounds_check(log)
        verdict.nan_assert = verdict.nan_assert or kernel_log.nan_assert(log)
        verdict.cuda_error = verdict.cuda_error or kernel_log.cuda_error(log)
        verdict.phase = verdict.phase or second.phase

    def sanitizer(self) -> None:
        tool = sanitizer_path()
        if tool is None:
            self.verdict.notes.append(
                "stage sanitizer not run: compute-sanitizer is not on PATH (nor in /usr/local/cuda/bin)"
            )
            return
        run = self.stage(Stage.SANITIZER, {**SANITIZER_ENV, **self.extra_env}, prefix=(tool, *SANITIZER_ARGS))
        self.verdict.sanitizer = kernel_log.sanitizer_error(run.log)

    def attach_bundle(self, source_root: Path, log: str) -> None:
        """The user's source lines of the kernels, and the repro bundle with the stages' logs in it."""
        verdict, bundle = self.verdict, self.bundle
        verdict.source_root = source_root
        if (bundle / "package.pt2").exists():
            launches = provenance.read_kernel_sources(bundle / "package.pt2", read_node_sources(bundle))
            verdict.sources = kernel_sources(verdict, launches, log)
        if (bundle / "repro.py").exists():
            for run in verdict.stages:
                if run.log_path.exists():
                    shutil.copyfile(run.log_path, bundle / run.log_path.name)
            verdict.bundle = bundle
            verdict.custom_ops = custom_op_modules(bundle)


def debug_rerun(
    config: pytest.Config, nodeid: str, *, test_path: Path | None, workdir: Path, request: DebugRequest, plan: Triage
) -> Verdict:
    """Rerun ``nodeid`` through the stages triage chose (``plan``), as the test's marker and the session's options
    ask (``request``), and read the verdict off the logs.

    A NaN/Inf failure widens the tensors stage to every launched kernel: a NaN propagates, so the last kernel is a
    poor suspect for where it was made. A first stage that does not reproduce the failure runs up to
    ``request.flaky_reruns`` more times (its package is cached by then): a flaky failure is told from one that needs
    the tests before it.
    """
    timeout = request.timeout

    start = functools.partial(start_child, config, nodeid, test_path=test_path, timeout=timeout, workdir=workdir)

    def launch(stage: str, env: dict[str, str], prefix: tuple[str, ...], attempt: int) -> StartedChild:
        return start(stage=stage, env=env, capture=False, prefix=prefix, attempt=attempt)

    pipeline = StagePipeline(launch, workdir, request.env, request.flaky_reruns, Verdict(nodeid))
    started = time.monotonic()
    log = run_stages(
        pipeline,
        plan.stages,
        kernels=request.kernels,
        mismatch=plan.mismatch,
        nonfinite_failure=plan.nonfinite_failure,
        sanitizer_on_cuda_error=request.sanitizer_on_cuda_error,
    )
    if Stage.MINIFY in plan.stages and not pipeline.stopped:
        _minify(pipeline.verdict, pipeline.bundle, workdir, budget=request.minify_budget, mismatch=plan.mismatch)
    pipeline.verdict.seconds = time.monotonic() - started
    pipeline.attach_bundle(config.invocation_params.dir, log)
    pipeline.verdict.read_logs()
    return pipeline.verdict


def run_stages(
    pipeline: StagePipeline,
    stages: tuple[str, ...],
    *,
    kernels: tuple[str, ...],
    nonfinite_failure: bool,
    sanitizer_on_cuda_error: bool,
    mismatch: bool,
) -> str:
    """Numerics, kernels, tensors and sanitizer, each when asked for and when what came before allows it; returns
    stage kernels' log (empty without it). Stage tensors runs beside stage kernels when both are asked for."""
    verdict = pipeline.verdict
    if Stage.NUMERICS in stages:
        pipeline.numerics(mismatch)
    beside = pipeline.start_tensors(kernels) if {Stage.KERNELS, Stage.TENSORS} <= set(stages) else None
    try:
        log = pipeline.kernels(later_stages=len(stages) > 1) if Stage.KERNELS in stages else ""
        launched = tuple(dict.fromkeys(e.kernel for e in kernel_log.launches(log)))
        suspects = kernels or (launched if nonfinite_failure else kernel_log.suspect_kernels(log))
        verdict.suspects = suspects
        reproduced = not verdict.stages or verdict.reproduced
        if beside is not None and not pipeline.stopped:
            pipeline.tensors(suspects, beside)
        elif Stage.TENSORS in stages and suspects and reproduced and not pipeline.stopped:
            pipeline.tensors(suspects, None)
    finally:
        if beside is not None:
            beside.discard()  # stage kernels timed out (it would hang the same way), or this process is stopping
    reproduced = not verdict.stages or verdict.reproduced
    cuda_failure = verdict.cuda_error is not None or verdict.device_assert is not None
    if (
        (Stage.SANITIZER in stages or (sanitizer_on_cuda_error and cuda_failure))
        and reproduced
        and not pipeline.stopped
    ):
        pipeline.sanitizer()
    return log


def kernel_sources(
    verdict: Verdict, sources: list[provenance.KernelSource], log: str
) -> dict[str, provenance.KernelSource]:
    """The launches the verdict names, found in the package's provenance data (launch order): a kernel launched
    several times is matched by how often the kernels stage's log saw it launch."""
    found: dict[str, provenance.KernelSource] = {}

    def find(role: str, kernel: str, occurrence: int = 1) -> int | None:
        index = provenance.launch_of(sources, kernel, max(1, occurrence))
        if index is not None:
            found[role] = sources[index]
        return index

    if verdict.died_in is not None:
        find("suspect", verdict.died_in, _launch_count(log, verdict.died_in, "before"))
    elif verdict.last_completed is not None and not verdict.crashed_after_run:
        index = find("suspect", verdict.last_completed, _launch_count(log, verdict.last_completed, "after"))
        # The call after it is the answer only for a crash between the two; in any other failure it never ran.
        if verdict.crashed_between_kernels and index is not None and index + 1 < len(sources):
            found["next"] = sources[index + 1]
    nonfinite = verdict.first_nonfinite
    if nonfinite is not None and nonfinite.kernel is not None:
        # The launch that wrote it (a kernel reused by several blocks has a line per launch).
        find("nonfinite", nonfinite.kernel, nonfinite.launch)
    if verdict.numerics is not None and verdict.numerics.diverged is not None:
        find("divergent", verdict.numerics.diverged.kernel)
    return found


def _launch_count(log: str, kernel: str, when: str) -> int:
    return sum(1 for launch in kernel_log.launches(log) if launch.kernel == kernel and launch.when == when)


def _minify_target(verdict: Verdict) -> str:
    """How a minified candidate must fail to count as the same failure."""
    if any(run.outcome is Outcome.CRASHED for run in verdict.stages):
        return "crash"
    if verdict.first_nonfinite is not None or verdict.nan_assert is not None:
        return "nonfinite"
    return "error"


def _minify(verdict: Verdict, bundle: Path, workdir: Path, *, budget: float, mismatch: bool) -> None:
    """Stage minify: ``python -m pytest_aoti.debug.minify`` over the bundle, in its own process (it starts one per
    candidate); the result lands in ``bundle/minified``."""
    if mismatch:
        verdict.notes.append("stage minify not run: a package-vs-eager mismatch needs eager to judge candidates")
        return
    if not (bundle / "exported_program.pt2").exists() or not verdict.reproduced:
        verdict.notes.append("stage minify not run: no repro bundle of a reproduced failure to minify")
        return
    want = _minify_target(verdict)
    log_path = workdir / "minify.log"
    command = [
        sys.executable,
        "-u",
        "-m",
        "pytest_aoti.debug.minify",
        str(bundle),
        "--want",
        want,
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
    verdict.minify_log = log_path
    try:
        verdict.minified = MinifyResult.from_json((bundle / "minified" / MINIFY_RESULT).read_text())
    except (OSError, ValueError, TypeError):
        how = "timed out" if timed_out else f"exited with {returncode}"
        verdict.notes.append(f"stage minify {how} without a result (log: {log_path})")
