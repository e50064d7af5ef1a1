"""Deployment checks: what passes every test in the process that built a package, then breaks where it is deployed.

- :func:`check_standalone`: the package, with its example inputs and outputs bundled, loaded and run by
  ``python -m pytest_aoti.verify`` in a fresh interpreter, from an empty directory, with an empty Inductor cache and
  without the test's directories on ``sys.path``. A package that calls a custom op needs the op's module (or
  library) there too; the failure names the op and where it is defined.
- :func:`check_threads`: the package loaded with ``num_runners=N`` and called from several threads at once, each on
  its own inputs, must give what serial calls give (AOTI packages have raised IMAs under concurrency).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.deploy.errors import AOTIDeployError

_MISSING_OP = re.compile(
    r"(?:Could not find schema for|No such operator|Could not find any kernel for)\s+(\w+::\w+(?:\.\w+)?)\b"
)


# A package's input and output specs name each pytree node type (a Hugging Face ModelOutput, a registered
# dataclass); the loader rebuilds one only where the module that registers it was imported.
_UNREGISTERED_TYPE = re.compile(r"Deserializing (?P<type>[\w.]+) in pytree is not registered")


def unregistered_type_explanation(text: str) -> str | None:
    """Why a package fails where the module that registers its inputs' or outputs' pytree type is not imported, and
    what a deployment does about it; None when ``text`` shows no such failure."""
    match = _UNREGISTERED_TYPE.search(text)
    if match is None:
        return None
    name = match.group("type")
    module = name.rsplit(".", 1)[0] if "." in name else name
    return (
        f"its inputs or outputs are a {name}, a pytree type that module {module} registers with torch; the "
        f"loader rebuilds it only where that module is imported. A deployment must import {module} before "
        "calling the package, or the model should return plain tuples, lists and dicts (return_dict=False for a "
        "Hugging Face model)"
    )


_MATRIX_TIMEOUT = 900.0  # seconds for all GPUs of the device matrix: each loads and runs the package once
_CAUGHT_IN_AOTI = re.compile(r"Exception in aoti_torch: (.+)")


def _interpreter_env(workdir: Path) -> dict[str, str]:
    """The environment of a deployment: no PYTHONPATH but what imports pytest-aoti itself (when it is not
    installed), an empty Inductor cache."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    plugin_root = Path(__file__).resolve().parents[2]  # the dir that holds pytest_aoti/
    if "site-packages" not in plugin_root.parts and "dist-packages" not in plugin_root.parts:
        env["PYTHONPATH"] = str(plugin_root)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(workdir / "empty-inductor-cache")
    return env


def _defined_in(op_name: str) -> str:
    from pytest_aoti.core.cache_key import custom_op_function

    function = custom_op_function(op_name)
    module = sys.modules.get(getattr(function, "__module__", ""), None)
    if module is None:
        return "a library loaded at run time (torch.ops.load_library)"
    return f"module {module.__name__} ({getattr(module, '__file__', '?')})"


def _bundled(compiled: Any, args: Sequence[Any], kwargs: dict[str, Any], workdir: Path) -> Path:
    """``compiled``'s package with these inputs and the outputs it gives here bundled in, for ``python -m
    pytest_aoti.verify`` to check in another process."""
    from pytest_aoti.shared.bundled_io import write_bundled_io

    workdir.mkdir(parents=True, exist_ok=True)
    outputs = compiled.call(args, kwargs)
    bundled = workdir / "bundled.pt2"
    write_bundled_io(
        compiled.package_path, bundled, compiled.exported_program, args, kwargs, outputs, compiled.device.type
    )
    return bundled


def _verify_command(bundled: Path, device: str | None = None) -> list[str]:
    """``python -m pytest_aoti.verify`` on ``bundled`` from its own directory, ``-P``: the cwd not on ``sys.path``."""
    return [sys.executable, "-P", "-m", "pytest_aoti.verify", bundled.name, *(["--device", device] if device else [])]


