"""The remote cache's options: where the URL comes from (ini < $PYTEST_AOTI_CACHE_URL < --aoti-cache-url), when
the remote cache is used at all (a secret, or --aoti-cache-unsigned), and bad URLs, in-process (no server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aoti.cache.options import CacheSettings, cache_settings_key


@pytest.fixture
def resolve(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., CacheSettings]:
    monkeypatch.delenv("PYTEST_AOTI_CACHE_URL", raising=False)
    monkeypatch.delenv("PYTEST_AOTI_CACHE_SECRET", raising=False)

    def resolved(*args: str) -> CacheSettings:
        config = pytester.parseconfigure("-p", "no:cacheprovider", f"--aoti-cache-dir={tmp_path / 'cache'}", *args)
        return config.stash[cache_settings_key]

    return resolved


def test_the_url_from_ini_env_and_command_line(
    pytester: pytest.Pytester, resolve: Callable[..., CacheSettings], monkeypatch: pytest.MonkeyPatch
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


def test_without_a_secret_only_when_unsigned_is_asked_for(resolve: Callable[..., CacheSettings]) -> None:
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
            "--aoti-cache-url: redis-py cannot parse this URL (not shown: it may hold a password); a password "
            "holding '/', '@', ':', '?' or '#' must be percent-encoded",
        ),
        (["--aoti-cache-url=redis://:pw/x@host:6379/0"], None, "--aoti-cache-url: redis-py cannot parse this URL"),
        (
            ["--aoti-cache-url=redis://:pw@host:6379/1O"],
            None,
            "--aoti-cache-url: 'redis://***@host:6379/1O': the database after the host is '1O'; expected a number",
        ),
    ],
    ids=["not redis", "no scheme", "a bad port", "a '/' in the password", "a db that is not a number"],
)
def test_a_url_that_is_not_redis_is_a_usage_error(
    resolve: Callable[..., CacheSettings],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: str | None,
    message: str,
) -> None:
    if env is not None:
        monkeypatch.setenv("PYTEST_AOTI_CACHE_URL", env)
    with pytest.raises(pytest.UsageError) as error:
        resolve(*args)
    assert message in str(error.value) and "pw" not in str(error.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6391/0?password=s3cr3tPW",
        "redis://:s3cr3tPW@127.0.0.1:6391/0",
        "redis://:s3cr@tPW@127.0.0.1:6391/0",
        "redis://default:s3cr%2FtPW@127.0.0.1:6391/0",
        "unix:///run/redis.sock?password=s3cr3tPW",
    ],
    ids=["query", "userinfo", "an @ in it", "percent-encoded", "unix socket"],
)
def test_every_form_of_password_is_hidden(resolve: Callable[..., CacheSettings], url: str) -> None:
    """Whatever form redis-py reads a password from, it never shows: in the header's URL, in the "not used" line,
    nor where a URL is shown in a reproduce line (``--aoti-cache-url=…``, ``-o aoti_cache_url=…``)."""
    from urllib.parse import unquote

    from pytest_aoti.core.remote_cache import RemoteSettings, mask_url_argument

    off = resolve(f"--aoti-cache-url={url}").remote_cache_off
    password = unquote(url.split("password=")[-1] if "password=" in url else url.split(":")[2].rsplit("@", 1)[0])
    shown = [
        off,
        RemoteSettings(url).shown_url,
        mask_url_argument(f"--aoti-cache-url={url}"),
        mask_url_argument(f"aoti_cache_url={url}"),
        mask_url_argument(url),
    ]
    for text in shown:
        assert password not in text and unquote(text).count(password) == 0, text
        assert "127.0.0.1" in text or "redis.sock" in text, text  # the rest of the URL still says where
