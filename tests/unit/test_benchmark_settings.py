"""The benchmark plugin's settings, from a real parsed command line."""

from __future__ import annotations

import pytest

from pytest_aoti.benchmark.plugin import resolve
from pytest_aoti.core.protocol import CHILD_ENV, Stage


@pytest.mark.parametrize(
    ("child", "records"),
    [(None, True), (Stage.ISOLATE, True), (Stage.KERNELS, False), (Stage.TENSORS, False)],
    ids=["the session", "an isolated first run", "debug stage kernels", "debug stage tensors"],
)
def test_only_a_tests_own_run_records_a_baseline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, child: Stage | None, records: bool
) -> None:
    """A debug rerun (and its reproduce line, which sets the same variable) times a debug build: with
    --aoti-benchmark-update on its command line it still benchmarks, but records nothing."""
    if child is None:
        monkeypatch.delenv(CHILD_ENV, raising=False)
    else:
        monkeypatch.setenv(CHILD_ENV, str(child))
    settings = resolve(pytester.parseconfig("--aoti-benchmark-update"))
    assert settings.enabled and settings.update is records


def _record(baseline: str, vs_baseline: float | None) -> dict[str, object]:
    return {
        "test": "test_b.py::test_speed",
        "benchmark": "test_speed",
        "median_s": 4.8e-5,
        "iqr_s": 1.7e-6,
        "baseline": baseline,
        "vs_baseline": vs_baseline,
        "speedup_vs_eager": 1.5,
        "load_s": 0.02,
        "load_memory_bytes": 1 << 20,
        "run_memory_bytes": None,
    }


def test_a_run_that_was_not_judged_shows_no_ratio() -> None:
    """The calibration ran 167x slower than at record time: normalizing stops meaning anything, and the 0.01x it
    would give must not read as a speed-up in the summary."""
    from pytest_aoti.benchmark.plugin import NOT_JUDGED, summary_table
    from pytest_aoti.benchmark.rule import Verdict

    assert Verdict.NOT_JUDGED.value == NOT_JUDGED
    unjudged, slower = summary_table([_record(NOT_JUDGED, 0.01), _record("slower", 1.8)])[-2:]
    assert " not judged " in unjudged and "0.01x" not in unjudged
    assert "1.80x SLOWER" in slower
