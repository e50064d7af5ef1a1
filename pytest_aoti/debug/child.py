"""Parent side of the process boundary: run one test alone in a fresh interpreter and bring back what it reported.

A child is the parent's twin, the way pytest-xdist builds its workers: the parent's own command line and invocation
directory (``config.invocation_params``) and environment (``PYTEST_ADDOPTS`` included), overriding only what must
differ — no xdist, its own basetemp, cache dir and JUnit file, the one test selected by node id (the child session
deselects the rest, so the id means what it meant in the parent whatever the layout). Its stdout and stderr go to a
log file at the file-descriptor level (the AOTI printer writes from C/C++), unbuffered, so a crash loses no kernel line.
Reports and warnings come back through pytest's own serialization hooks, one JSON line each, written as they happen.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.cache.options import CACHE_SECRET_ENV
from pytest_aoti.core import isa_verdicts, processes
from pytest_aoti.core.devices import assigned_device
from pytest_aoti.core.isa_verdicts import ISA_RECORD_ENV
from pytest_aoti.core.machine import inductor_cache_dir
from pytest_aoti.core.processes import signal_group, signal_name
from pytest_aoti.core.protocol import (
    CHILD_ENV,
    NODEID_ENV,
    REPORT_FILE_ENV,
    TEST_PATH_ENV,
    Event,
    ExitRequest,
    Finding,
    Outcome,
    ProtocolError,
    append_event,
    decode_events,
)
from pytest_aoti.core.remote_cache import mask_url_argument
from pytest_aoti.debug.child_args import strip_parent_only
from pytest_aoti.debug.crash_route import record_of
from pytest_aoti.forkserver.client import ForkedProcess, start_forked
from pytest_aoti.roles import CHILD_OWNER_ENV, worker_id, worker_input
from pytest_aoti.settings import settings_key

# Variables that would make the child an xdist worker, or that describe the parent's test rather than the child's
# (a child's claim on its role, where a child starts one: the new child claims its own).
_DROPPED_ENV = (
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_XDIST_TESTRUNUID",
    "PYTEST_CURRENT_TEST",
    CHILD_OWNER_ENV,
)
# Set for the child's own bookkeeping; a person reproducing the run by hand does not need them.
_UNSHOWN_ENV = (REPORT_FILE_ENV, TEST_PATH_ENV, "TMPDIR", ISA_RECORD_ENV, CACHE_SECRET_ENV)
_KILL_GRACE_SECONDS = 10.0
# Under -s an isolated child's log holds its whole pytest session (header, collection, summary). The child frames what
# each phase of the test writes (setup, call, teardown) between these, and the parent shows only that, as pytest -s
# shows a test's output. Not lines: a test may print without a newline.
OUTPUT_BEGIN = "[pytest-aoti:test-output-begin]"
OUTPUT_END = "[pytest-aoti:test-output-end]"


@dataclass
class ChildRun:
    """What one child process did: its outcome, how it ended, its log and its test reports."""

    stage: str
    outcome: Outcome
    returncode: int | None
    signal_name: str | None
    seconds: float
    log_path: Path
    command: list[str]
    env_delta: dict[str, str]
    cwd: Path
    reports: list[pytest.TestReport] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)  # the phases the compiled-model code announced, in order
    finding: Finding | None = None  # stage numerics' answer
    exit: ExitRequest | None = None  # the test called pytest.exit: the parent ends its session the same way
    error: str | None = None
    timeout: float | None = None
    attempt: int = 1  # the stage's run: 2 and up are extra runs of a stage that did not reproduce the failure
    # Forked warm from the fork server, with no PYTHONHASHSEED of the user's: its string-hash seed is the server's,
    # the same in every fork (a fork cannot draw another).
    shared_hash_seed: bool = False

    def __post_init__(self) -> None:
        self.outcome = Outcome(self.outcome)  # an outcome's name ("crashed") is taken too, and checked

    @property
    def label(self) -> str:
        return self.stage if self.attempt == 1 else f"{self.stage}, run {self.attempt}"

    @property
    def reproduced(self) -> bool:
        return self.outcome not in (Outcome.PASSED, Outcome.SKIPPED)

    @property
    def log(self) -> str:
        """The child's output; a log that vanished (a tmp cleaner) or cannot be read says so instead."""
        return self._raw_log().replace(OUTPUT_BEGIN, "").replace(OUTPUT_END, "")

    @property
    def test_output(self) -> str:
        """What the test itself wrote under -s: the framed parts of the log. A frame the child never closed (it
        crashed or timed out in that phase) runs to the end of the log, faulthandler's dump included."""
        framed = [part.split(OUTPUT_END, 1)[0] for part in self._raw_log().split(OUTPUT_BEGIN)[1:]]
        return "".join(framed)

    def _raw_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError as error:
            return f"(log missing: {self.log_path}: {error.strerror or error})"

    @property
    def phase(self) -> str | None:
        """The last phase the child announced (export, compile, load, loaded, run, ran), if any."""
        return self.phases[-1] if self.phases else None

    @property
    def unreported_phase(self) -> str | None:
        """The first of the test's pytest phases (setup, call, teardown) the child never reported: where it crashed,
        timed out or exited. None when it reported all three."""
        done = {report.when: report for report in self.reports}
        if "setup" not in done:
            return "setup"
        if done["setup"].passed and "call" not in done:
            return "call"
        return None if "teardown" in done else "teardown"

    @property
    def reproduce(self) -> str:
        """A shell line that reruns this child by hand, pasted in any shell."""
        # The remote cache URL's password never shows (--aoti-cache-url=…, -o aoti_cache_url=…: the child itself
        # gets the real URL), nor the cache's secret; nothing else is rewritten (node ids, paths).
        shown = {k: mask_url_argument(v) for k, v in self.env_delta.items() if k not in _UNSHOWN_ENV}
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items())
        command = shlex.join(mask_url_argument(argument) for argument in self.command)
        return f"cd {shlex.quote(str(self.cwd))} && {env} {command}"

    @property
    def failure(self) -> str | None:
        """The kind of failure this run had: a ``FailureKind`` its report carried, ``crash`` or ``timeout``; None
        when it did not fail."""
        if self.outcome is Outcome.CRASHED:
            return "crash"
        if self.outcome is Outcome.TIMED_OUT:
            return "timeout"
        failed = [report for report in self.reports if report.failed]
        return record_of(failed[0]).failure_kind or "other" if failed else None

    def describe(self) -> str:
        if self.outcome is Outcome.CRASHED:
            return f"crashed with {self.signal_name}"
        if self.outcome is Outcome.TIMED_OUT:
            return f"timed out after {self.timeout:g} s" if self.timeout else "timed out"
        if self.outcome in (Outcome.FAILED, Outcome.ERROR) and self.error:
            return f"{self.outcome}: {self.error}"
        return str(self.outcome)


