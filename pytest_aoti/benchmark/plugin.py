"""The benchmark feature as a pytest plugin: its ``--aoti-benchmark*`` options and ini keys, the ``aoti_benchmark``
fixture (it builds through ``aoti_compile``), baselines in ``__aoti_benchmarks__/<test file stem>.json`` beside the
tests (:mod:`.baselines`), the fail rule (:mod:`.rule`), the device lock under xdist, JUnit properties, the summary
table and ``--aoti-benchmark-json``. Importing this module does not import torch.

Under xdist, in runs with benchmarks only, a measurement holds an exclusive lock that every worker's build takes
shared (this plugin wraps ``pytest_aoti_build``): no compile runs while a package is timed, and compiles run in
parallel otherwise. Without ``--aoti-benchmark`` nothing is wrapped and no lock file exists. Tests that do not
compile still run beside a measurement: the calibration, timed beside the package, absorbs what they do to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_aoti import roles
from pytest_aoti.benchmark import records
from pytest_aoti.benchmark.errors import AOTIBenchmarkError, BaselineError
from pytest_aoti.core.errors import AOTITypeError, AOTIValueError
from pytest_aoti.settings import add_option, option_group, option_value

if TYPE_CHECKING:
    import torch

    from pytest_aoti.benchmark.rule import Judgment
    from pytest_aoti.benchmark.timing import Figures
    from pytest_aoti.core.compiler import CompiledModel
    from pytest_aoti.hookspecs import BuildRequest, ReportProperty

BENCHMARK_DIR = "__aoti_benchmarks__"
SKIP_REASON = "aoti_benchmark: benchmarks run only with --aoti-benchmark"
DEFAULT_KEPT_RUNS = 5
MAX_KEPT_RUNS = 100
NOT_JUDGED = "not judged"  # rule.Verdict.NOT_JUDGED's value (rule imports torch; the summary runs without it)
MIN_KEPT_RUNS = 2  # the spread between runs needs two (rule.MIN_BASELINE_RUNS, not imported: it imports torch)

BENCHMARK_DESC = "run tests that use aoti_benchmark (skipped otherwise) and judge them against their stored baselines"
UPDATE_DESC = (
    "add this run to the baselines of the benchmarks that run (for this machine; the last --aoti-benchmark-runs "
    "runs are kept, each its own pytest run)"
)
TOLERANCE_DESC = (
    "how much slower than its baseline a benchmark's calibration-normalized latency may be, as a fraction, before "
    "the spread between baseline runs is asked (default 0.1: a tenth)"
)
MIN_TIME_DESC = "seconds each side (package, eager, calibration) of a benchmark is timed for at least (default 1)"
RUNS_DESC = f"runs per machine a baseline keeps; a benchmark is judged against them (default {DEFAULT_KEPT_RUNS})"
JSON_DESC = "write every benchmark's figures and judgment to this JSON file (for dashboards)"
CPU_THREADS_DESC = (
    "threads a CPU benchmark is timed on (default 1): its package is compiled with cpp.threads at that count, and "
    "eager and the calibration run on as many; 'all' times the package as compiled, on all of torch's threads; a "
    "test that compiles with its own cpp.threads is timed on that many"
)
MAX_CPU_THREADS = 1024


@dataclass(frozen=True)
class BenchmarkSettings:
    enabled: bool = False
    update: bool = False
    tolerance: float = 0.1
    min_time: float = 1.0
    kept_runs: int = DEFAULT_KEPT_RUNS
    json_path: Path | None = None
    # CPU benchmarks timed on this many threads (None: the package as compiled). On a shared CPU runner a
    # multi-threaded package's blocks wait for descheduled OpenMP peers; one thread slows in step with the calibration.
    cpu_threads: int | None = 1
    run_id: str = ""  # this pytest run's, shared by its xdist workers: a run replaces its own earlier record


settings_key = pytest.StashKey[BenchmarkSettings]()
lock_key = pytest.StashKey["DeviceLock"]()
names_key = pytest.StashKey[set[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "benchmark", BENCHMARK_DESC, flag=True, ini_type="bool", default=False)
    # An action, not a setting: no ini twin, which would rewrite the baselines on every run.
    option_group(parser).addoption("--aoti-benchmark-update", action="store_true", default=False, help=UPDATE_DESC)
    for name, help_text, default in (
        ("tolerance", TOLERANCE_DESC, "0.1"),
        ("min-time", MIN_TIME_DESC, "1"),
        ("runs", RUNS_DESC, str(DEFAULT_KEPT_RUNS)),
        ("json", JSON_DESC, ""),
        ("cpu-threads", CPU_THREADS_DESC, "1"),
    ):
        add_option(parser, f"benchmark-{name}", help_text, default=default, metavar=name.upper())


def _value(config: pytest.Config, name: str) -> tuple[str, str, bool]:
    """The option's text, where it came from (for errors), and whether from the command line."""
    dest = f"aoti_benchmark_{name.replace('-', '_')}"
    raw, source = option_value(config, dest)
    return str(raw), source, config.getoption(dest) is not None


