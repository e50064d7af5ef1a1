"""What a new process costs, and what the fork server (pytest_aoti/forkserver/) saves, measured in one run.

Three ways to run the same one-test pytest file that exports and compiles a small MLP (timed inside the test, each
with an empty Inductor cache):

- ``fresh``: a fresh ``python -m pytest`` (what every debug stage and isolated test was);
- ``forked``: a child of pytest-aoti's fork server (what they are now), the server warmed before it;
- ``warm``: a second compile in a process that compiled once already (the issue's "warm process").

Then a failing test's debug verdict (``--aoti-debug``, a model that makes NaN): the seconds of its debug stages
against its own cold compile, with the fork server (default) and without it (``PYTEST_AOTI_FORK_SERVER=0``).
``--suite``: the whole wall time of a 6-test file with two failures (a NaN; on CPU a segfaulting custom op, on CUDA
an out-of-range embedding index, a device-side assert) under plain ``pytest --aoti-debug``, without then with the
fork server. ``--suite-only`` runs only that part; ``--side-by-side`` runs its two runs at the same time, each on
its own GPU (``CUDA_VISIBLE_DEVICES`` 0 and 1), so both meet the same machine load (a two-GPU host).
``--before-tree DIR``: the "without" run is pytest-aoti as it was in DIR (a checkout of an older commit, e.g.
``git worktree add /tmp/before 7761002``, the tree issue #51 measured), not this tree with the fork server off.
``--limit S`` stops a suite run after S seconds: a "before" stopped there gives a bound ("at most") on the ratio.

    python bench/warm_process_benchmark.py [--device cpu|cuda] [--suite] [--suite-only] [--side-by-side]
        [--before-tree DIR] [--limit S]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

COMPILE_TEST = """
import json, os, time, torch


class MLP(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a = torch.nn.Linear(64, width)
        self.b = torch.nn.Linear(width, 32)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def _compile(width):
    device = os.environ["BENCH_DEVICE"]
    model = MLP(width).to(device).eval()
    started = time.perf_counter()
    program = torch.export.export(model, (torch.randn(8, 64, device=device),))
    torch._inductor.aoti_compile_and_package(program)
    return time.perf_counter() - started


def test_first():
    seconds = _compile(128)
    with open(os.environ["BENCH_RECORD"], "a") as record:
        record.write(json.dumps({"first": seconds}) + "\\n")


def test_second():
    if os.environ.get("BENCH_SECOND") != "1":
        return
    seconds = _compile(96)
    with open(os.environ["BENCH_RECORD"], "a") as record:
        record.write(json.dumps({"second": seconds}) + "\\n")
"""

NAN_TEST = """
import pytest
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 64)
        self.b = torch.nn.Linear(64, 64)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        return self.b(torch.log(h - 100.0))


def test_nan(aoti_check, aoti_device):
    aoti_check(Model().to(aoti_device).eval(), (torch.randn(16, 64, device=aoti_device),))
"""

SUITE_TEST = (
    NAN_TEST
    + """