def _launcher(config: pytest.Config) -> list[str]:
    """``python -u -m pytest`` the way the parent started: ``python -m pytest`` puts the cwd on ``sys.path``, the
    ``pytest`` script does not (``-P``), and imports of the user's tests may depend on which."""
    mainargv = worker_input(config).get("mainargv") or sys.argv
    started_as_script = bool(mainargv) and Path(mainargv[0]).name not in ("__main__.py", "-c", "")
    safe_path = ["-P"] if started_as_script and sys.version_info >= (3, 11) else []
    return [sys.executable, "-u", *safe_path, "-m", "pytest"]


def child_command(config: pytest.Config, *, capture: bool) -> list[str]:
    """The parent's command line without what writes the user's files or changes scheduling
    (:func:`~pytest_aoti.debug.child_args.strip_parent_only`), pinned to the parent's rootdir and ini file, and without
    output capture for the debug stages (the printer writes to the file descriptors, which must reach the log even if
    the child crashes). This is the line the reproduce line shows."""
    args = strip_parent_only([str(arg) for arg in config.invocation_params.args])
    command = [*_launcher(config), *args]
    # pytest picks the rootdir and ini file from the paths among the arguments that exist when it starts, option
    # values included: a directory made since (``--aoti-cache-dir new/dir``) would move the child's rootdir, and
    # every node id with it. Pin both to the parent's.
    command.append(f"--rootdir={config.rootpath}")
    if config.inipath is not None:
        command += ["-c", str(config.inipath)]
    if not capture:
        command.append("--capture=no")
    # An xdist worker's share of the GPUs (devices.py): the child is not a worker, and without this would take
    # cuda:0; its reproduce line names the GPU it ran on.
    assigned = assigned_device(config.stash[settings_key].device, worker_id(config))
    if assigned is not None:
        command.append(f"--aoti-device={assigned}")
    return command


