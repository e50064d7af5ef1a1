"""What the remote package cache buys a CI fleet, measured in one run against a real ``redis-server`` on loopback:

- runner A: a fresh runner (empty pytest-aoti cache dir, empty Inductor cache, its own TMPDIR, so no precompiled
  headers) runs the suite; it compiles every model and fills the remote cache;
- warm local: runner A runs the suite again (every package a local hit): the best a runner can do;
- runner B: another fresh runner (fresh dirs, fresh processes) against the same Redis: every package a remote hit.

Warm local and B are run alternately (``--repeats`` times each, B with new dirs every time) and their medians are
compared, so both meet the same machine load. Targets (issues #46, #52): B <= 1.2x warm local, B <= 0.35x A, and A's
own second run (the first warm local run) 0 misses.

On a multi-GPU host, run it with more xdist workers than GPUs (``--device cuda -n 3`` on two GPUs): the workers share
the GPUs, so a model lands on another GPU in each run, as in a fleet. A package key that held the GPU index missed
there (issue #52); every package must now serve every GPU of its kind. ``--device cuda`` without ``-n`` takes one
worker more than the GPUs it sees.

    python bench/remote_cache_benchmark.py [--device cpu|cuda] [--models N] [--repeats N] [-n WORKERS]

Needs ``redis-server`` on this machine and the ``redis`` client (``pip install 'pytest-aoti[remote-cache]'``); without
them it says so and exits 0. CPU default: 6 models; ``--device cuda``: 3 (an MLP, a conv with BatchNorm, multi-head
attention: issue #52's suite).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SECRET = "benchmark-secret"

# Six small models of different shapes (each its own package key); a suite takes the first N.
SUITE = """
import pytest
import torch


def mlp(width):
    return torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.GELU(), torch.nn.Linear(width, 64))


def conv_batchnorm():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU())


MODELS = {{
    "mlp_128": (lambda: mlp(128), (16, 64)),
    "conv_batchnorm": (conv_batchnorm, (2, 3, 16, 16)),
    "attention": (lambda: torch.nn.MultiheadAttention(64, 4, batch_first=True), None),
    "mlp_256": (lambda: mlp(256), (16, 64)),
    "layernorm_mlp": (lambda: torch.nn.Sequential(torch.nn.LayerNorm(64), mlp(96)), (16, 64)),
    "gru_cell": (lambda: torch.nn.GRUCell(64, 32), (16, 64)),
}}


@pytest.mark.parametrize("name", list(MODELS)[:{count}])
def test_model(aoti_check, name):
    build, shape = MODELS[name]
    model = build().eval()
    if shape is None:
        x = torch.randn(2, 8, 64)
        inputs = (x, x, x)
    else:
        inputs = (torch.randn(*shape),)
    aoti_check(model, inputs, rtol=1e-3, atol=1e-3)
