"""The remote cache's password and secret never shown (issue 50, item 2): in what the store says and in a debug
child's reproduce line, in-process (no server; the store's runs against a real redis-server are
tests/test_remote_cache.py)."""

from __future__ import annotations

from pathlib import Path

from pytest_aoti.core.remote_cache import RemoteSettings, mask_url

SECRET = b"s3cret-for-tests"


def test_no_password_or_secret_in_what_the_store_says() -> None:
    settings = RemoteSettings("redis://user:pass-word@host:6379/0", SECRET)
    assert "pass-word" not in repr(settings) and "s3cret" not in repr(settings)
    assert settings.shown_url == "redis://***@host:6379/0"
    assert [mask_url("redis://:pw@h:1/0"), mask_url("rediss://u:pw@h:2/1")] == [
        "redis://***@h:1/0",
        "rediss://***@h:2/1",
    ]


def test_a_debug_childs_reproduce_line_hides_the_password(tmp_path: Path) -> None:
    """A debug child's reproduce line is the parent's command line (JUnit's aoti_reproduce, the report section)."""
    from pytest_aoti.debug.child import ChildRun

    run = ChildRun(
        stage="kernels",
        outcome="passed",  # type: ignore[arg-type]
        returncode=0,
        signal_name=None,
        seconds=1.0,
        log_path=tmp_path / "log",
        command=["python", "-m", "pytest", "--aoti-cache-url=redis://:pass-word@cache.ci:6379/0", "test_a.py"],
        env_delta={"AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER": "3"},
        cwd=tmp_path,
    )
    assert "pass-word" not in run.reproduce and "--aoti-cache-url=redis://***@cache.ci:6379/0" in run.reproduce


def test_a_password_inside_node_ids_and_paths_is_not_rewritten(tmp_path: Path) -> None:
    """Issue 50, item 2: with the password ``test``, the reproduce line read
    ``PYTEST_AOTI_NODEID=***_r.py::***_03_fails`` (pasted, it selected no test, and it told the password). Only the
    URL is masked; the child's environment shows neither the URL's password nor the secret."""
    from pytest_aoti.debug.child import ChildRun

    workdir = tmp_path / "test" / "main"
    run = ChildRun(
        stage="kernels",
        outcome="passed",  # type: ignore[arg-type]
        returncode=0,
        seconds=1.0,
        signal_name=None,
        log_path=workdir / "log",
        command=[
            "python",
            "-m",
            "pytest",
            "-o",
            "aoti_cache_url=redis://:test@cache.ci:6379/0",
            "test_r.py",
            "-k",
            "test",
        ],
        env_delta={
            "PYTEST_AOTI_NODEID": "test_r.py::test_03_fails",
            "PYTEST_AOTI_CACHE_URL": "redis://:test@cache.ci:6379/0",
            "PYTEST_AOTI_CACHE_SECRET": "s3cret-in-the-env",
        },
        cwd=workdir,
    )
    assert run.reproduce == (
        f"cd {workdir} && PYTEST_AOTI_NODEID=test_r.py::test_03_fails "
        "PYTEST_AOTI_CACHE_URL='redis://***@cache.ci:6379/0' python -m pytest -o "
        "'aoti_cache_url=redis://***@cache.ci:6379/0' test_r.py -k test"
    )
