"""The xdist controller's side of a pytest-aoti session, registered only where pytest-xdist is (pytest-xdist splits
its own modules by process role the same way): tests that crash their worker become failures of the phase they
crashed in, with their debug verdict (:mod:`pytest_aoti.debug.crash_route`); the session pytest-aoti supervises as
one worker keeps pytest's order, counts and exit statuses (:mod:`pytest_aoti.debug.in_order`); a worker's
``pytest.exit`` ends the run. The xdist internals used are named in :mod:`pytest_aoti.debug.xdist_compat`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_aoti.debug.child import SIGTERM_EXIT
from pytest_aoti.debug.crash_route import (
    FAILURES_BEFORE,
    SUPERVISED_WORKER,
    WORKER_EXIT,
    Crash,
    crash_reports,
    record_of,
)
from pytest_aoti.debug.in_order import InOrderScheduling
from pytest_aoti.debug.options import DebugRequest
from pytest_aoti.debug.parent import attach_debug, file_of_nodeid, raise_if_interrupted, workers_basetemp_key
from pytest_aoti.debug.xdist_compat import count_crash_failure, scheduler_protocol_known, worker_exit, worker_pid
from pytest_aoti.roles import hand_to_worker


class XdistController:
    """Registered only where pytest-xdist is: debug reruns for tests that crash their worker, crash reports that
    say how the worker ended. With ``supervising`` (the session pytest-aoti turned into one xdist worker, whose
    restarts are not capped), it also stops a run whose crashes cannot be test failures: a worker that dies while
    collecting, or two tests in a row crashing in setup (a session- or module-scoped fixture that crashes would
    otherwise crash once per test)."""

    def __init__(self, config: pytest.Config, *, supervising: bool) -> None:
        self.config = config
        self.supervising = supervising
        self.armed: dict[str, DebugRequest] = {}  # the tests set up on a worker that want a debug rerun
        self.teardowns: dict[str, pytest.TestReport] = {}  # to log after xdist logs the crash report it made
        self.crash_report: pytest.TestReport | None = None  # the last one
        self.devices: dict[str, str] = {}  # the device of each test set up on a worker (its setup report says)
        self.setup_passed: set[str] = set()
        self.call_reported: set[str] = set()  # a test whose worker crashes now crashed in teardown
        self.collected_nodes: set[int] = set()
        self.crashed_in_setup_last = False
        self.stop_reason: str | None = None
        self.session: pytest.Session | None = None
        self.worker: int | None = None  # the supervised worker's pid, while it runs
        self.handed_on: int | None = None  # the signal (SIGINT, SIGTERM) handed on to the supervised worker

    def _session_stops(self) -> bool:
        session = self.session
        return session is not None and bool(session.shouldfail or session.shouldstop)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> InOrderScheduling | None:
        return InOrderScheduling(self._session_stops) if self.supervising and scheduler_protocol_known() else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """The supervised session stops as pytest's own loop does: ``-x``/``--maxfail`` a failure (exit status 1),
        ``--sw`` an interruption, counted over crash reports too (xdist would make both an interruption)."""
        with self._signals_handed_to_the_worker():
            try:
                result = yield
            except KeyboardInterrupt:  # xdist's Interrupted, when its worker stopped itself
                if not (self.supervising and self._session_stops()):
                    raise
                result = True
        if self.supervising and session.shouldfail:
            raise session.Failed(session.shouldfail)
        if self.supervising and session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        return result

    @contextlib.contextmanager
    def _signals_handed_to_the_worker(self) -> Iterator[None]:
        """While the supervised worker runs the tests, Ctrl-C and SIGTERM are handed on to it, the first of each
        kind once (it runs in a session of its own: debug/parent.py), and this process goes on receiving its
        reports until it ends: a test whose debug rerun the signal stopped is reported, failed, with its verdict
        (the worker's exit then ends this run: :meth:`pytest_testnodedown`). A second one, or one while no worker
        runs, acts here at once, as it would have."""
        if not self.supervising or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        if previous[signal.SIGINT] is signal.SIG_IGN:  # started in the background by a shell: Ctrl-C never comes
            del previous[signal.SIGINT]
        for sig in previous:
            signal.signal(sig, self._hand_on)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _hand_on(self, signum: int, frame: Any) -> None:
        worker, self.worker = self.worker, None
        if worker is not None and self.handed_on is None:
            try:
                os.kill(worker, signum)
            except OSError:
                pass
            else:
                self.handed_on = signum
                return
        self._stop_as_signalled(signum)

    @staticmethod
    def _stop_as_signalled(signum: int) -> NoReturn:
        if signum == signal.SIGTERM:
            pytest.exit(SIGTERM_EXIT, returncode=143)
        raise KeyboardInterrupt

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        if self.supervising and self.handed_on is None:
            self.worker = worker_pid(node)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        record = record_of(report)
        if record.debug_request is not None:
            self.armed[report.nodeid] = record.debug_request
        if record.temp_root is not None:
            self.config.stash.setdefault(workers_basetemp_key, record.temp_root)
        if report.when == "setup" and record.device is not None:
            self.devices[report.nodeid] = record.device
        elif report.when == "teardown":
            self.devices.pop(report.nodeid, None)
        if report.when == "setup" and report.passed:
            self.setup_passed.add(report.nodeid)
            self.crashed_in_setup_last = False
        elif report.when == "call":
            self.call_reported.add(report.nodeid)
        yield
        # The teardown is logged once every plugin has logged the crash report, not from inside one of their hooks:
        # pytest-html and junitxml close a test's row on its teardown report and drop what comes after.
        teardown = self.teardowns.pop(report.nodeid, None)
        if teardown is not None:  # xdist logged the crash report it made: now the teardown crash_reports added
            self.config.hook.pytest_runtest_logreport(report=teardown)
        if report is self.crash_report:  # the report xdist made for a crashed worker is logged
            raise_if_interrupted(self.config)  # Ctrl-C came during its debug rerun
            if self.stop_reason is not None:
                pytest.exit(self.stop_reason, returncode=pytest.ExitCode.INTERRUPTED)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.supervising:
            hand_to_worker(node, SUPERVISED_WORKER, True)
            # A worker that replaces a crashed one counts the failures before it toward -x/--maxfail.
            hand_to_worker(node, FAILURES_BEFORE, self.session.testsfailed if self.session is not None else 0)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        self.collected_nodes.add(id(node))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """xdist made ``report`` for a test that crashed its worker and logs it after this hook: it becomes the
        failure of the phase the test crashed in (:func:`crash_reports`), with its debug verdict."""
        in_setup = crashitem not in self.setup_passed
        in_teardown = crashitem in self.call_reported  # the call was reported: it passed or failed, then the crash
        # A crash is this test's failure in the phase it crashed in, not an error of an unknown phase ("???"): in
        # setup or teardown an error, as pytest reports a fixture's exception there.
        when = "setup" if in_setup else "teardown" if in_teardown else "call"
        where = f", in {when}" if when != "call" else ""
        crash = Crash(
            when,
            f"{report.longrepr} ({worker_exit(getattr(report, 'node', None))}{where})",
            self.devices.pop(crashitem, None),
        )
        request = self.armed.get(crashitem)
        attach = (
            None
            if request is None
            else functools.partial(self._attach_debug, request, file_of_nodeid(self.config, crashitem))
        )
        self.crash_report = report
        _, *teardown = crash_reports(crash, report, attach)
        if teardown:
            self.teardowns[crashitem] = teardown[0]
        if not self.supervising:  # the supervised session stops through its scheduler
            count_crash_failure(self.config, report)
        if self.supervising and in_setup and self.crashed_in_setup_last:
            self.stop_reason = (
                f"pytest-aoti stopped the run: {crashitem} crashed in setup right after another test did, with no "
                "test set up in between; a session- or module-scoped fixture that crashes would crash every later "
                "test the same way"
            )
        self.crashed_in_setup_last = in_setup

    def _attach_debug(
        self, request: DebugRequest, test_path: Path, report: pytest.TestReport
    ) -> list[tuple[str, object]]:
        return attach_debug(self.config, report, request, test_path=test_path, failure=None, crashed=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if self.worker is not None and self.worker == worker_pid(node):
            self.worker = None
        workeroutput = getattr(node, "workeroutput", {})
        exited = workeroutput.get(WORKER_EXIT)
        if isinstance(exited, dict):
            pytest.exit(str(exited.get("reason")), returncode=exited.get("returncode"))
        if self.handed_on is not None:  # the worker ended without saying how, after the signal it was handed
            self._stop_as_signalled(self.handed_on)
        if self.supervising and error and id(node) not in self.collected_nodes:
            pytest.exit(
                f"pytest-aoti stopped the run: the xdist worker it runs the tests in ended while collecting "
                f"({worker_exit(node)}); a crash during collection would repeat in every new worker",
                returncode=pytest.ExitCode.INTERRUPTED,
            )
