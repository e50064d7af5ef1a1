"""Stage ``minify``: shrink a repro bundle's graph to the fewest nodes that still fail, each candidate judged in its
own process.

PyTorch's AOTI minifier (``torch._dynamo.repro.aoti``) compiles and runs every candidate in-process, so the first
candidate that segfaults ends the search. Here the search (``torch._functorch.fx_minifier.minifier``: truncate the
suffix, then delta-debug) runs in this process, and each candidate is exported, saved and compiled and run by a judge
process under the bundle's environment: for a CPU graph on Linux, a fork of a judge server that imported torch and
Inductor once (``--judge-server``); else a fresh interpreter (``--judge``). A candidate fails when its judge fails the
way the original did: killed by a signal (``crash``), NaN/Inf in its outputs (``nonfinite``), or an error while
running the package (``error``). A candidate that cannot be exported or compiled is not a failing one. Past the time
budget (or when the next candidate could not finish before it, judging by the slowest so far) the search ends with
the smallest failing graph found so far.

Usage: ``python -m pytest_aoti.debug.minify BUNDLE --want crash|nonfinite|error --budget SECONDS``. The result is
``BUNDLE/minified/`` (a bundle of its own, with the same ``repro.py`` and the smallest failing candidate's
package) and ``BUNDLE/minified/minify.json``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_aoti.core import processes
from pytest_aoti.core.processes import die_with_parent, signal_group
from pytest_aoti.core.protocol import DEFAULT_MINIFY_BUDGET, MINIFY_RESULT, MinifyResult

# A cap on the candidates judged, for pytest-aoti's own tests: a search bounded by a count, not by seconds a busy
# machine may not have. Not a user option (the budget is): an environment variable the stage's process inherits.
MAX_CANDIDATES_ENV = "PYTEST_AOTI_MINIFY_MAX_CANDIDATES"

_EXIT_NONFINITE = 10
_EXIT_RUN_ERROR = 11
_EXIT_NOT_RUN = 12  # export, compile or load failed: not the failure being minified
_COPIED = ("env.json", "custom_ops.json", "inductor_configs.json", "versions.json", "repro.py")


def _import_custom_ops(bundle: Path) -> None:
    for entry in json.loads((bundle / "custom_ops.json").read_text()):
        sys.path.insert(0, entry["path"])
        importlib.import_module(entry["module"])


def judge(candidate: Path) -> int:
    """Compile and run one candidate (in a fresh interpreter started with the bundle's environment)."""
    import torch

    _import_custom_ops(candidate)
    try:
        program = torch.export.load(candidate / "exported_program.pt2")
        inputs = torch.load(candidate / "inputs.pt", weights_only=False)
        configs = json.loads((candidate / "inductor_configs.json").read_text())
        package = torch._inductor.aoti_compile_and_package(
            program, package_path=str(candidate / "candidate.pt2"), inductor_configs=configs
        )
        # On the GPU the failing call ran on (a package loads for the current one unless told): repro.py does the same.
        on_gpu = [t for t in torch.utils._pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor) and t.is_cuda]
        runner = torch._inductor.aoti_load_package(package, device_index=on_gpu[0].device.index if on_gpu else -1)
    except Exception as error:
        print(f"not run: {type(error).__name__}: {error}", flush=True)
        return _EXIT_NOT_RUN
    try:
        outputs = runner(*inputs["args"], **inputs["kwargs"])
        if any(t.is_cuda for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)):
            torch.cuda.synchronize()
    except Exception as error:
        print(f"run error: {type(error).__name__}: {error}", flush=True)
        # Under the debug environment's NaN asserts a NaN is an error naming it.
        return _EXIT_NONFINITE if re.search(r"\bnan\b", str(error), re.IGNORECASE) else _EXIT_RUN_ERROR
    for output in torch.utils._pytree.tree_leaves(outputs):
        if isinstance(output, torch.Tensor) and output.is_floating_point() and not torch.isfinite(output).all():
            return _EXIT_NONFINITE
    return 0


