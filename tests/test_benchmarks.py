"""Benchmarks as tests, with a real compile: skipped without the flag, a baseline recorded, passed against, and a
planted slowdown (a custom op that sleeps) that fails naming the ratio. The slowdown is 20 ms on a call that takes
well under a millisecond, and the pass run allows 20x: the outcome does not depend on how busy the machine is."""

from __future__ import annotations

import json

import pytest

from tests.conftest import RunPytest, junit_cases

BENCHMARKED = """
import os
import time

import torch


@torch.library.custom_op("aoti_bench_tests::maybe_slow", mutates_args=())
def maybe_slow(x: torch.Tensor) -> torch.Tensor:
    if os.environ.get("PLANT_SLOWDOWN"):
        time.sleep(0.02)
    return x.clone()


@maybe_slow.register_fake
def _(x):
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return maybe_slow(torch.relu(self.fc(x)))


def test_speed(aoti_benchmark):
    aoti_benchmark(Model().eval(), (torch.randn(8, 16),))
"""


def test_baseline_recorded_passed_and_a_planted_slowdown_caught(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_speed=BENCHMARKED)
    run_pytest("-rs").stdout.fnmatch_lines(["*SKIPPED*aoti_benchmark: benchmarks run only with --aoti-benchmark*"])

    quick = ("--aoti-benchmark-min-time=0.2", "-p", "no:logging")
    recorded = run_pytest("--aoti-benchmark-update", *quick)
    recorded.assert_outcomes(passed=1)
    baseline = json.loads((pytester.path / "__aoti_benchmarks__" / "test_speed.json").read_text())
    ((machine, record),) = baseline["tests"]["test_speed"].items()
    assert machine.startswith("cpu: ") and len(record["times"]) >= 2 and record["package"]

    again = run_pytest("--aoti-benchmark", "--aoti-benchmark-tolerance=20", "-n", "2", *quick, "--junitxml=r.xml")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*= aoti benchmarks =*", "test *latency*vs baseline*vs eager*load*memory",
                                "test_speed.py::test_speed *ms*x*x*ms*load +*"])  # fmt: skip
    properties = junit_cases(pytester.path / "r.xml")["test_speed"]["properties"]
    assert isinstance(properties, dict)
    assert {"aoti_latency_ms", "aoti_vs_baseline", "aoti_speedup_vs_eager", "aoti_load_ms", "aoti_memory"} <= set(
        properties
    )

    monkeypatch.setenv("PLANT_SLOWDOWN", "1")
    slow = run_pytest("--aoti-benchmark", *quick, "--aoti-benchmark-json=out/bench.json", "--aoti-debug")
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        ["*aoti_benchmark: slower than the baseline: *x the baseline's median (* ms vs * ms; tolerance 10%, "
         "Mann-Whitney p=*", "*SLOWER*"]
    )  # fmt: skip
    # Not a kernel's failure: no debug rerun.
    assert "verdict: not rerun: a benchmark slower than its baseline" in slow.stdout.str()
    (written,) = json.loads((pytester.path / "out" / "bench.json").read_text())["benchmarks"]
    assert written["baseline"] == "slower" and written["vs_baseline"] > 20 and written["outcome"] == "failed"
