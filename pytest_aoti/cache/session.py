"""The session's one package cache: opened from :class:`~pytest_aoti.cache.options.CacheSettings` at the first
builder fixture. Its statistics are :mod:`pytest_aoti.cache.stats`'."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aoti.cache.options import cache_settings_key

if TYPE_CHECKING:
    from pytest_aoti.core.cache import PackageCache

cache_key = pytest.StashKey["PackageCache | None"]()


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
