"""pytest glue: options, markers, fixtures and hooks over pytest_aoti's plain functions.

Importing this module must not import torch: everything torch-bound is imported inside fixtures and hooks.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable, Generator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti import settings as aoti_settings
from pytest_aoti.child import REPORT_FILE_ENV, run_child, write_report
from pytest_aoti.errors import AOTICompileError, AOTIExportError
from pytest_aoti.phases import CHILD_ENV
from pytest_aoti.settings import DebugRequest, Settings

if TYPE_CHECKING:
    import torch

    from pytest_aoti.cache import PackageCache
    from pytest_aoti.compiler import CompiledModel

AOTI_FIXTURES = frozenset({"aoti_compile", "aoti_check", "aoti_device", "aoti_compile_shared"})

settings_key = pytest.StashKey[Settings]()
cache_key = pytest.StashKey["PackageCache | None"]()
summary_key = pytest.StashKey["_SummaryCollector"]()
log_dir_key = pytest.StashKey[Path]()
armed_key = pytest.StashKey[dict[str, dict[str, Any]]]()
poisoned_by_key = pytest.StashKey[str]()
worker_stats_key = pytest.StashKey[list[dict[str, float]]]()
compiled_key = pytest.StashKey[list["CompiledModel"]]()


def in_child() -> bool:
    return bool(os.environ.get(CHILD_ENV))


def pytest_addoption(parser: pytest.Parser) -> None:
    aoti_settings.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for signature_and_help in aoti_settings.MARKERS.values():
        config.addinivalue_line("markers", signature_and_help)
    settings = aoti_settings.resolve(config)
    config.stash[settings_key] = settings
    config.stash[summary_key] = _SummaryCollector()
    if not in_child():
        config.pluginmanager.register(config.stash[summary_key], "aoti-summary")
    config.stash[armed_key] = {}
    config.stash[worker_stats_key] = []
    if settings.cache_clear and not in_child() and not hasattr(config, "workerinput"):
        from pytest_aoti.cache import clear_cache_dir

        clear_cache_dir(settings.cache_dir)
    report_file = os.environ.get(REPORT_FILE_ENV)
    if in_child() and report_file:
        config.pluginmanager.register(_ChildReporter(config, report_file), "aoti-child-reporter")
    if in_child():
        _replay_hypothesis_failures_only()
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config), "aoti-xdist")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate every aoti marker's arguments up front, so a typo is a usage error, not a failure mid-run."""
    settings = config.stash[settings_key]
    for item in items:
        if item.get_closest_marker("aoti_ima") is not None:
            aoti_settings.debug_request(item, settings)
        if item.get_closest_marker("aoti_isolate") is not None:
            aoti_settings.isolate_timeout(item, settings)
        aoti_settings.marker_arguments(item, "aoti")


