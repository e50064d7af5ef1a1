"""What crosses the process boundary between the session the user started and a rerun child: the environment
variables the parent sets for a child, and the files a child writes for the parent to read. Both sides import these
names from here and nowhere else. Imports neither torch nor pytest.

The parent starts a child with (all but the first two optional):

- ``CHILD_ENV``: which child this is: ``isolate`` (the test run alone) or a debug stage (``kernels``, ``tensors``,
  ``sanitizer``, ``numerics``);
- ``NODEID_ENV`` / ``TEST_PATH_ENV``: the one test to run, and the file that defines it;
- ``REPORT_FILE_ENV``: where the child appends its events (:class:`Event`: test reports, warnings, the phases the
  compiled-model code passes through so a crash can be placed, stage numerics' finding, a ``pytest.exit``), one JSON
  line each, ``{"event": NAME, "data": {...}}``, appended as they happen so a crash loses none written before it;
  the parent decodes them with :func:`decode_events`, where an unknown event is an error, as in pytest-xdist's
  controller;
- ``BUNDLE_ENV``: where the failing call records a repro bundle;
- ``NUMERICS_ENV``: where stage numerics captures both sides of every call.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

CHILD_ENV = "PYTEST_AOTI_CHILD"
NODEID_ENV = "PYTEST_AOTI_NODEID"
TEST_PATH_ENV = "PYTEST_AOTI_TEST_PATH"
REPORT_FILE_ENV = "PYTEST_AOTI_REPORT_FILE"
BUNDLE_ENV = "PYTEST_AOTI_BUNDLE_DIR"
NUMERICS_ENV = "PYTEST_AOTI_NUMERICS_DIR"

ORIGIN_RESULT = "origin.json"  # in the repro bundle: what python -m pytest_aoti.debug.origin found
MINIFY_RESULT = "minify.json"  # in minify's output dir: what python -m pytest_aoti.debug.minify found
DEFAULT_MINIFY_BUDGET = 300.0  # seconds of search per minified failure: the option's default and minify's own


class Name(str, enum.Enum):
    """A name that is its string everywhere: compared, hashed, formatted and serialized as its value, on both sides
    of the boundary and in JUnit properties (``enum.StrEnum``, which Python 3.10 lacks)."""

    def __str__(self) -> str:
        return str(self.value)

    def __hash__(self) -> int:
        return hash(self.value)


class Stage(Name):
    """Which child a child is (``CHILD_ENV``): the test run alone, or a debug stage."""

    ISOLATE = "isolate"
    KERNELS = "kernels"  # printer mode 3, NaN asserts, launch-blocking: where it died
    TENSORS = "tensors"  # printer mode 2: the suspects' tensors
    SANITIZER = "sanitizer"  # compute-sanitizer memcheck
    NUMERICS = "numerics"  # printer mode 1 and eager side by side: the first divergent kernel
    MINIFY = "minify"  # the smallest graph that still fails (its own process, not a test's child)


class FailureKind(Name):
    """The core's kinds of failure of a test (``errors.failure_kind``); triage decides from a kind whether a debug
    rerun can tell more (``triage.py``). A feature's error class declares a kind of its own, which crosses the
    boundary as its plain string."""

    INPUT_INVARIANT = "input_invariant"
    OUTPUT_NONFINITE = "output_nonfinite"
    OUTPUT_INVARIANT = "output_invariant"
    MISMATCH = "mismatch"
    RANDOM_MISMATCH = "random_mismatch"
    EXPORT = "export"
    COMPILE = "compile"
    # The package raised while running (a CUDA error, AOTI's run wrapper): the same failure aborts a process where
    # the error escapes C++, as it does under the debug stages' CUDA_LAUNCH_BLOCKING.
    PACKAGE_ERROR = "package_error"
    # pytest-aoti was called wrongly (errors.AOTIUsageError): a rerun would raise the same error.
    USAGE = "usage"
    OTHER = "other"


class Outcome(Name):
    """How a child's run of the test ended."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CRASHED = "crashed"  # killed by a signal
    TIMED_OUT = "timed out"
    ERROR = "error"  # ended without reporting the test's result


class Event(str, enum.Enum):
    """What a child streams to its parent in the report file."""

    REPORT = "report"  # a pytest.TestReport, as pytest_report_to_serializable gives it
    WARNING = "warning"  # a warning, as pytest-xdist's workers send theirs
    PHASE = "phase"  # {"phase": "export"|"compile"|"load"|"loaded"|"run"|"ran", "detail": ...}: where the call is
    FINDING = "finding"  # stage numerics' Finding (below)
    EXIT = "exit"  # the test called pytest.exit: an ExitRequest (below), which the parent raises again

    def __str__(self) -> str:
        return self.value


class ProtocolError(RuntimeError):
    """A child's stream holds an event this side does not know: parent and child run different code."""


def encode_event(event: Event, data: dict[str, Any]) -> str:
    """One line of the report file."""
    return json.dumps({"event": event.value, "data": data}) + "\n"


def append_event(path: str, event: Event, data: dict[str, Any]) -> None:
    """Child side: append one event, the file opened and closed for it, so it survives a later crash."""
    try:
        with open(path, "a") as stream:
            stream.write(encode_event(event, data))
    except OSError:
        pass  # the parent's dir vanished (a tmp cleaner): it will say the child reported nothing


