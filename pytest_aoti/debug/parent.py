"""Parent side: the pytest session the user started (or one of its xdist workers).

It runs isolated tests in children, debug-reruns failures, keeps later CUDA tests away from a poisoned context, and
writes the ``aoti`` terminal summary from the reports pytest keeps. The xdist controller's part (tests that crash
their worker) is :mod:`pytest_aoti.debug.controller`, registered only where pytest-xdist is. What a report says of
its test, and how a crash becomes reports, is :mod:`pytest_aoti.debug.crash_route`'s.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import getpass
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti import roles
from pytest_aoti.core import phases, processes
from pytest_aoti.core.protocol import Stage
from pytest_aoti.debug.child import SIGTERM_EXIT, ChildRun, replay_warning, start_child
from pytest_aoti.debug.crash_route import (
    FAILURES_BEFORE,
    SUPERVISED_WORKER,
    WORKER_EXIT,
    record_of,
    stamp,
    stamp_test_report,
)
from pytest_aoti.debug.figures import verdict_figures
from pytest_aoti.debug.options import DebugRequest, debug_settings_key, item_debug
from pytest_aoti.debug.reporting import (
    SECTION_TITLE,
    isolated_reports,
    junit_properties,
    render,
    summary_lines,
    verdict_record,
)
from pytest_aoti.debug.stages import Verdict, debug_rerun
from pytest_aoti.debug.triage import triage
from pytest_aoti.hookspecs import PublicVerdict
from pytest_aoti.roles import uses_aoti, writes_user_reports
from pytest_aoti.settings import session_temp_key, settings_key
from pytest_aoti.shared.figure_data import attach_figure_data

poisoned_by_key = pytest.StashKey[str]()
children_dir_key = pytest.StashKey[Path]()
children_note_key = pytest.StashKey[str]()  # why the children's logs are not under pytest's basetemp
workers_basetemp_key = pytest.StashKey[str]()  # on an xdist controller: its basetemp, as a worker's report named it
interrupted_key = pytest.StashKey[BaseException]()  # what stopped a debug rerun: raised again once its report is logged
verdict_properties_key = pytest.StashKey[list[tuple[str, object]]]()  # a test's, for its teardown report
HOOK_ERROR_TITLE = "aoti verdict hook error"


def children_dir(config: pytest.Config) -> Path:
    """Where children keep their logs and temp dirs: under pytest's basetemp, so its retention policy applies
    (:func:`_under_pytest_basetemp`). Where that cannot be, a directory of pytest-aoti's own
    (:func:`own_children_dir`), and the summary's ``aoti child logs:`` line says why; with ``-p no:tmpdir``, a temp
    dir removed at the end (the header says so)."""
    if children_dir_key not in config.stash:
        if not config.pluginmanager.has_plugin("tmpdir"):
            path = Path(tempfile.mkdtemp(prefix="pytest-aoti-children-"))
            config.add_cleanup(functools.partial(shutil.rmtree, path, ignore_errors=True))
            config.stash[children_note_key] = "removed at the end of the run: -p no:tmpdir"
        else:
            try:
                found = _under_pytest_basetemp(config)
            except OSError as error:  # a name too long, a directory not ours, no permission: never the session's end
                found = None
                config.stash[children_note_key] = f"not {error.filename}: {error.strerror or error}"
            path = found if found is not None else own_children_dir(Path(tempfile.gettempdir()))
        config.stash[children_dir_key] = path
    return config.stash[children_dir_key]


def _under_pytest_basetemp(config: pytest.Config) -> Path | None:
    """pytest hands its session TempPathFactory only to fixtures, and creates (and first empties) the basetemp when
    one first asks for it. So, by what this process knows:

    - a fixture ran: ``aoti_device``, where every aoti fixture starts, stashed the factory;
    - an xdist worker: its controller created its basetemp before starting it (the worker's ``--basetemp``'s parent);
    - an xdist controller (its workers run the fixtures): the basetemp a worker's setup report named (``temp_root``);
    - a plain session whose aoti tests so far ran isolated: beside a ``--basetemp`` the user gave
      (:func:`beside_given_basetemp`); without one, None.
    """
    factory = config.stash.get(session_temp_key, None)
    if factory is not None:
        return factory.mktemp("aoti-children", numbered=False)
    controller_basetemp = config.stash.get(workers_basetemp_key, None) or _controller_basetemp(config)
    if controller_basetemp is not None:
        worker = roles.worker_id(config)
        path = Path(controller_basetemp) / ("aoti-children" + (f"-{worker}" if worker else ""))
        path.mkdir(mode=0o700, exist_ok=True)
        return path
    if config.getoption("basetemp", None):
        return beside_given_basetemp(config.invocation_params.dir / str(config.getoption("basetemp")))
    return None


def _controller_basetemp(config: pytest.Config) -> str | None:
    """On an xdist worker, its controller's basetemp: xdist gives each worker ``--basetemp=<it>/popen-gwN``."""
    basetemp = config.getoption("basetemp", None)
    if not roles.is_worker(config) or not basetemp:
        return None
    return str(Path(basetemp).parent)