def serve_judges() -> int:
    """``--judge-server``: import torch and Inductor once, then fork one judge per candidate directory read from
    stdin. For each, print the judge's pid, then its exit status (negative: the signal that ended it). A judge dies
    with the server, and the server with the minify process that started it."""
    die_with_parent()
    from pytest_aoti.core.torch_private import import_what_compiles_import

    import_what_compiles_import()  # once, here, for every judge

    for line in sys.stdin:
        candidate = Path(line.strip())
        pid = os.fork()
        if pid == 0:  # the judge: its own process group (a timeout ends it and its compile workers), its own log
            os.setsid()
            die_with_parent()
            log = os.open(candidate / "judge.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            code = 1
            try:
                code = judge(candidate)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
    return 0


class _JudgeServer:
    """The minify side of ``--judge-server``. Saves each judge the import of torch and Inductor, most of a judge's
    time (docs/benchmarks.md#importing-inductor): the server imports while the search loads the bundle and runs its
    eager pass. Linux and CPU graphs only: a forked process
    cannot use a CUDA context its parent touched, and checking for CUDA touches it."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        with open(log_path, "w") as log:
            self.process = processes.start(
                [sys.executable, "-u", "-m", "pytest_aoti.debug.minify", "--judge-server"],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    def judge(self, candidate: Path, timeout: float) -> tuple[int, float]:
        """The judge's exit status and seconds (from its fork: not the server's start-up). Past ``timeout`` the
        judge is ended and ``subprocess.TimeoutExpired`` raised."""
        assert self.process.stdin is not None
        deadline = time.monotonic() + timeout
        self.process.stdin.write(f"{candidate}\n")
        self.process.stdin.flush()
        pid = int(self._line(deadline))
        forked = time.monotonic()
        try:
            status = int(self._line(deadline))
        except subprocess.TimeoutExpired:
            signal_group(pid, signal.SIGKILL)
            self._line(time.monotonic() + 30)  # the server reaps it
            raise
        return status, time.monotonic() - forked

    def _line(self, deadline: float) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise subprocess.TimeoutExpired(self.process.args, deadline)
        line = str(self.process.stdout.readline())
        if not line:
            raise RuntimeError(f"the judge server ended (exit status {self.process.wait()}); see its log")
        return line

    def close(self) -> None:
        """End the server (a judge it still runs dies with it)."""
        self.process.kill()
        self.process.wait()


def _on_cpu_only(module: Any, inputs: list[Any]) -> bool:
    """Whether every tensor the graph holds, takes or makes is on the CPU."""
    import torch

    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    tensors += [*module.parameters(), *module.buffers()]
    tensors += [
        value
        for node in module.graph.nodes
        for value in torch.utils._pytree.tree_leaves(node.meta.get("val"))
        if isinstance(value, torch.Tensor)
    ]
    return all(t.device.type == "cpu" for t in tensors)


def save_values(bundle: Path, directory: Path) -> None:
    """Run the bundle's graph eagerly and save every node's tensor value as soon as it exists (in a sacrificial
    process: the op that crashes the package often crashes eager too; the values before it survive)."""
    import torch

    _import_custom_ops(bundle)
    module, flat_inputs = _load(bundle)
    directory.mkdir(parents=True, exist_ok=True)

    class Saving(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            value = super().run_node(n)
            if isinstance(value, torch.Tensor):
                torch.save(value, directory / f"{n.name}.pt")
            return value

    with torch.no_grad():
        Saving(module).run(*flat_inputs)


def load_program(bundle: Path) -> tuple[Any, list[Any]]:
    """The bundle's program as a flat-input graph module, and its flat inputs (the custom ops it calls imported
    first)."""
    _import_custom_ops(bundle)
    return _load(bundle)


def _load(bundle: Path) -> tuple[Any, list[Any]]:
    """The bundle's program as a flat-input graph module, and its flat inputs."""
    import torch

    program = torch.export.load(bundle / "exported_program.pt2")
    inputs = torch.load(bundle / "inputs.pt", weights_only=False)
    return flat_program(program, tuple(inputs["args"]), dict(inputs["kwargs"]))


