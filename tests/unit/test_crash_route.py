"""The crash route in-process, with a fake worker node and scheduler and no subprocess (as pytest-xdist tests
``DSession`` with ``MockNode``): the xdist controller's side fed the reports a worker would send, then told that
the worker crashed. The real crashes are in tests/test_crash_survival.py and tests/test_debug_rerun.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_aoti.core.protocol import VerdictSummary
from pytest_aoti.debug.controller import XdistController
from pytest_aoti.debug.crash_route import FAILURES_BEFORE, WORKER_EXIT, ReportRecord, record_of, stamp
from pytest_aoti.debug.options import DebugRequest, debug_settings_key

NODEID = "test_user.py::test_crash"
REQUEST = DebugRequest(timeout=60.0, env={"A": "1"}, kernels=("k0",), stages=("kernels",))


class FakeNode:
    """What the controller reads of xdist's ``WorkerController``: no gateway (no process), its in/output dicts."""

    def __init__(self) -> None:
        self.workerinput: dict[str, Any] = {}
        self.workeroutput: dict[str, Any] = {}


class FakeScheduler:
    """``pytest_handlecrashitem``'s ``sched``: the controller never needs it."""


class Logged:
    """A plugin that records the reports the controller logs of its own."""

    def __init__(self) -> None:
        self.reports: list[pytest.TestReport] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.append(report)


@pytest.fixture
def config(pytester: pytest.Pytester) -> Iterator[pytest.Config]:
    """A real configured session's config (the plugin's own settings) whose debug reruns cannot start children:
    triage answers without a subprocess."""
    config = pytester.parseconfigure("-p", "no:cacheprovider", "-p", "no:terminal")
    config.stash[debug_settings_key] = dataclasses.replace(
        config.stash[debug_settings_key], no_children_reason="a unit test"
    )
    yield config
    config._ensure_unconfigure()


def _worker_report(
    when: str, outcome: str = "passed", node: FakeNode | None = None, **record: Any
) -> pytest.TestReport:
    report = pytest.TestReport(NODEID, ("test_user.py", 3, "test_crash"), {}, outcome, None, when)  # type: ignore[arg-type]
    report.node = node  # type: ignore[attr-defined]
    if record:
        stamp(report, **record)
    return report


def _crash(controller: XdistController, node: FakeNode) -> pytest.TestReport:
    """What ``DSession.handle_crashitem`` does: make a report, call the hook, log the report."""
    report = pytest.TestReport(
        NODEID,
        ("test_user.py", None, "test_user.py"),
        {},
        "failed",
        f"worker {'gw0'!r} crashed while running {NODEID!r}",
        "???",
    )  # type: ignore[arg-type]
    report.node = node  # type: ignore[attr-defined]
    controller.pytest_handlecrashitem(crashitem=NODEID, report=report, sched=FakeScheduler())
    controller.config.hook.pytest_runtest_logreport(report=report)
    return report


def _controller(config: pytest.Config, *, supervising: bool = True) -> tuple[XdistController, Logged]:
    controller = XdistController(config, supervising=supervising)
    config.pluginmanager.register(controller, "aoti-xdist-controller-under-test")
    logged = Logged()
    config.pluginmanager.register(logged, "logged")
    return controller, logged


def test_a_crash_in_call_fails_the_call_and_its_teardown_carries_the_device(config: pytest.Config) -> None:
    controller, logged = _controller(config)
    node = FakeNode()
    config.hook.pytest_runtest_logreport(report=_worker_report("setup", node=node, device="cpu"))
    report = _crash(controller, node)
    assert report.when == "call" and report.failed
    assert report.longrepr == f"worker 'gw0' crashed while running {NODEID!r} (crashed)"
    assert record_of(report).crashed
    teardown = logged.reports[-1]
    assert (teardown.when, teardown.outcome, teardown.user_properties) == (
        "teardown",
        "passed",
        [("aoti_device", "cpu")],
    )
    assert teardown.node is node  # type: ignore[attr-defined]  # junitxml's key: one test case with the crash


class LoggedLast(Logged):
    """A logger as pytest-html's is: ``trylast``, and registered after the controller (so called before it)."""

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.append(report)


def test_every_plugin_gets_the_crash_report_before_the_teardown(config: pytest.Config) -> None:
    controller, _ = _controller(config)
    logged = LoggedLast()
    config.pluginmanager.register(logged, "logged-last")
    node = FakeNode()
    config.hook.pytest_runtest_logreport(report=_worker_report("setup", node=node, device="cpu"))
    _crash(controller, node)
    assert [(report.when, report.outcome) for report in logged.reports] == [
        ("setup", "passed"),
        ("call", "failed"),
        ("teardown", "passed"),
    ]


