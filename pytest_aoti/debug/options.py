"""The debug rerun's options (each flag with its ini twin), its markers (``aoti_ima``, ``aoti_isolate``) and the
request a failing test is debug-rerun with, resolved here from them: ``--aoti-debug``, ``--aoti-isolate``, the
children's timeout, the extra stages (sanitizer, minify and its budget), flaky reruns, and how the session survives a
crash (:class:`CrashGuard`). Precedence: ini < command line < marker."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_aoti.core.protocol import DEFAULT_MINIFY_BUDGET, Stage
from pytest_aoti.roles import is_worker as is_xdist_worker
from pytest_aoti.roles import uses_aoti
from pytest_aoti.settings import add_option, marker_arguments, option_value, positive_number, whole_number

DEBUG_DESC = "debug-rerun every failing test that uses the aoti fixtures, as if marked aoti_ima"
ISOLATE_DESC = "run every test that uses the aoti fixtures in a fresh subprocess, so a crash fails only that test"
DEFAULT_RERUN_TIMEOUT = 900.0
# A week: a child still running after it is hung, and a wait past threading.TIMEOUT_MAX (~9.2e9 s) is an
# OverflowError. There is no "no timeout": a hung child must not hold a CI job forever.
MAX_RERUN_TIMEOUT = 7 * 24 * 3600.0
TIMEOUT_DESC = (
    "seconds a debug or isolated child process may run before it is stopped (default 900, at most 604800: a week; "
    "there is no unbounded wait, a child still running after a week is hung)"
)
SANITIZER_DESC = (
    "also run compute-sanitizer (memcheck) over a debugged test whose failure shows a CUDA error, where "
    "compute-sanitizer is installed"
)
MINIFY_DESC = (
    "add stage minify to every debug rerun: shrink the repro bundle's graph to the fewest nodes that still crash "
    "(or make NaN/Inf, or fail), each candidate judged in its own process"
)
MINIFY_BUDGET_DESC = "seconds stage minify may search before keeping the smallest failing graph found (default 300)"
DEFAULT_FLAKY_RERUNS = 2
# Each extra run is a child for every failure that does not reproduce (docs/benchmarks.md#children-and-the-fork-server):
# past a handful, more runs say little more about flakiness and can hold a failing suite for an hour.
MAX_FLAKY_RERUNS = 10
FLAKY_RERUNS_DESC = (
    "when a debug rerun's first stage does not reproduce the failure, run it up to this many more times (with the "
    "debug environment and its cached package) to tell a flaky failure from one that needs earlier tests "
    f"(default {DEFAULT_FLAKY_RERUNS}, at most {MAX_FLAKY_RERUNS}; 0: no extra runs)"
)
# A week: past it a budget is no budget, and time arithmetic on it overflows (1e308 s).
MAX_MINIFY_BUDGET = 7 * 24 * 3600.0

STAGES = tuple(str(stage) for stage in Stage if stage is not Stage.ISOLATE)  # what aoti_ima(stages=) takes


class CrashGuard(enum.Enum):
    """How this session survives a test that crashes its process, so a debug rerun can explain it."""

    NONE = "none"  # no test wants a debug rerun, or this is a pytest-aoti child
    ONE_WORKER = "one xdist worker"  # --aoti-debug: pytest-aoti turned the session into one supervised xdist worker
    XDIST = "xdist"  # the user's own -n: a crashed worker is replaced and its test debugged by the controller
    ISOLATE = "isolate"  # tests that want a debug rerun run in fresh subprocesses from the start
    UNGUARDED = "unguarded"  # pytest.main(plugins=[...]) or --pdb/--trace: no child can stand in for this process


@dataclass(frozen=True)
class DebugSettings:
    debug: bool
    isolate: bool
    rerun_timeout: float
    sanitizer: bool
    minify: bool
    minify_budget: float
    flaky_reruns: int
    crash_guard: CrashGuard = CrashGuard.NONE
    # Why children cannot run this session's tests (plugin objects passed to pytest.main, --pdb/--trace); None: they can
    no_children_reason: str | None = None
    crash_guard_blocked_by_debugger: bool = False


@dataclass(frozen=True)
class DebugRequest:
    """How a failing test is debug-rerun: from ``@pytest.mark.aoti_ima(...)`` over the session's debug options."""

    timeout: float
    env: Mapping[str, str]
    kernels: tuple[str, ...]
    stages: tuple[str, ...] | None  # None: chosen by the failure's kind (triage.stages_for)
    sanitizer_on_cuda_error: bool = False
    minify: bool = False  # --aoti-minify: add stage minify whatever the stages
    minify_budget: float = DEFAULT_MINIFY_BUDGET
    flaky_reruns: int = DEFAULT_FLAKY_RERUNS
    # The test uses a pytest-aoti fixture, so its stages compile: only then is a fork server worth starting or waiting
    # for (a test without one is rerun in a fresh interpreter, which starts faster than a server warms up).
    compiles: bool = True


