"""What each picture is drawn from: small frozen records of plain numbers and strings, and how they travel.

A feature that has a finding worth a picture builds one of these records where it analysed the finding and attaches
it with :func:`attach_figure_data` to the test's item (during the test) or report (after it). The records travel
as one JSON ``user_property`` named :data:`FIGURE_PROPERTY`, which pytest serializes across xdist workers and debug
children like every user property; the pictures feature (:mod:`pytest_aoti.pictures`) reads them back with
:func:`figure_properties` and draws them.

In the core because every layer builds them (the debug rerun, goldens, benchmarks) and none may import a feature.
Imports neither torch, matplotlib nor pytest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Protocol

FIGURE_PROPERTY = "aoti_figure_data"


class FigureDataError(ValueError):
    """A figure-data property this version cannot read (another plugin version wrote it, or it was edited)."""


@dataclass(frozen=True)
class KernelError:
    """One kernel launch compared with eager: its worst output's max abs and max rel error."""

    launch: int  # position in launch order, from 1
    kernel: str
    max_abs: float
    max_rel: float


@dataclass(frozen=True)
class Divergence:
    """Stage numerics' walk over the kernels, in launch order, up to the first divergent one."""

    kind: ClassVar[str] = "divergence"
    kernels: tuple[KernelError, ...]
    diverged_launch: int | None  # the first divergent kernel's launch, None when none diverged
    source: str  # where the divergent kernel comes from, e.g. ``at model.py:12 in forward: y = x.sin()``
    tolerance: str  # the test's tolerance, as the verdict writes it


@dataclass(frozen=True)
class InputStats:
    """A kernel input's stats as the tensor printer wrote them (strings: ``nan``, ``-inf`` and friends survive)."""

    arg: str
    minimum: str
    maximum: str
    mean: str
    size: str


@dataclass(frozen=True)
class KernelTimeline:
    """The kernels a debug rerun launched, in order, and where the run went wrong.

    ``problem`` is ``nonfinite`` (``marked`` is the first kernel whose output held NaN/Inf) or ``crash`` (``marked``
    is the kernel that never finished, if one did not). ``completed`` counts the launches that finished."""

    kind: ClassVar[str] = "timeline"
    problem: str
    kernels: tuple[str, ...]
    completed: int
    marked: str | None
    last_completed: str | None
    inputs: tuple[InputStats, ...]  # the marked kernel's inputs (nonfinite) or the suspect's (crash)
    source: str


@dataclass(frozen=True)
class GoldenErrors:
    """One golden output's per-element absolute error against the package's, binned on a log scale."""

    kind: ClassVar[str] = "golden"
    name: str
    elements: int
    mismatched: int  # elements outside the tolerance
    nonfinite: int  # elements whose error is NaN/Inf (left out of the bins)
    zero: int  # elements with no error (left out of the log bins)
    bin_edges: tuple[float, ...]  # len(counts) + 1, increasing
    counts: tuple[int, ...]
    max_abs: float
    rtol: float
    atol: float
    needed_atol: float  # the smallest atol that would pass at this rtol


@dataclass(frozen=True)
class BenchmarkTimes:
    """A benchmark's block times now and in the baseline's recorded runs (seconds), oldest run first."""

    kind: ClassVar[str] = "benchmark"
    name: str
    now: tuple[float, ...]
    baseline_runs: tuple[tuple[float, ...], ...]
    run_labels: tuple[str, ...]  # one per baseline run (``run 1``, ...): the x axis of the trend
    verdict: str  # the comparison's text


FigureData = Divergence | KernelTimeline | GoldenErrors | BenchmarkTimes
_KINDS: dict[str, type[Any]] = {
    record.kind: record for record in (Divergence, KernelTimeline, GoldenErrors, BenchmarkTimes)
}
_NESTED: dict[str, type[Any]] = {"kernels:divergence": KernelError, "inputs:timeline": InputStats}


def _finite(value: float) -> float | str:
    """JSON has no NaN/Inf: they travel as strings, read back by ``float``."""
    return value if math.isfinite(value) else str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, list | tuple):
        return [_plain(each) for each in value]
    if isinstance(value, dict):
        return {key: _plain(each) for key, each in value.items()}
    return value


def encode(records: Iterable[FigureData]) -> str:
    """The JSON text of a property value: a list of ``{"kind": ..., "data": {...}}``."""
    return json.dumps([{"kind": record.kind, "data": _plain(asdict(record))} for record in records])


def _number(value: Any) -> Any:
    """A float that travelled as a string (NaN, inf) back to a float; tuples of them too."""
    if isinstance(value, list | tuple):
        return tuple(_number(each) for each in value)
    return float(value) if isinstance(value, str) else value


def _build(record_type: type[Any], data: Any, kind: str) -> Any:
    if not isinstance(data, dict):
        raise FigureDataError(f"{kind}: expected an object, got {type(data).__name__}")
    types = {each.name: str(each.type) for each in fields(record_type)}
    if set(data) != set(types):
        raise FigureDataError(f"{kind}: expected fields {sorted(types)}, got {sorted(data)}")
    values = {}
    for name, value in data.items():
        nested = _NESTED.get(f"{name}:{kind}")
        if nested is not None:
            value = tuple(_build(nested, each, kind) for each in value)
        elif "float" in types[name]:
            value = _number(value)
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return record_type(**values)


def decode(text: str) -> list[FigureData]:
    """The records of one property value; :class:`FigureDataError` names what is wrong with anything else."""
    try:
        items = json.loads(text)
    except ValueError as error:
        raise FigureDataError(f"not JSON: {error}") from None
    if not isinstance(items, list):
        raise FigureDataError(f"expected a list of records, got {type(items).__name__}")
    records = []
    for item in items:
        kind = str(item.get("kind")) if isinstance(item, dict) else "?"
        record_type = _KINDS.get(kind)
        if record_type is None:
            raise FigureDataError(f"unknown kind of figure data {kind!r} (known: {', '.join(sorted(_KINDS))})")
        try:
            records.append(_build(record_type, item.get("data"), kind))
        except FigureDataError:
            raise
        except (TypeError, ValueError) as error:
            raise FigureDataError(f"{kind}: {error}") from None
    return records


class _HasProperties(Protocol):
    user_properties: list[tuple[str, object]]


def attach_figure_data(target: _HasProperties, *records: FigureData) -> None:
    """Put ``records`` on a test's item (while it runs: pytest copies them to its reports) or on a report."""
    if records:
        target.user_properties = [*target.user_properties, (FIGURE_PROPERTY, encode(records))]


def figure_properties(properties: Sequence[tuple[str, object]]) -> list[str]:
    """The values of the properties named :data:`FIGURE_PROPERTY`, each decodable with :func:`decode`; kept as text
    so that the same records seen on several reports of one test are recognised as one."""
    return [str(value) for name, value in properties if name == FIGURE_PROPERTY]