def _replay_hypothesis_failures_only() -> None:
    """In a debug child, Hypothesis replays the failing example from its database (the parent saved it, same cwd)
    and searches no further, so the kernel log is about the failing shape."""
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:
        return
    settings.register_profile(
        "pytest-aoti-child",
        phases=[Phase.explicit, Phase.reuse],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    settings.load_profile("pytest-aoti-child")


def pytest_report_header(config: pytest.Config) -> str:
    settings = config.stash[settings_key]
    cache = f"{settings.cache_dir} (cap {settings.cache_max_bytes >> 20} MiB)" if settings.use_cache else "off"
    return (
        f"aoti: device={settings.device}, debug={'on' if settings.debug else 'off'}, "
        f"isolate={'on' if settings.isolate else 'off'}, rerun timeout={settings.rerun_timeout:g}s, cache={cache}"
    )


class _ChildReporter:
    """In a child process: send every test report back to the parent as it is made."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config = config
        self.path = path

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        write_report(self.config, report, self.path)


# fixtures


def _session_cache(config: pytest.Config) -> PackageCache | None:
    if cache_key not in config.stash:
        settings = config.stash[settings_key]
        from pytest_aoti.cache import PackageCache

        config.stash[cache_key] = (
            PackageCache.open(settings.cache_dir, settings.cache_max_bytes) if settings.use_cache else None
        )
    return config.stash[cache_key]


def resolve_device(name: str) -> torch.device:
    """``auto``/``cpu``/``cuda``/``cuda:N`` to a torch.device; skips the test when the CUDA device is absent."""
    import torch

    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            pytest.skip(f"aoti_device {name!r}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            pytest.skip(f"aoti_device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return device


@pytest.fixture(scope="session")
def aoti_device(pytestconfig: pytest.Config) -> torch.device:
    """The device to compile for, from ``--aoti-device`` / ini ``aoti_device``."""
    return resolve_device(pytestconfig.stash[settings_key].device)


def _allow_nonfinite(item: pytest.Item) -> bool:
    return bool((aoti_settings.marker_arguments(item, "aoti") or {}).get("allow_nonfinite", False))


def _fail_on_build_error(build: Callable[..., CompiledModel]) -> Callable[..., CompiledModel]:
    """Export/compile failures fail the test with the one-line summary first and the full traceback after."""

    def wrapper(*args: Any, **kwargs: Any) -> CompiledModel:
        __tracebackhide__ = True
        try:
            return build(*args, **kwargs)
        except (AOTIExportError, AOTICompileError) as error:
            from pytest_aoti.compiler import full_traceback

            message = f"{error}\n\n{full_traceback(error.__cause__ or error)}"
        # Outside the except block, so pytest does not print the chain again before the summary line.
        pytest.fail(message, pytrace=False)

    return wrapper


def _seed() -> None:
    """Seed torch at setup so a model built with random weights is the same every run and hits the cache."""
    import torch

    torch.manual_seed(0)


def _moved(value: Any, device: torch.device) -> Any:
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda leaf: leaf.to(device) if isinstance(leaf, torch.Tensor) else leaf, value)


def _builder(
    core: Callable[..., CompiledModel],
    config: pytest.Config,
    device: torch.device,
    package_dir: Path,
    *,
    record: list[CompiledModel] | None = None,
    allow_nonfinite: bool = False,
) -> Callable[..., CompiledModel]:
    """What the compile fixtures hand to tests: ``core`` (compile_model or check_model) with the model and every
    input moved to ``device``, the session's cache, and build failures turned into test failures."""
    from pytest_aoti.compiler import as_module

    @_fail_on_build_error
    def build(model: Any, args: Any, kwargs: dict[str, Any] | None = None, **options: Any) -> CompiledModel:
        if "more_inputs" in options:
            options["more_inputs"] = [_moved(extra, device) for extra in options["more_inputs"]]
        options.setdefault("allow_nonfinite", allow_nonfinite)
        compiled = core(
            as_module(model).to(device),
            _moved(args, device),
            _moved(kwargs, device),
            package_dir=package_dir,
            cache=_session_cache(config),
            **options,
        )
        if record is not None:
            record.append(compiled)
        return compiled

    return build


def _per_test_builder(
    core: Callable[..., CompiledModel], request: pytest.FixtureRequest, device: torch.device, tmp_path: Path
) -> Callable[..., CompiledModel]:
    """A builder for one test: packages in its tmp dir, compiled models recorded for its report, its ``aoti``
    marker's ``allow_nonfinite``."""
    _seed()
    return _builder(
        core,
        request.config,
        device,
        tmp_path / "aoti-packages",
        record=request.node.stash.setdefault(compiled_key, []),
        allow_nonfinite=_allow_nonfinite(request.node),
    )


@pytest.fixture
def aoti_compile(
    request: pytest.FixtureRequest, aoti_device: torch.device, tmp_path: Path
) -> Callable[..., CompiledModel]:
    """``aoti_compile(model, args, kwargs=None, *, dynamic_shapes=None, inductor_configs=None, strict=False)``:
    move the model and inputs to ``aoti_device``, export, compile (or take from the cache), load; the result checks
    its invariants on every call."""
    from pytest_aoti.compiler import compile_model

    return _per_test_builder(compile_model, request, aoti_device, tmp_path)


@pytest.fixture(scope="module")
def aoti_compile_shared(
    request: pytest.FixtureRequest, aoti_device: torch.device, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., CompiledModel]:
    """``aoti_compile`` for module-scoped fixtures: compile once, use in many tests or Hypothesis examples
    (function-scoped fixtures and ``@given`` do not mix)."""
    from pytest_aoti.compiler import compile_model

    _seed()
    return _builder(compile_model, request.config, aoti_device, tmp_path_factory.mktemp("aoti-packages"))


@pytest.fixture
def aoti_check(
    request: pytest.FixtureRequest, aoti_device: torch.device, tmp_path: Path
) -> Callable[..., CompiledModel]:
    """``aoti_check(model, args, kwargs=None, *, more_inputs=(), rtol=None, atol=None, ...)``: compile as
    ``aoti_compile`` does, then compare package and eager on the example inputs and every extra input set."""
    from pytest_aoti.compiler import check_model

    return _per_test_builder(check_model, request, aoti_device, tmp_path)


# debug reruns and isolation


def _uses_aoti(item: pytest.Item) -> bool:
    return bool(AOTI_FIXTURES & set(getattr(item, "fixturenames", ())))


def _debug_requested(item: pytest.Item, settings: Settings) -> DebugRequest | None:
    if item.get_closest_marker("aoti_ima") is None and not (settings.debug and _uses_aoti(item)):
        return None
    return aoti_settings.debug_request(item, settings)


def _log_dir(config: pytest.Config, nodeid: str) -> Path:
    if log_dir_key not in config.stash:
        config.stash[log_dir_key] = Path(tempfile.mkdtemp(prefix="pytest-aoti-logs-"))
    safe = re.sub(r"[^\w.-]+", "_", nodeid)[-120:]
    return Path(tempfile.mkdtemp(prefix=safe + "-", dir=config.stash[log_dir_key]))


def _child_args(settings: Settings) -> list[str]:
    """The parent's resolved aoti settings, passed on explicitly (ini values the child reads anyway)."""
    args = [f"--aoti-device={settings.device}", f"--aoti-rerun-timeout={settings.rerun_timeout:g}"]
    args += [f"--aoti-cache-dir={settings.cache_dir}", f"--aoti-cache-max-mb={settings.cache_max_bytes >> 20}"]
    return args + ([] if settings.use_cache else ["--aoti-no-cache"])


def _failure_text(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else str(report.longrepr)


def _attach_debug(config: pytest.Config, report: pytest.TestReport, request: DebugRequest) -> list[tuple[str, object]]:
    """Rerun the failed test through the debug stages and attach the verdict to its report.

    Returns the JUnit properties, which the caller must also put on the test's teardown report: junitxml reads
    ``user_properties`` from that one only."""
    from pytest_aoti.debug import debug_rerun
    from pytest_aoti.reporting import SECTION_TITLE, section_text, user_properties

    settings = config.stash[settings_key]
    verdict = debug_rerun(
        config,
        report.nodeid,
        workdir=_log_dir(config, report.nodeid),
        timeout=request.timeout,
        extra_env=request.env,
        kernels=request.kernels,
        stages=request.stages,
        extra_args=_child_args(settings),
        nonfinite_failure="nonfinite invariant violated" in _failure_text(report),
    )
    properties = user_properties(verdict)
    report.sections.append((SECTION_TITLE, section_text(verdict)))
    report.user_properties = [*report.user_properties, *properties]
    # A plain attribute survives pytest's report serialization, so an xdist controller can list it too.
    report.aoti_verdict = {  # type: ignore[attr-defined]
        "headline": verdict.headline(),
        "reproduce": verdict.first.reproduce if verdict.stages else "",
    }
    return properties


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if in_child():
        return report
    config = item.config
    settings = config.stash[settings_key]
    request = _debug_requested(item, settings)
    if request is not None and report.when == "setup":
        # Tells an xdist controller, should this worker crash, that the test wants a debug rerun.
        report.aoti_debug_request = asdict(request)  # type: ignore[attr-defined]
    if report.failed and report.when in ("setup", "call"):
        _check_cuda_context(item, report)
        if request is not None:
            item.user_properties.extend(_attach_debug(config, report, request))
    if report.when == "teardown":
        _attach_package_info(item, report)
    return report


def _attach_package_info(item: pytest.Item, report: pytest.TestReport) -> None:
    compiled = item.stash.get(compiled_key, [])
    if compiled:
        report.user_properties = [
            *report.user_properties,
            ("aoti_packages", ", ".join(str(c.package_path) for c in compiled)),
            ("aoti_from_cache", ", ".join(str(c.from_cache) for c in compiled)),
        ]


def _check_cuda_context(item: pytest.Item, report: pytest.TestReport) -> None:
    """After a failure in this process, probe CUDA: a sticky error (an illegal memory access) poisons the context
    for every later test, which then runs isolated instead of failing with the inherited error."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    from pytest_aoti.compiler import cuda_context_problem

    problem = cuda_context_problem()
    if problem is not None:
        item.config.stash[poisoned_by_key] = item.nodeid
        report.aoti_poisoned_cuda = True  # type: ignore[attr-defined]
        report.sections.append(
            (
                "aoti cuda context",
                f"the CUDA context of this process is unusable after this test: {problem}\n"
                "later tests that use CUDA run in fresh subprocesses (pytest-aoti).",
            )
        )


def _isolate_reason(item: pytest.Item, settings: Settings) -> str | None:
    if item.get_closest_marker("aoti_isolate") is not None:
        return "marked aoti_isolate"
    if settings.isolate and _uses_aoti(item):
        return "--aoti-isolate"
    poisoned_by = item.config.stash.get(poisoned_by_key, None)
    if poisoned_by is not None and _uses_aoti(item) and settings.device != "cpu":
        return f"the CUDA context was poisoned by {poisoned_by}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if in_child():
        return None
    settings = item.config.stash[settings_key]
    reason = _isolate_reason(item, settings)
    if reason is None:
        return None
    timeout = aoti_settings.isolate_timeout(item, settings)
    request = _debug_requested(item, settings)
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    run = run_child(
        item.config,
        item.nodeid,
        stage="isolate",
        env={},
        timeout=timeout,
        workdir=_log_dir(item.config, item.nodeid),
        extra_args=_child_args(settings),
    )
    properties: list[tuple[str, object]] = []
    from pytest_aoti.reporting import isolated_reports

    for report in isolated_reports(item, run, reason):
        if report.failed and report.when in ("setup", "call") and request is not None:
            properties = _attach_debug(item.config, report, request)
        if report.when == "teardown":
            report.user_properties = [*report.user_properties, *properties]
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


class _XdistHooks:
    """Registered only when pytest-xdist is present: debug reruns for tests that crash their worker, and the
    workers' cache statistics for the controller's summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.crash_properties: dict[str, list[tuple[str, object]]] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        request = getattr(report, "aoti_debug_request", None)
        if request is not None:
            self.config.stash[armed_key][report.nodeid] = request
        properties = self.crash_properties.pop(report.nodeid, None)
        if properties is not None:
            # xdist logs a crashed test as one report and never a teardown: give junitxml the teardown it reads
            # properties from.
            teardown = pytest.TestReport(
                report.nodeid, report.location, {}, "passed", None, "teardown", user_properties=properties
            )
            self.config.hook.pytest_runtest_logreport(report=teardown)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        armed = self.config.stash[armed_key].get(crashitem)
        if armed is None:
            return
        request = DebugRequest(
            timeout=armed["timeout"], env=armed["env"], kernels=tuple(armed["kernels"]), stages=tuple(armed["stages"])
        )
        properties = _attach_debug(self.config, report, request)
        self.crash_properties[crashitem] = properties

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        stats = getattr(node, "workeroutput", {}).get("aoti_cache_stats")
        if stats:
            self.config.stash[worker_stats_key].append(stats)


class _SummaryCollector:
    """Collects verdicts and poisoned CUDA contexts for the terminal summary, from this process's reports or,
    under xdist, from the workers' reports (the same hook sees them, deserialized, in the controller)."""

    def __init__(self) -> None:
        self.verdicts: list[tuple[str, str, str]] = []
        self.poisoned_by: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        verdict = getattr(report, "aoti_verdict", None)
        if verdict:
            self.verdicts.append((report.nodeid, verdict["headline"], verdict["reproduce"]))
        if getattr(report, "aoti_poisoned_cuda", False):
            self.poisoned_by.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    cache = config.stash.get(cache_key, None)
    if cache is not None and hasattr(config, "workeroutput"):
        config.workeroutput["aoti_cache_stats"] = cache.stats.as_dict()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    from pytest_aoti.reporting import cache_summary

    collector = config.stash[summary_key]
    cache = config.stash.get(cache_key, None)
    stats = [*config.stash[worker_stats_key], *([cache.stats.as_dict()] if cache is not None else [])]
    if not collector.verdicts and not stats and not collector.poisoned_by:
        return
    terminalreporter.write_sep("=", "aoti")
    for nodeid, headline, reproduce in collector.verdicts:
        terminalreporter.write_line(f"{nodeid}: {headline}")
        if reproduce:
            terminalreporter.write_line(f"    reproduce: {reproduce}")
    for nodeid in collector.poisoned_by:
        terminalreporter.write_line(
            f"CUDA context poisoned by {nodeid}: later CUDA tests of that process ran in fresh subprocesses"
        )
    if stats:
        terminalreporter.write_line(cache_summary(stats))
    if log_dir_key in config.stash:
        terminalreporter.write_line(f"aoti child logs: {config.stash[log_dir_key]}")
