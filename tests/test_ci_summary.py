"""The Markdown summary written where ``GITHUB_STEP_SUMMARY`` points: read from the reports' properties, so a real
golden result shows up beside the properties other plugins record (a verdict, a benchmark row: recorded here with
``record_property`` under the names the features use, to keep the run free of debug reruns and timing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RunPytest

SUITE = """
import torch
from aoti_models import MLP

def test_golden(aoti_check):
    aoti_check(MLP(), (torch.randn(2, 8),), snapshot=True)

def test_fails(record_property):
    record_property("aoti_verdict", "failed: output 0 | nonfinite in cpp_fused_log_mul_0")
    assert False

def test_benchmarked(record_property):
    record_property("aoti_latency_ms", "0.153")
    record_property("aoti_vs_baseline", "1.020")

def test_skipped():
    import pytest
    pytest.skip("no GPU")
"""


def test_the_step_summary_lists_failures_goldens_and_benchmarks(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    summary = tmp_path / "step_summary.md"
    summary.write_text("# an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run_pytest("--aoti-snapshot=write")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    text = summary.read_text()
    assert text.startswith("# an earlier step's summary\n## pytest-aoti\n"), text  # appended
    assert "**1 failed, 2 passed, 1 skipped** (exit status 1)" in text
    assert "| `test_suite.py::test_fails` | failed | failed: output 0 \\| nonfinite in cpp_fused_log_mul_0 |" in text
    assert "| `test_suite.py::test_golden` | check0.example: written |" in text, text
    assert "| `test_suite.py::test_benchmarked` | 0.153 | 1.020 |  |  |  |" in text
    assert "`aoti cache: 1 hits, 0 misses" in text or "`aoti cache: 0 hits, 1 misses" in text

    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    run_pytest("--aoti-snapshot=write", "-k", "benchmarked").assert_outcomes(passed=1)
    assert summary.read_text() == text  # not on GitHub: nothing written
