"""The benchmark fail rule on fixed numbers: slower than the tolerance and significant, or it passes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pytest_aoti.benchmark.timing import Baselines, Figures, compare


def _figures(times: list[float]) -> Figures:
    return Figures(
        times=times,
        eager_times=[t * 2 for t in times],
        load_seconds=0.01,
        load_memory_bytes=1 << 20,
        run_memory_bytes=None,
        package_bytes=1 << 20,
        device="cpu",
    )


def _noisy(center: float, count: int, seed: int) -> list[float]:
    draw = random.Random(seed)
    return [center * (1 + draw.uniform(-0.05, 0.05)) for _ in range(count)]


def test_a_run_like_its_baseline_passes_and_a_slower_one_fails_naming_the_ratio() -> None:
    baseline = {"times": _noisy(1e-3, 40, 1), "torch": "0", "package": "a" * 64}
    assert compare(_figures(_noisy(1e-3, 40, 2)), baseline, 0.1).status == "ok"
    slower = compare(_figures(_noisy(1.5e-3, 40, 3)), baseline, 0.1, package_key="a" * 64)
    assert slower.status == "slower" and slower.ratio == pytest.approx(1.5, rel=0.05)
    assert slower.text.startswith("1.5") and "tolerance 10%, Mann-Whitney p=" in slower.text
    assert "since the baseline: torch 0 → " in slower.text and "the package changed" not in slower.text


def test_within_the_tolerance_or_not_significant_passes() -> None:
    baseline = {"times": _noisy(1e-3, 40, 1)}
    assert compare(_figures(_noisy(1.05e-3, 40, 4)), baseline, 0.1).status == "ok"
    # A slower median from a few blocks that a test cannot call real: not significant.
    assert compare(_figures([1.3e-3, 0.9e-3]), baseline, 0.1).status == "ok"


def test_no_baseline_and_baselines_of_other_machines(tmp_path: Path) -> None:
    assert compare(_figures([1e-3]), None, 0.1).status == "no baseline"
    baselines = Baselines(tmp_path / "b.json")
    baselines.put("test_x", "cpu: A x2", _figures([1e-3, 2e-3]), None)
    baselines.write()
    again = Baselines.read(tmp_path / "b.json")
    assert again.get("test_x", "cpu: A x2")["median"] == pytest.approx(1.5e-3)  # type: ignore[index]
    assert again.get("test_x", "cuda: B") is None and again.others("test_x", "cuda: B") == ["cpu: A x2"]
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(RuntimeError, match=r"bad.json: not a readable benchmark baseline file"):
        Baselines.read(tmp_path / "bad.json")