def _isolating_overrides(config: pytest.Config, workdir: Path, stem: str) -> list[str]:
    """Dirs the child must share neither with the parent nor with its sibling stages (stage tensors runs beside stage
    kernels): basetemp (a given one is wiped at start, with the packages a sibling is compiling into it) and pytest's
    cache. Left out of the reproduce line: they point into a temp dir."""
    overrides = [f"--basetemp={workdir / f'{stem}.basetemp'}"]
    if config.pluginmanager.has_plugin("cacheprovider"):
        overrides += ["-o", f"cache_dir={workdir / f'{stem}.pytest-cache'}"]
    return overrides


def _isa_record_for(workdir: Path) -> dict[str, str]:
    """Where a child finds the ISA probes' verdicts (``core.isa_verdicts``): the session's record, inherited; where
    the cache is off, this process's verdicts in a record of the child's own. A process that compiled nothing has
    not probed: nothing to hand on."""
    return isa_verdicts.env_for_child(workdir)


def private_tmpdir(workdir: Path) -> Path:
    """A TMPDIR for the child, so the ``aotinductor_*`` dirs its loader leaks (failed loads, killed processes)
    go away with it, still sharing Inductor's cache and precompiled headers through a link."""
    private = Path(tempfile.mkdtemp(prefix="tmp-", dir=workdir))
    user_cache = inductor_cache_dir()
    user_cache.mkdir(exist_ok=True)
    (private / user_cache.name).symlink_to(user_cache)
    return private


def _first_line(text: str) -> str:
    line = next((line for line in text.splitlines() if line.strip()), "")
    return line[:197] + "..." if len(line) > 200 else line


def _outcome(reports: list[pytest.TestReport], returncode: int | None, nodeid: str) -> tuple[Outcome, str | None]:
    """The child's outcome from its reports; a child that ended without reporting the call phase is an error."""
    for report in reports:
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            return Outcome.FAILED, _first_line(crash.message if crash is not None else str(report.longrepr)) or None
    if any(report.skipped for report in reports):
        return Outcome.SKIPPED, None
    if any(report.when == "call" for report in reports):
        return Outcome.PASSED, None
    if not reports and returncode == pytest.ExitCode.NO_TESTS_COLLECTED:
        return Outcome.ERROR, f"the child collected no test {nodeid!r} (see its log)"
    return Outcome.ERROR, f"the child exited with code {returncode} before reporting the test's result"


@contextmanager
def _terminate_child_on_exit(process: subprocess.Popen[bytes] | ForkedProcess) -> Iterator[None]:
    """Ctrl-C or SIGTERM in the parent ends the child's process group too (it runs in its own session, where the
    terminal's signals do not reach it). Ctrl-C then goes on as it would have; SIGTERM ends the pytest session with
    exit status 143 (:data:`SIGTERM_EXIT`), its summary printed, instead of killing it mid-write. While it waits,
    Ctrl-C raises KeyboardInterrupt here even where this process hands it on otherwise (an xdist controller passes
    it to the worker pytest-aoti supervises: debug/controller.py)."""
    previous_term = previous_int = None
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:

        def on_sigterm(signum: int, frame: Any) -> None:
            raise _Terminated

        previous_term = signal.signal(signal.SIGTERM, on_sigterm)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt:
        signal_group(process.pid, signal.SIGKILL)
        process.wait()
        raise
    except _Terminated:
        signal_group(process.pid, signal.SIGKILL)
        process.wait()
        pytest.exit(SIGTERM_EXIT, returncode=143)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous_term if previous_term is not None else signal.SIG_DFL)
            if previous_int is not None:
                signal.signal(signal.SIGINT, previous_int)


