"""Which process this is (pytest_aoti/roles.py), decided from what pytest and xdist set up, asked one way: no other
module reads what decides it; and the one answer to "does this test use pytest-aoti?"."""

from __future__ import annotations

import ast
import os
import types
from pathlib import Path

import pytest

from pytest_aoti import roles
from pytest_aoti.roles import Role
from tests.conftest import plugin_args

PACKAGE = Path(roles.__file__).parent


def test_the_session_the_user_started(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig("-p", "no:xdist")
    assert roles.role(config) is Role.SESSION and roles.writes_user_reports(config)
    assert not roles.is_child(config) and not roles.is_worker(config) and roles.worker_input(config) == {}


def test_an_xdist_controller_and_its_worker(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig("-n", "2", "--dist", "load")
    assert roles.role(config) is Role.CONTROLLER and roles.writes_user_reports(config)
    worker = types.SimpleNamespace(workerinput={"workerid": "gw0"}, option=config.option, stash=pytest.Stash())
    assert roles.role(worker) is Role.WORKER and roles.is_worker(worker)  # type: ignore[arg-type]
    assert not roles.writes_user_reports(worker)  # type: ignore[arg-type]
    assert roles.worker_id(worker) == "gw0" and roles.worker_id(config) is None  # type: ignore[arg-type]


def test_workers_from_tx_without_n_make_a_controller(pytester: pytest.Pytester) -> None:
    # xdist starts two workers for this command line, as it does for -n 2.
    config = pytester.parseconfig("--tx", "2*popen", "--dist", "load")
    assert roles.role(config) is Role.CONTROLLER
    assert roles.role(pytester.parseconfig("--tx", "2*popen")) is Role.SESSION  # no dist mode: xdist runs none


@pytest.mark.parametrize(
    ("child", "expected"),
    [("isolate", Role.ISOLATED), ("kernels", Role.DEBUG_STAGE), ("numerics", Role.DEBUG_STAGE)],
)
def test_an_isolated_test_and_a_debug_stage_are_two_roles(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, child: str, expected: Role
) -> None:
    """Whatever else the process is (here an xdist run's command line, which a pasted reproduce line may carry)."""
    monkeypatch.setenv("PYTEST_AOTI_CHILD", child)
    config = pytester.parseconfig("-n", "2")
    assert roles.settle(config) is expected and roles.is_child(config) and not roles.writes_user_reports(config)
    assert roles.is_debug_stage(config) is (expected is Role.DEBUG_STAGE)
    assert roles.is_isolated_test(config) is (expected is Role.ISOLATED)


def test_the_role_is_decided_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    config = pytester.parseconfig("-p", "no:xdist")
    assert roles.settle(config) is Role.SESSION
    monkeypatch.setenv("PYTEST_AOTI_CHILD", "kernels")  # what decides it changes afterwards: the role does not
    assert roles.role(config) is Role.SESSION and not roles.is_debug_stage(config)


def test_a_controller_hands_a_worker_what_it_reads() -> None:
    node = types.SimpleNamespace(workerinput={"workerid": "gw1"})
    roles.hand_to_worker(node, "aoti_x", 3)
    worker = types.SimpleNamespace(workerinput=node.workerinput)
    assert roles.worker_input(worker)["aoti_x"] == 3  # type: ignore[arg-type]


def _item(*fixtures: str) -> pytest.Item:
    return types.SimpleNamespace(fixturenames=list(fixtures))  # type: ignore[return-value]


def test_which_fixtures_make_a_test_use_pytest_aoti() -> None:
    """Pinned: every builder fixture asks for aoti_device, so a feature fixture over it (aoti_benchmark) counts
    through it; a fixture that only has the prefix (aoti_snapshot) or a test that only reads a property does not."""
    assert roles.AOTI_FIXTURES == {"aoti_compile", "aoti_check", "aoti_device", "aoti_compile_shared"}
    for fixture in sorted(roles.AOTI_FIXTURES):
        assert roles.uses_aoti(_item("tmp_path", fixture)), fixture
    assert roles.uses_aoti(_item("aoti_benchmark", "aoti_device"))
    assert not roles.uses_aoti(_item("aoti_snapshot", "tmp_path"))
    assert not roles.uses_aoti(_item())
    assert not roles.uses_aoti(types.SimpleNamespace())  # type: ignore[arg-type]  # a non-Python item: no fixtures


def role_input_reads(source: str, *, defines_child_env: bool = False) -> list[str]:
    """Where ``source`` reads what decides a process's role: xdist's ``workerinput`` (an attribute, or its name
    given to ``getattr``/``hasattr``), or ``PYTEST_AOTI_CHILD`` (by its name ``CHILD_ENV`` or its text). Putting
    ``CHILD_ENV`` into a child's environment (a dict display's key) is the parent's setting of it, not a read; the
    module that ``defines_child_env`` may spell its text once, in that definition."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    written: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            written |= {id(key) for key in node.keys if key is not None}
        if isinstance(node, ast.Assign) and defines_child_env:
            if [getattr(target, "id", None) for target in node.targets] == ["CHILD_ENV"]:
                written.add(id(node.value))
    for node in ast.walk(tree):
        if id(node) in written:
            continue
        if isinstance(node, ast.Attribute) and node.attr in ("workerinput", "CHILD_ENV"):
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Name) and node.id == "CHILD_ENV" and isinstance(node.ctx, ast.Load):
            found.append((node.lineno, "CHILD_ENV"))
        elif isinstance(node, ast.Constant) and node.value in ("workerinput", "PYTEST_AOTI_CHILD"):
            found.append((node.lineno, repr(node.value)))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def test_the_checker_finds_each_way_to_read_the_role() -> None:
    planted = [
        "x = getattr(config, 'workerinput', {}).get('workerid')",
        "x = hasattr(config, 'workerinput')",
        "node.workerinput['k'] = 1",
        "x = os.environ.get(CHILD_ENV)",
        "x = os.environ['PYTEST_AOTI_CHILD']",
        "x = protocol.CHILD_ENV in os.environ",
    ]
    for source in planted:
        assert role_input_reads(source), source
    written = ["env = {CHILD_ENV: stage, 'A': 'b'}", "from pytest_aoti.core.protocol import CHILD_ENV"]
    for source in written:
        assert role_input_reads(source) == [], source
    assert role_input_reads("CHILD_ENV = 'PYTEST_AOTI_CHILD'", defines_child_env=True) == []
    assert role_input_reads("CHILD_ENV = 'PYTEST_AOTI_CHILD'")  # anywhere else it is a second spelling


def test_only_roles_reads_what_decides_a_role() -> None:
    """The review found ``workerinput`` read in 5 modules and ``PYTEST_AOTI_CHILD`` in 3: each question now asks a
    predicate of roles.py."""
    readers = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "roles.py":
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        reads = role_input_reads(path.read_text(), defines_child_env=relative == "core/protocol.py")
        if reads:
            readers[relative] = reads
    assert readers == {}, f"read what decides a process's role outside roles.py (ask its predicates): {readers}"


NESTED_IN_A_CHILD = """
import pytest

pytest_plugins = ["pytester"]


def test_inner_runs(pytester):
    pytester.makepyfile(test_inner="def test_one():\\n    pass\\n")
    pytester.makeconftest(
        "from pytest_aoti import roles\\n"
        "def pytest_report_header(config):\\n"
        "    return 'inner role: ' + roles.role(config).value\\n"
    )
    {run}.assert_outcomes(passed=1)
"""


@pytest.mark.parametrize("run", ["pytester.runpytest_inprocess()", "pytester.runpytest_subprocess()"])
def test_a_pytest_run_inside_a_child_is_a_session_of_its_own(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    """A child's test that starts a pytest run of its own (a plugin's pytester tests run under --aoti-isolate)
    inherits PYTEST_AOTI_CHILD: that run is a session, not the child, and runs its tests (it collected none)."""
    monkeypatch.setenv("PYTEST_AOTI_CHILD", "isolate")
    monkeypatch.setenv("PYTEST_AOTI_NODEID", "test_outer.py::test_inner_runs")
    monkeypatch.delenv(roles.CHILD_OWNER_ENV, raising=False)
    pytester.makepyfile(test_outer=NESTED_IN_A_CHILD.format(run=run))
    result = pytester.runpytest_subprocess(*plugin_args(), "-s", "test_outer.py::test_inner_runs")
    result.stdout.fnmatch_lines(["*inner role: session*"])
    assert "inner role: isolated test" not in result.stdout.str()


def test_a_childs_claim_ends_with_its_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_AOTI_CHILD", "kernels")
    monkeypatch.delenv(roles.CHILD_OWNER_ENV, raising=False)
    child = pytester.parseconfigure()
    assert roles.is_debug_stage(child)
    assert roles.role(pytester.parseconfig()) is roles.Role.SESSION  # a second config while the child's lives
    roles.release(child)  # what plugin.py's pytest_unconfigure does
    assert roles.CHILD_OWNER_ENV not in os.environ
    assert roles.is_debug_stage(pytester.parseconfigure())  # the next child claims it afresh
