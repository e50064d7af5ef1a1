"""The package cache's options (each flag with its ini twin), resolved once at configure time into a frozen
:class:`CacheSettings`: the local cache's dir, cap and on/off, ``--aoti-cache-clear``, and the remote cache behind it.
The fixtures open the cache from them (``cache.session.session_cache``)."""

from __future__ import annotations

import importlib.util
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.core.cache import default_cache_dir
from pytest_aoti.core.remote_cache import RemoteSettings, remote_cache_header
from pytest_aoti.settings import add_option, option_value, positive_number

CACHE_DIR_DESC = "directory of the compiled-package cache (default: ~/.cache/pytest-aoti)"
NO_CACHE_DESC = "compile every model afresh; do not read or write the package cache"
CACHE_CLEAR_DESC = "empty the package cache at the start of the session"
CACHE_MAX_MB_DESC = "size cap of the package cache in MiB; least-recently-used packages go first (default 2048)"
CACHE_URL_ENV = "PYTEST_AOTI_CACHE_URL"
CACHE_SECRET_ENV = "PYTEST_AOTI_CACHE_SECRET"
CACHE_URL_DESC = (
    "a remote package cache behind the local one, shared by CI runners: redis://[:password@]host:port/db (or "
    f"rediss://, unix://); also ${CACHE_URL_ENV}, which keeps a password off the command line. Entries are signed "
    f"with ${CACHE_SECRET_ENV} (HMAC-SHA256)"
)
CACHE_READONLY_DESC = "read the remote package cache but never write to it (untrusted pull-request builds)"
CACHE_UNSIGNED_DESC = (
    f"use the remote package cache without ${CACHE_SECRET_ENV}: entries are neither signed nor verified beyond "
    "their checksum, so anyone who can write to the server can run code on this machine"
)
DEFAULT_CACHE_MAX_MB = 2048
# The name ``-p no:`` blocks the cache plugin by (``--trace-config`` shows it): its options go with it, and the
# session runs without a package cache, as under --aoti-no-cache (the header says why).
CACHE_PLUGIN = "pytest_aoti.cache.plugin"
CACHE_PLUGIN_BLOCKED = f"off (-p no:{CACHE_PLUGIN})"


@dataclass(frozen=True)
class CacheSettings:
    cache_dir: Path
    use_cache: bool
    cache_clear: bool
    cache_max_bytes: int
    remote_cache: RemoteSettings | None = None
    remote_cache_off: str | None = None  # why a remote cache the user named is not used (the header says it)


def add_options(parser: pytest.Parser) -> None:
    add_option(parser, "cache-dir", CACHE_DIR_DESC, default="")
    add_option(parser, "no-cache", NO_CACHE_DESC, flag=True, ini_type="bool", default=False)
    # An action, not a setting: an ini twin would empty the cache on every run.
    add_option(parser, "cache-clear", CACHE_CLEAR_DESC, flag=True, ini=False)
    add_option(parser, "cache-max-mb", CACHE_MAX_MB_DESC, default=str(DEFAULT_CACHE_MAX_MB))
    add_option(parser, "cache-url", CACHE_URL_DESC, default="")
    add_option(parser, "cache-readonly", CACHE_READONLY_DESC, flag=True, ini_type="bool", default=False)
    add_option(parser, "cache-unsigned", CACHE_UNSIGNED_DESC, flag=True, ini_type="bool", default=False)


def resolve(config: pytest.Config) -> CacheSettings:
    cap_raw, cap_source = option_value(config, "aoti_cache_max_mb")
    return CacheSettings(
        cache_dir=_cache_dir(config),
        use_cache=not option_value(config, "aoti_no_cache")[0],
        cache_clear=bool(config.getoption("aoti_cache_clear")),
        cache_max_bytes=int(positive_number(cap_raw, cap_source, what="a size in MiB", integer=True)) * 2**20,
        **_remote_cache(config),
    )


