"""Baseline files: reviewable JSON beside the tests, ``{"format": ..., "tests": {benchmark: {machine: {"runs":
[...]}}}}``, the last K runs of each benchmark per machine. Whatever is wrong with a file (not JSON, another shape,
an older format, a hand-edited run with no, empty, zero or misaligned block times) is a :class:`BaselineError`
whose one line names the file, the benchmark, the machine and the run."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_aoti.benchmark.errors import BaselineError
from pytest_aoti.benchmark.rule import Run
from pytest_aoti.benchmark.timing import MIN_BLOCKS

FORMAT = "pytest-aoti benchmarks 2"
_OLDER_FORMATS = {"pytest-aoti benchmarks 1": "one run per machine, no calibration blocks"}
_SIDES = ("package", "eager", "calibration")
_FIX = "fix it, or delete it and record again with --aoti-benchmark-update"


# What a block time (seconds per call) can be: a hand-edited 1e-300 or 1e300 would overflow the rule's logarithms.
SHORTEST_BLOCK = 1e-12
LONGEST_BLOCK = 1e6


def _block_times(raw: dict[str, Any], side: str) -> tuple[float, ...]:
    """One side's block times, or a ValueError saying what is wrong with them."""
    if side not in raw:
        raise ValueError(f"no {side!r} block times")
    times = raw[side]
    if not isinstance(times, list) or not times:
        raise ValueError(f"{side!r} is {'empty' if times == [] else f'not a list of seconds: {times!r:.60}'}")
    for value in times:
        try:
            seconds = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
        except OverflowError:  # an int too large for a float
            seconds = math.inf
        if not SHORTEST_BLOCK <= seconds <= LONGEST_BLOCK:  # NaN compares false: refused too
            raise ValueError(
                f"{side!r} holds {value!r:.40}; block times are seconds per call, from {SHORTEST_BLOCK:g} to "
                f"{LONGEST_BLOCK:g}"
            )
    if len(times) < MIN_BLOCKS:
        raise ValueError(f"{side!r} has {len(times)} blocks; a run has at least {MIN_BLOCKS}")
    return tuple(float(value) for value in times)


def _run(raw: Any) -> Run:
    if not isinstance(raw, dict):
        raise ValueError(f"expected an object of block times, got {raw!r}")
    package, eager, calibration = (_block_times(raw, side) for side in _SIDES)
    if len(package) != len(calibration):
        raise ValueError(
            f"'package' and 'calibration' differ in length ({len(package)} vs {len(calibration)} blocks); "
            "they are aligned by round"
        )
    key = raw.get("package_key")
    return Run(package, eager, calibration, str(raw.get("torch", "")), key if isinstance(key, str) else None,
               str(raw.get("run_id", "")))  # fmt: skip


def _as_json(run: Run) -> dict[str, Any]:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(run).items()}


@dataclass
class Baselines:
    """One test file's baselines."""

    path: Path
    tests: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Baselines:
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise BaselineError(f"{path}: not a readable benchmark baseline file ({error}); {_FIX}") from None
        if not isinstance(data, dict):
            raise BaselineError(
                f"{path}: expected a JSON object with 'format' and 'tests', got {type(data).__name__} {data!r:.40}; "
                + _FIX
            )
        found = data.get("format")
        if found in _OLDER_FORMATS:
            raise BaselineError(
                f"{path}: baselines of an older pytest-aoti ({found!r}: {_OLDER_FORMATS[found]}); delete the file "
                "and record again with --aoti-benchmark-update"
            )
        if found != FORMAT or not isinstance(data.get("tests"), dict):
            raise BaselineError(f"{path}: not a pytest-aoti benchmark baseline file (format {found!r}); {_FIX}")
        return cls(path, data["tests"])

    def runs(self, benchmark: str, machine: str) -> list[Run]:
        """The recorded runs of ``benchmark`` on ``machine``, oldest first; a malformed entry is a BaselineError."""
        entry = self.tests.get(benchmark, {})
        where = f"{self.path}: benchmark {benchmark!r}"
        if not isinstance(entry, dict):
            raise BaselineError(f"{where}: expected an object of machines, got {entry!r:.40}; {_FIX}")
        if machine not in entry:
            return []
        where += f" on {machine!r}"
        runs = entry[machine].get("runs") if isinstance(entry[machine], dict) else None
        if not isinstance(runs, list) or not runs:
            raise BaselineError(f"{where}: expected a non-empty list 'runs', got {runs!r:.40}; {_FIX}")
        parsed = []
        for number, raw in enumerate(runs, 1):
            try:
                parsed.append(_run(raw))
            except ValueError as error:
                raise BaselineError(f"{where}, run {number}: {error}; {_FIX}") from None
        return parsed

    def others(self, benchmark: str, machine: str) -> list[str]:
        entry = self.tests.get(benchmark, {})
        return sorted(key for key in entry if key != machine) if isinstance(entry, dict) else []

    def add(self, benchmark: str, machine: str, run: Run, keep: int) -> int:
        """Record ``run``, replacing a run of the same pytest run, keeping the last ``keep``; how many are kept."""
        runs = [old for old in self.runs(benchmark, machine) if not run.run_id or old.run_id != run.run_id]
        runs = [*runs, run][-keep:]
        self.tests.setdefault(benchmark, {})[machine] = {"runs": [_as_json(kept) for kept in runs]}
        return len(runs)

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".partial-{os.getpid()}-{self.path.name}")
        partial.write_text(json.dumps({"format": FORMAT, "tests": self.tests}, indent=1, sort_keys=True) + "\n")
        os.replace(partial, self.path)