OWN_DIR_KEPT_SECONDS = 7 * 24 * 3600
OURS = ".made-by-pytest-aoti"  # in a directory pytest-aoti may empty again: one it made


def beside_given_basetemp(basetemp: Path) -> Path:
    """``<basetemp>-aoti-children``, emptied as pytest empties a given ``--basetemp``: once per session. Not inside
    it: pytest empties the basetemp when it first creates it, which can come after children wrote their logs (a
    later test's ``tmp_path``). A directory (or link) of that name that pytest-aoti did not make is left alone:
    FileExistsError, as for any other OSError the caller falls back to a directory of pytest-aoti's own."""
    path = basetemp.with_name(f"{basetemp.name}-aoti-children")
    if path.is_symlink() or (path.exists() and not (path / OURS).is_file()):
        raise FileExistsError(errno.EEXIST, "a directory pytest-aoti did not make, left alone", str(path))
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(mode=0o700, parents=True)
    (path / OURS).touch()
    return path


def own_children_dir(temp_root: Path, now: float | None = None) -> Path:
    """A new ``children-*`` directory under ``<temp_root>/pytest-aoti-of-<user>``. Those of earlier sessions are
    removed after a week: by age, not by count, because sessions running at the same time (xdist runs, CI jobs on one
    host) each hold one. A base directory that is not this user's own, or is a link, is not used (another user
    could read or plant files there): then a fresh private temp directory."""
    base = temp_root / f"pytest-aoti-of-{_user()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        if base.is_symlink() or base.stat().st_uid != os.getuid():
            raise PermissionError(f"{base} is not this user's own directory")
    except OSError:
        return Path(tempfile.mkdtemp(prefix="pytest-aoti-children-", dir=temp_root))
    cutoff = (time.time() if now is None else now) - OWN_DIR_KEPT_SECONDS
    for old in base.glob("children-*"):
        with contextlib.suppress(OSError):
            if old.is_dir() and not old.is_symlink() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix="children-", dir=base))


def _user() -> str:
    try:
        return re.sub(r"[^\w.-]+", "_", getpass.getuser())
    except (OSError, KeyError, ImportError):  # no user name in a container: the uid names the directory
        return str(os.getuid())


def _workdir(config: pytest.Config, nodeid: str) -> Path:
    safe = re.sub(r"[^\w.-]+", "_", nodeid)[-100:]
    return Path(tempfile.mkdtemp(prefix=safe + "-", dir=children_dir(config)))


def file_of_nodeid(config: pytest.Config, nodeid: str) -> Path:
    """The file a node id names (its part before the first ``::``, relative to the rootdir; ``../`` when the tests
    live outside it), normalized as pytest's own collection paths are."""
    return Path(os.path.normpath(config.rootpath / nodeid.split("::", 1)[0]))


