"""Child side of the process boundary: the pytest session inside a debug or isolation child.

It keeps only the test the parent asked for (by node id, after collection, so the id means exactly what it meant in
the parent), skips collecting other files, sends every report and warning back as it is made, and makes Hypothesis
replay the saved failing example instead of searching again. It never reruns or isolates anything itself.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.core import phases
from pytest_aoti.core.observers import CallCapture, CallObservers
from pytest_aoti.core.protocol import BUNDLE_ENV, NUMERICS_ENV, Event, ExitRequest, append_event
from pytest_aoti.debug.child import OUTPUT_BEGIN, OUTPUT_END, write_report, write_warning
from pytest_aoti.debug.child_args import without_xdist_group
from pytest_aoti.debug.crash_route import stamp_test_report
from pytest_aoti.fixtures import call_observers_key
from pytest_aoti.roles import is_isolated_test, started_as_pytest

if TYPE_CHECKING:
    from pytest_aoti.core.compiler import CompiledModel


def _call_observers(bundle_dir: str | None, numerics_dir: str | None, event_file: str | None) -> CallObservers:
    """What the core's calls report to in this child: the first debug stage records each call into the repro bundle
    before it runs; stage numerics captures both sides of each compared call and sends its finding to the child's
    event stream. Torch is imported when a call first reports, not here."""
    return CallObservers(
        exported=_source_recorder(Path(bundle_dir)) if bundle_dir else None,
        before_run=_recorder(Path(bundle_dir)) if bundle_dir else None,
        capture=_capturer(Path(numerics_dir), event_file) if numerics_dir else None,
    )


def _recorder(bundle_dir: Path) -> Callable[[CompiledModel, Any, Any], None]:
    def record(compiled: CompiledModel, args: Any, kwargs: Any) -> None:
        from pytest_aoti.debug.bundle import write_call

        write_call(bundle_dir, compiled, args, kwargs)

    return record


def _source_recorder(bundle_dir: Path) -> Callable[[Any], None]:
    def record(program: Any) -> None:
        from pytest_aoti.debug.bundle import write_node_sources

        write_node_sources(bundle_dir, program)

    return record


def _capturer(numerics_dir: Path, event_file: str | None) -> Callable[[int], CallCapture]:
    def capture(number: int) -> CallCapture:
        from pytest_aoti.debug.numerics import Capture

        return Capture(numerics_dir, number, event_file)

    return capture


class ChildSession:
    def __init__(self, config: pytest.Config, nodeid: str, test_path: str | None, report_file: str | None) -> None:
        self.config = config
        self.nodeid = without_xdist_group(nodeid)
        self.test_path = Path(os.path.normpath(test_path)) if test_path else None
        self.report_file = report_file
        if not is_isolated_test(config):
            # A debug stage replays the failing example; an isolated test searches as it would in the parent.
            _replay_hypothesis_failures_only()
        # Where the core's phase marks go: the event stream, and a debug stage's log between the printer's kernel lines
        # (an isolated test's output is captured into its report, where the markers would be noise).
        phases.report_to(report_file, to_stderr=not is_isolated_test(config))
        config.stash[call_observers_key] = _call_observers(
            os.environ.get(BUNDLE_ENV), os.environ.get(NUMERICS_ENV), report_file
        )
        if is_isolated_test(config) and config.getoption("capture") == "no":
            config.pluginmanager.register(FramedTestOutput(), "aoti-framed-test-output")

    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        """Collect only the target's file (and the directories on the way to it): a child of a large suite must
        not import every test module. Package and conftest files are left to pytest."""
        if self.test_path is None or collection_path.name in ("__init__.py", "conftest.py"):
            return None
        if collection_path == self.test_path or collection_path in self.test_path.parents:
            return None
        return True

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        selected = [item for item in items if item.nodeid == self.nodeid]
        deselected = [item for item in items if item.nodeid != self.nodeid]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = selected

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        # What kind of failure this was, and the device, travel with the report: the parent triages debug reruns by
        # the kind, and names the device of a test that crashed the child.
        stamp_test_report(item, report, call.excinfo)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.report_file:
            write_report(self.config, report, self.report_file)

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str, nodeid: str) -> None:
        """Only the test's own warnings go back: those of configuring and collecting ("config", "collect") the
        parent recorded itself, from the same files, and would count again for each child."""
        if self.report_file and when == "runtest":
            write_warning(warning_message, when, nodeid, self.report_file)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """The test called ``pytest.exit``: the parent ends its session with the same reason and return code."""
        if self.report_file and isinstance(excinfo.value, pytest.exit.Exception):
            request = ExitRequest(excinfo.value.msg, excinfo.value.returncode)
            append_event(self.report_file, Event.EXIT, request.to_dict())

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        self.exitstatus = int(exitstatus)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        """Everything the parent reads is written by now (each event as it happened). What is left is interpreter
        shutdown: the final garbage collection walks every object torch, dynamo and Inductor made, and Inductor's
        compile workers are shut down one by one (seconds after a compile). No exit tax: the child ends here with
        its session's status; the parent ends its process group (the workers) and removes its temp dir. Only in
        the process pytest was started as (``python -m pytest ARGS``), never in a pytest run inside a test."""
        gc.freeze()
        if started_as_pytest(self.config):
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(getattr(self, "exitstatus", pytest.ExitCode.INTERNAL_ERROR))


class FramedTestOutput:
    """An isolated test under -s: what each phase writes goes between ``OUTPUT_BEGIN`` and ``OUTPUT_END`` in the
    child's log, written to the file descriptor itself (the log is the child's stdout and stderr), so the parent
    shows the test's output without the child's session around it. Outermost, so fixtures' output is inside."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self) -> Generator[None, None, None]:
        return (yield from _framed())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self) -> Generator[None, None, None]:
        return (yield from _framed())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self) -> Generator[None, None, None]:
        return (yield from _framed())


