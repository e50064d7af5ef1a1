"""pytest-aoti's entry point (``pytest11``): options, markers, and the role objects registered at configure time.

The process the user started (and each of its xdist workers) gets :class:`~pytest_aoti.debug.parent.ParentSession`; a
child that pytest-aoti spawned to rerun or isolate one test gets :class:`~pytest_aoti.debug.child_session.ChildSession`;
both get the fixtures, and every process gets :class:`~pytest_aoti.debug.warm_starts.WarmStarts`, the fork server's
owner. No hook asks which side it is on: the role is settled once here (:func:`pytest_aoti.roles.settle`). Importing
this module must not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from pytest_aoti import fixtures, roles
from pytest_aoti import settings as aoti_settings
from pytest_aoti.cache.options import header_part as cache_header
from pytest_aoti.core import torch_versions
from pytest_aoti.core.protocol import NODEID_ENV, REPORT_FILE_ENV, TEST_PATH_ENV
from pytest_aoti.core.torch_logs import quiet_torch_trace
from pytest_aoti.debug import options as debug_options
from pytest_aoti.debug.options import CrashGuard, debug_settings_key, item_debug
from pytest_aoti.debug.warm_starts import WarmStarts
from pytest_aoti.settings import item_settings, settings_key

# Feature plugins with options of their own: registered with this module, before pytest parses the command line.
pytest_plugins = [
    "pytest_aoti.cache.plugin",
    "pytest_aoti.cache.fleet",
    "pytest_aoti.pictures.plugin",
    "pytest_aoti.benchmark.plugin",
    "pytest_aoti.snapshots.plugin",
    "pytest_aoti.verify.plugin",
    "pytest_aoti.deploy.plugin",
    "pytest_aoti.ci_summary",
]

one_worker_key = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    aoti_settings.add_options(parser)
    debug_options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_aoti import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    debug_options.mark_looponfail(config)  # before xdist's looponfail hands the options to its loop's sessions
    if roles.is_child(config):
        from pytest_aoti.debug.child_session import neutralize_parent_options

        neutralize_parent_options(config)


def pytest_configure(config: pytest.Config) -> None:
    # Before anything reaches into torch: an older torch would fail later, inside a test, with an AttributeError.
    too_old = torch_versions.too_old_problem(torch_versions.installed_torch_version())
    if too_old is not None:
        raise pytest.UsageError(too_old)
    for signature_and_help in [*debug_options.MARKERS.values(), *aoti_settings.MARKERS.values()]:
        config.addinivalue_line("markers", signature_and_help)
    config.stash[settings_key] = aoti_settings.resolve(config)
    debug = debug_options.resolve(config)
    if not roles.is_child(config):
        debug = debug_options.choose_crash_guard(config, debug, xdist_available=config.pluginmanager.hasplugin("xdist"))
        if debug.crash_guard is CrashGuard.ONE_WORKER:
            _one_supervised_worker(config)
    roles.settle(config)  # decided once, after the crash guard
    config.stash[debug_settings_key] = debug
    config.pluginmanager.register(fixtures, "aoti-fixtures")
    # The fork server's plan, launch and stop (after the cache plugin's configure: the server inherits the
    # environment that one sets).
    config.pluginmanager.register(WarmStarts(debug), "aoti-warm-starts")
    if roles.is_child(config):
        from pytest_aoti.debug.child_session import ChildSession

        session: object = ChildSession(
            config, os.environ.get(NODEID_ENV, ""), os.environ.get(TEST_PATH_ENV), os.environ.get(REPORT_FILE_ENV)
        )
        config.pluginmanager.register(session, "aoti-child-session")
        return
    from pytest_aoti.debug.controller import XdistController
    from pytest_aoti.debug.parent import ParentSession

    config.pluginmanager.register(ParentSession(config), "aoti-parent-session")
    if config.pluginmanager.hasplugin("xdist") and not roles.is_worker(config):
        controller = XdistController(config, supervising=config.stash.get(one_worker_key, False))
        config.pluginmanager.register(controller, "aoti-xdist-controller")


def pytest_unconfigure(config: pytest.Config) -> None:
    roles.release(config)


def _one_supervised_worker(config: pytest.Config) -> None:
    """Run the session as one xdist worker (what ``-n 1`` sets up; xdist's own ``pytest_configure`` runs after this
    one and starts it): a test that crashes the worker fails alone, xdist starts a new worker for the tests after
    it, and the controller debug-reruns the crashed test. Restarts are not capped by count: the controller stops the
    run instead when crashes cannot be test failures (during collection, or in setup twice in a row)."""
    config.option.numprocesses = 1
    config.option.dist = "load"
    config.option.tx = ["popen"]
    if getattr(config.option, "maxworkerrestart", None) is None:
        config.option.maxworkerrestart = str(2**31)
    config.stash[one_worker_key] = True


_marker_problem_key = pytest.StashKey[str]()


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Generator[None, Any, Any]:
    """Resolve every test's aoti markers as it is collected. A bad argument fails that test alone, at its setup
    (pytest_runtest_setup below), with one line naming the test, the marker and the argument: as pytest's own
    ``skipif`` with a bad condition does, the rest of the session runs. The same with or without xdist (a usage
    error raised in a worker would be an INTERNALERROR)."""
    result = yield
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, pytest.Item):
            try:
                item_settings(item)
            except pytest.UsageError as error:
                item.stash[_marker_problem_key] = str(error)
            item_debug(item)
    return result


def _device_header(config: pytest.Config, setting: str) -> str:
    """The setting, and where it puts this run's tests: under xdist with GPUs, which worker takes which GPU."""
    from pytest_aoti.core.devices import SPREAD_SETTINGS, choose_device, visible_cuda_devices, worker_map

    if setting not in SPREAD_SETTINGS:
        return setting
    count = visible_cuda_devices()
    workers = getattr(config.option, "numprocesses", None)
    if count and isinstance(workers, int) and workers > 0:
        return (
            f"{setting} (one GPU per xdist worker, {count} visible: {', '.join(worker_map(setting, workers, count))})"
        )
    return f"{setting} ({choose_device(setting, None, count)})"


