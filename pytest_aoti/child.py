"""Run one test alone in a fresh interpreter (spawned, never forked) and bring back its reports and output.

The child's stdout and stderr go to a log file at the file-descriptor level (the AOTI printer writes from C/C++), with
Python unbuffered (``-u`` also sets C stdio unbuffered, so a crash loses no kernel lines). Its test reports come back
through pytest's own report serialization hooks, one JSON line per report, written as they happen.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.phases import CHILD_ENV

REPORT_FILE_ENV = "PYTEST_AOTI_REPORT_FILE"
# Variables a child must not inherit: they would make it an xdist worker or re-add the parent's options.
_DROPPED_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST")
_KILL_GRACE_SECONDS = 10.0


@dataclass
class ChildRun:
    """What one child process did: its outcome, how it ended, its log and its test reports."""

    stage: str
    outcome: str  # passed, failed, skipped, crashed, timed out, error
    returncode: int | None
    signal_name: str | None
    seconds: float
    log_path: Path
    command: list[str]
    env_delta: dict[str, str]
    cwd: Path
    reports: list[pytest.TestReport] = field(default_factory=list)
    error: str | None = None

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def reproduce(self) -> str:
        """A shell line that reruns this child by hand."""
        shown = {k: v for k, v in self.env_delta.items() if k not in (REPORT_FILE_ENV, "TMPDIR")}
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items())
        return f"cd {shlex.quote(str(self.cwd))} && {env} {shlex.join(self.command)}"

    def describe(self) -> str:
        if self.outcome == "crashed":
            return f"crashed with {self.signal_name}"
        if self.outcome == "timed out":
            return "timed out"
        if self.outcome in ("failed", "error") and self.error:
            return f"{self.outcome}: {self.error}"
        return self.outcome


def child_command(config: pytest.Config, nodeid: str, extra_args: list[str]) -> list[str]:
    """``python -u -m pytest <nodeid>`` with the parent's rootdir, ini file, ``-p`` plugins and overrides."""
    command = [sys.executable, "-u", "-m", "pytest", nodeid, "-s", "-q", "-p", "no:cacheprovider"]
    command += ["--rootdir", str(config.rootpath)]
    if config.inipath is not None:
        command += ["-c", str(config.inipath)]
    for plugin in config.option.plugins or []:
        command += ["-p", plugin]
    for override in config.option.override_ini or []:
        command += ["-o", override]
    if config.pluginmanager.hasplugin("xdist"):
        command += ["-n", "0"]
    return command + extra_args


def _private_tmpdir(workdir: Path) -> Path:
    """A TMPDIR for the child, so the ``aotinductor_*`` dirs its loader leaks (failed loads, killed processes)
    go away with it, still sharing Inductor's cache and precompiled headers through a link."""
    private = Path(tempfile.mkdtemp(prefix="tmp-", dir=workdir))
    user_cache = Path(tempfile.gettempdir()) / f"torchinductor_{_user_name()}"
    user_cache.mkdir(exist_ok=True)
    (private / user_cache.name).symlink_to(user_cache)
    return private


def _user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid_{os.getuid()}"


def _outcome(reports: list[pytest.TestReport]) -> tuple[str, str | None]:
    for report in reports:
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1:]
            first_line = str(message).splitlines()[0] if message else ""
            return "failed", (first_line[:200] + "...") if len(first_line) > 200 else first_line or None
    if any(report.skipped for report in reports):
        return "skipped", None
    return ("passed", None) if reports else ("error", "the child reported no test (was it collected?)")


def run_child(
    config: pytest.Config,
    nodeid: str,
    *,
    stage: str,
    env: Mapping[str, str],
    timeout: float,
    workdir: Path,
    extra_args: list[str] | None = None,
) -> ChildRun:
    """Run ``nodeid`` in a fresh interpreter with ``env`` on top of this process's environment."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{stage}.log"
    report_path = workdir / f"{stage}.reports.jsonl"
    report_path.unlink(missing_ok=True)
    tmpdir = _private_tmpdir(workdir)
    env_delta = {
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
        CHILD_ENV: stage,
        REPORT_FILE_ENV: str(report_path),
        "TMPDIR": str(tmpdir),
        **env,
    }
    child_env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV and k != "PYTEST_ADDOPTS"}
    child_env.update(env_delta)
    command = child_command(config, nodeid, extra_args or [])
    cwd = config.invocation_params.dir
    started = time.monotonic()
    timed_out = False
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            # SIGABRT first: faulthandler (PYTHONFAULTHANDLER) dumps every thread's traceback into the log.
            _signal_group(process.pid, signal.SIGABRT)
            try:
                process.wait(timeout=_KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        # Compile workers the child started must not outlive it.
        _signal_group(process.pid, signal.SIGKILL)
    seconds = time.monotonic() - started
    shutil.rmtree(tmpdir, ignore_errors=True)

    reports = read_reports(config, report_path)
    returncode = process.returncode
    signal_name = _signal_name(returncode)
    if timed_out:
        outcome, error = "timed out", f"stopped after {timeout:g} s (--aoti-rerun-timeout)"
    elif signal_name is not None:
        outcome, error = "crashed", None
    else:
        outcome, error = _outcome(reports)
        if outcome == "passed" and returncode not in (0, None):
            outcome, error = "error", f"pytest exited with code {returncode}"
    return ChildRun(
        stage=stage,
        outcome=outcome,
        returncode=returncode,
        signal_name=signal_name,
        seconds=seconds,
        log_path=log_path,
        command=command,
        env_delta=env_delta,
        cwd=cwd,
        reports=reports,
        error=error,
    )


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def read_reports(config: pytest.Config, path: Path) -> list[pytest.TestReport]:
    if not path.exists():
        return []
    reports = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            data: dict[str, Any] = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        report = config.hook.pytest_report_from_serializable(config=config, data=data)
        if isinstance(report, pytest.TestReport):
            reports.append(report)
    return reports


def write_report(config: pytest.Config, report: pytest.TestReport, path: str) -> None:
    """Child side: append one serialized report, flushed, so it survives a later crash."""
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(path, "a") as stream:
        stream.write(json.dumps(data) + "\n")