# The reason pytest.exit gives when SIGTERM came while a child ran.
SIGTERM_EXIT = "SIGTERM: pytest-aoti ended its child process and stops the session"


class _Terminated(BaseException):
    """SIGTERM arrived while a child ran."""


@dataclass
class _ChildSetup:
    """What a child is started with, and the files it reports through."""

    stage: str
    attempt: int
    nodeid: str
    command: list[str]  # as shown in the reproduce line: without the isolating overrides
    overrides: list[str]
    env_delta: dict[str, str]
    cwd: Path
    log_path: Path
    report_path: Path
    tmpdir: Path
    # Whether the child will compile (a debug stage or an isolated test of a test that uses a pytest-aoti fixture):
    # only then is a fork server worth starting or waiting for.
    compiles: bool
    fresh: bool = False  # a fresh interpreter even where the fork server could fork it (a hash seed of its own)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        env.update(self.env_delta)
        return env


def _finish(
    config: pytest.Config,
    setup: _ChildSetup,
    returncode: int,
    timed_out: bool,
    seconds: float,
    timeout: float,
    *,
    forked: bool,
) -> ChildRun:
    shutil.rmtree(setup.tmpdir, ignore_errors=True)
    signal_name = _signal_name(returncode)
    error: str | None
    broken_stream: str | None
    try:
        stream = read_stream(config, setup.report_path)
    except ProtocolError as broken:  # another pytest-aoti in the child's interpreter: say so, do not crash pytest
        stream, broken_stream = ChildStream(), f"{broken} (see its log)"
    else:
        broken_stream = None
    if timed_out:
        outcome, error = Outcome.TIMED_OUT, f"stopped after {timeout:g} s"
    elif signal_name is not None:
        outcome, error = Outcome.CRASHED, None
    elif broken_stream is not None:
        outcome, error = Outcome.ERROR, broken_stream
    else:
        outcome, error = _outcome(stream.reports, returncode, setup.nodeid)
        if outcome is Outcome.ERROR and stream.exit is not None:
            error = f"the test called pytest.exit: {stream.exit.reason}"
    return ChildRun(
        stage=setup.stage,
        attempt=setup.attempt,
        command=setup.command,
        env_delta=setup.env_delta,
        cwd=setup.cwd,
        log_path=setup.log_path,
        outcome=outcome,
        error=error,
        returncode=returncode,
        signal_name=signal_name,
        seconds=seconds,
        timeout=timeout if timed_out else None,
        reports=stream.reports,
        warnings=stream.warnings,
        phases=stream.phases,
        finding=stream.finding,
        exit=stream.exit,
        shared_hash_seed=forked and setup.environment().get("PYTHONHASHSEED", "random") in ("", "random"),
    )


