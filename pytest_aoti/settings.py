"""Options (each flag with its ini twin), resolved once at configure time into a frozen :class:`Settings`,
and the markers' arguments parsed through real signatures. Precedence: ini < command line < marker."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import inspect
import math
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.core.cache import default_cache_dir
from pytest_aoti.core.protocol import DEFAULT_MINIFY_BUDGET, Stage
from pytest_aoti.core.remote_cache import RemoteSettings
from pytest_aoti.roles import Role, decide

DEVICE_DESC = "device to compile for: auto (cuda:0 when CUDA is available, else cpu), cpu, cuda or cuda:N"
DEBUG_DESC = "debug-rerun every failing test that uses the aoti fixtures, as if marked aoti_ima"
ISOLATE_DESC = "run every test that uses the aoti fixtures in a fresh subprocess, so a crash fails only that test"
TIMEOUT_DESC = "seconds a debug or isolated child process may run before it is stopped (default 900)"
CACHE_DIR_DESC = "directory of the compiled-package cache (default: ~/.cache/pytest-aoti)"
NO_CACHE_DESC = "compile every model afresh; do not read or write the package cache"
CACHE_CLEAR_DESC = "empty the package cache at the start of the session"
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
# Each extra run is a child (~3 s on a CPU, more on a GPU) for every failure that does not reproduce: past a handful,
# more runs say little more about flakiness and can hold a failing suite for an hour.
MAX_FLAKY_RERUNS = 10
FLAKY_RERUNS_DESC = (
    "when a debug rerun's first stage does not reproduce the failure, run it up to this many more times (with the "
    "debug environment and its cached package) to tell a flaky failure from one that needs earlier tests "
    f"(default {DEFAULT_FLAKY_RERUNS}, at most {MAX_FLAKY_RERUNS}; 0: no extra runs)"
)
CACHE_MAX_MB_DESC = "size cap of the package cache in MiB; least-recently-used packages go first (default 2048)"
CACHE_URL_ENV = "PYTEST_AOTI_CACHE_URL"
CACHE_SECRET_ENV = "PYTEST_AOTI_CACHE_SECRET"
CACHE_URL_DESC = (
    "a remote package cache behind the local one, shared by CI runners: redis://[:password@]host:port/db (or "
    f"rediss://, unix://); also ${CACHE_URL_ENV}, which keeps a password off the command line. Entries are signed "
    f"with ${CACHE_SECRET_ENV} (HMAC-SHA256)"
)
CACHE_READONLY_DESC = "read the remote package cache but never write to it (untrusted pull-request builds)"
CACHE_UNSIGNED_DESC = (
    f"use the remote package cache without ${CACHE_SECRET_ENV}: entries are neither signed nor verified beyond "
    "their checksum, so anyone who can write to the server can run code on this machine"
)

DEFAULT_RERUN_TIMEOUT = 900.0
# A week: past it a budget is no budget, and time arithmetic on it overflows (1e308 s).
MAX_MINIFY_BUDGET = 7 * 24 * 3600.0
DEFAULT_CACHE_MAX_MB = 2048
_DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")

STAGES = tuple(str(stage) for stage in Stage if stage is not Stage.ISOLATE)  # what aoti_ima(stages=) takes


class CrashGuard(enum.Enum):
    """How this session survives a test that crashes its process, so a debug rerun can explain it."""

    NONE = "none"  # no test wants a debug rerun, or this is a pytest-aoti child
    ONE_WORKER = "one xdist worker"  # --aoti-debug: pytest-aoti turned the session into one supervised xdist worker
    XDIST = "xdist"  # the user's own -n: a crashed worker is replaced and its test debugged by the controller
    ISOLATE = "isolate"  # tests that want a debug rerun run in fresh subprocesses from the start
    UNGUARDED = "unguarded"  # pytest.main(plugins=[...]) or --pdb/--trace: no child can stand in for this process


@dataclass(frozen=True)
class Settings:
    device: str
    debug: bool
    isolate: bool
    rerun_timeout: float
    sanitizer: bool
    minify: bool
    minify_budget: float
    flaky_reruns: int
    cache_dir: Path
    use_cache: bool
    cache_clear: bool
    cache_max_bytes: int
    remote_cache: RemoteSettings | None = None
    remote_cache_off: str | None = None  # why a remote cache the user named is not used (the header says it)
    crash_guard: CrashGuard = CrashGuard.NONE
    # Why children cannot run this session's tests (plugin objects passed to pytest.main, --pdb/--trace); None: they can
    no_children_reason: str | None = None
    crash_guard_blocked_by_debugger: bool = False


@dataclass(frozen=True)
class DebugRequest:
    """How a failing test is debug-rerun: from ``@pytest.mark.aoti_ima(...)`` over the session settings."""

    timeout: float
    env: Mapping[str, str]
    kernels: tuple[str, ...]
    stages: tuple[str, ...] | None  # None: chosen by the failure's kind (triage.stages_for)
    sanitizer_on_cuda_error: bool = False
    minify: bool = False  # --aoti-minify: add stage minify whatever the stages
    minify_budget: float = DEFAULT_MINIFY_BUDGET
    flaky_reruns: int = DEFAULT_FLAKY_RERUNS


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("aoti", "AOTInductor testing (pytest-aoti)")

    def option(
        name: str, help: str, *, flag: bool = False, ini_type: Any = "string", default: Any = None, ini: bool = True
    ) -> None:
        dest = "aoti_" + name.replace("-", "_")
        if flag:
            group.addoption(f"--aoti-{name}", action="store_true", default=None, dest=dest, help=help)
        else:
            group.addoption(f"--aoti-{name}", default=None, dest=dest, metavar=name.split("-")[-1].upper(), help=help)
        if ini:
            parser.addini(dest, help, type=ini_type, default=default)

    option("device", DEVICE_DESC, default="auto")
    option("debug", DEBUG_DESC, flag=True, ini_type="bool", default=False)
    option("isolate", ISOLATE_DESC, flag=True, ini_type="bool", default=False)
    option("sanitizer", SANITIZER_DESC, flag=True, ini_type="bool", default=False)
    option("minify", MINIFY_DESC, flag=True, ini_type="bool", default=False)
    option("minify-budget", MINIFY_BUDGET_DESC, default=str(DEFAULT_MINIFY_BUDGET))
    option("rerun-timeout", TIMEOUT_DESC, default=str(DEFAULT_RERUN_TIMEOUT))
    option("flaky-reruns", FLAKY_RERUNS_DESC, default=str(DEFAULT_FLAKY_RERUNS))
    option("cache-dir", CACHE_DIR_DESC, default="")
    option("no-cache", NO_CACHE_DESC, flag=True, ini_type="bool", default=False)
    # An action, not a setting: an ini twin would empty the cache on every run.
    option("cache-clear", CACHE_CLEAR_DESC, flag=True, ini=False)
    option("cache-max-mb", CACHE_MAX_MB_DESC, default=str(DEFAULT_CACHE_MAX_MB))
    option("cache-url", CACHE_URL_DESC, default="")
    option("cache-readonly", CACHE_READONLY_DESC, flag=True, ini_type="bool", default=False)
    option("cache-unsigned", CACHE_UNSIGNED_DESC, flag=True, ini_type="bool", default=False)


def _value(config: pytest.Config, name: str) -> tuple[Any, str]:
    """The option's value and where it came from, for error messages."""
    dest = "aoti_" + name.replace("-", "_")
    cli = config.getoption(dest)
    if cli is not None:
        return cli, f"--aoti-{name}"
    try:
        return config.getini(dest), f"ini option {dest}"
    except (ValueError, pytest.UsageError) as error:  # a bool ini value pytest cannot read ("maybe")
        raise pytest.UsageError(f"ini option {dest}: {error}; expected true or false") from None


