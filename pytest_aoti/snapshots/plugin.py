"""The golden outputs feature as a pytest plugin (over :mod:`pytest_aoti.snapshots.golden`): its options, the
``aoti_snapshot`` fixture, ``aoti_check(..., snapshot=True)`` through pytest-aoti's build hooks, what each test
recorded (report properties, JUnit) and the summary: goldens written or updated, and golden files no test used.
Importing this module does not import torch."""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_aoti.roles import is_debug_stage, is_worker, writes_user_reports
from pytest_aoti.settings import add_option, option_group, option_value
from pytest_aoti.shared.figure_data import attach_figure_data
from pytest_aoti.snapshots.files import golden_files, snapshot_path
from pytest_aoti.snapshots.records import PROPERTIES, SNAPSHOT_FILE_PROPERTY, SNAPSHOT_PROPERTY

if TYPE_CHECKING:
    from pytest_aoti.core.compiler import CompiledModel
    from pytest_aoti.hookspecs import BuildRequest, MatchedOutputs, ReportProperty
    from pytest_aoti.snapshots.golden import GoldenOutputs

SNAPSHOT_DESC = (
    "what a snapshot without golden outputs does: auto (record them, or fail when the CI environment variable is "
    "set), write (record them) or fail (default auto)"
)
SNAPSHOT_UPDATE_DESC = (
    "rewrite the golden outputs of every snapshot that runs (aoti_snapshot, aoti_check(snapshot=True)); an action "
    "for one run, so it has no ini twin"
)
# The builder keywords this feature takes (aoti_check(..., snapshot=True, snapshot_rtol=, snapshot_atol=)).
BUILD_OPTIONS = ("snapshot", "snapshot_rtol", "snapshot_atol")

goldens_key = pytest.StashKey["GoldenOutputs"]()


@dataclass(frozen=True)
class SnapshotSettings:
    """The feature's options, resolved once at configure time."""

    missing: Literal["write", "fail"]  # what a snapshot without golden outputs does
    update: bool


settings_key = pytest.StashKey[SnapshotSettings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "snapshot", SNAPSHOT_DESC, default="auto", metavar="MODE")
    option_group(parser).addoption(
        "--aoti-snapshot-update",
        action="store_true",
        default=False,
        dest="aoti_snapshot_update",
        help=SNAPSHOT_UPDATE_DESC,
    )


def _in_ci() -> bool:
    """The ``CI`` environment variable as CI services set it (``true``, ``1``); ``false``/``0``/empty: not CI."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def resolve(config: pytest.Config) -> SnapshotSettings:
    raw, source = option_value(config, "aoti_snapshot")
    mode = str(raw).strip().lower()
    if mode not in ("auto", "write", "fail"):
        raise pytest.UsageError(f"{source}: expected auto, write or fail, got {raw!r}")
    missing: Literal["write", "fail"] = "fail" if mode == "fail" or (mode == "auto" and _in_ci()) else "write"
    return SnapshotSettings(missing=missing, update=bool(config.getoption("aoti_snapshot_update")))


def pytest_configure(config: pytest.Config) -> None:
    config.stash[settings_key] = resolve(config)
    # The summary of goldens written, updated and unused belongs to the session the user started (an xdist
    # controller hears its workers' reports), not to a pytest-aoti child or an xdist worker.
    if writes_user_reports(config):
        config.pluginmanager.register(SnapshotTracker(config), "aoti-snapshot-tracker")


def _test_id(nodeid: str) -> str:
    """The node id without its file part: ``TestA::test_b[x]``."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def goldens_of(item: pytest.Item) -> GoldenOutputs:
    """The item's golden outputs, opened at its first snapshot. A debug rerun never writes into the user's tree:
    there, a snapshot without golden outputs is not compared, and nothing is updated."""
    if goldens_key not in item.stash:
        from pytest_aoti.snapshots.golden import GoldenOutputs

        settings = item.config.stash[settings_key]
        debug_rerun = is_debug_stage(item.config)
        item.stash[goldens_key] = GoldenOutputs(
            path=snapshot_path(item.path, _test_id(item.nodeid)),
            missing="skip" if debug_rerun else settings.missing,
            update=settings.update and not debug_rerun,
            update_hint=f"pytest --aoti-snapshot-update '{item.nodeid}'",
        )
    return item.stash[goldens_key]


