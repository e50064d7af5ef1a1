"""The remote cache's options: where the URL comes from (ini < $PYTEST_AOTI_CACHE_URL < --aoti-cache-url), when
the remote cache is used at all (a secret, or --aoti-cache-unsigned), and bad URLs, in-process (no server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aoti.settings import Settings, settings_key


@pytest.fixture
def resolve(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Settings]:
    monkeypatch.delenv("PYTEST_AOTI_CACHE_URL", raising=False)
    monkeypatch.delenv("PYTEST_AOTI_CACHE_SECRET", raising=False)

    def resolved(*args: str) -> Settings:
        config = pytester.parseconfigure("-p", "no:cacheprovider", f"--aoti-cache-dir={tmp_path / 'cache'}", *args)
        return config.stash[settings_key]

    return resolved


def test_the_url_from_ini_env_and_command_line(
    pytester: pytest.Pytester, resolve: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_AOTI_CACHE_SECRET", "key")
    pytester.makeini("[pytest]\naoti_cache_url = redis://ini-host:6379/0\n")
    assert resolve().remote_cache.url == "redis://ini-host:6379/0"
    monkeypatch.setenv("PYTEST_AOTI_CACHE_URL", "redis://:pw@env-host:6379/1")
    remote = resolve().remote_cache
    assert remote.url == "redis://:pw@env-host:6379/1" and remote.secret == b"key" and not remote.readonly
    remote = resolve("--aoti-cache-url=redis://cli-host:6379/2", "--aoti-cache-readonly").remote_cache
    assert remote.url == "redis://cli-host:6379/2" and remote.readonly
    assert resolve("--aoti-no-cache").remote_cache is None


def test_without_a_secret_only_when_unsigned_is_asked_for(resolve: Callable[..., Settings]) -> None:
    skipped = resolve("--aoti-cache-url=redis://:pw@host:6379/0")
    assert skipped.remote_cache is None
    assert skipped.remote_cache_off == (
        "redis://***@host:6379/0 not used: $PYTEST_AOTI_CACHE_SECRET is not set (set it to sign and verify entries, "
        "or pass --aoti-cache-unsigned)"
    )
    unsigned = resolve("--aoti-cache-url=redis://host:6379/0", "--aoti-cache-unsigned").remote_cache
    assert unsigned is not None and unsigned.secret is None


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--aoti-cache-url=http://u:pw@host/"], None, "--aoti-cache-url: expected redis://[:password@]host:port/db"),
        ([], "host:6379", "$PYTEST_AOTI_CACHE_URL: expected redis://[:password@]host:port/db, got 'host:6379'"),
        (
            ["--aoti-cache-url=redis://:pw@host:port/0"],
            None,
            "--aoti-cache-url: 'redis://***@host:port/0': Port could not be cast to integer value as 'port'",
        ),
    ],
)
def test_a_url_that_is_not_redis_is_a_usage_error(
    resolve: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, args: list[str], env: str | None, message: str
) -> None:
    if env is not None:
        monkeypatch.setenv("PYTEST_AOTI_CACHE_URL", env)
    with pytest.raises(pytest.UsageError) as error:
        resolve(*args)
    assert message in str(error.value) and "pw" not in str(error.value)