def _cache_dir(config: pytest.Config) -> Path:
    raw, _ = option_value(config, "aoti_cache_dir")
    if not raw:
        return default_cache_dir()
    cache_dir = Path(raw).expanduser()
    if cache_dir.is_absolute():
        return cache_dir
    # pytest's own conventions: a path on the command line is relative to where pytest was started (--basetemp,
    # --junitxml), an ini path to the rootdir (cache_dir).
    from_cli = config.getoption("aoti_cache_dir") is not None
    return (config.invocation_params.dir if from_cli else config.rootpath) / cache_dir


def _remote_cache(config: pytest.Config) -> dict[str, Any]:
    """The remote cache's settings (``remote_cache``), or why the one named is not used (``remote_cache_off``).
    Precedence: ini < ``$PYTEST_AOTI_CACHE_URL`` < ``--aoti-cache-url``. The secret comes from the environment only,
    and no message here shows it or the URL's password."""
    from pytest_aoti.core.remote_cache import mask_url

    url, source = option_value(config, "aoti_cache_url")
    if config.getoption("aoti_cache_url") is None and os.environ.get(CACHE_URL_ENV, "").strip():
        url, source = os.environ[CACHE_URL_ENV], f"${CACHE_URL_ENV}"
    url = str(url).strip()
    if not url or option_value(config, "aoti_no_cache")[0]:
        return {}
    if not re.match(r"^(rediss?|unix)://", url):
        raise pytest.UsageError(f"{source}: expected redis://[:password@]host:port/db, got {mask_url(url)!r}")
    _refuse_an_unreadable_url(url, source)
    secret = os.environ.get(CACHE_SECRET_ENV, "")
    if not secret and not option_value(config, "aoti_cache_unsigned")[0]:
        return {
            "remote_cache_off": f"{mask_url(url)} not used: ${CACHE_SECRET_ENV} is not set (set it to sign and verify "
            "entries, or pass --aoti-cache-unsigned)"
        }
    readonly = bool(option_value(config, "aoti_cache_readonly")[0])
    return {"remote_cache": RemoteSettings(url, secret.encode() or None, readonly=readonly)}


def _refuse_an_unreadable_url(url: str, source: str) -> None:
    """A URL redis-py cannot read, or whose database is not a number, is a usage error that shows no password."""
    from pytest_aoti.core.remote_cache import mask_url

    if importlib.util.find_spec("redis") is None:
        raise pytest.UsageError(
            f"{source}: the remote cache needs the redis client: pip install 'pytest-aoti[remote-cache]'"
        )
    from redis.connection import parse_url

    try:
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError:
        # Neither the URL nor redis-py's message is shown: both may hold parts of the password.
        raise pytest.UsageError(
            f"{source}: redis-py cannot parse this URL (not shown: it may hold a password); a password holding '/', "
            "'@', ':', '?' or '#' must be percent-encoded (%2F, %40, %3A, %3F, %23)"
        ) from None
    # The database as redis-py reads it (the URL's path), which quietly becomes db 0 when it is not a number.
    db_path = urllib.parse.urlsplit(url).path.strip("/") if not url.startswith("unix://") else ""
    if db_path and not db_path.isdigit():
        raise pytest.UsageError(
            f"{source}: {mask_url(url)!r}: the database after the host is {db_path!r}; expected a number"
        )


cache_settings_key = pytest.StashKey[CacheSettings]()


def header_part(config: pytest.Config) -> str:
    """The ``cache=`` part of the ``aoti:`` header line: the cache dir and its cap, or off (and why where the cache
    plugin is blocked), then the remote cache."""
    settings = config.stash.get(cache_settings_key, None)
    if settings is None:
        return CACHE_PLUGIN_BLOCKED
    part = f"{settings.cache_dir} (cap {settings.cache_max_bytes >> 20} MiB)" if settings.use_cache else "off"
    return part + remote_cache_header(settings.remote_cache, settings.remote_cache_off)
