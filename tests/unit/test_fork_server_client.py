"""The fork server's client without a server (pytest_aoti/forkserver/client.py): what a fork cannot give starts
fresh, a server that will never be ready or whose directory is gone is not waited for, a child that compiles nothing
neither waits nor starts one, and a killed session's directory is removed by the next. (A real server's forked
children: tests/test_warm_children.py.)"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_aoti.forkserver import client
from pytest_aoti.forkserver.server import refusal


def test_what_a_fork_cannot_give_starts_fresh() -> None:
    startup = {"PATH": "/bin", "PYTHONPATH": "/a"}
    assert refusal({"PATH": "/bin", "PYTHONPATH": "/b", "TORCHINDUCTOR_NAN_ASSERTS": "1"}, startup) is None
    assert "PYTHONHASHSEED" in (refusal({**startup, "PYTHONHASHSEED": "0"}, startup) or "")
    assert "LD_PRELOAD" in (refusal({**startup, "LD_PRELOAD": "libx.so"}, startup) or "")
    # Read by torch's C++ when it is imported (issue #62 item 7): a fork cannot take them, a fresh child does.
    for name, value in [("TORCH_SHOW_CPP_STACKTRACES", "1"), ("MKL_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "2,1")]:
        assert name in (refusal({**startup, name: value}, startup) or ""), name
    # One thread count: the child sets it as a fresh torch would (torch.set_num_threads).
    assert refusal({**startup, "OMP_NUM_THREADS": "1"}, startup) is None
    assert "OMP_NUM_THREADS" in (refusal(startup, {**startup, "OMP_NUM_THREADS": "1"}) or "")
    assert client.forkable([sys.executable, "-u", "-P", "-m", "pytest", "-k", "x"]) == (["-k", "x"], True)
    assert client.forkable([sys.executable, "-u", "-m", "pytest"]) == ([], False)
    assert client.forkable(["compute-sanitizer", sys.executable, "-u", "-m", "pytest"]) is None
    assert client.forkable(["/other/python", "-u", "-m", "pytest"]) is None


def test_a_server_that_will_never_be_ready_is_not_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An xdist worker handed the socket of a server that said it is unsafe (or died warming up) starts its
    children fresh at once, instead of waiting for a socket that will never appear."""
    (tmp_path / client.UNSAFE_MARK).write_text("a forked child could not start CUDA")
    monkeypatch.setattr(client, "_own_server", None)  # a worker: a server this process started is not its own
    monkeypatch.setenv(client.FORK_SERVER_ENV, str(tmp_path / "socket"))
    started = client.start_forked(
        [sys.executable, "-u", "-m", "pytest"], env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "log"
    )
    assert started is None and not (tmp_path / "log").exists()


def test_a_child_that_compiles_nothing_does_not_wait_for_a_warming_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An isolated test that uses no pytest-aoti fixture starts fresh in ~2 s: it never waits for a server still
    warming up (~7 CPU-s), nor starts one. The handed-down socket here has not appeared, as while its server warms."""
    monkeypatch.setattr(client, "_own_server", None)  # a worker: a server this process started is not its own
    monkeypatch.setenv(client.FORK_SERVER_ENV, str(tmp_path / "socket"))
    command = [sys.executable, "-u", "-m", "pytest"]
    assert (
        client.start_forked(command, env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "log", compiles=False)
        is None
    )
    monkeypatch.delenv(client.FORK_SERVER_ENV)
    assert (
        client.start_forked(command, env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "log", compiles=False)
        is None
    )
    assert client.own_server() is None and not (tmp_path / "log").exists()


def test_a_killed_sessions_server_directory_is_removed_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session killed with SIGKILL cannot remove its fork server's directory (its server dies with it): the next
    session that plans a server removes it, and nothing that is not such a directory of a dead process."""
    import subprocess

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead, alive = ended.pid, os.getpid()
    namespace = os.stat("/proc/self/ns/pid").st_ino
    owners = {
        "dead": f"{namespace} {dead}",
        "alive": f"{namespace} {alive}",
        "foreign": f"{namespace} {dead}",  # holds a file a server never makes
        # Another pid namespace (a container sharing this tmp directory): its pids mean nothing here.
        "other_namespace": f"{namespace + 1} {dead}",
        # What no session writes: no owner (an older release's directory), a pid no process can have, garbage.
        "no_owner": None,
        "huge_pid": f"{namespace} {2**40}",
        "pid_zero": f"{namespace} 0",
        "garbage": "\xff\xfe not an owner",
    }
    left = {name: tmp_path / f"pytest-aoti-fork-{name}" for name in owners}
    left["not_ours"] = tmp_path / "pytest-aoti-forkish"
    owners["not_ours"] = f"{namespace} {dead}"
    for name, directory in left.items():
        directory.mkdir()
        (directory / "server.log").write_text("")
        if owners[name] is not None:
            (directory / "owner").write_text(str(owners[name]))
    (left["foreign"] / "notes.txt").write_text("the user's")
    planned = client.ForkServer()
    try:
        assert not left["dead"].exists()
        assert all(left[name].exists() for name in left if name != "dead"), sorted(left)
        assert planned.dir.parent == tmp_path and planned.dir.name.startswith("pytest-aoti-fork-")
        assert sorted(entry.name for entry in planned.dir.iterdir()) == ["owner", client.PLANNED_MARK]
        assert (planned.dir / "owner").read_text() == f"{namespace} {alive}"
    finally:
        planned.close()
    assert not planned.dir.exists()


def test_a_server_whose_directory_was_removed_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planned server whose directory a tmp cleaner removed before its launch never starts, and a child that
    compiles starts fresh at once instead of waiting for it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planned = client.ForkServer()
    try:
        shutil.rmtree(planned.dir)
        planned.launch()
        assert planned.process is None and not planned.wait_ready(0)
        assert planned.unsafe is not None and "could not start" in planned.unsafe
    finally:
        planned.close()