def _positive_number(raw: Any, source: str, *, what: str, integer: bool = False, at_most: float | None = None) -> float:
    try:
        value = int(raw) if integer else float(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{source}: expected {what}, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise pytest.UsageError(f"{source}: expected {what} greater than 0 (finite), got {raw!r}")
    if at_most is not None and value > at_most:
        raise pytest.UsageError(f"{source}: expected {what} of at most {at_most:g}, got {raw!r}")
    return value


def _count(raw: Any, source: str, *, what: str, at_most: int) -> int:
    """A whole number from 0 to ``at_most`` (``raw`` from the command line or the ini file)."""
    text = str(raw).strip()
    if not text.isascii() or not text.isdigit():
        raise pytest.UsageError(f"{source}: expected {what} (a whole number >= 0), got {raw!r}")
    # Compared as text first: int() refuses digit strings past 4300 characters.
    if len(text.lstrip("0")) > len(str(at_most)) or int(text) > at_most:
        raise pytest.UsageError(f"{source}: expected {what} of at most {at_most}, got {raw!r}")
    return int(text)


def resolve(config: pytest.Config) -> Settings:
    device, device_source = _value(config, "device")
    device = str(device).strip()
    if not _DEVICE_PATTERN.match(device):
        raise pytest.UsageError(f"{device_source}: unknown device {device!r}; expected auto, cpu, cuda or cuda:N")
    timeout_raw, timeout_source = _value(config, "rerun-timeout")
    cap_raw, cap_source = _value(config, "cache-max-mb")
    budget_raw, budget_source = _value(config, "minify-budget")
    flaky_raw, flaky_source = _value(config, "flaky-reruns")
    cache_dir_raw, _ = _value(config, "cache-dir")
    if cache_dir_raw:
        cache_dir = Path(cache_dir_raw).expanduser()
        if not cache_dir.is_absolute():
            # pytest's own conventions: a path on the command line is relative to where pytest was started
            # (--basetemp, --junitxml), an ini path to the rootdir (cache_dir).
            from_cli = config.getoption("aoti_cache_dir") is not None
            cache_dir = (config.invocation_params.dir if from_cli else config.rootpath) / cache_dir
    else:
        cache_dir = default_cache_dir()
    settings = Settings(
        device=device,
        debug=bool(_value(config, "debug")[0]),
        isolate=bool(_value(config, "isolate")[0]),
        rerun_timeout=_positive_number(timeout_raw, timeout_source, what="seconds"),
        sanitizer=bool(_value(config, "sanitizer")[0]),
        minify=bool(_value(config, "minify")[0]),
        minify_budget=_positive_number(budget_raw, budget_source, what="seconds", at_most=MAX_MINIFY_BUDGET),
        flaky_reruns=_count(flaky_raw, flaky_source, what="a number of extra runs", at_most=MAX_FLAKY_RERUNS),
        cache_dir=cache_dir,
        use_cache=not _value(config, "no-cache")[0],
        cache_clear=bool(config.getoption("aoti_cache_clear")),
        cache_max_bytes=int(_positive_number(cap_raw, cap_source, what="a size in MiB", integer=True)) * 2**20,
        **_remote_cache(config),
    )
    debugger = _debugger_option(config)
    if (settings.debug or settings.isolate) and debugger:
        raise pytest.UsageError(
            f"--aoti-debug/--aoti-isolate run tests in subprocesses and cannot be combined with {debugger}"
        )
    return settings


def _remote_cache(config: pytest.Config) -> dict[str, Any]:
    """The remote cache's settings (``remote_cache``), or why the one named is not used (``remote_cache_off``).
    Precedence: ini < ``$PYTEST_AOTI_CACHE_URL`` < ``--aoti-cache-url``. The secret comes from the environment only,
    and no message here shows it or the URL's password."""
    from pytest_aoti.core.remote_cache import RemoteSettings, mask_url

    url, source = _value(config, "cache-url")
    if config.getoption("aoti_cache_url") is None and os.environ.get(CACHE_URL_ENV, "").strip():
        url, source = os.environ[CACHE_URL_ENV], f"${CACHE_URL_ENV}"
    url = str(url).strip()
    if not url or _value(config, "no-cache")[0]:
        return {}
    if not re.match(r"^(rediss?|unix)://", url):
        raise pytest.UsageError(f"{source}: expected redis://[:password@]host:port/db, got {mask_url(url)!r}")
    if importlib.util.find_spec("redis") is None:
        raise pytest.UsageError(
            f"{source}: the remote cache needs the redis client: pip install 'pytest-aoti[remote-cache]'"
        )
    from redis.connection import parse_url

    try:
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError:
        # Neither the URL nor redis-py's message is shown: both may hold parts of the password.
        raise pytest.UsageError(
            f"{source}: redis-py cannot parse this URL (not shown: it may hold a password); a password holding '/', "
            "'@', ':', '?' or '#' must be percent-encoded (%2F, %40, %3A, %3F, %23)"
        ) from None
    # The database as redis-py reads it (the URL's path), which quietly becomes db 0 when it is not a number.
    db_path = urllib.parse.urlsplit(url).path.strip("/") if not url.startswith("unix://") else ""
    if db_path and not db_path.isdigit():
        raise pytest.UsageError(
            f"{source}: {mask_url(url)!r}: the database after the host is {db_path!r}; expected a number"
        )
    secret = os.environ.get(CACHE_SECRET_ENV, "")
    if not secret and not _value(config, "cache-unsigned")[0]:
        return {
            "remote_cache_off": f"{mask_url(url)} not used: ${CACHE_SECRET_ENV} is not set (set it to sign and verify "
            "entries, or pass --aoti-cache-unsigned)"
        }
    remote = RemoteSettings(url, secret.encode() or None, readonly=bool(_value(config, "cache-readonly")[0]))
    return {"remote_cache": remote}


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


def choose_crash_guard(config: pytest.Config, settings: Settings, *, xdist_available: bool) -> Settings:
    """How this session survives a crash when debug reruns are on (``--aoti-debug``, or tests marked ``aoti_ima``,
    which are only known after collection). ``--aoti-debug`` on a session xdist does not already distribute
    becomes one supervised xdist worker (xdist replaces a crashed worker and goes on; the controller debug-reruns
    the crashed test); without xdist, or under ``-s``, tests that want a debug rerun run isolated. Plain pytest
    stays in-process."""
    objects = _plugin_objects(config)
    debugger = _debugger_option(config)
    no_children = None
    if objects:
        no_children = (
            f"pytest.main() was given plugin object(s) {', '.join(objects)}, which a fresh interpreter cannot load"
        )
    elif debugger:
        no_children = f"{debugger} debugs the test in this process"
    option = config.option
    distributed = getattr(option, "dist", "no") != "no" and bool(getattr(option, "tx", None))
    is_worker = decide(config) is Role.WORKER
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


def _refuse_a_dist_that_loses_crashes(config: pytest.Config, settings: Settings, dist: str) -> None:
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
        f"{_value(config, 'debug')[1]} with -n and --dist {dist}: pytest-xdist's {dist} scheduler {what}, so a crash "
        "would not fail only its test. Use --dist load or worksteal, add --aoti-isolate (each aoti test in a fresh "
        "subprocess: a crash leaves its worker alive), or leave out -n (pytest-aoti then runs the session in one "
        "supervised worker)"
    )