def attach_debug(
    config: pytest.Config,
    report: pytest.TestReport,
    request: DebugRequest,
    *,
    test_path: Path | None,
    failure: str | None,
    isolated_run: ChildRun | None = None,
    reached_aoti: bool = True,
    crashed: bool = False,
) -> list[tuple[str, object]]:
    """Debug-rerun the failed test (unless triage says a rerun cannot tell more) and attach the verdict to its
    report. ``reached_aoti``: whether the test announced any pytest-aoti phase (export, compile, load, run) before
    it failed. Returns the JUnit properties, which the caller must also put on the test's teardown report: junitxml
    reads ``user_properties`` from that one only. A Ctrl-C during the rerun ends the rerun, not the report: the
    caller logs the report, then :func:`raise_if_interrupted` ends the run."""
    plan = triage(
        failure,
        request,
        isolated_run=isolated_run,
        setup_failed_before_aoti=report.when == "setup" and not reached_aoti,
        no_children_reason=config.stash[debug_settings_key].no_children_reason,
    )
    original = "crash" if crashed else isolated_run.failure if isolated_run is not None else failure
    if plan.not_rerun is not None:
        verdict = Verdict(report.nodeid, not_rerun=plan.not_rerun)
    else:
        workdir = _workdir(config, report.nodeid)
        try:
            # A rerun that fails another way (a fixture a child cannot find, a different exception) explains that
            # failure, not the test's: the verdict says so.
            verdict = debug_rerun(
                config,
                report.nodeid,
                test_path=test_path,
                workdir=workdir,
                request=request,
                plan=plan,
                failure=original,
            )
        except (KeyboardInterrupt, pytest.exit.Exception) as stop:  # Ctrl-C, SIGTERM (child.SIGTERM_EXIT)
            config.stash[interrupted_key] = stop
            verdict = Verdict(report.nodeid, not_rerun=f"the debug rerun was interrupted ({_how_stopped(stop)})")
    rendered = render(verdict, original)
    _publish_verdict(config, report, rendered)
    report.sections.append((SECTION_TITLE, rendered.text))
    before = list(report.user_properties)
    attach_figure_data(report, *verdict_figures(verdict))
    # The pictures' data go with the verdict's properties: onto the teardown report too, the one JUnit reads.
    properties: list[tuple[str, object]] = [*junit_properties(rendered), *report.user_properties[len(before) :]]
    report.user_properties = [*before, *properties]
    stamp(report, verdict=verdict_record(rendered))
    return properties


def _publish_verdict(config: pytest.Config, report: pytest.TestReport, verdict: PublicVerdict) -> None:
    """``pytest_aoti_verdict``: a hook implementation that raises is the hook's error, reported on the test's
    report with its traceback, not the run's end."""
    try:
        config.hook.pytest_aoti_verdict(config=config, nodeid=report.nodeid, verdict=verdict)
    except Exception:
        report.sections.append((HOOK_ERROR_TITLE, traceback.format_exc()))


def _how_stopped(stop: BaseException) -> str:
    if isinstance(stop, pytest.exit.Exception):
        return "SIGTERM" if stop.msg == SIGTERM_EXIT else f"pytest.exit: {stop.msg}"
    return type(stop).__name__


def raise_if_interrupted(config: pytest.Config) -> None:
    """Ctrl-C or SIGTERM came during a debug rerun: the report that rerun was for is logged, now the run ends as
    pytest's does on Ctrl-C (or, for SIGTERM, with exit status 143)."""
    stop = config.stash.get(interrupted_key, None)
    if stop is not None:
        raise stop


def _signals_through_the_controller() -> None:
    """The worker pytest-aoti supervises takes Ctrl-C and SIGTERM from its controller only, once each, in a session
    of its own (a terminal's Ctrl-C to the whole job would reach it a second time, mid-way through logging the
    report of a test whose debug rerun the first one stopped: debug/controller.py). SIGTERM ends its session with
    its summary, as it does while a child runs (:data:`SIGTERM_EXIT`); and it dies with its controller."""
    with contextlib.suppress(OSError):
        os.setsid()
    processes.die_with_parent()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    pytest.exit(SIGTERM_EXIT, returncode=143)


