"""pytest glue of golden outputs (:mod:`pytest_aoti.snapshots.golden`): the ``aoti_snapshot`` fixture, the hook behind
``aoti_check(..., snapshot=True)``, what each test recorded (report properties, JUnit) and the summary lines: goldens
written or updated, and golden files no test used. Importing this module does not import torch."""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.core.protocol import CHILD_ENV, Stage
from pytest_aoti.settings import settings_key
from pytest_aoti.snapshots.files import golden_files, snapshot_path

if TYPE_CHECKING:
    from pytest_aoti.core.compiler import CompiledModel
    from pytest_aoti.snapshots.golden import GoldenOutputs

goldens_key = pytest.StashKey["GoldenOutputs"]()
SNAPSHOT_PROPERTY = "aoti_snapshot"
SNAPSHOT_FILE_PROPERTY = "aoti_snapshot_file"


def _test_id(nodeid: str) -> str:
    """The node id without its file part: ``TestA::test_b[x]``."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def goldens_of(item: pytest.Item) -> GoldenOutputs:
    """The item's golden outputs, opened at its first snapshot. A debug rerun never writes into the user's tree:
    there, a snapshot without golden outputs is not compared, and nothing is updated."""
    if goldens_key not in item.stash:
        from pytest_aoti.snapshots.golden import GoldenOutputs

        settings = item.config.stash[settings_key]
        debug_rerun = os.environ.get(CHILD_ENV, "") not in ("", Stage.ISOLATE)
        item.stash[goldens_key] = GoldenOutputs(
            path=snapshot_path(item.path, _test_id(item.nodeid)),
            missing="skip" if debug_rerun else settings.snapshot_missing,  # type: ignore[arg-type]
            update=settings.snapshot_update and not debug_rerun,
            update_hint=f"pytest --aoti-snapshot-update '{item.nodeid}'",
        )
    return item.stash[goldens_key]


def package_key(compiled: CompiledModel) -> str | None:
    """The package's cache key (its file name in the cache), which changes with the model, weights and options."""
    stem = compiled.package_path.stem
    return stem if len(stem) == 64 and all(c in "0123456789abcdef" for c in stem) else None


def golden_hook(item: pytest.Item, rtol: float | None, atol: float | None) -> Callable[[str, Any, CompiledModel], None]:
    """What ``aoti_check(..., snapshot=True)`` hands to ``check_model``: each input set's package outputs, checked
    as snapshot ``check<N>.<input set>``."""
    goldens = goldens_of(item)
    name = goldens.next_name("check")

    def check(label: str, outputs: Any, compiled: CompiledModel) -> None:
        __tracebackhide__ = True
        goldens.check(f"{name}.{label}", outputs, rtol=rtol, atol=atol, package_key=package_key(compiled))

    return check


class Snapshot:
    """``aoti_snapshot(value, *, name=None, rtol=None, atol=None)``: hold ``value`` (a tensor or any pytree of
    them, e.g. a package's outputs) against this test's golden outputs, recorded on the first run. Returns what
    happened: ``matched``, ``written``, ``updated`` (``--aoti-snapshot-update``) or ``missing`` (a debug rerun)."""

    def __init__(self, item: pytest.Item) -> None:
        self._item = item

    def __call__(
        self, value: Any, *, name: str | None = None, rtol: float | None = None, atol: float | None = None
    ) -> str:
        __tracebackhide__ = True
        from pytest_aoti.core.compiler import tolerance_value

        goldens = goldens_of(self._item)
        return goldens.check(
            goldens.next_name("snapshot") if name is None else name,
            value,
            rtol=tolerance_value(rtol, "aoti_snapshot rtol"),
            atol=tolerance_value(atol, "aoti_snapshot atol"),
            user_name=name is not None,
        )


@pytest.fixture
def aoti_snapshot(request: pytest.FixtureRequest) -> Snapshot:
    """``aoti_snapshot(outputs, *, name=None, rtol=None, atol=None)``: compare ``outputs`` with golden outputs
    stored in ``__aoti_snapshots__/<test file>/<test id>.safetensors`` beside the test file (recorded when missing,
    unless in CI or with ``--aoti-snapshot=fail``; rewritten with ``--aoti-snapshot-update``)."""
    return Snapshot(request.node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    goldens = item.stash.get(goldens_key, None)
    if report.when == "teardown" and goldens is not None and goldens.outcomes:
        report.user_properties = [
            *report.user_properties,
            (SNAPSHOT_PROPERTY, "; ".join(f"{name}: {outcome}" for name, outcome in goldens.outcomes)),
            (SNAPSHOT_FILE_PROPERTY, str(goldens.path)),
        ]
    return report


@dataclass(eq=False)  # a plugin object: pluggy keeps plugins in sets, by identity
class SnapshotTracker:
    """In the session the user started: which tests were collected and which golden files they used, for the
    summary (written and updated goldens, and golden files no test used, as syrupy lists them)."""

    config: pytest.Config
    collected: list[str] = field(default_factory=list)
    passed: set[str] = field(default_factory=set)
    used: dict[str, str] = field(default_factory=dict)  # golden file → its test's outcomes

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # An xdist controller collects nothing itself: its workers' collections arrive through the hook below.
        if session.items and not hasattr(self.config, "workerinput"):
            self.collected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.collected:
            self.collected = list(ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed:
            self.passed.add(report.nodeid)
        properties = dict(report.user_properties)
        if SNAPSHOT_FILE_PROPERTY in properties:
            self.used[str(properties[SNAPSHOT_FILE_PROPERTY])] = str(properties.get(SNAPSHOT_PROPERTY, ""))

    def _selected_part(self) -> bool:
        """Whether this run selected part of its test files (then their unused goldens cannot be known)."""
        option = self.config.option
        return bool(
            getattr(option, "keyword", "")
            or getattr(option, "markexpr", "")
            or getattr(option, "deselect", None)
            or getattr(option, "lf", False)
            or any("::" in str(arg) for arg in self.config.args)
        )

    def unused(self) -> list[Path]:
        if self._selected_part():
            return []
        by_file: dict[str, list[str]] = {}
        for nodeid in self.collected:
            by_file.setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
        used = {Path(path).resolve() for path in self.used}
        found: list[Path] = []
        for file, nodeids in by_file.items():
            test_file = self.config.rootpath / file
            owners = {snapshot_path(test_file, _test_id(nodeid)).resolve(): nodeid for nodeid in nodeids}
            for golden in golden_files(snapshot_path(test_file, "x").parent):
                owner = owners.get(golden.resolve())
                # A golden of a test that is gone, or of a test that passed without taking its snapshots.
                if owner is None or (owner in self.passed and golden.resolve() not in used):
                    found.append(golden)
        return found

    def summary_lines(self) -> list[str]:
        written = [f"{path} ({outcomes})" for path, outcomes in self.used.items() if "written" in outcomes]
        updated = [f"{path} ({outcomes})" for path, outcomes in self.used.items() if "updated" in outcomes]
        unused = self.unused()
        lines = [f"aoti snapshot written (new golden outputs: review and commit it): {line}" for line in written]
        lines += [f"aoti snapshot updated: {line}" for line in updated]
        if unused:
            lines.append(f"aoti snapshots unused ({len(unused)} golden file(s) no test used; delete them if stale):")
            lines += [f"  {path}" for path in unused]
        return lines