class Fine(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a = torch.nn.Linear(32, width)

    def forward(self, x):
        return torch.relu(self.a(x))


def test_fine_1(aoti_check, aoti_device):
    aoti_check(Fine(16).to(aoti_device).eval(), (torch.randn(4, 32, device=aoti_device),))


def test_fine_2(aoti_check, aoti_device):
    aoti_check(Fine(24).to(aoti_device).eval(), (torch.randn(4, 32, device=aoti_device),))


def test_fine_3(aoti_check, aoti_device):
    aoti_check(Fine(40).to(aoti_device).eval(), (torch.randn(4, 32, device=aoti_device),))


def test_fine_4(aoti_check, aoti_device):
    aoti_check(Fine(48).to(aoti_device).eval(), (torch.randn(4, 32, device=aoti_device),))


class Lookup(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(100, 8)

    def forward(self, index):
        return self.embedding(index) * 2


@pytest.mark.aoti(allow_out_of_range=True)  # past the input check, to the device-side assert
def test_crash(aoti_compile, aoti_device):
    if torch.device(aoti_device).type == "cuda":
        compiled = aoti_compile(Lookup().to(aoti_device), (torch.zeros(4, dtype=torch.int64, device=aoti_device),))
        compiled(torch.full((4,), 5000, dtype=torch.int64, device=aoti_device))
        torch.cuda.synchronize()
    else:
        import ctypes

        compiled = aoti_compile(Fine(8), (torch.randn(4, 32),))
        compiled(torch.randn(4, 32))
        ctypes.string_at(0)
"""
)


def _env(directory: Path, device: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "BENCH_DEVICE": device,
        "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-", dir=directory),
        "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="xdg-", dir=directory),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH", "")])),
        **extra,
    }


def _records(path: Path) -> dict[str, float]:
    merged: dict[str, float] = {}
    for line in path.read_text().splitlines():
        merged.update(json.loads(line))
    return merged


def compile_costs(directory: Path, device: str) -> dict[str, float]:
    from pytest_aoti.forkserver import client

    (directory / "test_compile.py").write_text(COMPILE_TEST)
    command = [sys.executable, "-u", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_compile.py"]
    seconds: dict[str, float] = {}
    record = directory / "warm.jsonl"
    subprocess.run(
        command,
        cwd=directory,
        env=_env(directory, device, BENCH_RECORD=str(record), BENCH_SECOND="1"),
        check=True,
        capture_output=True,
    )
    seconds["warm process (second compile)"] = _records(record)["second"]
    record = directory / "fresh.jsonl"
    subprocess.run(
        command, cwd=directory, env=_env(directory, device, BENCH_RECORD=str(record)), check=True, capture_output=True
    )
    seconds["fresh child (first compile)"] = _records(record)["first"]
    server = client.start_server()
    assert server is not None and server.wait_ready(900), server and server.unsafe
    seconds["fork server warm-up (once per session)"] = server.ready_seconds or 0.0
    record = directory / "forked.jsonl"
    forked = client.start_forked(
        command, env=_env(directory, device, BENCH_RECORD=str(record)), cwd=directory, log_path=directory / "forked.log"
    )
    assert forked is not None and forked.wait() == 0, (directory / "forked.log").read_text()[-3000:]
    seconds["forked child (first compile)"] = _records(record)["first"]
    client.stop_server()
    return seconds


def _plugin_args() -> list[str]:
    """``-p pytest_aoti.plugin`` where pytest-aoti is not installed (a copied tree on PYTHONPATH)."""
    from importlib.metadata import entry_points

    installed = any(point.value == "pytest_aoti.plugin" for point in entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_aoti.plugin"]


def debug_verdict(
    directory: Path,
    device: str,
    fork_server: bool,
    test: str,
    visible_devices: str | None = None,
    tree: Path | None = None,
    limit: float | None = None,
) -> tuple[float, float, float, str]:
    """(wall seconds, debug-stage seconds, the failing test's own compile seconds, the summary line); ``tree``: run
    the pytest-aoti of that checkout instead of this one. A run past ``limit`` seconds is stopped (its whole process
    group) and its wall time is the limit, with the summary ``stopped at the limit``: a lower bound."""
    run_dir = Path(tempfile.mkdtemp(prefix="debug-", dir=directory))
    (run_dir / "test_bench.py").write_text(test)
    env = _env(run_dir, device, **({} if fork_server else {"PYTEST_AOTI_FORK_SERVER": "0"}))
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree.resolve()), os.environ.get("PYTHONPATH", "")]))
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    command = [
        sys.executable,
        "-m",
        "pytest",
        *_plugin_args(),
        "--aoti-debug",
        "-p",
        "no:cacheprovider",
        f"--aoti-device={device}",
        "test_bench.py",
    ]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=run_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=limit)
        stopped = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        stopped = True
    wall = time.monotonic() - started
    (run_dir / "pytest-output.txt").write_text(output)
    stages = [float(s) for s in re.findall(r"debug stages: ([\d.]+) s in all", output)]
    compiling = re.search(r"aoti cache: .*?([\d.]+) s compiling", output)
    summary = (re.findall(r"=+ (\d+ (?:failed|passed).*) =+", output) or ["?"])[-1]
    if stopped:
        wall, summary = float(limit or wall), f"stopped at the limit of {limit:.0f} s: at least that long"
    return wall, sum(stages), float(compiling.group(1)) if compiling else float("nan"), summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--suite", action="store_true")
    parser.add_argument("--suite-only", action="store_true", help="only the 6-test file, without then with")
    parser.add_argument("--side-by-side", action="store_true", help="the suite's two runs at once, one GPU each")
    parser.add_argument("--before-tree", type=Path, default=None, help="the 'without' run: pytest-aoti of this tree")
    parser.add_argument("--limit", type=float, default=None, help="stop a suite run after this many seconds")
    options = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="warm-bench-"))
    if options.suite_only:
        suite_walls(directory, options.device, options.side_by_side, options.before_tree, options.limit)
        return
    costs = compile_costs(directory, options.device)
    warm = costs["warm process (second compile)"]
    print(f"device {options.device}: one small MLP, export + compile, empty Inductor cache each")
    for name, seconds in costs.items():
        print(f"  {name:42s} {seconds:7.1f} s  ({seconds / warm:.2f}x the warm process)")
    for fork_server in (False, True):
        wall, stages, compiling, summary = debug_verdict(directory, options.device, fork_server, NAN_TEST)
        print(
            f"a failing test's debug verdict, fork server {'on ' if fork_server else 'off'}: stages {stages:.1f} s "
            f"against its own compile {compiling:.1f} s ({stages / compiling:.2f}x); wall {wall:.1f} s ({summary})"
        )
    if options.suite:
        suite_walls(directory, options.device, options.side_by_side, options.before_tree, options.limit)


def suite_walls(
    directory: Path, device: str, side_by_side: bool, before_tree: Path | None, limit: float | None = None
) -> None:
    """The 6-test file under plain ``--aoti-debug`` without, then with, the fork server (or both at once); with
    ``before_tree``, "without" is that older pytest-aoti (its own defaults) rather than this one's server off."""

    def run(after: bool, visible_devices: str | None) -> tuple[float, float, float, str]:
        tree = None if after else before_tree
        on = after or before_tree is not None
        return debug_verdict(directory, device, on, SUITE_TEST, visible_devices, tree, limit)

    results: dict[bool, tuple[float, float, float, str]] = {}
    if side_by_side:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            runs = {after: pool.submit(run, after, "1" if after else "0") for after in (False, True)}
            results = {after: future.result() for after, future in runs.items()}
    else:
        results = {after: run(after, None) for after in (False, True)}
    names = {False: f"before ({before_tree})", True: "after (this tree)"} if before_tree else {}
    for after in (False, True):
        wall, stages, _, summary = results[after]
        name = names.get(after) or f"fork server {'on ' if after else 'off'}"
        print(
            f"6-test file, two failures, plain --aoti-debug, {name}"
            f"{' (side by side, one GPU each)' if side_by_side else ''}: {wall:.1f} s, debug stages {stages:.1f} s"
            f" ({summary})"
        )
    bound = "at most " if "stopped at the limit" in results[False][3] else ""
    print(f"  after / before: {bound}{results[True][0] / results[False][0]:.2f}x the wall time")


if __name__ == "__main__":
    main()
