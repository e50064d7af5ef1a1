"""Warm starts: the session's fork server (:mod:`pytest_aoti.forkserver`), from its plan to its stop, in one plugin
object's hooks (as pytest-xdist's ``DSession`` starts and stops its nodes in its own session hooks).

- **Plan** (``pytest_configure``): under ``--aoti-debug`` or ``--aoti-isolate``, in the process pytest was started as,
  when tests will run and may have children: the server's directory, and its socket path handed to xdist workers
  through the environment.
- **Launch** (``pytest_runtest_logreport``): at the first setup report that carries a device, that is of a test that
  uses a pytest-aoti fixture: the server warms up beside that test's compile. A worker's setup reports reach its
  controller, and they are how a worker's tests trigger the warm-up: a worker only plans nothing and launches nothing.
- **Stop** (``pytest_unconfigure``): the server this process planned or started (one a child asked for on demand, in
  a session without a plan, too).

A child that finds no server of its own or handed down starts fresh, or starts a server then
(``forkserver.client.start_forked``, :mod:`pytest_aoti.debug.child`).
"""

from __future__ import annotations

import pytest

from pytest_aoti import roles
from pytest_aoti.debug.crash_route import record_of
from pytest_aoti.debug.options import DebugSettings
from pytest_aoti.forkserver.client import launch_server, plan_server, stop_server


class WarmStarts:
    def __init__(self, debug: DebugSettings) -> None:
        self.debug = debug

    def pytest_configure(self, config: pytest.Config) -> None:
        if self._planned_ahead(config):
            # Under --aoti-debug its children are mostly debug stages: it imports torch as they want it.
            from pytest_aoti.debug.stages import READ_ONCE_STAGE_ENV

            plan_server(READ_ONCE_STAGE_ENV if self.debug.debug else None)

    def _planned_ahead(self, config: pytest.Config) -> bool:
        """Whether to plan the fork server ahead of need: in the process pytest was started as (``pytest.main()``
        inside a test or a script starts one at its first child instead), never in an xdist worker (its controller's
        is handed down) or a child, when tests will run and may have children. Planned, it is launched at the first
        test that uses a pytest-aoti fixture, beside that test's compile, and not at the first child: a run with
        failures to debug is faster that way (docs/benchmarks.md#children-and-the-fork-server)."""
        debug = self.debug
        if not (debug.debug or debug.isolate) or not roles.writes_user_reports(config):
            return False
        if debug.no_children_reason or not roles.started_as_pytest(config):
            return False
        return not any(config.getoption(name, False) for name in ("collectonly", "setupplan", "setuponly"))

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup" and record_of(report).device is not None:
            # A test that uses a pytest-aoti fixture was set up, here or in an xdist worker: the planned fork server
            # warms up beside its compile (a no-op where none was planned, or once launched).
            launch_server()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        stop_server()