def _aoti_ima_signature(
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    kernels: Sequence[str] = (),
    stages: Sequence[str] | None = None,
) -> None: ...


def _aoti_isolate_signature(*, timeout: float | None = None) -> None: ...


def _aoti_signature(
    *, allow_nonfinite: bool = False, restride_inputs: bool = False, allow_out_of_range: bool = False
) -> None: ...


MARKERS = {
    "aoti_ima": "aoti_ima(*, timeout=None, env=None, kernels=(), stages=None): when the test fails, rerun it alone "
    "in a fresh interpreter under PyTorch's AOTI debugging environment and report the suspect kernel; stages "
    "(default: 'numerics' for a package-vs-eager mismatch, else 'kernels' and 'tensors') may name 'kernels', "
    "'tensors', 'sanitizer' (compute-sanitizer memcheck, CUDA), 'numerics' (first kernel that diverges from eager) "
    "and 'minify' (the repro bundle's graph shrunk to the fewest failing nodes)",
    "aoti_isolate": "aoti_isolate(*, timeout=None): run the test in a fresh subprocess, so a crash fails only "
    "this test",
    "aoti": "aoti(*, allow_nonfinite=False, restride_inputs=False, allow_out_of_range=False): per-test settings of "
    "the aoti fixtures: accept NaN/Inf in inputs and outputs; copy inputs whose strides differ from the compiled ones "
    "instead of failing; let embedding indices outside the table reach the package (whose bounds check aborts)",
}
_SIGNATURES: dict[str, Callable[..., None]] = {
    "aoti_ima": _aoti_ima_signature,
    "aoti_isolate": _aoti_isolate_signature,
    "aoti": _aoti_signature,
}
AOTI_FIXTURES = frozenset({"aoti_compile", "aoti_check", "aoti_device", "aoti_compile_shared"})