def decode_events(lines: Iterable[str]) -> Iterator[tuple[Event, dict[str, Any]]]:
    """The events of a report file, in order. A line a crash cut short is skipped (the child died writing it);
    a whole line naming an unknown event raises :class:`ProtocolError`."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        name = record.get("event") if isinstance(record, dict) else None
        try:
            event = Event(name)
        except ValueError:
            raise ProtocolError(f"a child sent an unknown event {name!r}: {line[:200]!r}") from None
        yield event, record.get("data") or {}


@dataclass(frozen=True)
class ExitRequest:
    """``pytest.exit(reason, returncode)`` called in a child: the parent ends its own session the same way, as
    pytest would have without the child."""

    reason: str
    returncode: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExitRequest:
        """The request a child sent; a return code that is not an int is pytest's default (None)."""
        returncode = data.get("returncode")
        return cls(str(data.get("reason", "")), returncode if type(returncode) is int else None)


@dataclass
class KernelFinding:
    """One kernel launch stage numerics compared with eager."""

    kernel: str
    launch: int  # position in launch order, from 1
    nodes: list[str]
    node: str  # the node whose value the worst output buffer holds
    buffer: str
    max_abs: float
    max_rel: float
    index: list[int]
    within_noise: bool
    inputs_matched: bool  # no input that could be compared differs from eager
    input_notes: list[str] = field(default_factory=list)  # the inputs that differ
    inputs_not_compared: list[str] = field(default_factory=list)
    closer: str | None = None  # "package", "eager" or "neither": which is nearer the float64 reference
    package_err64: float | None = None
    eager_err64: float | None = None
    as_exported: bool = False  # the package matches the exported program here: the difference comes from export


@dataclass
class Finding:
    """The numerics stage's answer, written as JSON for the parent."""

    diverged: KernelFinding | None = None
    past_tolerance: KernelFinding | None = None  # the first launch past the test's tolerance, within noise
    launches: int = 0
    compared: int = 0
    test_tolerance: str = ""
    noise: str = ""
    notes: list[str] = field(default_factory=list)
    # The package's outputs are the exported program's (run eagerly) and eager's are not: export's doing, even when
    # the node that differs has no kernel of its own (Inductor folded it away).
    outputs_as_exported: bool = False
    # No kernel was found past the test's tolerance (those inside a torch.cond branch are not compared), yet the
    # outputs are past it: by rounding noise only, so the tolerance is tighter than the arithmetic allows.
    outputs_within_noise: bool = False
    # (launch, kernel, max abs err, max rel err) of every kernel output compared, in launch order: where the error
    # grew, for the picture of it (pytest_aoti.pictures).
    kernel_errors: list[tuple[int, str, float, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        """The finding a child sent; raises TypeError (or ValueError) for data that is not one."""
        kernels = {key: KernelFinding(**data[key]) if data.get(key) else None for key in ("diverged", "past_tolerance")}
        return cls(**{**data, **kernels})


def _json_object(text: str, what: str) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"not a {what}: {text[:80]!r}")
    return data


@dataclass(frozen=True)
class VerdictSummary:
    """What a failed test's report carries of its verdict, for the terminal summary: it crosses from an xdist worker
    to the controller inside the report, as a dict of plain strings (``to_dict``)."""

    headline: str
    reproduce: str = ""
    bundle: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> VerdictSummary | None:
        """The summary a report carried; None for anything else (a report from another plugin version)."""
        if not isinstance(data, dict) or not isinstance(data.get("headline"), str):
            return None
        return cls(data["headline"], str(data.get("reproduce") or ""), str(data.get("bundle") or ""))


@dataclass
class MinifyResult:
    """Stage minify's answer (``pytest_aoti.debug.minify``), written as ``MINIFY_RESULT`` in its output dir."""

    want: str  # how a candidate must fail: crash, nonfinite or error
    nodes_before: int
    budget_s: float
    candidates: int = 0
    failing_candidates: int = 0
    verdicts: list[str] = field(default_factory=list)  # each candidate's, in order
    out_of_time: bool = False
    out_of_candidates: bool = False
    seconds: float = 0.0
    nodes_after: int | None = None  # with repro: a smaller failing graph was found and saved
    repro: str | None = None
    error: str | None = None  # the minifier's own error, if it stopped on one

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> MinifyResult:
        """The result a minify process wrote; raises ValueError (or TypeError) for text that is not one."""
        return cls(**_json_object(text, "minify result"))


@dataclass(frozen=True)
class NonfiniteOrigin:
    """Where eager makes the failing call's first NaN (or, with no NaN in its outputs, its first overflow to Inf):
    the exported program replayed op by op on the call's inputs (``pytest_aoti.debug.origin``), written as
    ``ORIGIN_RESULT`` in the repro bundle. A node holding an infinity of a constant it was given (an attention
    mask's ``-inf``, ``masked_fill(-inf)``) is a fill by design, never the origin."""

    # What the replay's outputs hold: "nan", "inf" or "finite" (then the package alone made it); "raised": the replay
    # stopped at ``node``, an index read out of range (``kind`` "index") or a node that raised (``kind`` "error"),
    # and ``output`` says which index and bound, or the error.
    outputs: str
    kind: str | None = None  # "NaN" or "Inf": what the origin node made from inputs that held none
    node: str | None = None  # the exported program's node name (the provenance data's pre-grad node)
    op: str | None = None  # "aten.log.default"
    inputs: list[str] = field(default_factory=list)  # "sub_3 (min -101.2, max -98.4)", each tensor input's range
    output: str | None = None  # "12 of 512 values NaN"
    fills: list[str] = field(default_factory=list)  # nodes whose infinities are a constant they were given
    error: str | None = None  # why the replay could not run

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> NonfiniteOrigin:
        """The origin a replay wrote; raises ValueError (or TypeError) for text that is not one."""
        return cls(**_json_object(text, "nonfinite origin"))
