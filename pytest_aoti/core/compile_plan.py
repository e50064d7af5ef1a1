"""How xdist workers share a host's cores when they compile (issue 63): pure functions, no pytest, no torch.

- Inductor sizes its compile pool from the host's cores (``compile_threads`` = min(32, cores)) in every process, so N
  workers can start N pools of the host's size. :func:`compile_threads_per_worker` gives each worker its share.
- The longest compiles first: each cache entry's sidecar records the test that built it and its compile seconds
  (:func:`recorded_compile_seconds`); :func:`longest_first` orders a collection by them, so that no long compile
  starts last and leaves a tail.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_aoti.core.cache_files import SIDECAR_LIMIT, RefusedCacheFile, read_cache_file

# Inductor reads it when its config module is imported (``decide_compile_threads``); a value there is the user's.
COMPILE_THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"
# Inductor's own cap on its pool.
_INDUCTOR_MAX_THREADS = 32


def compile_threads_per_worker(cores: int, workers: int) -> int:
    """Each worker's share of ``cores`` (at least 1, at most Inductor's cap) when ``workers`` compile at once."""
    if cores < 1 or workers < 1:
        raise ValueError(f"cores and workers must be at least 1, got {cores} cores and {workers} workers")
    return max(1, min(_INDUCTOR_MAX_THREADS, cores // workers))


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as Inductor counts them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def recorded_compile_seconds(cache_dir: Path) -> dict[str, float]:
    """Each test's compile seconds summed over the entries it built, from the cache's sidecars (``owner`` and
    ``compile_seconds``); entries without an owner, unreadable or malformed are left out."""
    seconds: dict[str, float] = {}
    for sidecar in sorted(cache_dir.glob("*/*.json")):
        try:
            record = json.loads(read_cache_file(sidecar, SIDECAR_LIMIT, root=cache_dir))
        except (RefusedCacheFile, OSError, ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        owner, took = record.get("owner"), record.get("compile_seconds")
        if isinstance(owner, str) and owner and isinstance(took, int | float) and math.isfinite(took) and took >= 0:
            seconds[owner] = seconds.get(owner, 0.0) + float(took)
    return seconds


def longest_first(nodeids: Sequence[str], seconds: Mapping[str, float]) -> list[int]:
    """The order (indices into ``nodeids``) that runs the longest recorded compiles first. A test with no record
    comes before every recorded one (new or renamed: it may compile, for how long is unknown); ties keep their
    collection order."""

    def rank(index: int) -> tuple[bool, float, int]:
        recorded = seconds.get(nodeids[index])
        return (recorded is not None, -(recorded or 0.0), index)

    return sorted(range(len(nodeids)), key=rank)