class ParentSession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.terminated = False  # SIGTERM ended the run (SIGTERM_EXIT)
        if roles.worker_input(config).get(FAILURES_BEFORE) and hasattr(config.option, "stepwise_skip"):
            # This worker replaces one that crashed after a failure: --sw-skip's one skip is spent (pytest's
            # stepwise plugin reads the option when it configures itself, after this).
            config.option.stepwise = config.option.stepwise or config.option.stepwise_skip
            config.option.stepwise_skip = False
        if roles.worker_input(config).get(SUPERVISED_WORKER):
            _signals_through_the_controller()

    def _isolate_reason(self, item: pytest.Item) -> str | None:
        if any(self.config.getoption(name, False) for name in ("setupplan", "setuponly")):
            return None  # only fixtures are set up (or shown): nothing a child would add
        reason = item_debug(item).isolate_reason
        if reason is not None:
            return reason
        poisoned_by = self.config.stash.get(poisoned_by_key, None)
        if poisoned_by is not None and uses_aoti(item) and self.config.stash[settings_key].device != "cpu":
            return f"the CUDA context was poisoned by {poisoned_by}"
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        reason = self._isolate_reason(item)
        if reason is None:
            return None  # pytest's own protocol; a failure's debug rerun hangs on its report (makereport below)
        resolved = item_debug(item)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        capture = self.config.getoption("capture", "fd") != "no"
        run = start_child(
            self.config,
            item.nodeid,
            test_path=item.path,
            stage=Stage.ISOLATE,
            env={},
            timeout=resolved.isolate_timeout,
            workdir=_workdir(self.config, item.nodeid),
            capture=capture,
            compiles=uses_aoti(item),
        ).wait()
        if not capture:
            # -s: the test's output, as it would have reached the terminal in this process.
            self.config.get_terminal_writer().write(run.test_output)
        for record in run.warnings:
            replay_warning(self.config, record)
        self._log_isolated(item, run, reason, resolved.request)
        if run.exit is not None:
            # As pytest does in-process: the reports made before the exit are logged, then the session ends.
            pytest.exit(run.exit.reason, returncode=run.exit.returncode)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        raise_if_interrupted(self.config)
        return True

    def _log_isolated(self, item: pytest.Item, run: ChildRun, reason: str, request: DebugRequest | None) -> None:
        """Log the isolated child's reports, a failed setup or call with its debug verdict. A crash (also in
        teardown: the package's release, or a device-side assert that aborts at the next synchronize) gets its
        verdict through the crash route, unless the child had reported a failure that has one already."""

        def attach(report: pytest.TestReport, failure: str | None = None) -> list[tuple[str, object]]:
            assert request is not None
            return attach_debug(
                self.config,
                report,
                request,
                test_path=item.path,
                failure=failure,
                isolated_run=run,
                reached_aoti=run.phase is not None,
            )

        child_failed = any(report.failed and report.when in ("setup", "call") for report in run.reports)
        crash_attach = attach if request is not None and not child_failed else None
        properties: list[tuple[str, object]] = []
        for report in isolated_reports(item, run, reason, crash_attach):
            record = record_of(report)
            if report.failed and report.when in ("setup", "call") and not record.crashed and request is not None:
                properties = attach(report, record.failure_kind)
            if report.when == "teardown":
                report.user_properties = [*report.user_properties, *properties]
            item.ihook.pytest_runtest_logreport(report=report)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Each report of a test run here gets its record; a failed setup or call that wants a debug rerun gets its
        verdict before pytest logs the report (as pytest-rerunfailures works from pytest's own reports), and the
        verdict's JUnit properties go on the teardown report too, which junitxml reads them from."""
        report = yield
        stamp_test_report(item, report, call.excinfo)
        request = item_debug(item).request
        if request is not None and report.when == "setup":
            # Tells an xdist controller, should this worker crash, that the test wants a debug rerun, and where its
            # basetemp is (see children_dir).
            stamp(report, debug_request=request, temp_root=_controller_basetemp(self.config))
        if report.failed and report.when in ("setup", "call"):
            self._check_cuda_context(item, report)
            if request is not None:
                record = record_of(report)
                item.stash[verdict_properties_key] = attach_debug(
                    self.config,
                    report,
                    request,
                    test_path=item.path,
                    failure=record.failure_kind,
                    reached_aoti=record.reached_aoti,
                )
        if report.when == "teardown":
            report.user_properties = [*report.user_properties, *item.stash.get(verdict_properties_key, [])]
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        """Ctrl-C or SIGTERM came during a debug rerun of this test: its reports are logged, its teardown's with the
        verdict's JUnit properties (and an xdist worker's sent), now it ends the run."""
        raise_if_interrupted(self.config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        phases.forget()  # what counts is what this test reaches

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        session.testsfailed = roles.worker_input(self.config).get(FAILURES_BEFORE, 0)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """SIGTERM ended the run while a child ran (exit status 143): pytest writes its terminal summary for the
        statuses of its own only; the failures so far, and their verdicts, are written all the same (as for
        Ctrl-C), before pytest's last line."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.terminated and reporter is not None and writes_user_reports(self.config):
            self.config.hook.pytest_terminal_summary(
                terminalreporter=reporter, exitstatus=exitstatus, config=self.config
            )

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """An xdist worker whose test called ``pytest.exit`` (or that SIGTERM stopped), or the supervised worker that
        Ctrl-C stopped: the controller ends the run the same way (xdist itself would take the test that was running
        for a crash, and start another worker)."""
        if isinstance(excinfo.value, pytest.exit.Exception) and excinfo.value.msg == SIGTERM_EXIT:
            self.terminated = True
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is None:
            return
        if isinstance(excinfo.value, pytest.exit.Exception):
            workeroutput[WORKER_EXIT] = {"reason": excinfo.value.msg, "returncode": excinfo.value.returncode}
        elif roles.worker_input(self.config).get(SUPERVISED_WORKER):
            workeroutput[WORKER_EXIT] = {"reason": "KeyboardInterrupt", "returncode": int(pytest.ExitCode.INTERRUPTED)}

    def _check_cuda_context(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """After a failure in this process, probe CUDA: a sticky error (an illegal memory access) poisons the
        context for every later test, which then runs isolated instead of failing with the inherited error."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        from pytest_aoti.core.compiler import cuda_context_problem

        problem = cuda_context_problem()
        if problem is not None:
            self.config.stash[poisoned_by_key] = item.nodeid
            stamp(report, poisoned_cuda=True)
            report.sections.append(
                (
                    "aoti cuda context",
                    f"the CUDA context of this process is unusable after this test: {problem}\n"
                    "later tests that use CUDA run in fresh subprocesses (pytest-aoti).",
                )
            )

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The supervised worker is a process pytest-aoti added, not the user's interpreter: once its reports are sent,
        skip shutdown's final garbage collection over every object torch made, which the controller would wait for
        (docs/benchmarks.md#skipping-the-final-garbage-collection). The controller, the process the user started, ends
        as it always does."""
        if roles.worker_input(config).get(SUPERVISED_WORKER):
            gc.freeze()

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        from pytest_aoti.cache.stats import summary_line

        verdicts: list[str] = []
        poisoned: list[str] = []
        seen: set[tuple[str, str]] = set()
        for reports in terminalreporter.stats.values():
            for report in reports:
                record = record_of(report)
                summary = record.verdict
                if summary is not None and (report.nodeid, summary.headline) not in seen:
                    seen.add((report.nodeid, summary.headline))
                    verdicts += summary_lines(report.nodeid, summary)
                if record.poisoned_cuda:
                    poisoned.append(
                        f"CUDA context poisoned by {report.nodeid}: later CUDA tests of that process ran in fresh "
                        "subprocesses"
                    )
                poisoned += _hook_errors(report)
        cache_line = summary_line(config)  # the package cache's, over every xdist worker
        if not verdicts and not poisoned and cache_line is None:
            return
        terminalreporter.write_sep("=", "aoti")
        for line in [*verdicts, *poisoned]:
            terminalreporter.write_line(line)
        if cache_line is not None:
            terminalreporter.write_line(cache_line)
        if children_dir_key in config.stash:
            note = config.stash.get(children_note_key, None)
            shown = f" ({note})" if note else ""
            terminalreporter.write_line(f"aoti child logs: {config.stash[children_dir_key]}{shown}")


def _hook_errors(report: Any) -> list[str]:
    """A line per ``pytest_aoti_verdict`` error on ``report``: the traceback's last line."""
    return [
        f"pytest_aoti_verdict raised {text.strip().splitlines()[-1]} ({report.nodeid}; traceback in its report "
        f"section '{HOOK_ERROR_TITLE}')"
        for title, text in getattr(report, "sections", ())  # the summary's stats hold warnings' reports too
        if title == HOOK_ERROR_TITLE and text.strip()
    ]