def _said(text: str, returncode: int) -> str:
    """The line of a verify run's output that says what failed."""
    lines = text.strip().splitlines() or [f"exit status {returncode}"]
    if returncode < 0:
        from pytest_aoti.core.processes import signal_name

        return f"crashed with {signal_name(-returncode)}: {lines[-1]}"
    said = next((line for line in lines if line.startswith("FAILED ")), lines[-1]).removeprefix("FAILED ")
    # The runtime's one line ("run_func_(...) API call failed") hides the cause, which its C++ side printed.
    cause = _CAUGHT_IN_AOTI.search(text)
    return f"{said} (the package's error: {cause.group(1).strip()})" if cause else said


def check_standalone(compiled: Any, args: Sequence[Any], kwargs: dict[str, Any], workdir: Path) -> str:
    """Bundle ``compiled``'s package with these inputs and the outputs it gives here, then verify it in a fresh
    interpreter (``pytest_aoti.verify``). Returns what the fresh interpreter printed; raises
    :class:`AOTIDeployError` naming what the package needs that a deployment would lack."""
    __tracebackhide__ = True
    from pytest_aoti.core.cache_key import custom_op_names

    bundled = _bundled(compiled, args, kwargs, workdir)
    run = subprocess.run(
        _verify_command(bundled),
        cwd=workdir,
        env=_interpreter_env(workdir),
        capture_output=True,
        text=True,
        timeout=900,
    )
    text = run.stdout + run.stderr
    if run.returncode == 0:
        return run.stdout
    said = _said(text, run.returncode)
    missing = _MISSING_OP.search(text)
    ops = [missing.group(1)] if missing else custom_op_names(compiled.exported_program)
    if ops:
        needs = "; ".join(f"{op} (defined in {_defined_in(op)})" for op in ops)
        raise AOTIDeployError(
            f"standalone: the package does not run in a fresh interpreter: it calls custom op(s) {needs}, which a "
            "deployment must import (or load) before loading the package (a Python custom op needs Python and that "
            "module where the package runs; a C++ deployment needs the op registered in C++, TORCH_LIBRARY)\n"
            f"the fresh interpreter said: {said}"
        )
    unregistered = unregistered_type_explanation(text)
    if unregistered is not None:
        raise AOTIDeployError(
            f"standalone: the package does not run in a fresh interpreter: {unregistered}\n"
            f"the fresh interpreter said: {said}"
        )
    raise AOTIDeployError(f"standalone: the package does not run in a fresh interpreter; it said: {said}")


