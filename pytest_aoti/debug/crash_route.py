"""The one route a failure or a crash takes to the process that logs its report.

A report made in one process is often logged in another: an xdist worker's in the controller, an isolated or debug
child's in the session. What pytest-aoti knows about the test travels with the report as one typed record,
:class:`ReportRecord`, in one report attribute (``aoti``) as plain JSON data, which pytest's
``pytest_report_to_serializable`` keeps and xdist's wire carries; :func:`record_of` decodes it, :func:`stamp`
writes it, and nothing else reads or writes report attributes of pytest-aoti's.

A crash reaches the controller three ways (the worker pytest-aoti supervises under ``--aoti-debug``, an ``-n``
worker, an isolated child); each is described by a :class:`Crash` and turned into pytest reports by
:func:`crash_reports` alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_aoti.core import phases
from pytest_aoti.core.errors import failure_kind
from pytest_aoti.core.protocol import VerdictSummary
from pytest_aoti.debug.options import DebugRequest
from pytest_aoti.fixtures import device_property_key
from pytest_aoti.roles import uses_aoti

ExceptionInfo = pytest.ExceptionInfo[BaseException]

REPORT_ATTRIBUTE = "aoti"
# xdist's workerinput key: this worker is the one pytest-aoti made of the session (the crash guard).
SUPERVISED_WORKER = "aoti_supervised"
# workerinput key: the supervised session's failures before this worker started (it replaces one that crashed).
FAILURES_BEFORE = "aoti_failures_before"
# workeroutput key: a test in this worker called pytest.exit (its reason and return code).
WORKER_EXIT = "aoti_exit"


@dataclass(frozen=True)
class ReportRecord:
    """What one report says beyond pytest's fields.

    ``failure_kind``: a failed setup or call's kind (a ``FailureKind`` value), which triage decides reruns by.
    ``reached_aoti``: whether the test had announced a pytest-aoti phase (export, compile, load, run) when it failed.
    ``debug_request``: on a setup report, the test's debug request: the controller reruns it should the worker crash.
    ``device``: on a setup report, the device the test was set up on (JUnit ``aoti_device`` of a crashed test).
    ``poisoned_cuda``: the CUDA context of the process was unusable after this test.
    ``verdict``: the rendered verdict's summary, for the ``aoti`` terminal summary.
    ``crashed``: a report the controller made for a test that crashed its worker.
    ``temp_root``: beside ``debug_request``, the controller's basetemp as the worker knows it (its ``--basetemp``'s
    parent): where the controller keeps the logs of the debug rerun it runs should the worker crash."""

    failure_kind: str | None = None
    reached_aoti: bool = True
    debug_request: DebugRequest | None = None
    device: str | None = None
    poisoned_cuda: bool = False
    verdict: VerdictSummary | None = None
    crashed: bool = False
    temp_root: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)  # plain dicts, lists and strs: what execnet carries
        data["debug_request"] = dict(data["debug_request"]) if self.debug_request is not None else None
        return {key: value for key, value in data.items() if value != _DEFAULTS[key]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportRecord:
        """The record a report carried; raises TypeError or ValueError for data that is not one."""
        fields = dict(data)
        request = fields.get("debug_request")
        if request is not None:
            stages = request.get("stages")
            fields["debug_request"] = DebugRequest(
                **{**request, "kernels": tuple(request["kernels"]), "stages": tuple(stages) if stages else stages}
            )
        verdict = fields.get("verdict")
        if verdict is not None:
            fields["verdict"] = VerdictSummary.from_dict(verdict)
            if fields["verdict"] is None:
                raise ValueError(f"not a verdict summary: {verdict!r}")
        return cls(**fields)


_DEFAULTS = dataclasses.asdict(ReportRecord())


def record_of(report: Any) -> ReportRecord:
    """The record ``report`` carries: an empty one for a report without (or from another plugin version)."""
    data = getattr(report, REPORT_ATTRIBUTE, None)
    if not isinstance(data, dict):
        return ReportRecord()
    try:
        return ReportRecord.from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError):
        return ReportRecord()


def stamp(report: Any, **changes: Any) -> ReportRecord:
    """Write ``changes`` into the record ``report`` carries; returns the new record."""
    record = dataclasses.replace(record_of(report), **changes)
    setattr(report, REPORT_ATTRIBUTE, record.to_dict())
    return record


def stamp_test_report(item: pytest.Item, report: pytest.TestReport, excinfo: ExceptionInfo | None) -> None:
    """The one place a test's report gets what pytest-aoti knows of the test, in the session, its xdist workers and
    the children: on setup the device it was set up on; on a failed setup or call the kind of failure (triage
    decides reruns by it) and whether the test had reached pytest-aoti."""
    changes: dict[str, Any] = {}
    device = item.config.stash.get(device_property_key, None)
    if report.when == "setup" and device is not None and uses_aoti(item):
        changes["device"] = device
    if report.failed and report.when in ("setup", "call") and excinfo is not None:
        # A plain str: xdist's wire format (execnet) takes no str subclass.
        changes["failure_kind"] = str(failure_kind(excinfo.value))
        changes["reached_aoti"] = phases.announced() is not None
    if changes:
        stamp(report, **changes)


@dataclass(frozen=True)
class Crash:
    """A test whose process ended before it reported all of its phases: ``when``, the phase it ended in (setup,
    call, teardown); ``longrepr``, the failure's text (how the process ended, where); ``device``, the device its
    setup reported, if any."""

    when: str
    longrepr: str
    device: str | None = None


# Attaches the debug verdict to a crashed test's failed report (its section and JUnit properties, on that report);
# returns the properties.
AttachDebug = Callable[[pytest.TestReport], Sequence[tuple[str, object]]]


def crash_reports(crash: Crash, report: pytest.TestReport, attach: AttachDebug | None) -> list[pytest.TestReport]:
    """The reports of a crashed test, in the order to log them: ``report`` made the failed report of the phase it
    crashed in (with the debug verdict ``attach`` gives it), then, unless it crashed in teardown, a passed teardown.
    junitxml reads a test case's properties from its teardown report only, and keys a case by node id and worker
    node: the properties go on the teardown, which carries the crash report's worker."""
    report.when = crash.when  # type: ignore[assignment]
    report.outcome = "failed"
    report.longrepr = crash.longrepr
    stamp(report, crashed=True)
    device: list[tuple[str, object]] = [("aoti_device", crash.device)] if crash.device is not None else []
    verdict = list(attach(report)) if attach is not None else []
    if crash.when == "teardown":  # the verdict's properties are on it already
        report.user_properties = [*report.user_properties, *device]
        return [report]
    properties = [*device, *verdict]
    teardown = pytest.TestReport(
        report.nodeid, report.location, {}, "passed", None, "teardown", user_properties=properties
    )
    teardown.node = getattr(report, "node", None)  # type: ignore[attr-defined]
    return [report, teardown]
