"""What a CI fleet pays for a cold many-model suite, pytest-aoti against the hand-written loop (issue 63), side by side
in one run on this host, over the same real architectures (``bench/fleet_models.py``):

- (b) the loop: a pool of N processes (``multiprocessing``, spawned), each model ``torch.export.export``,
  ``aoti_compile_and_package``, ``aoti_load_package`` and one ``torch.testing.assert_close`` against eager;
- (a) pytest-aoti cold: ``pytest -n N`` over a generated file with one ``aoti_check`` test per model;
- (c) pytest-aoti warm: (a) again, with its caches;
- (d) a fresh runner served from Redis: a new local cache dir, every package from a real ``redis-server`` on
  loopback that (a) filled (a fleet's runner uploads what it compiles).

Each cold variant gets a fresh Inductor cache (``TORCHINDUCTOR_CACHE_DIR``) and ``TMPDIR``; (a), (c) and (d) run
with the remote cache configured, as a fleet's runner is. It prints each one's wall time, its CPU utilization (user +
sys CPU seconds of it and its children over wall x cores) and the ratios cold/loop and redis/warm.
``--threads-compare`` adds (a'): (a) with ``--aoti-compile-threads per-worker`` (each worker's Inductor sized from
its share of the cores, not the host's), in fresh dirs of its own and without the remote cache. ``--schedule-compare``
adds (e) and (e'): (a)'s cache with its packages deleted (each sidecar's compile time kept), compiled
again with the longest recorded compiles first and in collection order (``--aoti-schedule=collection``).

``--rounds N`` runs (b) and (a) N times, taking turns, and prints the median round's ratio: on 2 cores one round's
ratio moves by about 5% from run to run. pytest loads only xdist and pytest-aoti (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``):
the other pytest plugins of this venv cost about 2 CPU-s in every pytest process and are not pytest-aoti's.

    python bench/fleet.py --models cpu -n 2 --rounds 3  # the CPU form: 6 models on 2 cores, about 8 minutes
    python bench/fleet.py --models bert -n 2 --check    # .ci/run's smoke form: fails on a wrong result, never a time
    python bench/fleet.py --models all --device cuda -n 15

Needs ``redis-server`` and the ``redis`` client for (d); without them (d) is left out and the rest runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPOSITORY = BENCH.parent
SECRET = "fleet-benchmark-secret"
TOLERANCE = 1e-3  # rtol and atol of both sides' comparison with eager

SUITE = """
import pytest

from fleet_models import build

MODELS = {models!r}


@pytest.mark.parametrize("model_type", MODELS)
def test_model(aoti_check, model_type):
    model, args, kwargs = build(model_type)
    aoti_check(model, args, kwargs, rtol={tolerance}, atol={tolerance})
"""


@dataclass
class Measured:
    name: str
    wall: float
    cpu: float  # user + sys seconds of the run and its children
    note: str

    def utilization(self, cores: int) -> float:
        return self.cpu / (self.wall * cores) if self.wall > 0 else 0.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(name: str, command: list[str], env: dict[str, str], cwd: Path) -> tuple[Measured, str]:
    before = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    cpu = _children_cpu() - before
    output = done.stdout + done.stderr
    if done.returncode not in (0, 1):  # 1: some tests failed, still a measurement
        print(output[-4000:])
        raise SystemExit(f"{name} ended with {done.returncode}")
    return Measured(name, wall, cpu, ""), output


def _fresh_dirs(root: Path) -> dict[str, str]:
    """A runner's own Inductor cache and TMPDIR (so no precompiled header or kernel of another run is reused)."""
    for name in ("inductor-cache", "tmp"):
        (root / name).mkdir(parents=True, exist_ok=True)
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"), "TMPDIR": str(root / "tmp")}


