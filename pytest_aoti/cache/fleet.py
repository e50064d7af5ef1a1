"""How the xdist workers of one session share the host (issue 63), a pytest plugin listed in ``plugin.py``; the logic
is :mod:`pytest_aoti.core.compile_plan`.

- ``--aoti-compile-threads per-worker``: each worker's Inductor sizes its compile pool from its share of the cores
  (``TORCHINDUCTOR_COMPILE_THREADS`` = the cores this process may use // the workers) instead of the host's. A value
  you set stands: the variable, or Inductor's ``compile_threads`` set in a conftest (after Inductor read the variable).
- ``--aoti-schedule longest-first``: under ``--dist load`` or ``worksteal`` with two workers or more, the tests whose
  packages took longest to compile last time (the cache's sidecars) are sent first, so no long compile starts at the
  end. The controller reads the records once and hands the same snapshot to every worker (``workerinput``): a worker
  started later to replace a crashed one orders its collection the same, as xdist requires.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_aoti import roles
from pytest_aoti.cache.options import cache_settings_key
from pytest_aoti.core.compile_plan import (
    COMPILE_THREADS_ENV,
    compile_threads_per_worker,
    longest_first,
    recorded_compile_seconds,
    usable_cores,
)
from pytest_aoti.settings import add_option, option_value

COMPILE_THREADS_CHOICES = ("inductor", "per-worker")
SCHEDULE_CHOICES = ("longest-first", "collection")
COMPILE_THREADS_DESC = (
    "Inductor's compile threads in each xdist worker: 'per-worker' (the cores this process may use divided by the "
    f"workers) or 'inductor' (Inductor's own: min(32, the host's cores) in every worker). ${COMPILE_THREADS_ENV} "
    "set by you wins (default: inductor)"
)
SCHEDULE_DESC = (
    "order of the tests under xdist's --dist load or worksteal: 'longest-first' (the longest compiles the cache "
    "recorded first; tests without a record before them) or 'collection' (default: longest-first)"
)
# The controller's snapshot of the recorded compile seconds, in each worker's workerinput.
_RECORDED_SECONDS = "aoti_recorded_compile_seconds"


@dataclass(frozen=True)
class FleetSettings:
    compile_threads: str
    schedule: str


fleet_settings_key = pytest.StashKey[FleetSettings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "compile-threads", COMPILE_THREADS_DESC, default="inductor", metavar="HOW")
    add_option(parser, "schedule", SCHEDULE_DESC, default="longest-first", metavar="ORDER")


def _choice(config: pytest.Config, dest: str, choices: tuple[str, ...]) -> str:
    raw, source = option_value(config, dest)
    value = str(raw).strip()
    if value not in choices:
        raise pytest.UsageError(f"{source}: expected one of {', '.join(choices)}, got {raw!r}")
    return value


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash[fleet_settings_key] = FleetSettings(
        compile_threads=_choice(config, "aoti_compile_threads", COMPILE_THREADS_CHOICES),
        schedule=_choice(config, "aoti_schedule", SCHEDULE_CHOICES),
    )
    if settings.compile_threads == "per-worker" and roles.is_worker(config):
        _share_compile_threads(config)


def _share_compile_threads(config: pytest.Config) -> None:
    """This worker's share of the cores, for its Inductor and the children it starts; never over the user's."""
    if COMPILE_THREADS_ENV in os.environ:
        return  # the user's
    # Inductor reads the variable when its config is imported: a conftest that sets compile_threads sets it after.
    workers = int(roles.worker_input(config).get("workercount") or 1)
    os.environ[COMPILE_THREADS_ENV] = str(compile_threads_per_worker(usable_cores(), workers))
    config.add_cleanup(_forget_compile_threads)


def _forget_compile_threads() -> None:
    os.environ.pop(COMPILE_THREADS_ENV, None)


def _longest_first_wanted(config: pytest.Config) -> bool:
    """Where the order can shorten the run: two workers or more. One worker (``-n 1``, or the crash guard that plain
    ``--aoti-debug`` makes of a session) keeps pytest's order."""
    cache = config.stash.get(cache_settings_key, None)
    workers = getattr(config.option, "numprocesses", None)
    return (
        config.stash[fleet_settings_key].schedule == "longest-first"
        and cache is not None
        and cache.use_cache
        and getattr(config.option, "dist", "no") in ("load", "worksteal")
        and isinstance(workers, int)
        and workers >= 2
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """The controller's side: one snapshot of the records for every worker, replacements included."""
    config = node.config
    if not _longest_first_wanted(config):
        return
    snapshot = config.stash.get(_snapshot_key, None)
    if snapshot is None:
        snapshot = config.stash[_snapshot_key] = recorded_compile_seconds(config.stash[cache_settings_key].cache_dir)
    roles.hand_to_worker(node, _RECORDED_SECONDS, snapshot)


_snapshot_key = pytest.StashKey[dict[str, float]]()


@pytest.hookimpl(trylast=True)  # after plugins that filter or reorder (-k, --deselect, randomly)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only where the controller decided it (a worker's own --dist is not the controller's).
    recorded = roles.worker_input(config).get(_RECORDED_SECONDS)
    if not recorded:
        return
    order = longest_first([item.nodeid for item in items], recorded)
    items[:] = [items[index] for index in order]