def start_child(
    config: pytest.Config,
    nodeid: str,
    *,
    test_path: Path | None,
    stage: str,
    env: Mapping[str, str],
    timeout: float,
    workdir: Path,
    capture: bool,
    compiles: bool,
    prefix: tuple[str, ...] = (),
    attempt: int = 1,
    fresh: bool = False,
) -> StartedChild:
    """Start test ``nodeid`` (defined in ``test_path``, when known) alone in a fresh interpreter, with ``env`` on top
    of this process's environment, its command run under ``prefix`` (a tool like compute-sanitizer) if given;
    ``attempt`` > 1 is another run of the same stage, with its own log; ``fresh``: never forked warm. Wait for it
    with :meth:`StartedChild.wait`."""
    workdir.mkdir(parents=True, exist_ok=True)
    stem = stage if attempt == 1 else f"{stage}.{attempt}"
    report_path = workdir / f"{stem}.reports.jsonl"
    report_path.unlink(missing_ok=True)
    tmpdir = private_tmpdir(workdir)
    env_delta = {
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
        CHILD_ENV: stage,
        NODEID_ENV: nodeid,
        **({TEST_PATH_ENV: str(test_path)} if test_path is not None else {}),
        REPORT_FILE_ENV: str(report_path),
        "TMPDIR": str(tmpdir),
        **_isa_record_for(workdir),
        **env,
    }
    setup = _ChildSetup(
        stage=stage,
        attempt=attempt,
        nodeid=nodeid,
        command=[*prefix, *child_command(config, capture=capture)],
        overrides=_isolating_overrides(config, workdir, stem),
        env_delta=env_delta,
        cwd=config.invocation_params.dir,
        log_path=workdir / f"{stem}.log",
        report_path=report_path,
        tmpdir=tmpdir,
        compiles=compiles,
        fresh=fresh,
    )
    return StartedChild(config, setup, timeout)


class StartedChild:
    """A running child. Its timeout counts from its start, so a child started while another stage runs (stage
    tensors beside stage kernels) is waited for as if it had been run alone. The process is spawned by the calling
    thread (a child dies with the thread that started it); a watcher thread only notes when it ends."""

    def __init__(self, config: pytest.Config, setup: _ChildSetup, timeout: float) -> None:
        self._config, self._setup, self._timeout = config, setup, timeout
        try:
            self._process = _spawn(
                [*setup.command, *setup.overrides],
                env=setup.environment(),
                cwd=setup.cwd,
                log_path=setup.log_path,
                compiles=setup.compiles,
                fresh=setup.fresh,
            )
        except BaseException:
            shutil.rmtree(setup.tmpdir, ignore_errors=True)
            raise
        # From the child's start: waiting for a fork server still warming up is not the test's time.
        self._started = time.monotonic()
        self._ended: float | None = None
        self._done = False
        threading.Thread(target=self._note_end, daemon=True).start()

    def _note_end(self) -> None:
        self._process.wait()
        self._ended = time.monotonic()

    def wait(self) -> ChildRun:
        """Wait for the child, stopping it when its timeout is up, and read what it reported."""
        self._done = True
        try:
            remaining = max(0.0, self._timeout - (time.monotonic() - self._started))
            returncode, timed_out = _wait(self._process, remaining)
        except BaseException:
            shutil.rmtree(self._setup.tmpdir, ignore_errors=True)
            raise
        seconds = (self._ended or time.monotonic()) - self._started
        forked = isinstance(self._process, ForkedProcess)
        return _finish(self._config, self._setup, returncode, timed_out, seconds, self._timeout, forked=forked)

    def discard(self) -> None:
        """Not needed after all (or this process is stopping): end it, keeping its log for the curious."""
        if self._done:
            return
        self._done = True
        signal_group(self._process.pid, signal.SIGKILL)
        self._process.wait()
        shutil.rmtree(self._setup.tmpdir, ignore_errors=True)


def run_process(
    command: list[str], *, env: Mapping[str, str], cwd: Path, log_path: Path, timeout: float
) -> tuple[int, bool, float]:
    """Run ``command`` in its own process group, its output to ``log_path``; stop the group at ``timeout`` (SIGABRT
    first, for faulthandler's tracebacks) and when this process is interrupted. Returns (return code, timed out,
    seconds)."""
    started = time.monotonic()
    process = _spawn(command, env=env, cwd=cwd, log_path=log_path, compiles=True)  # what it runs may compile
    returncode, timed_out = _wait(process, timeout)
    return returncode, timed_out, time.monotonic() - started