def _number(config: pytest.Config, name: str, what: str, *, most: float, zero_ok: bool, whole: bool = False) -> float:
    raw, source, _ = _value(config, name)
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        raise pytest.UsageError(f"{source}: expected {what}, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok) or value > most:
        raise pytest.UsageError(f"{source}: expected {what} of at most {most:g}, got {raw!r}")
    return value


def _json_target(config: pytest.Config) -> Path | None:
    """``--aoti-benchmark-json``: a path from the command line is relative to where pytest started, from the ini
    file to the rootdir. A target that cannot be written is a usage error now, not a traceback after the tests."""
    from pytest_aoti.shared.report_files import report_target

    raw, source, from_cli = _value(config, "json")
    if not raw.strip():
        return None
    invoked_in = config.invocation_params.dir
    path, problem = report_target(raw, invoked_in if from_cli else config.rootpath, "aoti_benchmark_json",
                                  lambda dest: config.getoption(dest, None), invoked_in, "a JSON file")  # fmt: skip
    if problem is not None:
        raise pytest.UsageError(f"{source}: {problem}")
    return path


def _kept_runs(config: pytest.Config) -> int:
    kept = int(_number(config, "runs", "a whole number of runs", most=MAX_KEPT_RUNS, zero_ok=False, whole=True))
    if kept < MIN_KEPT_RUNS:
        raise pytest.UsageError(
            f"{_value(config, 'runs')[1]}: a baseline keeps at least {MIN_KEPT_RUNS} runs (their spread is what a "
            f"run is judged against), got {kept}"
        )
    return kept


def _cpu_threads(config: pytest.Config) -> int | None:
    raw, source, _ = _value(config, "cpu-threads")
    text = raw.strip().lower() or "1"  # an empty ini value: the default
    if text == "all":
        return None
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_CPU_THREADS):
        raise pytest.UsageError(f"{source}: expected a whole number of threads from 1 to {MAX_CPU_THREADS}, or 'all', "
                                f"got {raw!r}")  # fmt: skip
    return int(text)


def resolve(config: pytest.Config) -> BenchmarkSettings:
    asked_to_update = bool(config.getoption("aoti_benchmark_update"))
    # A debug rerun (or its reproduce line, pasted) times a debug build: it never records a baseline run.
    update = asked_to_update and not roles.is_debug_stage(config)
    enabled = bool(option_value(config, "aoti_benchmark")[0]) or asked_to_update
    run_id = roles.worker_input(config).get("testrunuid")
    return BenchmarkSettings(
        enabled=enabled,
        update=update,
        tolerance=_number(config, "tolerance", "a fraction >= 0 (0.1 = 10 %)", most=100, zero_ok=True),
        min_time=_number(config, "min-time", "seconds above 0", most=3600, zero_ok=False),
        kept_runs=_kept_runs(config),
        json_path=_json_target(config),
        cpu_threads=_cpu_threads(config),
        run_id=str(run_id) if run_id else uuid.uuid4().hex,
    )


def pytest_aoti_report_properties(config: pytest.Config) -> list[ReportProperty]:
    return list(records.PROPERTIES)


