"""Latency, load time and memory of a compiled package, held against a stored baseline.

Timing is ``torch.utils.benchmark.Timer.blocked_autorange`` (its timer synchronizes CUDA), after a warm-up, on the
package's own runner (no pytest-aoti checks in the timed call) and on eager. A baseline is the list of per-block times
of an earlier run on the same machine; a run fails only when its median is slower than the baseline's by more than the
tolerance **and** a one-sided Mann-Whitney U test (SciPy) says its times are larger than the baseline's times scaled
by ``1 + tolerance``: noise on a busy machine moves a median; it rarely shifts every block.

Baselines are kept per machine (device, GPU name and compute capability, or CPU model and core count): another
machine's baseline is reported, never compared. Torch version and package key are recorded and shown, not part of the
key: a torch upgrade or a lost fusion that makes the package slower is what a baseline is there to catch.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from pytest_aoti.snapshots import golden as snapshots

FORMAT = "pytest-aoti benchmarks 1"
SIGNIFICANCE = 0.01
BLOCK_SECONDS = 0.01
MIN_BLOCKS = 10
MAX_BLOCKS = 500


@dataclass(frozen=True)
class Figures:
    """One benchmarked package: seconds per call (per Timer block), and what loading and running it cost."""

    times: list[float]
    eager_times: list[float]
    load_seconds: float
    load_memory_bytes: int | None  # CUDA: peak allocated by the load; CPU: resident-set growth
    run_memory_bytes: int | None  # CUDA: peak allocated by one call; CPU: not measured (None)
    package_bytes: int
    device: str

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def iqr(self) -> float:
        if len(self.times) < 2:
            return 0.0
        quartiles = statistics.quantiles(self.times, n=4)
        return quartiles[2] - quartiles[0]

    @property
    def speedup(self) -> float:
        return statistics.median(self.eager_times) / self.median


def _rss_bytes() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _timed(call: Callable[[], Any], min_run_time: float, clock: str) -> list[float]:
    """Seconds per call, one figure per block of calls (each block ~10 ms): at least ``MIN_BLOCKS`` blocks, more
    until ``min_run_time`` has passed. Enough blocks for the significance test to be able to say anything: torch's
    ``blocked_autorange`` gave 3-5 blocks on a GPU, too few for any test at 1 %."""
    from torch.utils.benchmark import Timer

    with torch.no_grad():
        for _ in range(3):  # warm-up: first calls allocate, pick algorithms, fill caches
            call()
        # "cpu": this process's CPU seconds (all its threads), which other processes on a busy machine do not
        # inflate the way they inflate wall time; blind to time spent waiting (sleep, I/O, the GPU).
        if clock == "cpu":
            timer = Timer(stmt="call()", globals={"call": call}, timer=time.process_time)
        else:
            timer = Timer(stmt="call()", globals={"call": call})  # its default timer synchronizes CUDA
        one = timer.timeit(1).mean
        number = max(1, int(BLOCK_SECONDS / max(one, 1e-9)))
        times: list[float] = []
        deadline = time.perf_counter() + min_run_time
        while len(times) < MAX_BLOCKS and (len(times) < MIN_BLOCKS or time.perf_counter() < deadline):
            times.append(float(timer.timeit(number).mean))
    return times


def measure(
    load: Callable[[], Any],
    run: Callable[[Any], Any],
    eager: Callable[[], Any],
    *,
    package: Path,
    device: torch.device,
    min_run_time: float,
    clock: str = "wall",
) -> Figures:
    """``load()`` loads the package (timed and measured for memory), ``run(runner)`` calls it once, ``eager()``
    calls the model. ``clock``: ``wall`` (CUDA-synchronized wall time) or ``cpu`` (this process's CPU time)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = _rss_bytes()
    start = time.perf_counter()
    runner = load()
    if cuda:
        torch.cuda.synchronize(device)
    load_seconds = time.perf_counter() - start
    load_memory = (torch.cuda.max_memory_allocated(device) - before) if cuda else max(_rss_bytes() - before, 0)
    run_memory = None
    if cuda:
        with torch.no_grad():
            run(runner)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with torch.no_grad():
            run(runner)
        torch.cuda.synchronize(device)
        run_memory = torch.cuda.max_memory_allocated(device) - before
    times = _timed(lambda: run(runner), min_run_time, clock)
    eager_times = _timed(eager, min_run_time, clock)
    return Figures(
        times=times,
        eager_times=eager_times,
        load_seconds=load_seconds,
        load_memory_bytes=load_memory,
        run_memory_bytes=run_memory,
        package_bytes=package.stat().st_size,
        device=str(device),
    )


def machine(device: torch.device) -> str:
    """The baseline key: what the timings depend on that a commit does not change."""
    if device.type == "cuda":
        env = snapshots.environment("cuda")
        return f"cuda: {env['gpu']}"
    cpu, _ = snapshots.cpu_description()
    return f"cpu: {cpu} x{os.cpu_count()}"


@dataclass(frozen=True)
class Comparison:
    """How this run compares with its stored baseline."""

    status: str  # "no baseline", "other machine", "ok", "slower"
    ratio: float | None = None  # this median / baseline median
    p_value: float | None = None
    text: str = ""


def compare(
    figures: Figures, baseline: dict[str, Any] | None, tolerance: float, package_key: str | None = None
) -> Comparison:
    if baseline is None:
        return Comparison("no baseline", text="no baseline for this machine (record one with --aoti-benchmark-update)")
    old_times = [float(t) for t in baseline["times"]]
    ratio = figures.median / statistics.median(old_times)
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:
        raise RuntimeError(
            "comparing with a benchmark baseline needs SciPy's Mann-Whitney U test: pip install scipy "
            "(or pytest-aoti[benchmark])"
        ) from None
    # H0: this run is at most `tolerance` slower. Its times against the baseline's stretched by the tolerance.
    stretched = [t * (1 + tolerance) for t in old_times]
    p_value = float(mannwhitneyu(figures.times, stretched, alternative="greater").pvalue)
    slower = ratio > 1 + tolerance and p_value < SIGNIFICANCE
    text = (
        f"{ratio:.2f}x the baseline's median ({_ms(figures.median)} vs {_ms(statistics.median(old_times))}; "
        f"tolerance {tolerance:.0%}, Mann-Whitney p={p_value:.2g})"
    )
    changed = []
    if baseline.get("torch") and baseline["torch"] != torch.__version__:
        changed.append(f"torch {baseline.get('torch')} → {torch.__version__}")
    if baseline.get("package") and package_key and baseline["package"] != package_key:
        changed.append("the package changed (model, weights or compile options)")
    if changed:
        text += "; since the baseline: " + ", ".join(changed)
    return Comparison("slower" if slower else "ok", ratio, p_value, text)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def describe(figures: Figures) -> str:
    return (
        f"median {_ms(figures.median)} (IQR {_ms(figures.iqr)}, {len(figures.times)} blocks), "
        f"{figures.speedup:.2f}x eager, load {_ms(figures.load_seconds)}, package "
        f"{figures.package_bytes / 2**20:.1f} MiB"
    )


@dataclass
class Baselines:
    """A reviewable JSON file of baselines for one test file: ``{test id: {machine: record}}``."""

    path: Path
    tests: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Baselines:
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise RuntimeError(f"{path}: not a readable benchmark baseline file ({error})") from None
        if data.get("format") != FORMAT:
            raise RuntimeError(f"{path}: not a pytest-aoti benchmark baseline file (format {data.get('format')!r})")
        return cls(path, data["tests"])

    def get(self, test_id: str, machine_key: str) -> dict[str, Any] | None:
        return self.tests.get(test_id, {}).get(machine_key)

    def others(self, test_id: str, machine_key: str) -> list[str]:
        return sorted(key for key in self.tests.get(test_id, {}) if key != machine_key)

    def put(self, test_id: str, machine_key: str, figures: Figures, package_key: str | None) -> None:
        record = {key: value for key, value in asdict(figures).items() if key != "eager_times"}
        record.update(median=figures.median, iqr=figures.iqr, torch=torch.__version__, package=package_key)
        self.tests.setdefault(test_id, {})[machine_key] = record

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".partial-{os.getpid()}-{self.path.name}")
        partial.write_text(json.dumps({"format": FORMAT, "tests": self.tests}, indent=1, sort_keys=True) + "\n")
        os.replace(partial, self.path)
