"""Timing a compiled package beside two controls, in interleaved blocks: the package, eager on the same inputs, and a
calibration workload of pinned size on the same device (a matmul, for the device's arithmetic, and a loop of small
elementwise ops, for its dispatch and launch overhead). Each round times one block of each, so the three blocks of
a round saw the same machine: what the machine did to the package, it did to the calibration beside it.

Also what loading the package cost (time, memory) and the machine's description, the key of its baselines.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

BLOCK_SECONDS = 0.01  # each block runs its call this long, give or take: long enough for the clock, short for rounds
MIN_BLOCKS = 10  # rounds a run needs before it can be judged; fewer: too few blocks to say anything
MAX_BLOCKS = 500
# A run stops after this many times its planned time (and at least OVERRUN_SECONDS), with whatever rounds it has (at
# least 2): a model whose one call takes longer than the planned time would otherwise hold the test for MIN_BLOCKS calls
# of each side. A busy shared machine stretches even a tiny model's rounds
# (docs/benchmarks.md#the-benchmark-gate-on-a-shared-machine).
OVERRUN_FACTOR = 10
OVERRUN_SECONDS = 60.0
WARMUP_CALLS = 3

# The calibration workload: fixed sizes per device type, so its speed is a property of the machine alone.
_CALIBRATION_SIZES = {"cpu": (128, 16384, 8), "cuda": (2048, 1 << 20, 8)}  # matmul n, elementwise numel, loop steps


@dataclass(frozen=True)
class Figures:
    """One measurement: seconds per call of the package, eager and the calibration, one figure per block (the three
    lists are aligned by round), and what loading and holding the package cost."""

    package: list[float]
    eager: list[float]
    calibration: list[float]
    load_seconds: float
    load_memory_bytes: int | None  # CUDA: peak allocated by the load; CPU: resident-set growth
    run_memory_bytes: int | None  # CUDA: peak allocated by one call; CPU: not measured (None)
    package_bytes: int
    device: str
    threads: int | None = None  # CPU threads the sides ran on; None: torch's default (and the package as compiled)
    attempts: int = 1  # 2: the machine changed under the first measurement, and this is the second

    @property
    def median(self) -> float:
        return statistics.median(self.package)

    @property
    def iqr(self) -> float:
        if len(self.package) < 2:
            return 0.0
        quartiles = statistics.quantiles(self.package, n=4)
        return quartiles[2] - quartiles[0]

    @property
    def speedup(self) -> float:
        """Eager's median over the package's: above 1, the package is faster."""
        return statistics.median(self.eager) / self.median


def calibration_workload(device: torch.device) -> Callable[[], Any]:
    """A call whose work never changes: an n x n matmul and a loop of elementwise ops on fixed, seeded data."""
    matmul_size, numel, steps = _CALIBRATION_SIZES["cuda" if device.type == "cuda" else "cpu"]
    generator = torch.Generator().manual_seed(0)
    matrix = torch.rand(matmul_size, matmul_size, generator=generator).to(device) / matmul_size
    vector = torch.rand(numel, generator=generator).to(device)

    def calibrate() -> Any:
        product = matrix @ matrix
        value = vector
        for _ in range(steps):
            value = torch.sin(value) * 0.5 + vector
        return product, value

    return calibrate


def _rss_bytes() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _seconds_per_call(call: Callable[[], Any], number: int, synchronize: Callable[[], None]) -> float:
    synchronize()
    start = time.perf_counter()
    for _ in range(number):
        call()
    synchronize()
    return (time.perf_counter() - start) / number


def interleaved(calls: list[Callable[[], Any]], device: torch.device, min_run_time: float) -> list[list[float]]:
    """Seconds per call of each of ``calls``, one figure per block, in rounds that time one block of each in turn:
    at least ``MIN_BLOCKS`` rounds, more until each call had ``min_run_time`` seconds, and none past
    ``OVERRUN_FACTOR`` times that or ``OVERRUN_SECONDS`` (then fewer rounds, which the judge refuses)."""
    synchronize = _synchronizer(device)
    with torch.no_grad():
        for call in calls:
            for _ in range(WARMUP_CALLS):  # first calls allocate, pick algorithms, fill caches
                call()
        # Calls per block from the median of a few single calls: one call caught in a busy moment (or a quiet one)
        # would size every block of the run by it.
        one_call = [statistics.median(_seconds_per_call(call, 1, synchronize) for _ in range(5)) for call in calls]
        numbers = [max(1, int(BLOCK_SECONDS / max(seconds, 1e-9))) for seconds in one_call]
        blocks: list[list[float]] = [[] for _ in calls]
        start = time.perf_counter()
        planned = start + min_run_time * len(calls)
        overrun = start + max(min_run_time * len(calls) * OVERRUN_FACTOR, OVERRUN_SECONDS)
        while len(blocks[0]) < MAX_BLOCKS:
            now = time.perf_counter()
            if (len(blocks[0]) >= MIN_BLOCKS and now >= planned) or (len(blocks[0]) >= 2 and now >= overrun):
                break
            for call, number, figures in zip(calls, numbers, blocks, strict=True):
                figures.append(_seconds_per_call(call, number, synchronize))
    return blocks


@contextlib.contextmanager
def _cpu_threads(threads: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure(
    load: Callable[[], Any],
    run: Callable[[Any], Any],
    eager: Callable[[], Any],
    *,
    package: Path,
    device: torch.device,
    min_run_time: float,
    threads: int | None = None,
) -> Figures:
    """``load()`` loads the package (timed and measured for memory), ``run(runner)`` calls it once, ``eager()``
    calls the model; the three sides are then timed in interleaved blocks (:func:`interleaved`), on ``threads``
    CPU threads if given (torch's intra-op threads: eager, the calibration and the package's ATen calls; the
    package's own kernels have their count compiled in)."""
    with _cpu_threads(threads):
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        else:
            before = _rss_bytes()
        start = time.perf_counter()
        runner = load()
        _synchronizer(device)()
        load_seconds = time.perf_counter() - start
        load_memory = (torch.cuda.max_memory_allocated(device) - before) if cuda else max(_rss_bytes() - before, 0)
        run_memory = _run_memory(runner, run, device) if cuda else None
        package_times, eager_times, calibration_times = interleaved(
            [lambda: run(runner), eager, calibration_workload(device)], device, min_run_time
        )
        return Figures(
            package=package_times,
            eager=eager_times,
            calibration=calibration_times,
            load_seconds=load_seconds,
            load_memory_bytes=load_memory,
            run_memory_bytes=run_memory,
            package_bytes=package.stat().st_size,
            device=str(device),
            threads=threads,
        )


def _run_memory(runner: Any, run: Callable[[Any], Any], device: torch.device) -> int:
    """Peak CUDA memory one call allocates, after a first call that may allocate what later calls reuse."""
    with torch.no_grad():
        run(runner)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        run(runner)
        torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - before)


def machine(device: torch.device) -> str:
    """The baselines' key: what the timings depend on that a commit does not change (the GPU, or the CPU model and
    its core count; the benchmark plugin adds the CPU threads it timed on)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda: {torch.cuda.get_device_name(index)} (sm_{major}{minor})"
    from pytest_aoti.shared.environment import cpu_description

    return f"cpu: {cpu_description()[0]} x{os.cpu_count()}"
