"""The session's one package cache: opened from :class:`~pytest_aoti.cache.options.CacheSettings` at the first
builder fixture, and its statistics (this process's and, in an xdist controller, its workers')."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.cache.options import cache_settings_key

if TYPE_CHECKING:
    from pytest_aoti.core.cache import PackageCache

cache_key = pytest.StashKey["PackageCache | None"]()
worker_stats_key = pytest.StashKey[list[dict[str, Any]]]()


# The name ``-p no:`` blocks the cache plugin by (``--trace-config`` shows it): its options go with it, and the
# session runs without a package cache, as under --aoti-no-cache (the header says why).
CACHE_PLUGIN = "pytest_aoti.cache.plugin"
CACHE_PLUGIN_BLOCKED = f"off (-p no:{CACHE_PLUGIN})"


def session_cache(config: pytest.Config) -> PackageCache | None:
    if cache_key not in config.stash:
        settings = config.stash.get(cache_settings_key, None)  # None: the cache plugin is blocked
        from pytest_aoti.core.cache import PackageCache

        config.stash[cache_key] = (
            PackageCache.open(
                settings.cache_dir, settings.cache_max_bytes, settings.remote_cache, settings.remote_cache_off
            )
            if settings is not None and settings.use_cache
            else None
        )
    return config.stash[cache_key]


def cache_stats(config: pytest.Config) -> list[dict[str, Any]]:
    """This process's cache statistics and, in an xdist controller, its workers'."""
    cache = config.stash.get(cache_key, None)
    own = [cache.stats.as_dict()] if cache is not None else []
    return [*config.stash.get(worker_stats_key, []), *own]