def check_device_matrix(compiled: Any, args: Sequence[Any], kwargs: dict[str, Any], workdir: Path) -> list[str]:
    """The package on every visible GPU: loaded with each ``device_index``, its bundled inputs moved there, its
    invariants checking that every output is on that GPU, its outputs against the ones it gave on the GPU it was
    built on. One fresh interpreter per GPU, all at once (a load on another index has segfaulted upstream). Returns
    one line per GPU; raises :class:`AOTIDeployError` naming each index that failed. A CPU package is checked on
    ``cpu``: there is no index to vary."""
    __tracebackhide__ = True
    from pytest_aoti.core.cache_key import custom_op_function, custom_op_names

    bundled = _bundled(compiled, args, kwargs, workdir)
    count = torch.cuda.device_count() if compiled.device.type == "cuda" else 0
    devices = [f"cuda:{index}" for index in range(count)] or ["cpu"]
    # Not a stand-alone check: the test's imports are there, and the modules defining its custom ops are imported.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(entry for entry in sys.path if entry)}
    modules = {getattr(custom_op_function(op), "__module__", None) for op in custom_op_names(compiled.exported_program)}
    imports = [argument for module in sorted(m for m in modules if m) for argument in ("--import", module)]
    started = {
        device: subprocess.Popen(
            [*_verify_command(bundled, device), *imports],
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for device in devices
    }
    lines: list[str] = []
    failed: list[str] = []
    deadline = time.monotonic() + _MATRIX_TIMEOUT
    for device, process in started.items():
        try:
            output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:  # a hung load or kernel on that GPU: that GPU's verdict, not the test's
            process.kill()
            output, _ = process.communicate()
            failed.append(device)
            lines.append(f"{device}: FAILED: no result within {_MATRIX_TIMEOUT:g} s")
            continue
        if process.returncode == 0:
            lines.append(f"{device}: ok")
        else:
            failed.append(device)
            lines.append(f"{device}: FAILED: {_said(output, process.returncode)}")
    built_on = f"built on {compiled.device}"
    if failed:
        raise AOTIDeployError(
            f"device_matrix: the package ({built_on}) fails on {', '.join(failed)} of the {len(devices)} visible "
            "device(s):\n" + "\n".join(lines)
        )
    return [f"device_matrix ({built_on}): {line}" for line in lines]


def _perturbed(value: Any, step: int) -> Any:
    """Each thread's own inputs: floating tensors shifted by a thread-specific amount, everything else as given."""
    return pytree.tree_map(
        lambda leaf: leaf + 0.01 * step if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() else leaf,
        value,
    )


def check_threads(
    compiled: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    threads: int,
    calls: int,
    num_runners: int,
) -> None:
    """``threads`` threads x ``calls`` calls on the package loaded with ``num_runners`` runners, each thread on its
    own inputs, against the outputs of serial calls on the same inputs. Raises :class:`AOTIDeployError` naming the
    thread, call and output that differed, or what a call raised."""
    __tracebackhide__ = True
    from pytest_aoti.core.compiler import load_package

    inputs = [_perturbed((tuple(args), kwargs), step) for step in range(threads)]
    with torch.no_grad():
        expected = [compiled.runner(*thread_args, **thread_kwargs) for thread_args, thread_kwargs in inputs]
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-threads-") as extract:
        runner = load_package(compiled.package_path, compiled.device, Path(extract), num_runners=num_runners)
        problems: list[str] = []
        lock = threading.Lock()

        def work(runner: Any, step: int) -> None:
            thread_args, thread_kwargs = inputs[step]
            for call in range(calls):
                try:
                    with torch.no_grad():
                        got = runner(*thread_args, **thread_kwargs)
                    if compiled.device.type == "cuda":
                        torch.cuda.synchronize(compiled.device)
                except Exception as error:  # a thread's failure is the finding, not a crash of the check
                    with lock:
                        problems.append(f"thread {step} call {call} raised {type(error).__name__}: {error}")
                    return
                for index, (want, have) in enumerate(
                    zip(pytree.tree_leaves(expected[step]), pytree.tree_leaves(got), strict=True)
                ):
                    if isinstance(want, torch.Tensor) and not torch.equal(want, have):
                        diff = (want.double() - have.double()).abs().max().item()
                        with lock:
                            problems.append(
                                f"thread {step} call {call} output {index} differs from the serial call "
                                f"(max abs diff {diff:.4g})"
                            )
                        return

        workers = [threading.Thread(target=work, args=(runner, step)) for step in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        del runner
    if problems:
        raise AOTIDeployError(
            f"threads: {threads} threads x {calls} calls on the package loaded with num_runners={num_runners}: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )


_RUN_WITHOUT_WEIGHTS = """
import sys, torch
from pathlib import Path
from pytest_aoti.core.compiler import load_package
args, kwargs = torch.load(sys.argv[2])
# Extracted into the caller's work dir: this process is expected to crash, and a crash leaves the extraction behind.
runner = load_package(Path(sys.argv[1]), torch.device(sys.argv[3]), extract_dir=Path(sys.argv[4]))
runner(*args, **kwargs)
print("ran without its weights", flush=True)
"""


def _run_before_loading_weights(compiled: Any, args: Sequence[Any], kwargs: dict[str, Any], workdir: Path) -> None:
    """A package built with its weights outside the .so, called before ``load_constants``: in a child, because
    torch 2.13 segfaults there. A clear error passes; a crash, or a run that silently computes with no weights,
    fails."""
    from pytest_aoti.core.processes import signal_name

    inputs = workdir / "inputs.pt"
    torch.save((tuple(args), kwargs), inputs)
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            _RUN_WITHOUT_WEIGHTS,
            str(compiled.package_path),
            str(inputs),
            str(compiled.device),
            str(workdir / "extracted"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if run.returncode < 0:
        raise AOTIDeployError(
            f"weights: the package keeps its weights outside the .so (package_constants_in_so=False), and a call "
            f"before load_constants crashes the process ({signal_name(-run.returncode)}) instead of raising: a "
            "deployment must load every constant before the first call, and cannot learn it from an error"
        )
    if run.returncode == 0:
        raise AOTIDeployError(
            "weights: a call before load_constants ran without an error on a package that keeps its weights outside "
            "the .so: it computed with weights it did not have"
        )


def check_weights(compiled: Any, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """A weight swap as a deployment does it: the package's constants (``get_constant_fqns``) must cover the
    model's ``state_dict``; ``load_constants`` with other weights must give what eager gives with them; swapping back
    must give the original outputs again. Raises :class:`AOTIDeployError` naming the keys or the step that failed."""
    __tracebackhide__ = True
    from pytest_aoti.core.compiler import load_package, weights_outside_the_package

    state = {key: value.detach() for key, value in module.state_dict().items()}
    program = compiled.exported_program
    known = {**program.state_dict, **program.constants}
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-weights-") as extract:
        if weights_outside_the_package(compiled.inductor_configs):
            _run_before_loading_weights(compiled, args, kwargs, Path(extract))
        runner = load_package(compiled.package_path, compiled.device, Path(extract))
        fqns = list(runner.get_constant_fqns())
        missing = sorted(set(state) - set(fqns))
        extra = sorted(set(fqns) - set(state))  # lifted tensor constants: filled from the export below
        if missing:
            also = f" (and hold constants the state_dict lacks: {', '.join(extra)})" if extra else ""
            raise AOTIDeployError(
                f"weights: the package's constants lack state_dict entries {', '.join(missing)}{also}: a weight swap "
                "(load_constants) cannot change them, because Inductor compiled their values into the package (small "
                "tensors are inlined: compile with inductor_configs={'always_keep_tensor_constants': True} to keep "
                f"them swappable); its swappable constants are {', '.join(sorted(fqns)) or 'none'}"
            )
        generator = torch.Generator(device="cpu").manual_seed(1)
        swapped = {
            key: value + 0.1 * torch.randn(value.shape, generator=generator).to(value)
            if value.is_floating_point()
            else value
            for key, value in state.items()
        }
        for label, weights in (("other weights", swapped), ("the original weights, swapped back", state)):
            constants = {fqn: weights.get(fqn, known.get(fqn)) for fqn in fqns}
            try:
                runner.load_constants(constants, check_full_update=True)
                with torch.no_grad():
                    got = runner(*args, **kwargs)
                    want = torch.func.functional_call(module, weights, tuple(args), kwargs)
                torch.testing.assert_close(got, want)
            except (RuntimeError, AssertionError) as error:
                raise AOTIDeployError(f"weights: after load_constants with {label}, the package {error}") from None
        del runner


def check_cuda_graph(compiled: Any, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """The package loaded with ``run_single_threaded=True`` (what CUDA graph capture needs), captured into a CUDA
    graph on static inputs, replayed on other values copied into them: the replay must match eager on those values."""
    __tracebackhide__ = True
    from pytest_aoti.core.compiler import load_package

    if compiled.device.type != "cuda":
        raise AOTIDeployError(f"cuda_graph: the package runs on {compiled.device}; CUDA graphs need a CUDA package")
    static = pytree.tree_map(
        lambda leaf: leaf.clone() if isinstance(leaf, torch.Tensor) else leaf, (tuple(args), kwargs)
    )
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-graph-") as extract:
        runner = load_package(compiled.package_path, compiled.device, Path(extract), run_single_threaded=True)
        try:
            with torch.no_grad():
                side = torch.cuda.Stream(compiled.device)  # type: ignore[no-untyped-call]
                side.wait_stream(torch.cuda.current_stream(compiled.device))
                with torch.cuda.stream(side):
                    for _ in range(3):  # warm-up outside the graph, as capture requires
                        runner(*static[0], **static[1])
                torch.cuda.current_stream(compiled.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = runner(*static[0], **static[1])
                fresh_args, fresh_kwargs = _perturbed(static, 1)
                for target, value in zip(
                    pytree.tree_leaves(static), pytree.tree_leaves((fresh_args, fresh_kwargs)), strict=True
                ):
                    if isinstance(target, torch.Tensor):
                        target.copy_(value)
                graph.replay()
                torch.cuda.synchronize(compiled.device)
                expected = module(*fresh_args, **fresh_kwargs)
            torch.testing.assert_close(captured, expected)
        except (RuntimeError, AssertionError) as error:
            raise AOTIDeployError(
                f"cuda_graph: a CUDA graph replay of the package (run_single_threaded=True): {error}"
            ) from None
        finally:
            del runner


def _resized(example: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``example`` tiled or cut to ``shape``: the example's own values (valid token ids stay valid ids)."""
    value = example
    for axis, size in enumerate(shape):
        have = value.shape[axis]
        if have == 0:
            value = torch.zeros(
                (*value.shape[:axis], size, *value.shape[axis + 1 :]), dtype=value.dtype, device=value.device
            )
            continue
        if size > have:
            repeats = [1] * value.dim()
            repeats[axis] = -(-size // have)
            value = value.repeat(*repeats)
        value = value.narrow(axis, 0, size)
    return value.contiguous()


def probe_dims(compiled: Any, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> list[str]:
    """Each dynamic dim at its min, its max (a dim without one: min + 64), 1 and 2, the other dims as in the example,
    the package against eager: one verdict per dim. Raises :class:`AOTIDeployError` listing them when any failed;
    returns them otherwise."""
    __tracebackhide__ = True
    from pytest_aoti.core.invariants import TensorSpec, check_inputs, flatten_inputs
    from pytest_aoti.core.strategies import (
        DEFAULT_MAX_ELEMENTS,
        DEFAULT_UNBOUNDED_SPAN,
        bound_shape,
        consistent_dims,
        root_bounds,
    )

    spec = compiled.spec
    in_spec = compiled.exported_program.call_spec.in_spec
    flat = flatten_inputs(in_spec, tuple(args), kwargs)
    example_bound, _ = check_inputs(spec, flat, compiled.device)
    verdicts: list[str] = []
    failed = False
    for symbol in sorted(example_bound, key=str):
        low, high = root_bounds(spec, symbol, DEFAULT_UNBOUNDED_SPAN, DEFAULT_MAX_ELEMENTS)
        sizes = [size for size in dict.fromkeys((low, high, 1, 2)) if low <= size <= high]
        problems: list[str] = []
        tried: list[int] = []
        for size in sizes:
            bound = {**example_bound, symbol: size}
            if not consistent_dims(spec, bound, DEFAULT_MAX_ELEMENTS):
                continue
            tried.append(size)
            probe = [
                _resized(value, bound_shape(tensor, bound) or ()) if isinstance(tensor, TensorSpec) else value
                for tensor, value in zip(spec.inputs, flat, strict=True)
            ]
            call_args, call_kwargs = pytree.tree_unflatten(probe, in_spec)
            try:
                got = compiled.call(call_args, call_kwargs)
                with torch.no_grad():
                    want = module(*call_args, **call_kwargs)
                torch.testing.assert_close(got, want)
            except (RuntimeError, AssertionError) as error:
                problems.append(f"{size}: {str(error).splitlines()[0]}")
        name = spec.named(symbol)
        if problems:
            failed = True
            verdicts.append(f"dim {name} in [{low}, {high}]: FAILED at " + "; ".join(problems))
        else:
            verdicts.append(f"dim {name} in [{low}, {high}]: ok at {', '.join(map(str, tried)) or 'no size'}")
    if failed:
        raise AOTIDeployError(
            "probe_dims: the package against eager at each dynamic dim's edges:\n" + "\n".join(verdicts)
        )
    return verdicts