def _spawn(
    command: list[str], *, env: Mapping[str, str], cwd: Path, log_path: Path, compiles: bool, fresh: bool = False
) -> subprocess.Popen[bytes] | ForkedProcess:
    """A warm fork of the session's fork server where it can give one (forkserver/) and ``fresh`` is false, else a
    fresh interpreter."""
    forked = None if fresh else start_forked(command, env=env, cwd=cwd, log_path=log_path, compiles=compiles)
    if forked is not None:
        return forked
    with log_path.open("wb") as log:  # the child holds its own copy of the descriptor
        return processes.start(
            command, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )


def _wait(process: subprocess.Popen[bytes] | ForkedProcess, timeout: float) -> tuple[int, bool]:
    timed_out = False
    with _terminate_child_on_exit(process):
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            signal_group(process.pid, signal.SIGABRT)
            try:
                process.wait(timeout=_KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                signal_group(process.pid, signal.SIGKILL)
                process.wait()
    # Compile workers the child started must not outlive it.
    signal_group(process.pid, signal.SIGKILL)
    return process.wait(), timed_out


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    return signal_name(-returncode)


@dataclass
class ChildStream:
    """What a child streamed back: its test reports, warnings, phases, stage numerics' finding and a pytest.exit."""

    reports: list[pytest.TestReport] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    finding: Finding | None = None
    exit: ExitRequest | None = None


def read_stream(config: pytest.Config, path: Path) -> ChildStream:
    """The child's events; a file that is missing or unreadable gives none (the outcome then says the child
    reported nothing). Raises ProtocolError on an event this side does not know."""
    stream = ChildStream()
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return stream
    for event, data in decode_events(lines):
        if event is Event.WARNING:
            stream.warnings.append(data)
        elif event is Event.PHASE:
            stream.phases.append(str(data.get("phase")))
        elif event is Event.FINDING:
            try:
                stream.finding = Finding.from_dict(data)
            except (TypeError, ValueError):
                pass  # not a finding this side can read: the stage says it found none
        elif event is Event.EXIT:
            stream.exit = ExitRequest.from_dict(data)
        else:
            report = config.hook.pytest_report_from_serializable(config=config, data=data)
            if isinstance(report, pytest.TestReport):
                if isinstance(report.longrepr, list):
                    # A skip's (path, lineno, reason) comes back from JSON as a list; pytest's summary wants the tuple.
                    report.longrepr = tuple(report.longrepr)
                stream.reports.append(report)
    return stream


def write_report(config: pytest.Config, report: pytest.TestReport, path: str) -> None:
    """Child side: append one serialized report, flushed, so it survives a later crash."""
    append_event(path, Event.REPORT, config.hook.pytest_report_to_serializable(config=config, report=report))


def write_warning(message: warnings.WarningMessage, when: str, nodeid: str, path: str) -> None:
    """Child side: append one warning the way pytest-xdist's workers send theirs."""
    record = {
        "message": str(message.message),
        "category": f"{message.category.__module__}.{message.category.__qualname__}",
        "filename": message.filename,
        "lineno": message.lineno,
        "when": when,
        "nodeid": nodeid,
    }
    append_event(path, Event.WARNING, record)


def replay_warning(config: pytest.Config, record: dict[str, Any]) -> None:
    """Parent side: record a child's warning as if it had happened here (pytest-xdist's controller does the same)."""
    category = _warning_category(record["category"])
    message = warnings.WarningMessage(
        category(record["message"]), category, record["filename"], record["lineno"], None, None
    )
    config.hook.pytest_warning_recorded.call_historic(
        kwargs={"warning_message": message, "when": record["when"], "nodeid": record["nodeid"], "location": None}
    )


def _warning_category(qualified_name: str) -> type[Warning]:
    import importlib

    module_name, _, name = qualified_name.rpartition(".")
    try:
        category = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return UserWarning
    return category if isinstance(category, type) and issubclass(category, Warning) else UserWarning