@dataclass(frozen=True)
class ItemSettings:
    """One test's settings: the session's, overlaid by its markers. Resolved once, at collection."""

    debug: DebugRequest | None  # how to debug-rerun the test when it fails; None: not at all
    isolate_reason: str | None  # why the test runs in a fresh subprocess from the start; None: it does not
    isolate_timeout: float
    allow_nonfinite: bool
    restride_inputs: bool
    allow_out_of_range: bool = False


def marker_arguments(item: pytest.Item, name: str) -> dict[str, Any] | None:
    """The marker's arguments bound through its signature (defaults applied), or None when it is absent."""
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    try:
        bound = inspect.signature(_SIGNATURES[name]).bind(*marker.args, **marker.kwargs)
    except TypeError as error:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name}: {error}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def _timeout(value: Any, where: str) -> float | None:
    if value is None:
        return None
    # bool is an int to Python, and timeout=True is surely not "one second".
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise pytest.UsageError(f"{where}: timeout= expected seconds greater than 0 (finite), got {value!r}")
    return float(value)


def _flag(value: Any, where: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise pytest.UsageError(f"{where}: {name}= expected True or False, got {value!r}")
    return value


def _debug_request(item: pytest.Item, settings: Settings) -> DebugRequest:
    args = marker_arguments(item, "aoti_ima") or {}
    where = f"{item.nodeid}: @pytest.mark.aoti_ima"
    timeout = _timeout(args["timeout"], where) if args else None
    env = args.get("env") or {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise pytest.UsageError(f"{where}: env= expected a dict of str to str, got {env!r}")
    kernels = args.get("kernels", ())
    if isinstance(kernels, str | bytes) or not isinstance(kernels, Iterable):
        raise pytest.UsageError(f"{where}: kernels= expected a list of kernel names, got {kernels!r}")
    kernels = tuple(kernels)
    if not all(isinstance(k, str) and k for k in kernels):
        raise pytest.UsageError(f"{where}: kernels= expected a list of kernel names, got {kernels!r}")
    stages = args.get("stages")
    if stages is not None:
        if isinstance(stages, str) or not isinstance(stages, Iterable):
            raise pytest.UsageError(f"{where}: stages= expected a non-empty subset of {STAGES}, got {stages!r}")
        stages = tuple(stages)
        if not stages or any(stage not in STAGES for stage in stages):
            raise pytest.UsageError(f"{where}: stages= expected a non-empty subset of {STAGES}, got {stages!r}")
    if stages == ("minify",):
        raise pytest.UsageError(
            f"{where}: stages=('minify',) alone has no repro bundle to minify (the first other stage writes it): "
            "add 'kernels'"
        )
    if stages is not None and "tensors" in stages and "kernels" not in stages and not kernels:
        raise pytest.UsageError(f"{where}: stages=('tensors',) alone needs kernels= to know what to print")
    return DebugRequest(
        timeout=timeout if timeout is not None else settings.rerun_timeout,
        env=dict(env),
        kernels=kernels,
        stages=stages,
        sanitizer_on_cuda_error=settings.sanitizer,
        minify=settings.minify,
        minify_budget=settings.minify_budget,
        flaky_reruns=settings.flaky_reruns,
    )


# Why a test that wants a debug rerun (marked aoti_ima) runs in a fresh subprocess from the start in a session that
# runs tests in-process: it is expected to crash its process (an illegal memory access), which must not end the run.
DEBUG_ISOLATION_REASON = "debug reruns are on and this session runs tests in-process: a crash must end only this test"


def debug_isolation_notice(items: Sequence[pytest.Item]) -> str | None:
    """The line after ``collected N items`` when tests run in fresh subprocesses from the start because they want a
    debug rerun: unlike their rerun, this changes what the rest of the session sees (their side effects stay in
    their process), so the run says so."""
    count = sum(1 for item in items if item_settings(item).isolate_reason == DEBUG_ISOLATION_REASON)
    if not count:
        return None
    return (
        f"aoti: tests that want a debug rerun (marked aoti_ima, or under --aoti-debug; {count} here) run in fresh "
        "subprocesses from the start, so that a crash fails only that test; what they change in a process (module "
        "globals, caches, fixtures' state) does not reach the other tests"
    )


def uses_aoti(item: pytest.Item) -> bool:
    return bool(AOTI_FIXTURES & set(getattr(item, "fixturenames", ())))


def resolve_item(item: pytest.Item, settings: Settings) -> ItemSettings:
    """Overlay ``item``'s markers on the session settings; a bad marker argument is a :class:`pytest.UsageError`
    naming the test, the marker and the argument."""
    debug = None
    if item.get_closest_marker("aoti_ima") is not None or (settings.debug and uses_aoti(item)):
        debug = _debug_request(item, settings)
    isolate_args = marker_arguments(item, "aoti_isolate")
    isolate_timeout = _timeout((isolate_args or {}).get("timeout"), f"{item.nodeid}: @pytest.mark.aoti_isolate")
    isolate_reason = None
    if isolate_args is not None:
        isolate_reason = "marked aoti_isolate"
    elif settings.isolate and uses_aoti(item):
        isolate_reason = "--aoti-isolate"
    elif debug is not None and settings.crash_guard is CrashGuard.ISOLATE:
        isolate_reason = DEBUG_ISOLATION_REASON
    if isolate_reason is not None and settings.no_children_reason is not None:
        # Under a debugger, a test marked to run elsewhere is refused (as --aoti-isolate with --pdb is); with plugin
        # objects a child cannot load, it runs here (the header says why).
        if isolate_args is not None and settings.crash_guard_blocked_by_debugger:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.aoti_isolate needs a fresh subprocess, and {settings.no_children_reason}"
            )
        isolate_reason = None
    aoti_args = marker_arguments(item, "aoti") or {}
    where = f"{item.nodeid}: @pytest.mark.aoti"
    return ItemSettings(
        debug=debug,
        isolate_reason=isolate_reason,
        isolate_timeout=_isolate_timeout(isolate_timeout, debug, settings),
        allow_nonfinite=_flag(aoti_args.get("allow_nonfinite", False), where, "allow_nonfinite"),
        restride_inputs=_flag(aoti_args.get("restride_inputs", False), where, "restride_inputs"),
        allow_out_of_range=_flag(aoti_args.get("allow_out_of_range", False), where, "allow_out_of_range"),
    )


def _isolate_timeout(marked: float | None, debug: DebugRequest | None, settings: Settings) -> float:
    """What bounds the test's run in a fresh subprocess: ``aoti_isolate(timeout=)``, else the debug request's timeout
    (``aoti_ima(timeout=)`` bounds every child of its test, the first run too), else ``--aoti-rerun-timeout``."""
    if marked is not None:
        return marked
    return debug.timeout if debug is not None else settings.rerun_timeout


settings_key = pytest.StashKey[Settings]()
# pytest's session TempPathFactory, which pytest hands out only to fixtures: aoti_device stashes it for the debug
# rerun, which keeps its children's logs under the session's basetemp (pytest's retention policy applies there).
session_temp_key = pytest.StashKey[pytest.TempPathFactory]()
_item_settings_key = pytest.StashKey[ItemSettings]()


def item_settings(item: pytest.Item) -> ItemSettings:
    """``item``'s resolved settings, computed once (collection validates them all up front)."""
    if _item_settings_key not in item.stash:
        item.stash[_item_settings_key] = resolve_item(item, item.config.stash[settings_key])
    return item.stash[_item_settings_key]