def add_options(parser: pytest.Parser) -> None:
    add_option(parser, "debug", DEBUG_DESC, flag=True, ini_type="bool", default=False)
    add_option(parser, "isolate", ISOLATE_DESC, flag=True, ini_type="bool", default=False)
    add_option(parser, "sanitizer", SANITIZER_DESC, flag=True, ini_type="bool", default=False)
    add_option(parser, "minify", MINIFY_DESC, flag=True, ini_type="bool", default=False)
    add_option(parser, "minify-budget", MINIFY_BUDGET_DESC, default=str(DEFAULT_MINIFY_BUDGET))
    add_option(parser, "rerun-timeout", TIMEOUT_DESC, default=str(DEFAULT_RERUN_TIMEOUT))
    add_option(parser, "flaky-reruns", FLAKY_RERUNS_DESC, default=str(DEFAULT_FLAKY_RERUNS))


def resolve(config: pytest.Config) -> DebugSettings:
    timeout_raw, timeout_source = option_value(config, "aoti_rerun_timeout")
    budget_raw, budget_source = option_value(config, "aoti_minify_budget")
    flaky_raw, flaky_source = option_value(config, "aoti_flaky_reruns")
    settings = DebugSettings(
        debug=bool(option_value(config, "aoti_debug")[0]),
        isolate=bool(option_value(config, "aoti_isolate")[0]),
        rerun_timeout=positive_number(timeout_raw, timeout_source, what="seconds", at_most=MAX_RERUN_TIMEOUT),
        sanitizer=bool(option_value(config, "aoti_sanitizer")[0]),
        minify=bool(option_value(config, "aoti_minify")[0]),
        minify_budget=positive_number(budget_raw, budget_source, what="seconds", at_most=MAX_MINIFY_BUDGET),
        flaky_reruns=whole_number(flaky_raw, flaky_source, what="a number of extra runs", at_most=MAX_FLAKY_RERUNS),
    )
    debugger = _debugger_option(config)
    if (settings.debug or settings.isolate) and debugger:
        raise pytest.UsageError(
            f"--aoti-debug/--aoti-isolate run tests in subprocesses and cannot be combined with {debugger}"
        )
    return settings


def _debugger_option(config: pytest.Config) -> str | None:
    if config.getoption("usepdb", False):
        return "--pdb"
    if config.getoption("trace", False):
        return "--trace"
    return None


def _plugin_objects(config: pytest.Config) -> list[str]:
    """Plugins passed to ``pytest.main(plugins=[...])`` as objects: a fresh interpreter cannot load them. pytest's
    own (pytester's helpers, in its in-process runs) change nothing a test sees."""
    return [
        getattr(plugin, "__name__", type(plugin).__name__)
        for plugin in config.invocation_params.plugins or ()
        if not isinstance(plugin, str)
        and not (getattr(plugin, "__name__", None) or type(plugin).__module__).startswith("_pytest.")
    ]


# Set on the options by the process pytest -f started (plugin.py's pytest_cmdline_main), before xdist's looponfail
# hands them to the process that runs each loop's session: that session knows it runs under -f by this alone.
UNDER_LOOPONFAIL_OPTION = "aoti_under_looponfail"
LOOPONFAIL_REASON = (
    "--looponfail (-f) runs each loop in a process that pytest-xdist gives only the test paths, not your command "
    "line, so a child would run without your options: no debug reruns or isolated tests under -f (for a failure's "
    "verdict, run pytest --aoti-debug on it)"
)


