"""The benchmark fail rule, measured in one run: false positives and true positives of ``pytest_aoti.benchmark.timing``.

One package is compiled (an MLP with a custom op that busy-waits for a set time per call: 0 unless planted). A
baseline is measured, then the same package is measured and compared with it ``--runs`` times (false positives: any
failure is one), then with a planted slowdown that makes each call 1.5x the baseline's median (true positives).
``--hogs N`` runs N busy-loop processes for the whole script (baseline included), so the machine is noisy throughout.

    python bench/benchmark_fail_rule.py [--runs 10] [--hogs 1] [--device cpu|cuda] [--min-run-time 1] [--clock wall|cpu]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import torch

from pytest_aoti.benchmark import timing as benchmark
from pytest_aoti.core.compiler import compile_model, load_package

SPIN_SECONDS = [0.0]
GPU_CYCLES_PER_SECOND = [0.0]


@torch.library.custom_op("aoti_bench::spin", mutates_args=())
def spin(x: torch.Tensor) -> torch.Tensor:
    """The planted slowdown: busy time on the device the model runs on (a CPU busy-wait would overlap the GPU's
    queued kernels and slow a CUDA package by less than planted)."""
    if SPIN_SECONDS[0] and x.is_cuda:
        torch.cuda._sleep(int(SPIN_SECONDS[0] * GPU_CYCLES_PER_SECOND[0]))
    else:
        end = time.perf_counter() + SPIN_SECONDS[0]
        while time.perf_counter() < end:
            pass
    return x.clone()


def _calibrate_gpu_sleep() -> None:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 50_000_000
    torch.cuda._sleep(cycles)  # warm-up
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    GPU_CYCLES_PER_SECOND[0] = cycles / (start.elapsed_time(end) / 1e3)


@spin.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(256, width)
        self.down = torch.nn.Linear(width, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(spin(torch.relu(self.up(x))))


def _hog() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hogs", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--min-run-time", type=float, default=1.0)
    parser.add_argument("--tolerance", type=float, default=0.1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    options = parser.parse_args()
    device = torch.device(options.device)
    if device.type == "cuda":
        _calibrate_gpu_sleep()
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(options.hogs)]
    for hog in hogs:
        hog.start()
    try:
        torch.manual_seed(0)
        # On a GPU, a model big enough that its kernels, not the launches, set the pace (a slowdown planted in GPU
        # time would otherwise hide behind the CPU's launch overhead).
        cuda = device.type == "cuda"
        model = Model(8192 if cuda else 1024).eval().to(device)
        x = torch.randn(8192 if cuda else 64, 256, device=device)
        with tempfile.TemporaryDirectory() as work:
            compiled = compile_model(model, (x,), package_dir=Path(work))
            package = compiled.package_path

            def once() -> benchmark.Figures:
                return benchmark.measure(
                    lambda: load_package(package, device, extract_dir=Path(work) / "load"),
                    lambda runner: runner(x),
                    lambda: model(x),
                    package=package,
                    device=device,
                    min_run_time=options.min_run_time,
                    clock=options.clock,
                )

            base = once()
            baseline = {"times": base.times}
            print(
                f"baseline: {benchmark.describe(base)} ({options.hogs} busy-loop process(es) running, "
                f"{options.clock} clock)"
            )
            false_positives = 0
            for run in range(options.runs):
                comparison = benchmark.compare(once(), baseline, options.tolerance)
                false_positives += comparison.status == "slower"
                print(f"same package, run {run + 1}: {comparison.status}: {comparison.text}")
            SPIN_SECONDS[0] = 0.5 * statistics.median(base.times)
            caught = 0
            for run in range(options.runs):
                comparison = benchmark.compare(once(), baseline, options.tolerance)
                caught += comparison.status == "slower"
                print(f"planted 1.5x slowdown, run {run + 1}: {comparison.status}: {comparison.text}")
    finally:
        for hog in hogs:
            hog.terminate()
    print(f"false positives: {false_positives} of {options.runs} (target 0)")
    print(f"true positives: {caught} of {options.runs} planted 1.5x slowdowns caught (target {options.runs})")


if __name__ == "__main__":
    main()
