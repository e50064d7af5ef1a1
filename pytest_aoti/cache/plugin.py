"""The package cache as a pytest plugin: its options (``cache.options``), ``--aoti-cache-clear``, its statistics over
the xdist workers (``cache.stats``), why each package missed (under ``-v``), and Inductor's CPU vector-ISA probe,
paid once per machine.

Each miss is named under ``-v``, below the ``aoti`` section's cache line, with what differs from the test's nearest
entry (``core.cache_miss``); the test's JUnit properties hold it too (``aoti_cache_miss``), and ``--aoti-html`` shows
it with the test's other properties. A miss with no earlier entry to compare with (each compile of a cold run) is
only counted, in the cache line.

Inductor's ISA probes (one build and one Python per candidate ISA) run before a fresh process's first compile, in
each xdist worker and debug child: the longest wait of a fresh process on a GPU machine
(docs/benchmarks.md#inductors-isa-probes). Their verdicts depend only on the CPU, torch and the C++
compiler, so they are recorded in the cache dir (``core.isa_verdicts``), which this session names in
``PYTEST_AOTI_ISA_RECORD`` for itself and the processes it starts: its xdist workers and debug children read it. That
part is :class:`CacheSession`, registered as ``aoti-cache`` while the cache is on (``-p no:aoti-cache`` turns it
off)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_aoti import roles
from pytest_aoti.cache import options as cache_options
from pytest_aoti.cache.options import CacheSettings, cache_settings_key
from pytest_aoti.cache.stats import WorkerStats, cache_stats, miss_lines, summary_line
from pytest_aoti.core import isa_verdicts
from pytest_aoti.core.isa_verdicts import ISA_RECORD_ENV


def pytest_addoption(parser: pytest.Parser) -> None:
    cache_options.add_options(parser)


# First: debug/warm_starts.py's plans the fork server, which must inherit what this one puts in the environment.
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash[cache_settings_key] = cache_options.resolve(config)
    # Once, by the session the user started: never by an xdist worker or a child.
    if settings.cache_clear and roles.writes_user_reports(config):
        from pytest_aoti.core.cache import clear_cache_dir

        clear_cache_dir(settings.cache_dir)  # the ISA verdicts too; a dir not marked as a cache is left alone
    if settings.use_cache:
        config.pluginmanager.register(CacheSession(settings), "aoti-cache")
        config.pluginmanager.register(WorkerStats(config), "aoti-cache-stats")


class CacheSession:
    """The ISA probes' verdicts handed to later processes; a child's cache line, and the misses named under ``-v``."""

    def __init__(self, settings: CacheSettings) -> None:
        self.settings = settings

    def pytest_configure(self, config: pytest.Config) -> None:
        # The ISA probes' verdicts (core.isa_verdicts), for this process and those it starts; a process records what
        # it probed as soon as it has (after --aoti-cache-clear, which removed the record above, anew).
        if ISA_RECORD_ENV not in os.environ:
            os.environ[ISA_RECORD_ENV] = str(isa_verdicts.record_path(self.settings.cache_dir))
            # For the rest of this process only: a pytest run inside a test (pytester) leaves the test's env as it was.
            config.add_cleanup(_forget_record_path)

    @pytest.hookimpl(trylast=True)  # after the aoti section's cache line (debug.parent)
    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        """A child's own cache line, in its log (did a debug stage load its package or compile it?); the user's
        session has it in the ``aoti`` section. Under ``-v``, a line per package that missed the cache, in this
        process and in every xdist worker."""
        child_line = summary_line(config) if roles.is_child(config) else None
        if child_line is not None:
            terminalreporter.write_line(child_line)
        if config.get_verbosity() < 1:
            return
        for line in miss_lines(cache_stats(config)):
            terminalreporter.write_line(line)


def _forget_record_path() -> None:
    os.environ.pop(ISA_RECORD_ENV, None)