def test_a_crash_before_setup_reported_is_a_setup_error_and_after_call_a_teardown_error(config: pytest.Config) -> None:
    controller, logged = _controller(config, supervising=False)
    node = FakeNode()
    assert _crash(controller, node).when == "setup"
    assert "(crashed, in setup)" in str(logged.reports[0].longrepr)
    config.hook.pytest_runtest_logreport(report=_worker_report("setup", node=node, device="cpu"))
    config.hook.pytest_runtest_logreport(report=_worker_report("call", node=node))
    count = len(logged.reports)
    in_teardown = _crash(controller, node)
    assert in_teardown.when == "teardown" and "(crashed, in teardown)" in str(in_teardown.longrepr)
    assert ("aoti_device", "cpu") in in_teardown.user_properties
    assert len(logged.reports) == count + 1  # the crash report is the teardown: nothing more


def test_a_crashed_test_that_wants_a_rerun_gets_its_verdict(config: pytest.Config) -> None:
    controller, logged = _controller(config)
    node = FakeNode()
    config.hook.pytest_runtest_logreport(report=_worker_report("setup", node=node, debug_request=REQUEST))
    report = _crash(controller, node)
    record = record_of(report)
    assert record.verdict is not None and record.verdict.headline == "not rerun: a unit test"
    assert ("aoti debug rerun", "verdict: not rerun: a unit test") in [
        (t, s.splitlines()[0]) for t, s in report.sections
    ]
    assert dict(logged.reports[-1].user_properties)["aoti_verdict"] == "not rerun: a unit test"


def test_two_setup_crashes_in_a_row_stop_the_supervised_run(config: pytest.Config) -> None:
    controller, _ = _controller(config)
    _crash(controller, FakeNode())
    with pytest.raises(pytest.exit.Exception, match="crashed in setup right after another test did"):
        _crash(controller, FakeNode())


def test_a_worker_that_called_pytest_exit_ends_the_run_with_its_code(config: pytest.Config) -> None:
    controller, _ = _controller(config)
    node = FakeNode()
    node.workeroutput[WORKER_EXIT] = {"reason": "asked to stop", "returncode": 7}
    with pytest.raises(pytest.exit.Exception, match="asked to stop") as stopped:
        controller.pytest_testnodedown(node=node, error=None)
    assert stopped.value.returncode == 7


def test_a_replacement_worker_starts_from_the_sessions_failure_count(config: pytest.Config) -> None:
    controller, _ = _controller(config)
    session = pytest.Session.from_config(config)
    controller.pytest_sessionstart(session)
    session.testsfailed = 2
    node = FakeNode()
    controller.pytest_configure_node(node)
    assert node.workerinput[FAILURES_BEFORE] == 2


def test_the_record_survives_pytests_serialization(config: pytest.Config) -> None:
    """xdist moves reports with pytest_report_to_serializable / _from_serializable: the record goes with them."""
    report = _worker_report(
        "setup", debug_request=REQUEST, device="cuda:1", verdict=VerdictSummary("h", "r"), failure_kind="mismatch"
    )
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    back = config.hook.pytest_report_from_serializable(config=config, data=data)
    assert (
        record_of(back)
        == record_of(report)
        == ReportRecord(
            failure_kind="mismatch", debug_request=REQUEST, device="cuda:1", verdict=VerdictSummary("h", "r")
        )
    )
    # A report from another plugin version, or with garbage in the attribute, carries an empty record.
    report.aoti = {"verdict": {"no": "headline"}}  # type: ignore[attr-defined]
    assert record_of(report) == ReportRecord()


def test_how_a_worker_ended_is_read_off_its_process() -> None:
    """``xdist_compat.worker_exit`` reads execnet's popen gateway: a real process killed by SIGSEGV, one that exited
    with 3, and a node without a process."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from pytest_aoti.debug.xdist_compat import worker_exit

    def node_of(code: str) -> SimpleNamespace:
        popen = subprocess.Popen([sys.executable, "-c", code])
        return SimpleNamespace(gateway=SimpleNamespace(_io=SimpleNamespace(popen=popen)))

    assert worker_exit(node_of("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")) == "crashed with SIGSEGV"
    assert worker_exit(node_of("raise SystemExit(3)")) == "exited with code 3"
    assert worker_exit(FakeNode()) == "crashed"
