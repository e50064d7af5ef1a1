"""pytest glue of package benchmarks (:mod:`pytest_aoti.benchmark.timing`): the ``aoti_benchmark`` fixture, baselines in
``__aoti_benchmarks__/<test file stem>.json`` beside the tests, the device lock under xdist, JUnit properties, the
summary table and ``--aoti-benchmark-json``. Importing this module does not import torch.

Under xdist, a measurement holds an exclusive lock that every worker's compile (in the aoti fixtures) takes shared:
no compile runs while a package is timed, and compiles run in parallel otherwise. Tests that do not compile still run
beside a measurement; a noisy neighbour shifts some blocks, which the significance test tolerates.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.settings import settings_key

if TYPE_CHECKING:
    import torch

    from pytest_aoti.benchmark.timing import Comparison, Figures

BENCHMARK_DIR = "__aoti_benchmarks__"
RECORD_PROPERTY = "aoti_benchmark"
SKIP_REASON = "aoti_benchmark: benchmarks run only with --aoti-benchmark"


def _lock_path(config: pytest.Config) -> Path | None:
    """One lock file for all xdist workers of the run (beside their base temps), None outside xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    factory = config._tmp_path_factory  # type: ignore[attr-defined]  # what the tmp_path_factory fixture returns
    return Path(factory.getbasetemp()).parent / "aoti-device.lock"


@contextlib.contextmanager
def device_lock(config: pytest.Config, *, exclusive: bool) -> Iterator[None]:
    """Shared for a compile, exclusive for a measurement; a no-op without benchmarks or outside xdist."""
    path = _lock_path(config) if config.stash[settings_key].benchmark else None
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class BenchmarkResult:
    """What ``aoti_benchmark`` returns: the figures and how they compare with the stored baseline."""

    figures: Figures
    comparison: Comparison
    baseline_file: Path