def mark_looponfail(config: pytest.Config) -> None:
    """In the process ``pytest -f`` started: tell the sessions of its loop that they run under looponfail."""
    if config.getoption("looponfail", False):
        setattr(config.option, UNDER_LOOPONFAIL_OPTION, True)


def _no_children_reason(config: pytest.Config, objects: list[str], debugger: str | None) -> str | None:
    if objects:
        return f"pytest.main() was given plugin object(s) {', '.join(objects)}, which a fresh interpreter cannot load"
    if debugger:
        return f"{debugger} debugs the test in this process"
    if getattr(config.option, UNDER_LOOPONFAIL_OPTION, False):
        return LOOPONFAIL_REASON
    return None


def choose_crash_guard(config: pytest.Config, settings: DebugSettings, *, xdist_available: bool) -> DebugSettings:
    """How this session survives a crash when debug reruns are on (``--aoti-debug``, or tests marked ``aoti_ima``,
    which are only known after collection). ``--aoti-debug`` on a session xdist does not already distribute
    becomes one supervised xdist worker (xdist replaces a crashed worker and goes on; the controller debug-reruns
    the crashed test); without xdist, or under ``-s``, tests that want a debug rerun run isolated. Plain pytest
    stays in-process."""
    objects = _plugin_objects(config)
    debugger = _debugger_option(config)
    no_children = _no_children_reason(config, objects, debugger)
    option = config.option
    distributed = getattr(option, "dist", "no") != "no" and bool(getattr(option, "tx", None))
    is_worker = is_xdist_worker(config)
    if distributed and not is_worker:
        _refuse_a_dist_that_loses_crashes(config, settings, str(option.dist))
    if is_worker or distributed:
        guard = CrashGuard.XDIST
    elif no_children is not None:
        guard = CrashGuard.UNGUARDED
    elif any(config.getoption(name, False) for name in ("collectonly", "setupplan", "setuponly")):
        guard = CrashGuard.NONE  # no test runs
    elif settings.isolate:
        guard = CrashGuard.ISOLATE
    elif (
        settings.debug
        and xdist_available
        and getattr(option, "numprocesses", None) is None
        # xdist workers never show a test's output: under -s, isolated tests write theirs to the terminal.
        and getattr(option, "capture", "fd") != "no"
    ):
        guard = CrashGuard.ONE_WORKER
    else:
        guard = CrashGuard.ISOLATE
    return dataclasses.replace(
        settings,
        crash_guard=guard,
        no_children_reason=no_children,
        crash_guard_blocked_by_debugger=not objects and debugger is not None,
    )


# pytest-xdist's schedulers that do not survive a worker's crash (3.8.0, also without pytest-aoti): loadgroup hangs
# after it; loadscope and loadfile give the crashed test to each replacement worker in turn, until xdist stops
# replacing them, and never run the rest of its scope or file.
DIST_LOSING_CRASHES = ("loadgroup", "loadscope", "loadfile")


def _refuse_a_dist_that_loses_crashes(config: pytest.Config, settings: DebugSettings, dist: str) -> None:
    """``--aoti-debug`` promises that a crash fails only its test, and under ``-n`` a crash takes its worker with it.
    Where a test runs in a child of its own (``--aoti-isolate``), the worker survives it."""
    if dist not in DIST_LOSING_CRASHES or settings.isolate or not settings.debug:
        return
    what = (
        "hangs once a worker crashes"
        if dist == "loadgroup"
        else "gives a test that crashed its worker to each new worker in turn, and never runs the rest of its "
        + ("scope" if dist == "loadscope" else "file")
    )
    raise pytest.UsageError(
        f"{option_value(config, 'aoti_debug')[1]} with -n and --dist {dist}: pytest-xdist's {dist} scheduler {what}, "
        "so a crash would not fail only its test. Use --dist load or worksteal, add --aoti-isolate (each aoti test in "
        "a fresh subprocess: a crash leaves its worker alive), or leave out -n (pytest-aoti then runs the session in "
        "one supervised worker)"
    )