def package_key(compiled: CompiledModel) -> str | None:
    """The package's cache key (its file name in the cache), which changes with the model, weights and options."""
    stem = compiled.package_path.stem
    return stem if len(stem) == 64 and all(c in "0123456789abcdef" for c in stem) else None


@dataclass
class _CheckSnapshot:
    """One ``aoti_check(..., snapshot=True)`` call while it builds: its snapshot's name and tolerances."""

    name: str
    rtol: float | None
    atol: float | None
    input_sets: int = 0  # how many matched input sets it held against the goldens


# The aoti_check calls of a test that are building now, by their BuildRequest (frozen, unhashable: by identity).
_building_key = pytest.StashKey[dict[int, _CheckSnapshot]]()


def _snapshot_options(request: BuildRequest) -> tuple[bool, float | None, float | None]:
    """``snapshot``, ``snapshot_rtol`` and ``snapshot_atol`` of a build, checked before anything is compiled."""
    __tracebackhide__ = True
    from pytest_aoti.core.compiler import check_flag, tolerance_value

    options = request.feature_options
    wanted = check_flag(options.get("snapshot", False), "snapshot")
    rtol = tolerance_value(options.get("snapshot_rtol"), "snapshot_rtol")
    atol = tolerance_value(options.get("snapshot_atol"), "snapshot_atol")
    if (rtol is None) != (atol is None):
        raise ValueError("snapshot_rtol and snapshot_atol: give both or neither")
    if rtol is not None and not wanted:
        raise TypeError(
            "snapshot_rtol/snapshot_atol are the golden comparison's tolerances, and this call takes no snapshot: add "
            "snapshot=True, or drop them"
        )
    if wanted and request.item is None:
        raise TypeError("snapshot=True: aoti_compile_shared serves a whole module; take snapshots in a test")
    return wanted, rtol, atol


def pytest_aoti_build_options(config: pytest.Config) -> list[str]:
    return list(BUILD_OPTIONS)


def pytest_aoti_report_properties(config: pytest.Config) -> list[ReportProperty]:
    return list(PROPERTIES)


@pytest.hookimpl(wrapper=True)
def pytest_aoti_build(config: pytest.Config, request: BuildRequest) -> Generator[None, Any, Any]:
    """Name the snapshot of an ``aoti_check(..., snapshot=True)`` call (``check0``, ``check1``, …) while it builds;
    its matched input sets arrive meanwhile (:func:`pytest_aoti_matched_outputs`)."""
    __tracebackhide__ = True
    wanted, rtol, atol = _snapshot_options(request)
    if not wanted or request.item is None:
        return (yield)
    building = request.item.stash.setdefault(_building_key, {})
    check = building[id(request)] = _CheckSnapshot(goldens_of(request.item).next_name("check"), rtol, atol)
    try:
        compiled = yield
    finally:
        del building[id(request)]
    from pytest_aoti.core.compiler import CompiledModel

    if not isinstance(compiled, CompiledModel):
        # Another pytest_aoti_build implementation returned something else, and nothing was built or compared: the
        # fixture names that hook as the cause.
        return compiled
    if check.input_sets == 0:  # built, and never compared with eager: aoti_compile
        raise TypeError(
            "snapshot=True: only aoti_check compares a package's outputs; with aoti_compile, pass its outputs to the "
            "aoti_snapshot fixture"
        )
    return compiled


def pytest_aoti_matched_outputs(config: pytest.Config, matched: MatchedOutputs) -> None:
    """Each input set of ``aoti_check(..., snapshot=True)`` whose outputs matched eager, held against the goldens as
    snapshot ``check<N>.<input set>`` (``check0.example``, ``check0.more_inputs[0]``)."""
    __tracebackhide__ = True
    item = matched.request.item
    check = item.stash.get(_building_key, {}).get(id(matched.request)) if item is not None else None
    if item is None or check is None:
        return
    check.input_sets += 1
    goldens_of(item).check(
        f"{check.name}.{matched.label}",
        matched.outputs,
        rtol=check.rtol,
        atol=check.atol,
        package_key=package_key(matched.compiled),
    )


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
    if report.when in ("call", "teardown") and goldens is not None:
        # On the call report for pytest-html's row, and on the teardown report, the one JUnit reads properties
        # from (the pictures plugin counts the two as one).
        attach_figure_data(report, *goldens.figures)
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
        if session.items and not is_worker(self.config):
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

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        lines = self.summary_lines()
        if lines:
            terminalreporter.write_sep("=", "aoti snapshots")
            for line in lines:
                terminalreporter.write_line(line)

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