def _baseline_file(item: pytest.Item) -> Path:
    return item.path.parent / BENCHMARK_DIR / f"{item.path.stem}.json"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Workers writing baselines of tests of the same file take turns (read, update, write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        path.with_name(f".{path.name}.lock").unlink()


def _record(item: pytest.Item, figures: Figures, comparison: Comparison, package_key: str | None) -> None:
    record = {
        "test": item.nodeid,
        "device": figures.device,
        "median_s": figures.median,
        "iqr_s": figures.iqr,
        "blocks": len(figures.times),
        "speedup_vs_eager": figures.speedup,
        "load_s": figures.load_seconds,
        "load_memory_bytes": figures.load_memory_bytes,
        "run_memory_bytes": figures.run_memory_bytes,
        "package_bytes": figures.package_bytes,
        "package": package_key,
        "baseline": comparison.status,
        "vs_baseline": comparison.ratio,
        "p_value": comparison.p_value,
        "comparison": comparison.text,
    }
    item.user_properties.extend(
        [
            ("aoti_latency_ms", f"{figures.median * 1e3:.4g}"),
            ("aoti_latency_iqr_ms", f"{figures.iqr * 1e3:.4g}"),
            ("aoti_vs_baseline", f"{comparison.ratio:.3f}" if comparison.ratio is not None else comparison.status),
            ("aoti_speedup_vs_eager", f"{figures.speedup:.3f}"),
            ("aoti_load_ms", f"{figures.load_seconds * 1e3:.4g}"),
            ("aoti_memory", _memory_cell(record)),
            (RECORD_PROPERTY, json.dumps(record)),
        ]
    )


@pytest.fixture
def aoti_benchmark(
    request: pytest.FixtureRequest, aoti_device: torch.device, tmp_path: Path
) -> Callable[..., BenchmarkResult]:
    """``aoti_benchmark(model, args, kwargs=None, *, tolerance=None, min_run_time=None, **compile options)``: compile
    (with the package cache), time the package and eager, and hold the median against this machine's stored
    baseline. Skipped unless ``--aoti-benchmark``; ``--aoti-benchmark-update`` records baselines."""
    settings = request.config.stash[settings_key]
    if not settings.benchmark:
        pytest.skip(SKIP_REASON)
    from pytest_aoti.core.compiler import compile_model
    from pytest_aoti.fixtures import _seed

    _seed()  # the same random weights every run: the package hits the cache, and the baseline is of the same model
    item = request.node

    def bench(
        model: Any,
        args: Any,
        kwargs: dict[str, Any] | None = None,
        *,
        tolerance: float | None = None,
        min_run_time: float | None = None,
        **options: Any,
    ) -> BenchmarkResult:
        __tracebackhide__ = True
        from pytest_aoti.benchmark import timing as benchmark
        from pytest_aoti.core.compiler import as_module, load_package, tolerance_value
        from pytest_aoti.fixtures import _builder, _moved
        from pytest_aoti.snapshots.plugin import package_key

        allowed = tolerance_value(tolerance, "aoti_benchmark tolerance")
        allowed = settings.benchmark_tolerance if allowed is None else allowed
        run_time = tolerance_value(min_run_time, "aoti_benchmark min_run_time") or settings.benchmark_min_time
        compiled = _builder(
            compile_model, request.config, aoti_device, tmp_path / "aoti-packages", [], item, item.nodeid
        )(model, args, kwargs, **options)
        module = as_module(model).to(aoti_device).eval()
        run_args, run_kwargs = _moved(tuple(args), aoti_device), _moved(kwargs or {}, aoti_device)
        key = package_key(compiled)
        compiled.release()
        with device_lock(request.config, exclusive=True):
            figures = benchmark.measure(
                lambda: load_package(compiled.package_path, aoti_device, extract_dir=tmp_path / "aoti-bench-load"),
                lambda runner: runner(*run_args, **run_kwargs),
                lambda: module(*run_args, **run_kwargs),
                package=compiled.package_path,
                device=aoti_device,
                min_run_time=run_time,
                clock="wall" if aoti_device.type == "cuda" else settings.benchmark_clock,
            )
        return _judged(item, figures, _against_baseline(item, figures, aoti_device, key, allowed), key)

    return bench


def _judged(item: pytest.Item, figures: Figures, comparison: Comparison, key: str | None) -> BenchmarkResult:
    """The measurement recorded (JUnit, report section); a benchmark slower than its baseline fails the test."""
    __tracebackhide__ = True
    from pytest_aoti.benchmark import timing as benchmark

    _record(item, figures, comparison, key)
    item.add_report_section("call", "aoti benchmark", f"{benchmark.describe(figures)}\n{comparison.text}")
    if comparison.status == "slower":
        slower = pytest.fail.Exception(f"aoti_benchmark: slower than the baseline: {comparison.text}", pytrace=False)
        slower.aoti_failure_kind = "benchmark"  # type: ignore[attr-defined]  # a debug rerun times nothing
        raise slower
    return BenchmarkResult(figures, comparison, _baseline_file(item))


def _against_baseline(
    item: pytest.Item, figures: Figures, device: torch.device, key: str | None, tolerance: float
) -> Comparison:
    """Record this machine's baseline (``--aoti-benchmark-update``) or compare with it; a baseline of another
    machine is reported, not compared."""
    from pytest_aoti.benchmark import timing as benchmark

    path = _baseline_file(item)
    test_id = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    machine = benchmark.machine(device)
    with _file_lock(path):
        baselines = benchmark.Baselines.read(path)
        if item.config.stash[settings_key].benchmark_update:
            baselines.put(test_id, machine, figures, key)
            baselines.write()
            return benchmark.Comparison("recorded", text=f"baseline recorded in {path}")
        comparison = benchmark.compare(figures, baselines.get(test_id, machine), tolerance, key)
        others = baselines.others(test_id, machine)
        if comparison.status == "no baseline" and others:
            text = f"baselines only for other machines ({', '.join(others)}): reported, not compared"
            return benchmark.Comparison("other machine", text=text)
        return comparison


@dataclass(eq=False)  # a plugin object: pluggy keeps plugins in sets, by identity
class BenchmarkTracker:
    """In the session the user started: the summary table and ``--aoti-benchmark-json``."""

    config: pytest.Config
    records: list[dict[str, Any]] = field(default_factory=list)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == RECORD_PROPERTY:
                self.records.append({**json.loads(str(value)), "outcome": report.outcome})

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records:
            return
        terminalreporter.write_sep("=", "aoti benchmarks")
        for line in summary_table(self.records):
            terminalreporter.write_line(line)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        target = self.config.stash[settings_key].benchmark_json
        if target is None or hasattr(self.config, "workerinput"):
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"benchmarks": self.records}, indent=1) + "\n")


def summary_table(records: list[dict[str, Any]]) -> list[str]:
    rows = [("test", "latency", "vs baseline", "vs eager", "load", "memory")]
    for record in records:
        ratio = record["vs_baseline"]
        rows.append(
            (
                record["test"],
                f"{record['median_s'] * 1e3:.3g} ms ± {record['iqr_s'] * 1e3:.2g}",
                f"{ratio:.2f}x" + (" SLOWER" if record["baseline"] == "slower" else "")
                if ratio is not None
                else record["baseline"],
                f"{record['speedup_vs_eager']:.2f}x",
                f"{record['load_s'] * 1e3:.3g} ms",
                _memory_cell(record),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _memory_cell(record: dict[str, Any]) -> str:
    parts = []
    if record["load_memory_bytes"] is not None:
        parts.append(f"load +{_size(record['load_memory_bytes'])}")
    if record["run_memory_bytes"] is not None:
        parts.append(f"run {_size(record['run_memory_bytes'])}")
    return ", ".join(parts) or "n/a"