def _aoti_ima_signature(
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    kernels: Sequence[str] = (),
    stages: Sequence[str] | None = None,
) -> None: ...


def _aoti_isolate_signature(*, timeout: float | None = None) -> None: ...


MARKERS = {
    "aoti_ima": "aoti_ima(*, timeout=None, env=None, kernels=(), stages=None): when the test fails, rerun it alone "
    "in a fresh interpreter under PyTorch's AOTI debugging environment and report the suspect kernel; stages "
    "(default: 'numerics' for a package-vs-eager mismatch, else 'kernels' and 'tensors') may name 'kernels', "
    "'tensors', 'sanitizer' (compute-sanitizer memcheck, CUDA), 'numerics' (first kernel that diverges from eager) "
    "and 'minify' (the repro bundle's graph shrunk to the fewest failing nodes)",
    "aoti_isolate": "aoti_isolate(*, timeout=None): run the test in a fresh subprocess, so a crash fails only "
    "this test",
}


@dataclass(frozen=True)
class ItemDebug:
    """One test's debug rerun and isolation: the session's debug options, overlaid by its markers. Resolved once, at
    collection."""

    request: DebugRequest | None  # how to debug-rerun the test when it fails; None: not at all
    isolate_reason: str | None  # why the test runs in a fresh subprocess from the start; None: it does not
    isolate_timeout: float


def _timeout(value: Any, where: str) -> float | None:
    if value is None:
        return None
    # bool is an int to Python, and timeout=True is surely not "one second".
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise pytest.UsageError(f"{where}: timeout= expected seconds greater than 0 (finite), got {value!r}")
    if value > MAX_RERUN_TIMEOUT:
        raise pytest.UsageError(f"{where}: timeout= expected seconds of at most {MAX_RERUN_TIMEOUT:g}, got {value!r}")
    return float(value)


