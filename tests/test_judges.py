"""Minify's judges as processes: the judge server (forks), the fresh-interpreter judge, their timeouts and their
ends. A candidate's custom-op module runs first in every judge; here it sleeps (or the program is not loadable), so
no compile is needed to see how judges start, fail, time out and die."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_aoti.debug.minify import _EXIT_NOT_RUN, Search, _JudgeServer

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the judge server forks (Linux only)")

SLEEPER = """
import os, pathlib, time
pathlib.Path(os.environ["JUDGE_PID_FILE"]).write_text(str(os.getpid()))
time.sleep(120)
"""


def _candidate(directory: Path, *, sleeps: bool) -> Path:
    directory.mkdir(parents=True)
    (directory / "exported_program.pt2").write_bytes(b"not a program")
    modules: list[dict[str, str]] = []
    if sleeps:
        (directory / "sleeper.py").write_text(SLEEPER)
        modules.append({"path": str(directory), "module": "sleeper"})
    (directory / "custom_ops.json").write_text(json.dumps(modules))
    return directory


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has ended; only its parent has not read its status yet.
    return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()


def _wait_for_pid(path: Path) -> int:
    for _ in range(600):
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"no judge wrote {path}")


def test_judge_server_forks_times_out_and_takes_its_judges_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "judge.pid"
    server = _JudgeServer({**os.environ, "JUDGE_PID_FILE": str(pid_file)}, tmp_path / "server.log")
    try:
        status, _ = server.judge(_candidate(tmp_path / "c0", sleeps=False), timeout=120)
        assert status == _EXIT_NOT_RUN, (tmp_path / "c0" / "judge.log").read_text()
        assert "not run:" in (tmp_path / "c0" / "judge.log").read_text()
        # A judge past its timeout is ended; the server judges on.
        with pytest.raises(subprocess.TimeoutExpired):
            server.judge(_candidate(tmp_path / "slow", sleeps=True), timeout=2)
        assert not _alive(_wait_for_pid(pid_file))
        status, seconds = server.judge(_candidate(tmp_path / "c1", sleeps=False), timeout=120)
        assert status == _EXIT_NOT_RUN
        assert seconds < 3, "a forked judge does not import torch again"
    except BaseException:
        server.close()
        raise
    # A judge still running when its server ends dies with it.
    pid_file.unlink()
    errors: list[BaseException] = []

    def judge() -> None:
        try:
            server.judge(_candidate(tmp_path / "orphan", sleeps=True), timeout=120)
        except BaseException as error:
            errors.append(error)

    waiting = threading.Thread(target=judge)
    waiting.start()
    judge_pid = _wait_for_pid(pid_file)
    server.close()
    waiting.join(timeout=30)
    assert errors and "the judge server ended" in str(errors[0])
    for _ in range(100):
        if not _alive(judge_pid):
            break
        time.sleep(0.05)
    assert not _alive(judge_pid)


def test_fresh_interpreter_judge_without_a_server(tmp_path: Path) -> None:
    """The path CUDA graphs take: a fresh ``--judge`` interpreter per candidate."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "env.json").write_text("{}")
    search = Search(bundle, "crash", budget=120, workdir=tmp_path / "work")
    status, _ = search._judge(_candidate(tmp_path / "c0", sleeps=False), timeout=120)
    assert status == _EXIT_NOT_RUN, (tmp_path / "c0" / "judge.log").read_text()
