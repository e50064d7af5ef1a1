"""The debug rerun PyTorch's AOTI guide prescribes for illegal memory accesses, done automatically, and its verdict.

Stage ``kernels``: synchronous, uncached CUDA memory, runtime input checks, NaN asserts and printer mode 3 (kernel
names). A kernel with ``before_launch`` and no ``after_launch`` is where the process died; otherwise the last kernel
that completed is named. Stage ``tensors``: printer mode 2 filtered to the suspects, for their tensors' stats and the
first kernel whose output holds NaN/Inf. Both flags are codegen-time, so each child recompiles (without the cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_aoti import kernel_log, phases
from pytest_aoti.child import ChildRun, run_child

SANITY_ENV = {
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
    "CUDA_LAUNCH_BLOCKING": "1",
    "AOTI_RUNTIME_CHECK_INPUTS": "1",
    "TORCHINDUCTOR_NAN_ASSERTS": "1",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}
PRINTER_ENV = "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER"
FILTER_ENV = "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT"
LOAD_SEGFAULT_HINT = (
    "the process crashed while loading the AOTI package. If this is a segfault in std::regex / parse_device_str, "
    "the package's .so carries its own libstdc++ locale code that clashes with the process's: run with "
    "LD_PRELOAD=libstdc++.so.6 (or the path of your libstdc++.so.6)"
)


@dataclass
class Verdict:
    """What the debug rerun found, for the report section, the JUnit properties and the terminal summary."""

    nodeid: str
    stages: list[ChildRun] = field(default_factory=list)
    died_in: str | None = None
    last_completed: str | None = None
    suspects: tuple[str, ...] = ()
    first_nonfinite: kernel_log.TensorStats | None = None
    nan_assert: str | None = None
    runtime_check: str | None = None
    cuda_error: str | None = None
    phase: str | None = None

    @property
    def reproduced(self) -> bool:
        return any(run.outcome not in ("passed", "skipped") for run in self.stages)

    @property
    def first(self) -> ChildRun:
        return self.stages[0]

    @property
    def suspect_kernel(self) -> str | None:
        return self.died_in or self.last_completed

    def headline(self) -> str:
        if not self.reproduced:
            return "did not reproduce in isolation (the failure may depend on earlier tests or on timing)"
        parts = [self.first.describe()]
        if self.died_in:
            parts.append(f"in kernel {self.died_in} (before_launch with no after_launch)")
        elif self.last_completed and self.first.outcome == "crashed":
            parts.append(
                f"after kernel {self.last_completed} completed and before the next kernel launched "
                "(the crash is in code between compiled kernels: a custom op or an extern call)"
            )
        elif self.last_completed:
            parts.append(f"last kernel completed: {self.last_completed}")
        if self.phase == "load":
            parts.append("while loading the package")
        if self.nan_assert:
            parts.append(f"NaN assert: {self.nan_assert}")
        if self.first_nonfinite is not None:
            parts.append(f"first NaN/Inf in {_where(self.first_nonfinite)}")
        return "; ".join(parts)


def _where(stats: kernel_log.TensorStats) -> str:
    if stats.kernel is None:
        return f"model input {stats.arg}"
    return f"{stats.kernel} ({stats.arg} after launch, mean {stats.mean})"


def kernels_env(extra: Mapping[str, str]) -> dict[str, str]:
    return {**SANITY_ENV, PRINTER_ENV: "3", **extra}


def tensors_env(kernels: tuple[str, ...], extra: Mapping[str, str]) -> dict[str, str]:
    # No NaN asserts here: on CUDA they stop the run at the first NaN buffer, before the printer shows it.
    sanity = {k: v for k, v in SANITY_ENV.items() if k != "TORCHINDUCTOR_NAN_ASSERTS"}
    return {**sanity, PRINTER_ENV: "2", FILTER_ENV: ",".join(kernels), **extra}


def debug_rerun(
    config: pytest.Config,
    nodeid: str,
    *,
    workdir: Path,
    timeout: float,
    extra_env: Mapping[str, str],
    kernels: tuple[str, ...],
    stages: tuple[str, ...],
    extra_args: list[str],
    nonfinite_failure: bool,
) -> Verdict:
    """Rerun ``nodeid`` through the debug stages and read the verdict off the logs.

    ``nonfinite_failure`` (the original failure was a NaN/Inf) widens the tensors stage to every launched kernel:
    a NaN propagates, so the last kernel is a poor suspect for where it was made.
    """
    verdict = Verdict(nodeid)
    args = ["--aoti-no-cache", *extra_args]
    log = ""
    if "kernels" in stages:
        first = run_child(
            config,
            nodeid,
            stage="kernels",
            env=kernels_env(extra_env),
            timeout=timeout,
            workdir=workdir,
            extra_args=args,
        )
        verdict.stages.append(first)
        log = first.log
        verdict.phase = phases.last_phase(log)
        verdict.died_in = kernel_log.died_in(log)
        verdict.last_completed = kernel_log.last_completed(log)
        verdict.nan_assert = kernel_log.nan_assert(log)
        verdict.runtime_check = kernel_log.runtime_check_error(log)
        verdict.cuda_error = kernel_log.cuda_error(log)
    launched = tuple(dict.fromkeys(e.kernel for e in kernel_log.launches(log)))
    suspects = kernels or (launched if nonfinite_failure else kernel_log.suspect_kernels(log))
    verdict.suspects = suspects
    reproduced = not verdict.stages or verdict.reproduced
    if "tensors" in stages and suspects and reproduced:
        second = run_child(
            config,
            nodeid,
            stage="tensors",
            env=tensors_env(suspects, extra_env),
            timeout=timeout,
            workdir=workdir,
            extra_args=args,
        )
        verdict.stages.append(second)
        second_log = second.log
        verdict.first_nonfinite = kernel_log.first_nonfinite(kernel_log.tensor_stats(second_log))
        verdict.nan_assert = verdict.nan_assert or kernel_log.nan_assert(second_log)
        verdict.cuda_error = verdict.cuda_error or kernel_log.cuda_error(second_log)
    return verdict