# pytest loads xdist and pytest-aoti only, as in a runner's environment that holds what the loop holds plus those
# two. The plugins this venv carries for the project's own tests (Hypothesis's, anyio's, pytest-html's: about 2 CPU-s
# in every pytest process, Hypothesis's import in each terminal summary alone ~1.3 s) are not pytest-aoti's cost.
ONLY_OUR_PLUGINS = ["-p", "xdist.plugin", "-p", "pytest_aoti.plugin"]


def _pytest_run(name: str, suite: Path, runner: Path, env: dict[str, str], workers: int, *extra: str) -> Measured:
    command = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", *ONLY_OUR_PLUGINS]
    command += [f"--aoti-cache-dir={runner / 'aoti-cache'}", "-n", str(workers), *extra]
    run_env = {**env, **_fresh_dirs(runner), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    measured, output = _timed(name, command, run_env, suite.parent)
    outcome = re.findall(r"^(?:=+ )?(\d+ (?:passed|failed|error).*?) in [\d.]+s", output, re.MULTILINE)
    cache = [line for line in output.splitlines() if line.startswith("aoti cache:")]
    measured.note = "; ".join([*(outcome[-1:] or ["no outcome line"]), *cache[-1:]])
    return measured


def _loop_run(models: tuple[str, ...], runner: Path, env: dict[str, str], workers: int, device: str) -> Measured:
    command = [sys.executable, str(Path(__file__)), "--loop-child", ",".join(models), "-n", str(workers)]
    measured, output = _timed("loop", [*command, "--device", device], {**env, **_fresh_dirs(runner)}, runner)
    measured.name = "(b) hand-written loop"
    summary = [line for line in output.splitlines() if line.startswith("loop: ")]
    measured.note = summary[-1].removeprefix("loop: ") if summary else "no summary line"
    return measured


def _loop_one(job: tuple[str, str, str]) -> tuple[str, float, str | None]:
    """One model, as a team's loop does it: export, compile and package, load, compare once with eager."""
    model_type, device, package_dir = job
    import torch

    sys.path.insert(0, str(BENCH))
    from fleet_models import build

    started = time.perf_counter()
    try:
        model, args, kwargs = build(model_type)
        model = model.to(device)
        kwargs = {name: value.to(device) for name, value in kwargs.items()}
        with torch.no_grad():
            expected = model(*args, **kwargs)
        program = torch.export.export(model, args, kwargs, strict=False)
        package = torch._inductor.aoti_compile_and_package(program, package_path=f"{package_dir}/{model_type}.pt2")
        loaded = torch._inductor.aoti_load_package(package)
        torch.testing.assert_close(loaded(*args, **kwargs), expected, rtol=TOLERANCE, atol=TOLERANCE)
    except Exception as error:  # the model fails as its pytest-aoti test would: counted, the loop goes on
        return model_type, time.perf_counter() - started, f"{type(error).__name__}: {str(error)[:200]}"
    return model_type, time.perf_counter() - started, None


def _loop_child(models: list[str], workers: int, device: str) -> None:
    import multiprocessing

    package_dir = tempfile.mkdtemp(prefix="fleet-loop-")
    jobs = [(model, device, package_dir) for model in models]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        results = list(pool.imap_unordered(_loop_one, jobs, chunksize=1))
    failed = [(model, problem) for model, _, problem in results if problem is not None]
    for model, problem in failed:
        print(f"  {model} failed: {problem}")
    seconds = sum(took for _, took, _ in results)
    print(f"loop: {len(results) - len(failed)} passed, {len(failed)} failed; {seconds:.1f} s per model summed")


def _redis_missing() -> str | None:
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    if importlib.util.find_spec("redis") is None:
        return "the redis client is not installed (pip install 'pytest-aoti[remote-cache]')"
    return None


def _drop_packages(cache_dir: Path) -> int:
    """Delete the cache's packages, keep their sidecars (each one's compile time): every test compiles again."""
    packages = list(cache_dir.glob("*/*.pt2"))
    for package in packages:
        package.unlink()
    return len(packages)


def _shown(measured: Measured) -> Measured:
    """Each result as it comes, so a run cut short still leaves what it measured."""
    print(f"  {measured.name}: {measured.wall:.1f} s wall, {measured.cpu:.1f} s CPU  [{measured.note}]", flush=True)
    return measured


def _report(results: list[Measured], cores: int) -> None:
    print(f"\n{'run':44} {'wall':>8} {'CPU':>8} {'CPU busy':>9}")
    for measured in results:
        busy = f"{measured.utilization(cores):.0%}"
        print(f"{measured.name:44} {measured.wall:7.1f}s {measured.cpu:7.1f}s {busy:>9}   {measured.note}")
    named = {measured.name[:3]: measured.wall for measured in results}
    print()
    loops = [measured for measured in results if measured.name.startswith("(b)")]
    colds = [measured for measured in results if measured.name.startswith("(a) ")]
    rounds = list(zip(colds, loops, strict=True)) if loops and len(loops) == len(colds) else []
    if rounds:
        walls = [cold.wall / loop.wall for cold, loop in rounds]
        shown = ", ".join(f"{wall:.2f}x" for wall in walls)
        each = f" (median of {len(walls)} rounds: {shown})" if len(walls) > 1 else ""
        print(f"cold / loop: {statistics.median(walls):.2f}x{each} (target <= 1.05x)")
        print(f"cold / loop, CPU seconds: {statistics.median(cold.cpu / loop.cpu for cold, loop in rounds):.2f}x")
    if "(d)" in named and "(c)" in named:
        print(f"redis / warm: {named['(d)'] / named['(c)']:.2f}x (target <= 1.1x)")
    if "(a'" in named and "(a)" in named:
        print(f"cold, per-worker compile threads / Inductor's: {named[chr(40) + 'a' + chr(39)] / named['(a)']:.2f}x")
    if "(e)" in named and "(e'" in named:
        print(f"recompile, longest first / collection order: {named['(e)'] / named[chr(40) + 'e' + chr(39)]:.2f}x")


def _variants(args: Any, models: tuple[str, ...], root: Path, env: dict[str, str]) -> list[Measured]:
    suite = root / "suite" / "test_fleet.py"
    suite.parent.mkdir()
    suite.write_text(SUITE.format(models=list(models), tolerance=TOLERANCE))
    (suite.parent / "pytest.ini").write_text(f"[pytest]\naoti_device = {args.device}\n")
    workers, results = args.workers, []
    # The loop and the cold run take turns, each round in fresh dirs: a box's drift (another process, the page
    # cache, thermal state) meets both sides alike. The ratio is the median round's; each round's is printed too.
    for round_number in range(1, args.rounds + 1):
        suffix = f" #{round_number}" if args.rounds > 1 else ""
        if "PYTEST_AOTI_CACHE_URL" in env:  # each round's cold run uploads to an empty Redis database of its own
            base, _, _ = env["PYTEST_AOTI_CACHE_URL"].rpartition("/")
            env = {**env, "PYTEST_AOTI_CACHE_URL": f"{base}/{round_number - 1}"}
        loop = _loop_run(models, root / f"loop{round_number}", env, workers, args.device)
        loop.name += suffix
        results.append(_shown(loop))
        cold_dir = root / ("cold" if round_number == args.rounds else f"cold{round_number}")
        results.append(_shown(_pytest_run(f"(a) pytest-aoti cold{suffix}", suite, cold_dir, env, workers)))
    local = {name: value for name, value in env.items() if not name.startswith("PYTEST_AOTI_CACHE_")}
    results.append(_shown(_pytest_run("(c) pytest-aoti warm", suite, root / "cold", env, workers)))
    if "PYTEST_AOTI_CACHE_URL" in env:
        results.append(_shown(_pytest_run("(d) fresh runner, Redis", suite, root / "redis-runner", env, workers)))
    if args.threads_compare:  # after the ratios; cold: without the remote cache (a) filled
        per_worker = "--aoti-compile-threads=per-worker"
        shared = _pytest_run("(a') cold, per-worker threads", suite, root / "cold-shared", local, workers, per_worker)
        results.append(_shown(shared))
    if args.schedule_compare:
        for name, runner, extra in (
            ("(e) recompile, longest first", "cold", ()),
            ("(e') recompile, collection order", "cold", ("--aoti-schedule=collection",)),
        ):
            _drop_packages(root / runner / "aoti-cache")
            shutil.rmtree(root / runner / "inductor-cache")
            results.append(_shown(_pytest_run(name, suite, root / runner, local, workers, *extra)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="cpu", help="all, cpu, or model types separated by commas")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("-n", "--workers", type=int, default=2)
    parser.add_argument("--threads-compare", action="store_true")
    parser.add_argument("--schedule-compare", action="store_true")
    parser.add_argument(
        "--rounds", type=int, default=1, choices=range(1, 17), help="loop and cold runs taking turns (default: 1)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 unless every run passed every model and the warm and Redis runs hit every package",
    )
    parser.add_argument("--keep", help="keep the run's dirs here (default: a temporary dir, removed)")
    parser.add_argument("--loop-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop_child is not None:
        _loop_child(args.loop_child.split(","), args.workers, args.device)
        return
    sys.path.insert(0, str(BENCH))
    sys.path.insert(0, str(REPOSITORY))
    from fleet_models import selection

    models = selection(args.models)
    cores = len(os.sched_getaffinity(0))
    root = Path(args.keep or tempfile.mkdtemp(prefix="fleet-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    python_path = [str(BENCH), str(REPOSITORY), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, python_path))}
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)  # each fresh runner probes as a CI runner would
    missing, server = _redis_missing(), None
    try:
        if missing is None:
            from tests.redis_server import RedisServer

            server = RedisServer(root / "redis").start()
            env.update(PYTEST_AOTI_CACHE_URL=server.url(), PYTEST_AOTI_CACHE_SECRET=SECRET)
        else:
            print(f"(d) left out: {missing}")
        shown = ", ".join(models)
        print(f"{len(models)} models on {args.device}, -n {args.workers}, {cores} cores: {shown}", flush=True)
        results = _variants(args, models, root, env)
    finally:
        if server is not None:
            server.stop()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    _report(results, cores)
    if args.check:
        problems = _problems(results, len(models))
        for problem in problems:
            print(f"check failed: {problem}")
        if problems:
            raise SystemExit(1)
        print(f"check passed: every run passed all {len(models)} models; warm and Redis runs hit every package")


def _problems(results: list[Measured], models: int) -> list[str]:
    """What ``--check`` fails on, from each run's summary: a model that failed on either side, a warm rerun that
    missed (the keys moved between two runs of the same tree), a fresh runner that did not get every package from
    Redis. Never a time: this is the bench's smoke form in .ci/run."""
    problems = [] if any(m.name.startswith("(d)") for m in results) else ["(d) did not run (no redis-server)"]
    for measured in results:
        if measured.name.startswith("(b)") and not measured.note.startswith(f"{models} passed, 0 failed"):
            problems.append(f"{measured.name}: {measured.note}")
        if measured.name.startswith("(") and not measured.name.startswith("(b)"):
            if not re.match(rf"{models} passed(;|$)", measured.note):
                problems.append(f"{measured.name}: {measured.note}")
        if measured.name.startswith("(c)") and f"{models} hits (0 remote), 0 misses" not in measured.note:
            problems.append(f"{measured.name} missed: {measured.note}")
        if measured.name.startswith("(d)") and f"{models} hits ({models} remote), 0 misses" not in measured.note:
            problems.append(f"{measured.name} did not get every package from Redis: {measured.note}")
    return problems


if __name__ == "__main__":
    main()
