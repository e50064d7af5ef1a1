"""The remote cache as a user sees it: pytest runs on fresh runners (fresh local cache dirs) against a real
``redis-server``, their headers, summaries and JUnit files. The store's faults are tested on the store itself
(tests/test_remote_cache.py); the ISA probes' record in tests/test_isa_verdicts.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases
from tests.redis_server import REDIS_SERVER, RedisServer

PASSWORD = "pass-w0rd-of-the-server"
SECRET = "s3cret-that-signs-entries"

TEST_MLP = """
import torch
from aoti_models import MLP

def test_mlp(aoti_check):
    aoti_check(MLP(), (torch.randn(2, 8),))
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'pytest-aoti[test]')")
    started = RedisServer(tmp_path / "redis", requirepass=PASSWORD).start()
    yield started
    started.stop()


def _text(result: pytest.RunResult) -> str:
    return result.stdout.str() + result.stderr.str()


def _flip_a_byte_of_every_entry(server: RedisServer) -> None:
    admin = server.admin()
    for name in admin.keys("pytest-aoti:1:*:*:0"):
        data = bytearray(admin.get(name))
        data[10] ^= 0x01
        admin.set(name, bytes(data))


def test_runner_b_loads_what_runner_a_compiled_and_refuses_a_tampered_entry(
    pytester: pytest.Pytester,
    run_pytest: RunPytest,
    server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runner A compiles and uploads; runner B (a fresh local cache, under xdist) loads A's package; after one byte
    of the entry is flipped on the server, runner C refuses it, recompiles and replaces it; runner E does the same
    for an entry whose compile_seconds was changed; runner D, given a wrong password on the command line, warns
    once and compiles. The server's password and the secret appear nowhere."""
    pytester.makepyfile(test_model=TEST_MLP)
    monkeypatch.setenv("PYTEST_AOTI_CACHE_URL", server.url(password=PASSWORD))
    monkeypatch.setenv("PYTEST_AOTI_CACHE_SECRET", SECRET)
    outputs: list[str] = []

    def runner(name: str, *args: str) -> tuple[pytest.RunResult, dict[str, object]]:
        junit = tmp_path / f"{name}.xml"
        result = run_pytest("-rA", f"--junitxml={junit}", *args, cache=tmp_path / f"local-{name}")
        result.assert_outcomes(passed=1)
        outputs.extend([_text(result), junit.read_text()])
        properties = junit_cases(junit)["test_mlp"]["properties"]
        assert isinstance(properties, dict)
        return result, properties

    result, properties = runner("a")
    result.stdout.fnmatch_lines([f"aoti: *remote cache redis://***@127.0.0.1:{server.port}/0 (signed)*"])
    result.stdout.fnmatch_lines(["aoti cache: 0 hits (0 remote), 1 misses, * 1 uploaded"])
    assert properties["aoti_from_cache"] == "False"

    result, properties = runner("b", "-n", "1")  # the worker's statistics reach the controller's summary
    result.stdout.fnmatch_lines(["aoti cache: 1 hits (1 remote), 0 misses, * s saved"])
    assert properties["aoti_from_cache"] == "True"

    _flip_a_byte_of_every_entry(server)
    result, properties = runner("c")
    result.stdout.fnmatch_lines(
        [
            "aoti cache: 0 hits (0 remote), 1 misses, *, 1 uploaded, 1 remote entry refused and recompiled "
            "(*: tampered (its bytes do not match its manifest))"
        ]
    )
    assert properties["aoti_from_cache"] == "False"  # recompiled: the tampered package was never loaded

    # Issue 50, item 1: a manifest field changed on the server, its signature left as it was, failed every test
    # that used the package (ValueError: could not convert string to float: 'x'). Refused, recompiled, replaced.
    admin = server.admin()
    for name in admin.keys("pytest-aoti:1:" + "?" * 64):
        admin.set(name, json.dumps({**json.loads(admin.get(name)), "compile_seconds": "x"}))
    result, properties = runner("e")
    result.stdout.fnmatch_lines(
        [
            "aoti cache: 0 hits (0 remote), 1 misses, *, 1 uploaded, 1 remote entry refused and recompiled "
            "(*: wrongly signed: changed on the server or forged (its signature does not match))"
        ]
    )
    assert properties["aoti_from_cache"] == "False"

    result, _ = runner("d", f"--aoti-cache-url={server.url(password='a-wrong-one')}")
    text = _text(result)
    assert text.count("the remote package cache at redis://***@127.0.0.1") == 1, text
    assert "cannot be used (AuthenticationError" in text
    outputs.append(text)
    for output in outputs:
        assert PASSWORD not in output and SECRET not in output and "a-wrong-one" not in output


TEST_NOTHING = "def test_nothing():\n    pass\n"


def test_the_header_says_how_the_remote_cache_is_trusted(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a secret the remote cache is used only with --aoti-cache-unsigned, and the header says so; a URL that
    is not a Redis one is a usage error that shows no password. (No server is needed: nothing is compiled.)"""
    pytester.makepyfile(test_nothing=TEST_NOTHING)
    monkeypatch.delenv("PYTEST_AOTI_CACHE_SECRET", raising=False)
    monkeypatch.setenv("PYTEST_AOTI_CACHE_URL", "redis://:hidden-pw@cache.example:6379/2")
    result = run_pytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "aoti: *remote cache redis://***@cache.example:6379/2 not used: $PYTEST_AOTI_CACHE_SECRET is not set "
            "(set it to sign and verify entries, or pass --aoti-cache-unsigned)*"
        ]
    )
    result = run_pytest("--aoti-cache-unsigned", "--aoti-cache-readonly")
    result.stdout.fnmatch_lines(
        ["aoti: *remote cache redis://***@cache.example:6379/2 (UNSIGNED (--aoti-cache-unsigned: *), read-only)*"]
    )
    result = run_pytest("--aoti-cache-url=http://user:hidden-pw@cache.example/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--aoti-cache-url: expected redis://[:password@]host:port/db, got 'http://***@cache.example/'" in _text(
        result
    )
    assert "hidden-pw" not in _text(result)


def test_under_q_the_summary_says_why_the_remote_cache_was_skipped(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 50, item 4: -q hides the header, the only place that said the remote cache was not used. The summary
    line says it too. (No server: the remote cache is not used.)"""
    pytester.makepyfile(test_model=TEST_MLP)
    monkeypatch.delenv("PYTEST_AOTI_CACHE_SECRET", raising=False)
    monkeypatch.setenv("PYTEST_AOTI_CACHE_URL", "redis://:hidden-pw@cache.example:6379/2")
    result = run_pytest("-q")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "aoti cache: * s saved; remote cache redis://***@cache.example:6379/2 not used: "
            "$PYTEST_AOTI_CACHE_SECRET is not set (set it to sign and verify entries, or pass --aoti-cache-unsigned)"
        ]
    )
    assert "hidden-pw" not in _text(result)