def flat_program(program: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
    """An exported program as a flat-input graph module, and the call's inputs flattened for it: the minifier (and
    the eager replay) work on a flat-input graph; the exported module's pytree calling convention is not one."""
    import torch
    import torch.utils._pytree as pytree

    module = program.module(check_guards=False)
    flat_inputs = pytree.tree_leaves((args, kwargs))
    return torch.fx.GraphModule(module, _flat_graph(module)), flat_inputs


def _saved_values_prop(directory: Path) -> Any:
    """A stand-in for the minifier's ``ConcreteProp``, which runs the graph in this process to learn every node's
    value: it reads the values :func:`save_values` left instead. A node without one is never cut loose from its
    producers by delta debugging (the minifier skips nodes whose value it does not know)."""
    import torch

    class SavedValues:
        def __init__(self, module: Any, **_: Any) -> None:
            self.module = module

        def propagate(self, *args: Any) -> None:
            for node in self.module.graph.nodes:
                path = directory / f"{node.name}.pt"
                if node.op == "call_function":
                    node.meta["concrete_value"] = torch.load(path, weights_only=True) if path.exists() else None

    return SavedValues


def _nonfinite_input(inputs: Any) -> bool:
    import torch

    return any(
        isinstance(x, torch.Tensor) and x.is_floating_point() and not bool(torch.isfinite(x).all()) for x in inputs
    )


def _verdict(returncode: int) -> str:
    if returncode < 0:
        return "crash"
    return {_EXIT_NONFINITE: "nonfinite", _EXIT_RUN_ERROR: "error"}.get(returncode, "passed")


def _node_count(module: Any) -> int:
    return sum(1 for node in module.graph.nodes if node.op == "call_function")


class _OutOfTime(Exception):
    """Ends the minifier's search at the budget; the smallest failing candidate so far is the result."""


class Search:
    """The candidates' judge for the minifier, with the bookkeeping the report needs."""

    def __init__(
        self, bundle: Path, want: str, budget: float, workdir: Path, max_candidates: int | None = None
    ) -> None:
        self.bundle = bundle
        self.want = want
        self.deadline = time.monotonic() + budget
        self.max_candidates = max_candidates
        self.workdir = workdir
        self.env = {**os.environ, **json.loads((bundle / "env.json").read_text())}
        self.judged = 0
        self.failing = 0
        self.out_of_time = False
        self.out_of_candidates = False
        self.verdicts: list[str] = []  # per candidate: its verdict and seconds, for the report
        self.smallest: tuple[Any, Any] | None = None  # the smallest failing candidate: (module, inputs)
        self.slowest = 0.0  # seconds the slowest judge took
        self.server: _JudgeServer | None = None
        self.smallest_package = workdir / "smallest.pt2"

    def save(self, module: Any, inputs: Any, directory: Path) -> bool:
        """Export ``module`` on ``inputs`` and write it as a bundle; False when export rejects the candidate."""
        import torch

        try:
            program = torch.export.export(module, tuple(inputs), strict=False)
        except Exception:
            return False
        directory.mkdir(parents=True, exist_ok=True)
        torch.export.save(program, directory / "exported_program.pt2")
        torch.save({"args": tuple(inputs), "kwargs": {}}, directory / "inputs.pt")
        for name in _COPIED:
            if (self.bundle / name).exists():
                shutil.copyfile(self.bundle / name, directory / name)
        return True

    def _judge(self, candidate: Path, timeout: float) -> tuple[int, float]:
        """The candidate's judge's exit status and seconds."""
        if self.server is not None:
            return self.server.judge(candidate, timeout)
        started = time.monotonic()
        with open(candidate / "judge.log", "w") as log:
            returncode = processes.run(
                [sys.executable, "-u", "-m", "pytest_aoti.debug.minify", "--judge", str(candidate)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        return returncode, time.monotonic() - started

    def fails(self, module: Any, inputs: Any) -> bool:
        if self.max_candidates is not None and self.judged >= self.max_candidates:
            self.out_of_candidates = True
            raise _OutOfTime
        # A candidate that cannot finish before the deadline (judging by the slowest so far) is not started.
        if time.monotonic() + self.slowest > self.deadline:
            self.out_of_time = True
            raise _OutOfTime
        if _nonfinite_input(inputs):
            # Delta debugging turns nodes into inputs holding their values: a NaN fed in explains nothing.
            return False
        candidate = self.workdir / f"candidate-{self.judged}"
        self.judged += 1
        if not self.save(module, inputs, candidate):
            self.verdicts.append("not exportable")
            return False
        started = time.monotonic()
        remaining = max(self.deadline - started, 1.0)
        try:
            status, seconds = self._judge(candidate, remaining)
        except subprocess.TimeoutExpired:
            self.out_of_time = True
            self.verdicts.append(f"stopped at the budget ({time.monotonic() - started:.1f} s)")
            raise _OutOfTime from None
        verdict = _verdict(status)
        self.slowest = max(self.slowest, seconds)
        self.verdicts.append(f"{verdict} ({seconds:.1f} s)")
        failing = verdict == self.want
        if failing:
            self.failing += 1
            if self.smallest is None or _node_count(module) < _node_count(self.smallest[0]):
                self.smallest = (module, list(inputs))
                # The package that failed, for the minified bundle's repro.py to run as it is (none when the judge
                # died compiling: repro.py then recompiles).
                self.smallest_package.unlink(missing_ok=True)
                if (candidate / "candidate.pt2").exists():
                    shutil.move(candidate / "candidate.pt2", self.smallest_package)
        shutil.rmtree(candidate, ignore_errors=True)
        return failing


def minify(bundle: Path, want: str, budget: float, max_candidates: int | None = None) -> MinifyResult:
    from pytest_aoti.core.torch_private import fx_minifier as functorch_minifier

    fx_minifier = functorch_minifier()

    started = time.monotonic()
    _import_custom_ops(bundle)
    flat_module, flat_inputs = _load(bundle)
    before = _node_count(flat_module)
    out = bundle / "minified"
    shutil.rmtree(out, ignore_errors=True)
    search = Search(bundle, want, budget, bundle / "minify-work", max_candidates)
    search.workdir.mkdir(parents=True, exist_ok=True)
    if sys.platform == "linux" and _on_cpu_only(flat_module, flat_inputs):
        search.server = _JudgeServer(search.env, search.workdir / "judge-server.log")
    result = MinifyResult(want=want, nodes_before=before, budget_s=budget)
    try:
        if want != "nonfinite":
            # The op that crashes the package (or breaks the CUDA context) often does so in eager too: the
            # minifier's eager pass (the values delta debugging needs) runs in a sacrificial process, whose values
            # up to the crash survive on disk.
            values = search.workdir / "values"
            with open(search.workdir / "values.log", "w") as log:
                processes.run(
                    [sys.executable, "-u", "-m", "pytest_aoti.debug.minify", str(bundle), "--values", str(values)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=max(budget, 60.0),
                )
            fx_minifier.ConcreteProp = _saved_values_prop(values)
        smallest = _search(search, flat_module, flat_inputs, result)
    finally:
        if search.server is not None:
            search.server.close()
    if smallest is not None and search.save(smallest[0], smallest[1], out):
        result.nodes_after = _node_count(smallest[0])
        result.repro = str(out / "repro.py")
        if search.smallest_package.exists():
            shutil.move(search.smallest_package, out / "package.pt2")
    result.candidates, result.failing_candidates, result.verdicts = search.judged, search.failing, search.verdicts
    result.out_of_time, result.out_of_candidates = search.out_of_time, search.out_of_candidates
    result.seconds = round(time.monotonic() - started, 1)
    shutil.rmtree(search.workdir, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / MINIFY_RESULT).write_text(result.to_json())
    return result


def _search(search: Search, flat_module: Any, flat_inputs: list[Any], result: MinifyResult) -> tuple[Any, Any] | None:
    """Run the minifier with ``search`` judging candidates: its result, or, when the budget or an error of its own
    ends it, the smallest failing candidate judged so far (None if none failed)."""
    from pytest_aoti.core.torch_private import fx_minifier as functorch_minifier

    fx_minifier = functorch_minifier()

    try:
        found: tuple[Any, Any] | None = fx_minifier.minifier(
            flat_module,
            flat_inputs,
            module_fails=search.fails,
            dump_state=lambda graph, inps: None,  # the minified bundle is written by minify()
            skip_offload=True,
            skip_sanity=True,  # the debug stages already saw the original fail
        )
        return found
    except _OutOfTime:
        return search.smallest
    except Exception as error:  # the minifier's own errors: report, keep the smallest failing graph found
        result.error = f"{type(error).__name__}: {error}"
        return search.smallest


def _flat_graph(module: Any) -> Any:
    """The exported module's graph with the pytree (in/out spec) calling convention replaced by plain positional
    placeholders and a tuple output: what the minifier expects."""
    import copy

    import torch

    graph = copy.deepcopy(module.graph)
    graph._codegen = torch.fx.graph.CodeGen()
    output = next(node for node in graph.nodes if node.op == "output")
    values = output.args[0]
    if not isinstance(values, tuple | list):
        output.args = ((values,),)
    for node in list(graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn":
            graph.erase_node(node)
    graph.lint()
    return graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_aoti.debug.minify", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path, nargs="?")
    parser.add_argument("--want", choices=("crash", "nonfinite", "error"), default="crash")
    parser.add_argument("--budget", type=float, default=DEFAULT_MINIFY_BUDGET, help="seconds (default 300)")
    parser.add_argument(
        "--max-candidates",
        type=int,
        default=None,
        help=f"candidates judged at most (default: ${MAX_CANDIDATES_ENV}, else no cap)",
    )
    parser.add_argument("--judge", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--values", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--judge-server", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.judge_server:
        return serve_judges()
    if options.bundle is None:
        parser.error("the bundle directory is required")
    if options.judge:
        verdict = judge(options.bundle)
        gc.freeze()  # skip shutdown's final collection over torch's objects, a cost per candidate; see child_session
        return verdict
    if options.values:
        save_values(options.bundle, options.values)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    max_candidates = options.max_candidates if options.max_candidates is not None else _env_max_candidates(parser)
    print(minify(options.bundle, options.want, options.budget, max_candidates).to_json())
    return 0


def _env_max_candidates(parser: argparse.ArgumentParser) -> int | None:
    raw = os.environ.get(MAX_CANDIDATES_ENV, "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        parser.error(f"{MAX_CANDIDATES_ENV}: expected a whole number >= 1, got {raw!r}")
    return int(raw)


if __name__ == "__main__":
    sys.exit(main())
