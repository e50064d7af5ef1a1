"""The package cache as a pytest plugin: its options (``cache.options``), ``--aoti-cache-clear``, why each package
missed (under ``-v``), and Inductor's CPU vector-ISA probe, paid once per machine.

Each miss is named under ``-v``, below the ``aoti`` section's cache line, with what differs from the test's nearest
entry (``core.cache_miss``); the test's JUnit properties hold it too (``aoti_cache_miss``), and ``--aoti-html`` shows
it with the test's other properties.

The probe (one Python per candidate ISA, each importing torch) runs in every fresh process's first compile: ~35 s on
the H100 machine, in each xdist worker and debug child. Its verdict depends only on the CPU, torch and the C++
compiler, so the first process that probes records it in the package cache (when every candidate ISA passed), and
every later session on the machine sets ``TORCHINDUCTOR_VEC_ISA_OK=1`` for itself and the processes it starts: its
xdist workers and debug children inherit it. Never when the user set the variable, nor in a run that clears the
cache; the package key is the same either way (``core.cache``). That part is :class:`CacheSession`, registered as
``aoti-cache`` while the cache is on (``-p no:aoti-cache`` turns it off)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_aoti import roles
from pytest_aoti.cache import options as cache_options
from pytest_aoti.cache.options import CacheSettings, cache_settings_key
from pytest_aoti.cache.session import cache_key, cache_stats
from pytest_aoti.core import isa_verdicts
from pytest_aoti.core.isa_verdicts import ISA_RECORD_ENV
from pytest_aoti.roles import Role

VEC_ISA_OK_ENV = "TORCHINDUCTOR_VEC_ISA_OK"


def pytest_addoption(parser: pytest.Parser) -> None:
    cache_options.add_options(parser)


# First: plugin.py's may start the fork server, which must inherit what this one puts in the environment.
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash[cache_settings_key] = cache_options.resolve(config)
    # Once, by the session the user started: never by an xdist worker or a child.
    if settings.cache_clear and roles.decide(config) in (Role.SESSION, Role.CONTROLLER):
        from pytest_aoti.core.cache import clear_cache_dir

        clear_cache_dir(settings.cache_dir)  # the ISA verdicts too; a dir not marked as a cache is left alone
    if settings.use_cache:
        config.pluginmanager.register(CacheSession(settings), "aoti-cache")


class CacheSession:
    """The ISA probes' verdicts handed to later processes, and the misses named under ``-v``."""

    def __init__(self, settings: CacheSettings) -> None:
        self.settings = settings

    def pytest_configure(self, config: pytest.Config) -> None:
        # --aoti-cache-clear forgot the verdict with the packages (above): this run probes, and records it again.
        if self.settings.cache_clear:
            return
        if ISA_RECORD_ENV not in os.environ:
            # Every other ISA probe's verdicts (core.isa_verdicts), for this process and those it starts.
            os.environ[ISA_RECORD_ENV] = str(isa_verdicts.record_path(self.settings.cache_dir))
            config.add_cleanup(_forget_record_path)
        if VEC_ISA_OK_ENV in os.environ:
            return
        from pytest_aoti.core.cache import isa_probe_recorded

        if isa_probe_recorded(self.settings.cache_dir):
            os.environ[VEC_ISA_OK_ENV] = "1"
            # For the rest of this process only: a pytest run inside a test (pytester) leaves the test's env as it was.
            config.add_cleanup(_forget_recorded_verdict)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Record the verdict of the probe this process ran (it ran one only if the variable was not set)."""
        cache = session.config.stash.get(cache_key, None)
        if cache is None:
            return
        isa_verdicts.record(cache.root)
        if VEC_ISA_OK_ENV not in os.environ:
            from pytest_aoti.core.cache import record_isa_probe

            record_isa_probe(cache.root)

    @pytest.hookimpl(trylast=True)  # after the aoti section's cache line (debug.parent)
    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        """Under ``-v``, a line per package that missed the cache, in this process and in every xdist worker."""
        if config.get_verbosity() < 1:
            return
        from pytest_aoti.core.cache import miss_lines

        for line in miss_lines(cache_stats(config)):
            terminalreporter.write_line(line)


def _forget_record_path() -> None:
    os.environ.pop(ISA_RECORD_ENV, None)


def _forget_recorded_verdict() -> None:
    os.environ.pop(VEC_ISA_OK_ENV, None)