"""


def _missing() -> str | None:
    if shutil.which("redis-server") is None:
        return "redis-server is not installed on this machine (apt-get install redis-server)"
    if importlib.util.find_spec("redis") is None:
        return "the redis client is not installed (pip install 'pytest-aoti[remote-cache]')"
    return None


def _plugin_args() -> list[str]:
    """``-p pytest_aoti.plugin`` where pytest-aoti is importable (PYTHONPATH) but not installed (the GPU machine)."""
    from importlib.metadata import entry_points

    installed = any(entry.value == "pytest_aoti.plugin" for entry in entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_aoti.plugin"]


def _run(suite: Path, runner_dir: Path, env: dict[str, str], workers: int) -> tuple[float, str]:
    """One pytest run of the suite as runner ``runner_dir`` (its cache dir, Inductor cache and TMPDIR inside)."""
    for name in ("aoti-cache", "inductor-cache", "tmp"):
        (runner_dir / name).mkdir(parents=True, exist_ok=True)
    run_env = {
        **env,
        "TORCHINDUCTOR_CACHE_DIR": str(runner_dir / "inductor-cache"),
        "TMPDIR": str(runner_dir / "tmp"),
    }
    # -v: the cache names each package that missed, and what differed from its test's nearest entry.
    command = [sys.executable, "-m", "pytest", str(suite), "-v", "-p", "no:cacheprovider", *_plugin_args()]
    command += [f"--aoti-cache-dir={runner_dir / 'aoti-cache'}", *(["-n", str(workers)] if workers else [])]
    started = time.perf_counter()
    done = subprocess.run(command, env=run_env, cwd=suite.parent, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
        raise SystemExit(f"the suite failed in {runner_dir.name} ({done.returncode})")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("aoti cache:")), "no cache line")
    for missed in (ln for ln in done.stdout.splitlines() if ln.startswith("aoti cache:") and " missed" in ln):
        print(f"    {missed}")
    return wall, line


def _misses(line: str) -> int:
    found = re.search(r"(\d+) misses", line)
    return int(found.group(1)) if found else -1


def _gpus() -> int:
    """The GPUs a run would see (0 without CUDA): one worker more than these puts two workers on a GPU."""
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"],
        capture_output=True,
        text=True,
    )
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--models", type=int, default=None, help="models in the suite (default 6 on cpu, 3 on cuda)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of warm local and of runner B, alternated")
    parser.add_argument(
        "-n",
        "--workers",
        type=int,
        default=None,
        help="xdist workers per run (default: none on cpu; on cuda one more than the visible GPUs)",
    )
    args = parser.parse_args()
    missing = _missing()
    if missing is not None:
        print(f"remote cache benchmark not run: {missing}")
        return
    sys.path.insert(0, str(REPOSITORY))
    from tests.redis_server import RedisServer

    count = args.models or (6 if args.device == "cpu" else 3)
    gpus = _gpus() if args.device == "cuda" else 0
    workers = args.workers if args.workers is not None else (gpus + 1 if gpus else 0)
    with tempfile.TemporaryDirectory(prefix="remote-cache-bench-") as tmp:
        root = Path(tmp)
        suite = root / "suite" / "test_suite.py"
        suite.parent.mkdir()
        suite.write_text(SUITE.format(count=count))
        (suite.parent / "pytest.ini").write_text(f"[pytest]\naoti_device = {args.device}\n")
        server = RedisServer(root / "redis").start()
        try:
            env = {
                **os.environ,
                "PYTEST_AOTI_CACHE_URL": server.url(),
                "PYTEST_AOTI_CACHE_SECRET": SECRET,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
            }
            env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)  # each fresh runner probes as a CI runner would
            shared = f", {workers} workers on {gpus} GPUs" if gpus else (f", {workers} workers" if workers else "")
            print(f"{count} models on {args.device}{shared}, redis-server on 127.0.0.1:{server.port}")
            cold, cold_line = _run(suite, root / "runner-a", env, workers)
            print(f"runner A (cold, fills the remote cache): {cold:.1f} s  [{cold_line}]")
            warm_runs, remote_runs, second_run_misses = [], [], None
            for repeat in range(args.repeats):
                wall, line = _run(suite, root / "runner-a", env, workers)
                warm_runs.append(wall)
                second_run_misses = _misses(line) if second_run_misses is None else second_run_misses
                print(f"warm local (runner A again), run {repeat + 1}: {wall:.1f} s  [{line}]")
                wall, line = _run(suite, root / f"runner-b{repeat}", env, workers)
                remote_runs.append(wall)
                print(f"runner B (fresh, remote hits), run {repeat + 1}: {wall:.1f} s  [{line}]")
                if not re.search(rf"{count} hits \({count} remote\), 0 misses", line):
                    raise SystemExit(f"runner B did not load every package from the remote cache: {line}")
        finally:
            server.stop()
    warm, remote = statistics.median(warm_runs), statistics.median(remote_runs)
    print(f"B / A: {remote / cold:.2f}x (target <= 0.35x); B / warm local: {remote / warm:.2f}x (target <= 1.2x)")
    print(f"runner A's second run: {second_run_misses} misses (target 0)")


if __name__ == "__main__":
    main()
