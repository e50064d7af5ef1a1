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
