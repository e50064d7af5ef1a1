"""The suite's tiers (tests/tiers.py, tests/README.md): a bare ``pytest`` is the unit tier, a test's place says its
tier, ``slow`` and the order of work come from the recorded seconds, and a run records them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import tiers
from tests.conftest import DurationsRecorder

REPO = Path(__file__).parents[2]


def test_a_bare_pytest_collects_only_the_unit_tier(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contributor's loop: ``pytest --collect-only -q`` from the repository's root, as pyproject's testpaths has
    it. In-process: the test modules are imported already, so the collection costs no torch import."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    collected = [line for line in result.outlines if "::" in line]
    assert f"tests/unit/test_tiers.py::{test_a_bare_pytest_collects_only_the_unit_tier.__name__}" in collected
    assert [nodeid for nodeid in collected if not nodeid.startswith("tests/unit/")] == []
    assert len(collected) > 500


def test_a_tests_place_says_its_tier(tmp_path: Path) -> None:
    """A test added to a file gets its file's tier: nothing to keep by hand."""
    assert tiers.tier_marks(tmp_path / "test_new_scenario.py", tmp_path) == ("scenario",)
    assert tiers.tier_marks(tmp_path / "unit" / "test_new.py", tmp_path) == ()
    assert tiers.tier_marks(tmp_path / "gpu" / "test_new.py", tmp_path) == ("gpu",)
    assert tiers.tier_marks(tmp_path.parent / "conftest_examples" / "test_x.py", tmp_path) == ()
    assert tiers.tier_marks(Path(__file__)) == ()
    assert tiers.tier_marks(tiers.TESTS_DIR / "test_cache.py") == ("scenario",)


def test_slow_and_the_expected_seconds_come_from_the_record() -> None:
    recorded = {"tests/test_a.py::test_long": tiers.SLOW_SECONDS, "tests/test_a.py::test_medium": 5.0}
    assert tiers.is_slow("tests/test_a.py::test_long", recorded)
    assert not tiers.is_slow("tests/test_a.py::test_medium", recorded)
    assert not tiers.is_slow("tests/test_a.py::test_new", recorded)  # slow once a recorded run says so
    assert tiers.expected_seconds("tests/test_a.py::test_medium", ("scenario",), recorded) == 5.0
    assert tiers.expected_seconds("tests/test_a.py::test_new", ("scenario",), recorded) == 8.0
    assert tiers.expected_seconds("tests/unit/test_b.py::test_new", (), recorded) == 0.2


def test_a_run_replaces_what_it_ran_and_keeps_the_rest(tmp_path: Path) -> None:
    recorded = {"t::kept": 30.0, "t::replaced": 30.0, "t::now_quick": 4.0}
    merged = tiers.merged_durations(recorded, {"t::replaced": 12.34, "t::now_quick": 0.3, "t::added": 2.0})
    assert merged == {"t::added": 2.0, "t::kept": 30.0, "t::replaced": 12.3}
    path = tmp_path / "durations.json"
    tiers.write_durations(merged, path)
    assert tiers.load_durations(path) == merged
    assert json.loads(path.read_text())["how"] == tiers.HOW_RECORDED
    assert [entry.name for entry in tmp_path.iterdir()] == ["durations.json"]
    assert tiers.load_durations(tmp_path / "missing.json") == {}


def test_the_recorder_writes_the_seconds_of_tests_that_passed(pytester: pytest.Pytester) -> None:
    """Setup, call and teardown add up; a failed or skipped test keeps what the file held for it."""
    pytester.makepyfile(
        test_timed="""
        import time
        import pytest

        @pytest.fixture
        def slow_setup():
            time.sleep(0.55)

        def test_passes(slow_setup):
            time.sleep(0.55)

        def test_fails():
            assert False

        def test_skipped():
            pytest.skip("no")

        def test_quick():
            pass
        """
    )
    record = pytester.path / "durations.json"
    tiers.write_durations({"test_timed.py::test_fails": 9.0, "test_timed.py::test_quick": 3.0}, record)
    pytester.runpytest("-p", "no:cacheprovider", plugins=[DurationsRecorder(record)]).assert_outcomes(
        passed=2, failed=1, skipped=1
    )
    recorded = tiers.load_durations(record)
    assert sorted(recorded) == ["test_timed.py::test_fails", "test_timed.py::test_passes"]
    assert recorded["test_timed.py::test_fails"] == 9.0
    assert 1.1 <= recorded["test_timed.py::test_passes"] < 60
