"""Benchmarks as tests, with real compiles and real timing: skipped without the flag, two calls of one test recorded
as two baselines, a pass under ``-n 2`` (the device lock taken only in runs with benchmarks), a slowdown failed,
and bad input (a malformed baseline, an unwritable ``--aoti-benchmark-json``) named in one line.

No outcome here depends on the machine's speed: judging runs allow 50x (``--aoti-benchmark-tolerance=50``), and
the slowdown is written into the baseline instead (its package 10,000x faster than the one that runs, over five
runs 1 % apart), far past anything a busy machine does to the calibration-normalized latency. The one slowdown
planted in a model (100 ms of busy waiting per call, ~1000x a call) is judged beside real busy loops at the default
tolerance: it fails however the loops move the calibration, within the run or since the baseline."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases

BENCHMARKED = """
import torch


class Model(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(16, width)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_speed(aoti_benchmark):
    aoti_benchmark(Model(16).eval(), (torch.randn(8, 16),))
    aoti_benchmark(Model(64).eval(), (torch.randn(8, 16),))  # twice the work: its own baseline


def test_compiles(aoti_compile):
    aoti_compile(Model(16).eval(), (torch.randn(8, 16),))
"""

QUICK = ("--aoti-benchmark-min-time=0.2", "--aoti-benchmark-tolerance=50", "-p", "no:logging")


def _locks(root: Path) -> list[Path]:
    return list(root.rglob("aoti-benchmark.lock"))


def _planted_slowdown(path: Path) -> None:
    """The baseline of ``test_speed``'s first call, as if its package had been 10,000x faster: five copies of its
    first recorded run, 1 % apart."""
    data = json.loads(path.read_text())
    ((machine, entry),) = data["tests"]["test_speed"].items()
    first = entry["runs"][0]
    runs = [{**first, "package": [t * 1e-4 * (1 + 0.01 * n) for t in first["package"]], "run_id": str(n)}
            for n in range(5)]  # fmt: skip
    data["tests"]["test_speed"][machine] = {"runs": runs}
    path.write_text(json.dumps(data))


def test_baseline_recorded_passed_and_a_planted_slowdown_caught(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makepyfile(test_speed=BENCHMARKED)
    plain = run_pytest("-rs", "-n", "2")
    plain.assert_outcomes(passed=1, skipped=1)
    plain.stdout.fnmatch_lines(["*SKIPPED*aoti_benchmark: benchmarks run only with --aoti-benchmark*"])
    assert _locks(pytester.path) == []  # a compile in a run without benchmarks takes no lock

    for _ in range(2):  # two runs, each its own process: the spread between runs needs two
        recorded = run_pytest("--aoti-benchmark-update", *QUICK, "test_speed.py::test_speed")
        recorded.assert_outcomes(passed=1)
        recorded.stdout.fnmatch_lines(
            ["test_speed: baseline run recorded in *test_speed.json (* of 5 kept for cpu: *, 1 thread)"]
        )
    recorded.stdout.fnmatch_lines(["aoti benchmarks: recording baselines (*, CPU timed on 1 thread)"])
    path = pytester.path / "__aoti_benchmarks__" / "test_speed.json"
    entries = json.loads(path.read_text())["tests"]
    assert set(entries) == {"test_speed", "test_speed [call 2]"}  # two calls, two entries
    (first,), (second,) = entries["test_speed"].values(), entries["test_speed [call 2]"].values()
    assert len(first["runs"]) == len(second["runs"]) == 2
    assert first["runs"][0]["package_key"] != second["runs"][0]["package_key"]

    again = run_pytest("--aoti-benchmark", "-n", "2", *QUICK, "--junitxml=r.xml")
    again.assert_outcomes(passed=2)
    again.stdout.fnmatch_lines(["*= aoti benchmarks =*", "benchmark *latency*vs baseline*vs eager*load*memory",
                                "test_speed.py::test_speed *ms*x*ms*load +*",
                                "test_speed.py::test_speed ?call 2? *ms*x*ms*load +*"])  # fmt: skip
    assert _locks(pytester.path), "under -n 2 a run with benchmarks measures under the device lock"
    properties = junit_cases(pytester.path / "r.xml")["test_speed"]["properties"]
    assert isinstance(properties, dict)
    assert {"aoti_latency_ms", "aoti_vs_baseline", "aoti_speedup_vs_eager", "aoti_load_ms", "aoti_memory"} <= set(
        properties
    )
    assert "aoti_figure_data" in properties  # block times now and per baseline run, for the pictures plugin
    # The second call's figures under names of their own: two calls are never one property name twice.
    assert {"aoti_latency_ms (test_speed [call 2])", "aoti_vs_baseline (test_speed [call 2])"} <= set(properties)
    assert json.loads(str(properties["aoti_benchmark"]))["threads"] == 1

    # The package as compiled, on all threads: a baseline timed on one thread is another machine's, never compared.
    all_threads = run_pytest(
        "--aoti-benchmark", *QUICK, "--aoti-benchmark-cpu-threads=all", "test_speed.py::test_speed"
    )
    all_threads.assert_outcomes(passed=1)
    all_threads.stdout.fnmatch_lines(
        ["aoti benchmarks: judging against baselines (*, CPU timed on all threads)",
         "test_speed: not judged: baselines only for other machines (cpu: * x*, 1 thread); this is cpu: * x[0-9]"]
    )  # fmt: skip

    _planted_slowdown(path)
    update_lock = path.with_name(f".{path.name}.lock")
    update_lock.unlink()  # the recording runs' lock: judging alone writes nothing beside the baselines
    slow = run_pytest("--aoti-benchmark", *QUICK, "--aoti-benchmark-json=out/bench.json", "--aoti-debug")
    slow.assert_outcomes(failed=1, passed=1)
    slow.stdout.fnmatch_lines(
        ["*aoti_benchmark: test_speed: slower than the baseline: *normalized by the calibration, *x the baseline "
         "(fastest blocks: package *x, eager *x, calibration *x); fails above 51.00x (tolerance 5000%) and above "
         "*x (the spread of 5 baseline runs, 99% prediction bound)*", "*SLOWER*"]
    )  # fmt: skip
    assert "verdict: not rerun: a benchmark slower than its baseline" in slow.stdout.str()  # no debug rerun
    written = {r["benchmark"]: r for r in json.loads((pytester.path / "out" / "bench.json").read_text())["benchmarks"]}
    assert written["test_speed"]["baseline"] == "slower" and written["test_speed"]["vs_baseline"] > 1000
    assert written["test_speed"]["outcome"] == "failed"
    assert written["test_speed"]["fails_above"] == pytest.approx(51.0)  # the tolerance; the machine within 51x
    assert sorted(path.parent.iterdir()) == [path]  # a read-only checkout judges the same

    path.write_text("null")
    malformed = run_pytest("--aoti-benchmark", *QUICK, "test_speed.py::test_speed")
    malformed.assert_outcomes(failed=1)
    malformed.stdout.fnmatch_lines(
        [f"*{path}: expected a JSON object with 'format' and 'tests', got NoneType None; fix it, or delete it and "
         "record again with --aoti-benchmark-update"]
    )  # fmt: skip
    # Once, not chained. Only the failure section counts: the short summary repeats the message when the terminal is
    # wide enough (CI's is), which says nothing about chaining.
    failure_section = malformed.stdout.str().split("short test summary info")[0]
    assert failure_section.count("expected a JSON object with 'format'") == 1
    assert "During handling of the above exception" not in malformed.stdout.str()
    assert "The above exception was the direct cause" not in malformed.stdout.str()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--aoti-benchmark-json=out",), "--aoti-benchmark-json: */out is a directory; expected the path of a JSON *"),
        (("--aoti-benchmark-json=notes.txt/bench.json",), "--aoti-benchmark-json: cannot write */notes.txt/bench.json: "
                                                          "*/notes.txt is not a directory"),
        (("--aoti-benchmark-runs=1",), "--aoti-benchmark-runs: a baseline keeps at least 2 runs (*), got 1"),
        (("--aoti-benchmark-tolerance=-1",), "--aoti-benchmark-tolerance: expected a fraction >= 0 (0.1 = 10 %) *"),
        (("--aoti-benchmark-clock=cpu",), "*unrecognized arguments: --aoti-benchmark-clock=cpu*"),
        (("--aoti-benchmark-cpu-threads=0",), "--aoti-benchmark-cpu-threads: expected a whole number of threads from "
                                              "1 to 1024, or 'all', got '0'"),
        (("--aoti-benchmark-cpu-threads=two",), "--aoti-benchmark-cpu-threads: expected a whole number of threads "
                                                "from 1 to 1024, or 'all', got 'two'"),
    ],
    ids=["json to a directory", "json under a file", "one run kept", "negative tolerance", "no clock option",
         "no threads", "threads not a number"],
)  # fmt: skip
def test_bad_benchmark_options_are_usage_errors_at_start(
    pytester: pytest.Pytester, run_pytest: RunPytest, args: tuple[str, ...], error: str
) -> None:
    pytester.makepyfile(test_speed=BENCHMARKED)
    (pytester.path / "out").mkdir()
    (pytester.path / "notes.txt").write_text("")
    result = run_pytest("--aoti-benchmark", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{error}"])
    assert "Traceback" not in result.stderr.str()


def test_a_benchmark_call_with_a_bad_value_fails_before_it_compiles(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makepyfile(
        test_values="""
        import pytest
        import torch


        @pytest.mark.parametrize("values", [{"min_run_time": 0}, {"min_run_time": -1}, {"tolerance": float("nan")}])
        def test_bad(aoti_benchmark, values):
            aoti_benchmark(torch.nn.Linear(4, 4), (torch.randn(2, 4),), **values)
        """
    )
    result = run_pytest("--aoti-benchmark", "-p", "no:logging")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*ValueError: aoti_benchmark min_run_time: expected seconds above 0, got 0",
            "*ValueError: aoti_benchmark min_run_time*-1*",
            "*ValueError: aoti_benchmark tolerance*nan*",
        ],
        consecutive=False,
    )
    assert "aoti cache:" not in result.stdout.str() or "0 misses" in result.stdout.str()  # nothing compiled


PLANTED = """
import os
import time

import torch


@torch.library.custom_op("aoti_latency_gate::wait", mutates_args=())
def wait(x: torch.Tensor) -> torch.Tensor:
    \"\"\"In eager and in the package: PLANTED_WAIT_MS of busy waiting per call (none unless planted).\"\"\"
    end = time.perf_counter() + float(os.environ.get("PLANTED_WAIT_MS", "0")) / 1e3
    while time.perf_counter() < end:
        pass
    return x.clone()


@wait.register_fake
def _(x):
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return wait(torch.relu(self.fc(x)))


def test_latency(aoti_benchmark):
    aoti_benchmark(Model().eval(), (torch.randn(8, 16),))
"""


@contextlib.contextmanager
def _cpu_hogs(count: int) -> Iterator[None]:
    """Real busy-loop processes, for as long as the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_a_planted_slowdown_fails_beside_busy_loops(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 62 item 8: on a loaded machine the calibration moves, within the run and since the baseline, and a
    package 18x slower was waved through as "not judged". A forward made ~1000x slower fails whatever two busy loops
    do to the calibration: no move of it explains that much."""
    pytester.makepyfile(test_gate=PLANTED)
    quick = ("--aoti-benchmark-min-time=0.2", "-p", "no:logging")
    recorded = 0
    for _ in range(8):  # 3 runs, each its own process: a baseline of 3 judges at a 99 % bound of 8.0 sd, not 39
        # Recorded at a 100 % tolerance: a run other work on this machine moved by up to 2x within it still counts.
        done = run_pytest("--aoti-benchmark-update", *quick, "--aoti-benchmark-tolerance=1")
        done.assert_outcomes(passed=1)
        recorded += "test_latency: baseline run recorded in" in done.stdout.str()
        if recorded == 3:
            break
    assert recorded == 3, "the machine changed under 6 of 8 recording runs"

    monkeypatch.setenv("PLANTED_WAIT_MS", "100")
    with _cpu_hogs(2):
        slow = run_pytest("--aoti-benchmark", *quick, "--aoti-benchmark-json=bench.json")
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        ["*aoti_benchmark: test_latency: slower than the baseline: *normalized by the calibration, *x the baseline "
         "(fastest blocks: package *x, eager *x, calibration *x); *fails above *"]
    )  # fmt: skip
    (record,) = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert record["baseline"] == "slower" and record["outcome"] == "failed"
    assert record["vs_baseline"] > 10 * record["fails_above"], record["comparison"]  # not a close call