def _framed() -> Generator[None, None, None]:
    _write_to_log(OUTPUT_BEGIN)
    try:
        return (yield)
    finally:
        _write_to_log(OUTPUT_END)


def _write_to_log(marker: str) -> None:
    # What Python buffered belongs before the marker (the child runs unbuffered, but a test may swap the streams).
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.write(1, marker.encode())


# Options of the parent's that write its files or change its scheduling, and what they become in a child: set
# from PYTEST_ADDOPTS or the ini file's addopts, they reach the child even though its command line leaves them out.
_PARENT_ONLY_OPTIONS: dict[str, object] = {
    "xmlpath": None,  # --junitxml
    "report_log": None,  # pytest-reportlog
    "htmlpath": None,  # pytest-html
    "json_report": False,  # pytest-json-report
    "json_report_file": None,
    "resultlog": None,
    "numprocesses": None,  # pytest-xdist
    "dist": "no",
    "tx": [],
    "distload": False,
    "looponfail": False,
    "lf": False,
    "failedfirst": False,
    "newfirst": False,
    "last_failed_no_failures": "all",
    "stepwise": False,
    "stepwise_skip": False,
    "stepwise_reset": False,
    "cacheclear": False,
    "aoti_cache_clear": None,
}


def neutralize_parent_options(config: pytest.Config) -> None:
    """In a child, before any plugin configures itself: turn off what would write the user's report files, start
    xdist, or select tests by the parent's cache (pytest-xdist's ``remote.setup_config`` does the same to its
    workers' options)."""
    for dest, value in _PARENT_ONLY_OPTIONS.items():
        if hasattr(config.option, dest):
            setattr(config.option, dest, value)


def _replay_hypothesis_failures_only() -> None:
    """Hypothesis replays the failing example from its database (the parent saved it, same cwd) and searches no
    further, so the kernel log is about the failing shape. Loaded before collection: ``@settings`` objects inherit
    the profile that is current when the test module is imported."""
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