def pytest_configure(config: pytest.Config) -> None:
    settings = resolve(config)
    config.stash[settings_key] = settings
    if not settings.enabled:
        return
    if roles.is_worker(config):
        lock = DeviceLock(Path(str(config.getoption("basetemp"))).parent / "aoti-benchmark.lock")
        config.stash[lock_key] = lock
        config.pluginmanager.register(lock, "aoti-benchmark-lock")
    elif roles.writes_user_reports(config):
        config.pluginmanager.register(BenchmarkTracker(config), "aoti-benchmark-tracker")


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash[settings_key]
    if not settings.enabled:
        if settings.json_path is not None and config.getoption("aoti_benchmark_json") is not None:
            return "aoti benchmarks: off; --aoti-benchmark-json writes nothing without --aoti-benchmark"
        return None
    action = "recording baselines" if settings.update else "judging against baselines"
    threads = "all threads" if settings.cpu_threads is None else f"{_threads(settings.cpu_threads)}"
    return (
        f"aoti benchmarks: {action} (tolerance {settings.tolerance:g}, {settings.kept_runs} runs kept per machine, "
        f"min time {settings.min_time:g} s per side, CPU timed on {threads})"
    )


def _threads(count: int) -> str:
    return f"{count} thread" + ("" if count == 1 else "s")