def _stages(value: Any, where: str, kernels: tuple[str, ...]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise pytest.UsageError(f"{where}: stages= expected a non-empty subset of {STAGES}, got {value!r}")
    stages = tuple(value)
    if not stages or any(stage not in STAGES for stage in stages):
        raise pytest.UsageError(f"{where}: stages= expected a non-empty subset of {STAGES}, got {stages!r}")
    if stages == ("minify",):
        raise pytest.UsageError(
            f"{where}: stages=('minify',) alone has no repro bundle to minify (the first other stage writes it): "
            "add 'kernels'"
        )
    if "tensors" in stages and "kernels" not in stages and not kernels:
        raise pytest.UsageError(f"{where}: stages=('tensors',) alone needs kernels= to know what to print")
    return stages


def _kernels(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise pytest.UsageError(f"{where}: kernels= expected a list of kernel names, got {value!r}")
    kernels = tuple(value)
    if not all(isinstance(k, str) and k for k in kernels):
        raise pytest.UsageError(f"{where}: kernels= expected a list of kernel names, got {kernels!r}")
    return kernels


def debug_request(item: pytest.Item, settings: DebugSettings) -> DebugRequest:
    """The test's ``aoti_ima`` marker over the session's debug options; a bad argument is a
    :class:`pytest.UsageError` naming the test, the marker and the argument."""
    args = marker_arguments(item, "aoti_ima", _aoti_ima_signature) or {}
    where = f"{item.nodeid}: @pytest.mark.aoti_ima"
    timeout = _timeout(args["timeout"], where) if args else None
    env = args.get("env") or {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise pytest.UsageError(f"{where}: env= expected a dict of str to str, got {env!r}")
    kernels = _kernels(args.get("kernels", ()), where)
    return DebugRequest(
        timeout=timeout if timeout is not None else settings.rerun_timeout,
        env=dict(env),
        kernels=kernels,
        stages=_stages(args.get("stages"), where, kernels),
        sanitizer_on_cuda_error=settings.sanitizer,
        minify=settings.minify,
        minify_budget=settings.minify_budget,
        flaky_reruns=settings.flaky_reruns,
        compiles=uses_aoti(item),
    )


# Why a test that wants a debug rerun (marked aoti_ima) runs in a fresh subprocess from the start in a session that
# runs tests in-process: it is expected to crash its process (an illegal memory access), which must not end the run.
DEBUG_ISOLATION_REASON = "debug reruns are on and this session runs tests in-process: a crash must end only this test"


def debug_isolation_notice(items: Sequence[pytest.Item]) -> str | None:
    """The line after ``collected N items`` when tests run in fresh subprocesses from the start because they want a
    debug rerun: unlike their rerun, this changes what the rest of the session sees (their side effects stay in
    their process), so the run says so."""
    count = sum(1 for item in items if item_debug(item).isolate_reason == DEBUG_ISOLATION_REASON)
    if not count:
        return None
    return (
        f"aoti: tests that want a debug rerun (marked aoti_ima, or under --aoti-debug; {count} here) run in fresh "
        "subprocesses from the start, so that a crash fails only that test; what they change in a process (module "
        "globals, caches, fixtures' state) does not reach the other tests"
    )


def resolve_item(item: pytest.Item, settings: DebugSettings) -> ItemDebug:
    """Overlay ``item``'s ``aoti_ima`` and ``aoti_isolate`` markers on the session's debug options."""
    request = None
    if item.get_closest_marker("aoti_ima") is not None or (settings.debug and uses_aoti(item)):
        request = debug_request(item, settings)
    isolate_args = marker_arguments(item, "aoti_isolate", _aoti_isolate_signature)
    marked_timeout = _timeout((isolate_args or {}).get("timeout"), f"{item.nodeid}: @pytest.mark.aoti_isolate")
    isolate_reason = None
    if isolate_args is not None:
        isolate_reason = "marked aoti_isolate"
    elif settings.isolate and uses_aoti(item):
        isolate_reason = "--aoti-isolate"
    elif request is not None and settings.crash_guard is CrashGuard.ISOLATE:
        isolate_reason = DEBUG_ISOLATION_REASON
    if isolate_reason is not None and settings.no_children_reason is not None:
        # Under a debugger, a test marked to run elsewhere is refused (as --aoti-isolate with --pdb is); with plugin
        # objects a child cannot load, it runs here (the header says why).
        if isolate_args is not None and settings.crash_guard_blocked_by_debugger:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.aoti_isolate needs a fresh subprocess, and {settings.no_children_reason}"
            )
        isolate_reason = None
    # What bounds the test's run in a fresh subprocess: aoti_isolate(timeout=), else the debug request's timeout
    # (aoti_ima(timeout=) bounds every child of its test, the first run too), else --aoti-rerun-timeout.
    if marked_timeout is not None:
        isolate_timeout = marked_timeout
    else:
        isolate_timeout = request.timeout if request is not None else settings.rerun_timeout
    return ItemDebug(request=request, isolate_reason=isolate_reason, isolate_timeout=isolate_timeout)


debug_settings_key = pytest.StashKey[DebugSettings]()
_item_debug_key = pytest.StashKey[ItemDebug]()


_marker_problem_key = pytest.StashKey[str]()


def item_debug(item: pytest.Item) -> ItemDebug:
    """``item``'s resolved debug rerun and isolation, computed once (collection validates them all up front). A bad
    ``aoti_ima``/``aoti_isolate`` argument gives the test neither a rerun nor a subprocess: :func:`marker_problem`
    holds the error, which fails that test alone at its setup."""
    if _item_debug_key not in item.stash:
        settings = item.config.stash[debug_settings_key]
        try:
            item.stash[_item_debug_key] = resolve_item(item, settings)
        except pytest.UsageError as error:
            item.stash[_marker_problem_key] = str(error)
            item.stash[_item_debug_key] = ItemDebug(
                request=None, isolate_reason=None, isolate_timeout=settings.rerun_timeout
            )
    return item.stash[_item_debug_key]


def marker_problem(item: pytest.Item) -> str | None:
    """What is wrong with ``item``'s debug markers (see :func:`item_debug`); None: nothing."""
    item_debug(item)
    return item.stash.get(_marker_problem_key, None)
