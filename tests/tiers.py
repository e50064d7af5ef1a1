"""The suite's tiers by cost (tests/README.md): which tier a test module is in, each test's recorded seconds, and the
record a run writes. Plain functions; ``tests/conftest.py`` is their pytest glue.

A module's place says its tier, so a test added to a file gets its file's tier: ``tests/unit`` is the unit tier (a bare
``pytest``), a module at the top of ``tests/`` is an end-to-end scenario (it starts a pytest run or a process, or
compiles), ``tests/gpu`` needs a CUDA device. Among the rest, ``slow`` is a recorded time, never a hand-kept list: the
file ``tests/durations.json`` holds the seconds of each test that took a second or more in a recorded run.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

TESTS_DIR = Path(__file__).parent
DURATIONS_FILE = TESTS_DIR / "durations.json"

SLOW_SECONDS = 20.0  # a recorded time from this up marks a test `slow`
RECORDED_FROM = 1.0  # a test that took less is left out of the file: it counts as quick
# What a test the file does not hold (one added since the last record) is taken to cost, for the order of work only.
UNRECORDED_SCENARIO_SECONDS = 8.0
UNRECORDED_SECONDS = 0.2

HOW_RECORDED = (
    "Seconds of each test (setup + call + teardown) that passed in a run with --aoti-suite-record-durations, merged "
    f"over runs; tests under {RECORDED_FROM:g} s are left out. tests/README.md says how to record it."
)


def tier_marks(path: Path, tests_dir: Path = TESTS_DIR) -> tuple[str, ...]:
    """The tier marks of a test module by its place: ``scenario`` at the top of ``tests_dir``, ``gpu`` under its
    ``gpu`` folder, none in ``unit`` (or outside ``tests_dir``)."""
    try:
        parts = path.relative_to(tests_dir).parts
    except ValueError:
        return ()
    if len(parts) == 1:
        return ("scenario",)
    if parts[0] == "gpu":
        return ("gpu",)
    return ()


def load_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """The recorded seconds by node id; none where the file does not exist."""
    if not path.exists():
        return {}
    seconds = json.loads(path.read_text())["seconds"]
    return {str(nodeid): float(value) for nodeid, value in seconds.items()}


def expected_seconds(nodeid: str, marks: tuple[str, ...], durations: Mapping[str, float]) -> float:
    """What a test is expected to take: its recorded time, else a guess by its tier."""
    if nodeid in durations:
        return durations[nodeid]
    return UNRECORDED_SCENARIO_SECONDS if marks else UNRECORDED_SECONDS


def is_slow(nodeid: str, durations: Mapping[str, float]) -> bool:
    return durations.get(nodeid, 0.0) >= SLOW_SECONDS


def merged_durations(recorded: Mapping[str, float], ran: Mapping[str, float]) -> dict[str, float]:
    """The record after a run: each test that ran replaces its entry (removed where it took under a second), the
    tests that did not run (a partial run, GPU tests on a CPU machine) keep theirs."""
    merged = dict(recorded)
    for nodeid, seconds in ran.items():
        if seconds >= RECORDED_FROM:
            merged[nodeid] = round(seconds, 1)
        else:
            merged.pop(nodeid, None)
    return dict(sorted(merged.items()))


def write_durations(seconds: Mapping[str, float], path: Path = DURATIONS_FILE) -> None:
    """Write the record atomically (a reader sees the old file or the new one), one test a line."""
    text = json.dumps({"how": HOW_RECORDED, "seconds": dict(seconds)}, indent=1) + "\n"
    fd, temporary = tempfile.mkstemp(prefix=".durations-", dir=path.parent)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.replace(temporary, path)