@dataclass(eq=False)  # a plugin object: pluggy keeps plugins in sets, by identity
class DeviceLock:
    """One measurement at a time on this host, among the xdist workers of a run with benchmarks: builds take the
    lock shared, a measurement exclusive (compiles and kernel launches share the host's CPUs, whatever the device)."""

    path: Path

    @contextlib.contextmanager
    def held(self, *, exclusive: bool) -> Iterator[None]:
        with open(self.path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @pytest.hookimpl(wrapper=True)
    def pytest_aoti_build(
        self, config: pytest.Config, request: BuildRequest, build: Callable[[], CompiledModel]
    ) -> Generator[None, Any, Any]:
        with self.held(exclusive=False):
            return (yield)


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


@dataclass(frozen=True)
class BenchmarkResult:
    """What ``aoti_benchmark`` returns: the figures, how they compare with the stored baseline, and where that is."""

    figures: Figures
    judgment: Judgment
    baseline_file: Path
    name: str


def _baseline_file(item: pytest.Item) -> Path:
    return item.path.parent / BENCHMARK_DIR / f"{item.path.stem}.json"


def _test_id(item: pytest.Item) -> str:
    """The test's id within its file: the name of its first unnamed benchmark."""
    return item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name


def _benchmark_name(item: pytest.Item, name: Any) -> str:
    """The baseline entry of this call: the test's id for its first unnamed call, ``<id> [call N]`` for the Nth,
    ``<id> [name]`` for a named one. Two calls of one test never share an entry."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise AOTITypeError(f"aoti_benchmark name: expected a non-empty string, got {type(name).__name__} {name!r}")
    used = item.stash.setdefault(names_key, set())
    test_id = _test_id(item)
    if name is not None:
        benchmark = f"{test_id} [{name}]"
    else:
        number = len(used) + 1  # the Nth call; past any name= that reads like an unnamed call's
        while f"{test_id} [call {number}]" in used:
            number += 1
        benchmark = test_id if not used else f"{test_id} [call {number}]"
    if benchmark in used:
        raise AOTIValueError(
            f"aoti_benchmark: {benchmark!r} is benchmarked twice in this test; give each call its name="
        )
    used.add(benchmark)
    return benchmark


@pytest.fixture
def aoti_benchmark(
    request: pytest.FixtureRequest,
    aoti_compile: Callable[..., CompiledModel],
    aoti_device: torch.device,
    tmp_path: Path,
) -> Callable[..., BenchmarkResult]:
    """``aoti_benchmark(model, args, kwargs=None, *, name=None, tolerance=None, min_run_time=None, **compile
    options)``: compile through ``aoti_compile`` (its cache and options), time the package, eager and a calibration
    workload in interleaved blocks, and judge the package against this machine's baseline runs. Skipped unless
    ``--aoti-benchmark``; ``--aoti-benchmark-update`` records a run. ``name`` tells several calls of one test
    apart (unnamed, they are numbered)."""
    settings = request.config.stash[settings_key]
    if not settings.enabled:
        pytest.skip(SKIP_REASON)
    item = request.node

    def bench(
        model: Any,
        args: Any,
        kwargs: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        tolerance: float | None = None,
        min_run_time: float | None = None,
        **options: Any,
    ) -> BenchmarkResult:
        __tracebackhide__ = True
        from pytest_aoti.core.compiler import tolerance_value

        benchmark = _benchmark_name(item, name)
        allowed = tolerance_value(tolerance, "aoti_benchmark tolerance")
        own_time = tolerance_value(min_run_time, "aoti_benchmark min_run_time")
        if own_time == 0:  # not "the default": a measurement of no time judges nothing (--aoti-benchmark-min-time too)
            raise AOTIValueError("aoti_benchmark min_run_time: expected seconds above 0, got 0")
        run_time = settings.min_time if own_time is None else own_time
        threads = _timed_threads(settings.cpu_threads, aoti_device, options)
        compiled = aoti_compile(model, args, kwargs, **options)
        tolerance_used = settings.tolerance if allowed is None else allowed
        figures = _measured_until_still(
            lambda: _measure(request.config, compiled, model, args, kwargs, tmp_path, run_time, threads),
            tolerance_used,
        )
        judgment = _against_baseline(item, benchmark, figures, compiled, tolerance_used, run_time)
        return _judged(item, benchmark, figures, judgment)

    return bench


def _timed_threads(asked: int | None, device: torch.device, options: dict[str, Any]) -> int | None:
    """The CPU threads a benchmark is timed on, with ``options``' compile configs set to match: the package as
    compiled but for its thread count (CPU_THREADS_DESC). A ``cpp.threads`` the test compiles with itself is the
    package it asked for: that count is timed. None: torch's own threads, the package as compiled."""
    configs = options.get("inductor_configs")
    if device.type != "cpu" or asked is None or not isinstance(configs, dict | None):
        return None  # not a dict: aoti_compile names the mistake
    own = (configs or {}).get("cpp.threads")
    if isinstance(own, int) and not isinstance(own, bool) and own >= 1:
        return own
    options["inductor_configs"] = {**(configs or {}), "cpp.threads": asked}
    return asked


def _measured_until_still(measure: Callable[[], Figures], tolerance: float) -> Figures:
    """A measurement, taken once more if the machine changed under it (the calibration moved within the run), so
    that a burst of other work on a shared runner costs a second measurement, not a wider judgment. Twice at most: of
    two that both moved, the one whose calibration moved less (with enough blocks) is judged, as a disturbed run
    (rule.disturbance)."""
    import dataclasses

    from pytest_aoti.benchmark import rule, timing

    def still(figures: Figures) -> bool:
        # Too few blocks is not cured by measuring again: the first measurement already ran to its time limit.
        return len(figures.calibration) < timing.MIN_BLOCKS or not rule.moved_within(figures.calibration, tolerance)

    def drift(figures: Figures) -> float:
        ratio = rule.calibration_drift(figures.calibration)
        return max(ratio, 1 / ratio)

    first = measure()
    if still(first):
        return first
    second = measure()
    steadier = second if len(second.calibration) >= timing.MIN_BLOCKS and drift(second) <= drift(first) else first
    return dataclasses.replace(steadier, attempts=2)


def _measure(
    config: pytest.Config,
    compiled: CompiledModel,
    model: Any,
    args: Any,
    kwargs: dict[str, Any] | None,
    tmp_path: Path,
    min_run_time: float,
    threads: int | None,
) -> Figures:
    """The package (loaded afresh, its load timed), eager and the calibration, timed under the device lock (on
    ``threads`` CPU threads, if given)."""
    import torch.utils._pytree as pytree

    from pytest_aoti.benchmark import timing
    from pytest_aoti.core.compiler import as_module, load_package

    device = compiled.device
    module = as_module(model).to(device).eval()
    run_args, run_kwargs = pytree.tree_map(lambda leaf: leaf.to(device) if hasattr(leaf, "to") else leaf,
                                           (tuple(args), dict(kwargs or {})))  # fmt: skip
    compiled.release()  # its runner is not the one timed: the measured load is
    lock = config.stash.get(lock_key, None)
    with lock.held(exclusive=True) if lock is not None else contextlib.nullcontext():
        return timing.measure(
            lambda: load_package(compiled.package_path, device, extract_dir=tmp_path / "aoti-bench-load"),
            lambda runner: runner(*run_args, **run_kwargs),
            lambda: module(*run_args, **run_kwargs),
            package=compiled.package_path,
            device=device,
            min_run_time=min_run_time,
            threads=threads,
        )


def _package_key(compiled: CompiledModel) -> str:
    from pytest_aoti.core.cache_key import package_key
    from pytest_aoti.core.compiler import validate_inductor_configs

    return package_key(compiled.exported_program, validate_inductor_configs(compiled.inductor_configs), compiled.device)


def _against_baseline(
    item: pytest.Item, benchmark: str, figures: Figures, compiled: CompiledModel, tolerance: float, run_time: float
) -> Judgment:
    """Record this run (``--aoti-benchmark-update``) or judge it against this machine's recorded runs; a baseline
    of another machine only is reported, not compared."""
    __tracebackhide__ = True
    import torch

    from pytest_aoti.benchmark import rule, timing
    from pytest_aoti.benchmark.baselines import Baselines

    settings = item.config.stash[settings_key]
    run = rule.Run.of(figures, torch=torch.__version__, package_key=_package_key(compiled), run_id=settings.run_id)
    timed_on = "" if figures.threads is None else f", {_threads(figures.threads)}"
    path, machine = _baseline_file(item), timing.machine(compiled.device) + timed_on
    unusable: str | None = None
    try:
        if settings.update:
            with _file_lock(path):
                return _recorded(Baselines.read(path), benchmark, machine, run, tolerance, run_time, settings.kept_runs)
        # Judging only reads: no lock file, nothing written (a read-only checkout judges). Writers replace the file
        # whole (Baselines.write), so a read never sees half of one.
        baselines = Baselines.read(path)
        runs = baselines.runs(benchmark, machine)
    except BaselineError as error:
        unusable = str(error)
    if unusable is not None:  # outside the except: the failure is one line, not a chain of two
        _fail(unusable)
    others = baselines.others(benchmark, machine)
    if not runs and others:
        text = f"not judged: baselines only for other machines ({', '.join(others)}); this is {machine}"
        return rule.Judgment(rule.Verdict.NOT_JUDGED, text)
    try:
        judgment = rule.judge(run, runs, tolerance, run_time)
    except ImportError:
        _fail("aoti_benchmark: judging against a baseline needs SciPy: pip install scipy (or pytest-aoti[benchmark])")
    from pytest_aoti.shared.figure_builders import benchmark_times
    from pytest_aoti.shared.figure_data import attach_figure_data

    # The picture of this judgment (block times now against each baseline run's), drawn by the pictures plugin.
    attach_figure_data(item, benchmark_times(benchmark, run.package, [old.package for old in runs], judgment.text))
    return judgment


def _recorded(
    baselines: Any, benchmark: str, machine: str, run: Any, tolerance: float, run_time: float, keep: int
) -> Judgment:
    from pytest_aoti.benchmark import rule

    reason = rule.unrecordable(run, tolerance, run_time)
    if reason is not None:
        return rule.Judgment(rule.Verdict.NOT_JUDGED, f"not recorded: {reason}; record again")
    kept = baselines.add(benchmark, machine, run, keep)
    baselines.write()
    return rule.Judgment(
        rule.Verdict.RECORDED,
        f"baseline run recorded in {baselines.path} ({kept} of {keep} kept for {machine})",
        baseline_runs=kept,
    )


def _fail(message: str) -> NoReturn:
    __tracebackhide__ = True
    raise AOTIBenchmarkError(message)  # its failure kind: a debug rerun times nothing


def _judged(item: pytest.Item, benchmark: str, figures: Figures, judgment: Judgment) -> BenchmarkResult:
    """The measurement recorded (JUnit, report section); a benchmark slower than its baseline fails the test."""
    __tracebackhide__ = True
    from pytest_aoti.benchmark.rule import Verdict

    record = _record(item, benchmark, figures, judgment)
    item.add_report_section("call", f"aoti benchmark {benchmark}", f"{_describe(record)}\n{judgment.text}")
    if judgment.verdict is Verdict.SLOWER:
        _fail(f"aoti_benchmark: {benchmark}: slower than the baseline: {judgment.text}")
    return BenchmarkResult(figures, judgment, _baseline_file(item), benchmark)


def _record(item: pytest.Item, benchmark: str, figures: Figures, judgment: Judgment) -> dict[str, Any]:
    record = {
        "test": item.nodeid,
        "benchmark": benchmark,
        "device": figures.device,
        "threads": figures.threads,
        "attempts": figures.attempts,
        "median_s": figures.median,
        "fastest_s": min(figures.package),
        "iqr_s": figures.iqr,
        "blocks": len(figures.package),
        "speedup_vs_eager": figures.speedup,
        "load_s": figures.load_seconds,
        "load_memory_bytes": figures.load_memory_bytes,
        "run_memory_bytes": figures.run_memory_bytes,
        "package_bytes": figures.package_bytes,
        "baseline": judgment.verdict.value,
        "vs_baseline": judgment.normalized,
        "package_vs_baseline": judgment.package,
        "eager_vs_baseline": judgment.eager,
        "calibration_vs_baseline": judgment.calibration,
        "spread_bound": judgment.bound,
        "fails_above": judgment.limit,  # the tolerance or the spread bound, widened on a machine that moved
        "passes_at_most": judgment.passes_at_most,  # below fails_above for a disturbed run: between, not judged
        "baseline_runs": judgment.baseline_runs,
        "comparison": judgment.text,
    }
    normalized = _shown_ratio(record)
    # A test's first (unnamed) benchmark gives the plain names; any other call names its benchmark in each, so that
    # two calls of one test give JUnit (and the page) two sets of figures, not one name twice.
    of = "" if benchmark == _test_id(item) else f" ({benchmark})"
    item.user_properties.extend(
        [
            (records.LATENCY_PROPERTY + of, f"{figures.median * 1e3:.4g}"),
            (records.LATENCY_IQR_PROPERTY + of, f"{figures.iqr * 1e3:.4g}"),
            (records.RATIO_PROPERTY + of, f"{normalized:.3f}" if normalized is not None else judgment.verdict.value),
            (records.SPEEDUP_PROPERTY + of, f"{figures.speedup:.3f}"),
            (records.LOAD_PROPERTY + of, f"{figures.load_seconds * 1e3:.4g}"),
            (records.MEMORY_PROPERTY + of, _memory_cell(record)),
            (records.RECORD_PROPERTY, json.dumps(record)),  # carries its benchmark's name
        ]
    )
    return record


def _describe(record: dict[str, Any]) -> str:
    again = " (measured twice: the machine changed under the first measurement)" if record["attempts"] > 1 else ""
    threads = f", timed on {_threads(record['threads'])}" if record["threads"] is not None else ""
    return (
        f"median {record['median_s'] * 1e3:.3g} ms (IQR {record['iqr_s'] * 1e3:.2g} ms, {record['blocks']} blocks), "
        f"{record['speedup_vs_eager']:.2f}x eager, load {record['load_s'] * 1e3:.3g} ms, package "
        f"{record['package_bytes'] / 2**20:.1f} MiB{threads}{again}"
    )


@dataclass(eq=False)  # a plugin object: pluggy keeps plugins in sets, by identity
class BenchmarkTracker:
    """In the session the user started, in runs with benchmarks: the summary table and ``--aoti-benchmark-json``."""

    config: pytest.Config
    records: list[dict[str, Any]] = field(default_factory=list)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == records.RECORD_PROPERTY:
                self.records.append({**json.loads(str(value)), "outcome": report.outcome})

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records:
            return
        terminalreporter.write_sep("=", "aoti benchmarks")
        for line in summary_table(self.records):
            terminalreporter.write_line(line)
        for record in self.records:
            if record["baseline"] in ("not judged", "recorded"):
                terminalreporter.write_line(f"{record['benchmark']}: {record['comparison']}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        target = self.config.stash[settings_key].json_path
        if target is None:
            return
        from pytest_aoti.shared.report_files import write_report

        problem = write_report(target, json.dumps({"benchmarks": self.records}, indent=1) + "\n")
        if problem is not None:  # checked at start; the disk may have changed since
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"--aoti-benchmark-json: {problem}", red=True)
            if session.exitstatus == pytest.ExitCode.OK:  # the run does not pass without its report
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def _shown_ratio(record: dict[str, Any]) -> float | None:
    """The normalized ratio to show (summary, JUnit), or None. A run that was not judged shows none: one read off a
    machine that moved past judging (0.01x when the calibration ran 100x slower) would read as a speed-up on a
    dashboard. The JSON record keeps the figures."""
    return record["vs_baseline"] if record["baseline"] != NOT_JUDGED else None


def summary_table(records: list[dict[str, Any]]) -> list[str]:
    rows = [("benchmark", "latency", "vs baseline", "vs eager", "load", "memory")]
    for record in records:
        ratio = _shown_ratio(record)
        rows.append(
            (
                f"{record['test'].split('::', 1)[0]}::{record['benchmark']}",
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