def pytest_report_header(config: pytest.Config) -> str:
    settings, debug = config.stash[settings_key], config.stash[debug_settings_key]
    header = (
        f"aoti: device={_device_header(config, settings.device)}, debug={'on' if debug.debug else 'off'}, "
        f"isolate={'on' if debug.isolate else 'off'}, rerun timeout={debug.rerun_timeout:g}s, "
        f"cache={cache_header(config)}"
    )
    if debug.crash_guard is CrashGuard.ONE_WORKER:
        header += ", crash guard: one xdist worker (a crash fails only its test)"
    elif debug.no_children_reason:
        header += f", no subprocesses: {debug.no_children_reason}"
    if not config.pluginmanager.has_plugin("tmpdir"):  # tests marked aoti_ima get children too, without an option
        header += ", -p no:tmpdir: child logs and repro bundles are removed at the end of the run"
    extra_stages = [name for name, on in (("minify", debug.minify), ("sanitizer", debug.sanitizer)) if on]
    if extra_stages and not debug.debug:
        # They add stages to debug reruns: without --aoti-debug only tests marked aoti_ima get one.
        header += f" ({' and '.join(extra_stages)} apply to tests marked aoti_ima only: add --aoti-debug for all)"
    untested = torch_versions.untested_note(torch_versions.installed_torch_version())
    return header if untested is None else f"{header}, {untested}"


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    return debug_options.debug_isolation_notice(items)


# pytest attaches its log-capturing handlers to every non-propagating logger, torch's structured-trace logger
# included: without this, each compile puts hundreds of its DEBUG records into "Captured log call".
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # A bad aoti marker argument (pytest_pycollect_makeitem) fails this test before any fixture is set up.
    problem = item.stash.get(_marker_problem_key, None) or debug_options.marker_problem(item)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    quiet_torch_trace()


def pytest_runtest_call(item: pytest.Item) -> None:
    quiet_torch_trace()


def pytest_runtest_teardown(item: pytest.Item) -> None:
    quiet_torch_trace()
