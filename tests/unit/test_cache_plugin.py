"""The package cache is a feature plugin of its own (issue 53): ``pytest_aoti.cache.plugin``, registered with the
other features, declares and resolves the cache's options, and registers the ISA-verdict and miss-line part as
``aoti-cache`` while the cache is on. ``-p no:aoti-cache`` turns that part off, as it did when it was a top-level
module, and leaves the cache and its options working."""

from __future__ import annotations

import pytest

from pytest_aoti import plugin
from pytest_aoti.cache import plugin as cache_plugin
from pytest_aoti.cache.options import cache_settings_key


def _configure(pytester: pytest.Pytester, *args: str) -> pytest.Config:
    cache = pytester.path / "cache"
    return pytester.parseconfigure("-p", "no:cacheprovider", f"--aoti-cache-dir={cache}", *args)


def test_the_cache_plugin_is_registered_with_the_features(pytester: pytest.Pytester) -> None:
    assert "pytest_aoti.cache.plugin" in plugin.pytest_plugins
    config = _configure(pytester)
    assert config.pluginmanager.get_plugin("pytest_aoti.cache.plugin") is cache_plugin
    assert isinstance(config.pluginmanager.get_plugin("aoti-cache"), cache_plugin.CacheSession)
    assert config.stash[cache_settings_key].cache_dir == pytester.path / "cache"


def test_no_cache_registers_no_cache_session(pytester: pytest.Pytester) -> None:
    config = _configure(pytester, "--aoti-no-cache")
    assert not config.stash[cache_settings_key].use_cache
    assert config.pluginmanager.get_plugin("aoti-cache") is None


def test_p_no_aoti_cache_leaves_the_cache_and_its_options(pytester: pytest.Pytester) -> None:
    config = _configure(pytester, "-p", "no:aoti-cache", "--aoti-cache-max-mb=3")
    assert config.pluginmanager.get_plugin("aoti-cache") is None
    settings = config.stash[cache_settings_key]
    assert settings.use_cache and settings.cache_max_bytes == 3 << 20


def test_cache_clear_empties_only_the_cache_dir_given(pytester: pytest.Pytester) -> None:
    from pytest_aoti.core.cache import MARKER_FILE

    cache = pytester.path / "cache"
    entry = cache / "ab" / f"{'ab' * 32}.pt2"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"package")
    (cache / MARKER_FILE).write_text("pytest-aoti\n")
    _configure(pytester)
    assert entry.exists()
    _configure(pytester, "--aoti-cache-clear")
    assert not entry.exists() and (cache / MARKER_FILE).exists()


def test_cache_clear_leaves_an_unmarked_dir_and_its_records_alone(pytester: pytest.Pytester) -> None:
    """Issue 50's pass-5 recheck: on a dir that is not marked as a cache, --aoti-cache-clear said "nothing was
    deleted" and still deleted the ISA records in it."""
    cache = pytester.path / "cache"
    cache.mkdir()
    record = cache / "isa-checks-0123.json"
    record.write_text("{}")
    with pytest.warns(UserWarning, match="is not a pytest-aoti cache"):
        _configure(pytester, "--aoti-cache-clear")
    assert record.exists()
