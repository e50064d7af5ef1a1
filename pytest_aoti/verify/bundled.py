"""Packages that verify themselves: sample inputs and golden outputs carried inside the ``.pt2``, checked on the
deployment machine, where there is no model source and no test file.

:func:`bundle_io` runs a package on sample inputs and writes a copy that carries the inputs, the outputs and the
package's invariants (``<archive root>/pytest_aoti/io.safetensors``; not under the archive's ``extra/``, whose files
torch's loader decodes as text). :func:`verify_package` loads such a package on this machine, checks the inputs and
outputs against the invariants and compares the outputs with the golden ones. ``python -m pytest_aoti.verify
PACKAGE...`` and ``pytest --aoti-verify PACKAGE...`` run it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import signal
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from pytest_aoti.core.compiler import one_line, tolerance_value
from pytest_aoti.core.errors import AOTICompileError
from pytest_aoti.core.invariants import check_call_outputs, check_inputs, literal_value, spec_from_json
from pytest_aoti.shared.bundled_io import FORMAT, IO_MEMBER, archive_root, write_bundled_io
from pytest_aoti.shared.environment import environment, environment_diff
from pytest_aoti.shared.errors import AOTIVerifyError
from pytest_aoti.shared.output_diff import compare, default_tolerance
from pytest_aoti.verify.server import Terminated, VerifyServer

__all__ = ["IO_MEMBER", "Verified", "bundle_io", "main", "verify_in_child", "verify_package", "write_bundled_io"]

BUILD_HINT = (
    "build it with aoti_compile(..., bundle_io=True) or pytest_aoti.verify.bundle_io(package, exported_program, args)"
)


def bundle_io(
    package: str | os.PathLike[str],
    exported_program: ExportedProgram,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    output: str | os.PathLike[str] | None = None,
    device: torch.device | str | None = None,
) -> Path:
    """Run ``package`` on ``args``/``kwargs`` here and write a copy to ``output`` (default: ``package`` itself,
    replaced atomically) that carries these inputs, the outputs it produced, its invariants (from
    ``exported_program``) and the environment it ran in. Bundled I/O already in ``package`` is replaced."""
    from pytest_aoti.core.compiler import load_package

    source = Path(package)
    target = Path(output) if output is not None else source
    run_device = torch.device(device) if device is not None else _device_of(args, kwargs)
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-bundle-") as extract:
        runner = load_package(source, run_device, extract_dir=Path(extract))
        with torch.no_grad():
            outputs = runner(*args, **(kwargs or {}))
        if run_device.type == "cuda":
            torch.cuda.synchronize(run_device)
        del runner
    write_bundled_io(source, target, exported_program, args, kwargs or {}, outputs, run_device.type)
    return target


def _device_of(args: Any, kwargs: Any) -> torch.device:
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    return torch.device("cpu")


def bundle_built(compiled: Any, args: tuple[Any, ...], kwargs: dict[str, Any], package_dir: Path) -> None:
    """``aoti_compile(..., bundle_io=True)``: the package's outputs on the example inputs (its invariants checked),
    bundled into a copy to ship, which becomes ``compiled.package_path``."""
    from pytest_aoti.core.compiler import copied_inputs

    outputs = compiled.call(copied_inputs(args), copied_inputs(kwargs))
    stem = compiled.package_path.stem
    # A package from the cache is named by its key, which changes with the model, weights and options: recorded.
    key = stem if len(stem) == 64 and all(c in "0123456789abcdef" for c in stem) else None
    bundled = package_dir / f"{stem[:16]}.bundled.pt2"
    write_bundled_io(
        compiled.package_path, bundled, compiled.exported_program, args, kwargs, outputs, compiled.device.type, key
    )
    compiled.package_path = bundled


@dataclass(frozen=True)
class Verified:
    """What :func:`verify_package` checked: one line each."""

    path: Path
    device: str
    lines: tuple[str, ...]


def _read_io(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The bundled tensors and metadata, or a clear error for a file that is not a package with bundled I/O."""
    from safetensors.torch import load

    if path.is_symlink() and not path.exists():
        raise AOTIVerifyError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist")
    if not path.exists():
        raise AOTIVerifyError(f"{path}: no such file")
    if not path.is_file():
        raise AOTIVerifyError(f"{path}: not a file")
    try:
        with zipfile.ZipFile(path) as archive:
            root = archive_root(archive.namelist())
            if root is None:
                raise AOTIVerifyError(f"{path}: not an AOTI package (no data/aotinductor/ in the archive)")
            broken = archive.testzip()
            if broken is not None:
                raise AOTIVerifyError(
                    f"{path}: corrupted: archive member {broken} fails its CRC check (a truncated or bit-flipped copy?)"
                )
            try:
                payload = archive.read(f"{root}/{IO_MEMBER}")
            except KeyError:
                raise AOTIVerifyError(f"{path}: carries no bundled inputs and outputs; {BUILD_HINT}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as error:
        raise AOTIVerifyError(f"{path}: not a readable .pt2 archive ({error}; a truncated copy?)") from None
    header_size = int.from_bytes(payload[:8], "little")
    metadata = json.loads(payload[8 : 8 + header_size]).get("__metadata__", {})
    if metadata.get("format") != FORMAT:
        raise AOTIVerifyError(f"{path}: bundled I/O of an unknown format {metadata.get('format')!r}")
    return load(payload), metadata


def parse_device(value: str) -> torch.device:
    """``value`` as a torch device, or a ValueError that says what a device looks like."""
    try:
        return torch.device(value)
    except RuntimeError:
        raise ValueError(f"unknown device {value!r}; expected cpu, cuda or cuda:N") from None


def _run_device(path: Path, metadata: dict[str, str], device: str | None) -> torch.device:
    built_for = metadata["device"]
    recorded = json.loads(metadata["environment"])
    if device:
        try:
            wanted = parse_device(device)
        except ValueError as error:
            raise AOTIVerifyError(f"{path}: {error}") from None
    elif built_for == "cuda":
        # The current GPU: cuda:0, or the one an xdist worker took. Without CUDA the check below says so.
        wanted = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    else:
        wanted = torch.device(built_for)
    if wanted.type != built_for:
        raise AOTIVerifyError(f"{path}: built for {built_for}, asked to run on {wanted}")
    if built_for == "cuda" and not torch.cuda.is_available():
        raise AOTIVerifyError(
            f"{path}: built for CUDA (recorded on {recorded.get('gpu', 'a GPU')}); this machine has no CUDA device"
        )
    return wanted


def _inputs(tensors: dict[str, torch.Tensor], metadata: dict[str, str], device: torch.device) -> tuple[list[Any], Any]:
    in_spec = pytree.treespec_loads(metadata["in_spec"])
    scalars, strides = json.loads(metadata["scalars"]), json.loads(metadata["strides"])
    flat: list[Any] = []
    for index in range(in_spec.num_leaves):
        if str(index) in scalars:
            flat.append(literal_value(scalars[str(index)]))
            continue
        value = tensors[f"input.{index}"]
        placed = torch.empty_strided(value.shape, strides[str(index)], dtype=value.dtype, device=device)
        flat.append(placed.copy_(value))
    return flat, in_spec


def tolerance(value: Any, name: str) -> float | None:
    """``value`` as a tolerance: None, or a finite number >= 0 (NaN would pass every comparison)."""
    try:
        return tolerance_value(value, name)
    except ValueError as error:
        raise AOTIVerifyError(str(error)) from None


def verify_package(
    package: str | os.PathLike[str], *, device: str | None = None, rtol: float | None = None, atol: float | None = None
) -> Verified:
    """Load ``package`` in this process, run its bundled inputs through its invariants and compare its outputs
    with the bundled golden outputs (tolerances by dtype unless given). Raises :class:`AOTIVerifyError`, naming
    the file, for anything that does not hold. A package is foreign code that can crash the process that loads it:
    :func:`verify_in_child` loads it in a child instead."""
    from pytest_aoti.core.compiler import load_package

    rtol, atol = tolerance(rtol, "rtol"), tolerance(atol, "atol")
    path = Path(package)
    tensors, metadata = _read_io(path)
    run_device = _run_device(path, metadata, device)
    spec = spec_from_json(json.loads(metadata["spec"]))
    flat, in_spec = _inputs(tensors, metadata, run_device)
    recorded = json.loads(metadata["environment"])
    changed = environment_diff(recorded, environment(run_device.type))
    env_line = "environment diff (recorded → now): " + ("; ".join(changed) if changed else "none")
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-verify-") as extract:
        try:
            runner = load_package(path, run_device, extract_dir=Path(extract))
        except AOTICompileError as error:  # the environment guard, or the loader: one line naming the file
            raise AOTIVerifyError(f"{path}: {error}") from None
        try:
            bound, run_with = check_inputs(spec, flat, run_device)
            args, kwargs = pytree.tree_unflatten(run_with, in_spec)
            with torch.no_grad():
                outputs = runner(*args, **kwargs)
            if run_device.type == "cuda":
                torch.cuda.synchronize(run_device)
            leaves = pytree.tree_leaves(outputs)
            check_call_outputs(spec, outputs, run_device, bound).raise_if_broken()
        except AssertionError as error:
            raise AOTIVerifyError(f"{path}: {error}\n{env_line}") from None
        except RuntimeError as error:  # the package's own error (a kernel, a custom op, the runtime's checks)
            raise AOTIVerifyError(
                f"{path}: on {run_device} the package raised: {one_line(error)}\n{env_line}"
            ) from None
        finally:
            del runner
    found = _differences(leaves, tensors, int(metadata["outputs"]), rtol, atol)
    if found:
        raise AOTIVerifyError("\n".join([f"{path}: outputs differ from the bundled golden outputs:", *found, env_line]))
    given = f"rtol={rtol:g}, atol={atol:g}" if rtol is not None and atol is not None else "dtype defaults"
    return Verified(
        path,
        str(run_device),
        (
            f"{len(flat)} input(s) and {len(leaves)} output(s) hold the package's invariants; outputs match the "
            f"bundled golden outputs ({given})",
            f"recorded with torch {recorded.get('torch')} on {recorded.get('gpu') or recorded.get('cpu')}",
            env_line,
        ),
    )


def _differences(
    leaves: list[Any], tensors: dict[str, torch.Tensor], golden_count: int, rtol: float | None, atol: float | None
) -> list[str]:
    """What differs between the outputs and the bundled golden ones, a line each."""
    found: list[str] = []
    for index, leaf in enumerate(leaves):
        golden = tensors.get(f"output.{index}")
        if golden is None or not isinstance(leaf, torch.Tensor):
            continue
        out_rtol, out_atol = (rtol, atol) if rtol is not None and atol is not None else default_tolerance(golden.dtype)
        diff = compare(f"output {index}", leaf, golden, out_rtol, out_atol)
        if diff is not None:
            found += diff.lines(out_rtol, out_atol)
    if len(leaves) != golden_count:
        found.append(f"{len(leaves)} output(s), the golden has {golden_count}")
    return found


def verify_in_child(
    package: str | os.PathLike[str],
    *,
    device: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    imports: Sequence[str] = (),
) -> Verified:
    """:func:`verify_package` in a fresh interpreter (``python -m pytest_aoti.verify``), so that a package that
    crashes the process loading it (a garbage library with valid zip checksums) fails as that file, naming the
    signal. What needs no load (the archive, its bundled I/O, the device) is checked here first."""
    with VerifyServer(server_options(rtol, atol, imports)) as server:
        return verify_with(server, package, device=device)


def verify_with(server: VerifyServer, package: str | os.PathLike[str], *, device: str | None = None) -> Verified:
    """:func:`verify_package` in ``server``'s interpreter, which goes on to the next package unless this one
    crashed it. What needs no load (the archive, its bundled I/O, the device) is checked here first."""
    path = Path(package)
    _, metadata = _read_io(path)
    outcome = _outcome(path, server.verify(path, str(_run_device(path, metadata, device))))
    if isinstance(outcome, AOTIVerifyError):
        raise outcome
    return outcome


def verify_in_children(
    packages: Sequence[str | os.PathLike[str]],
    *,
    device: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    imports: Sequence[str] = (),
) -> Iterator[tuple[Path, Verified | AOTIVerifyError]]:
    """Each package verified in a fresh interpreter, in order, one interpreter for as many as it gets through: a
    package that crashes (or hangs) the interpreter on it fails naming the signal, and a new interpreter goes on with
    the packages after it. Each interpreter's temp files, a crashed load's extraction included, are removed."""
    with VerifyServer(server_options(rtol, atol, imports)) as server:
        for package in packages:
            path = Path(package)
            yield path, _outcome(path, server.verify(path, device))


def server_options(rtol: float | None, atol: float | None, imports: Sequence[str]) -> list[str]:
    """The verifying interpreter's command-line options (the device goes with each package)."""
    rtol, atol = tolerance(rtol, "rtol"), tolerance(atol, "atol")
    return [
        *([f"--rtol={rtol!r}", f"--atol={atol!r}"] if rtol is not None and atol is not None else []),
        *(f"--import={module}" for module in imports),
    ]


def _outcome(path: Path, answer: dict[str, Any]) -> Verified | AOTIVerifyError:
    error = answer.get("error")
    return AOTIVerifyError(error) if error else Verified(path, answer["device"], tuple(answer["lines"]))


def _tolerance_argument(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _device_argument(text: str) -> str:
    try:
        return str(parse_device(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_aoti.verify",
        description="Check AOTI packages built with bundled I/O on this machine: load each in a fresh interpreter, "
        "run its sample inputs through its invariants, and compare its outputs with its golden outputs.",
    )
    parser.add_argument(
        "packages", nargs="*", metavar="PACKAGE", help=".pt2 files built with bundle_io, or directories holding them"
    )
    parser.add_argument(
        "--device",
        type=_device_argument,
        help="device to run on (default: the package's own: cpu, or the current GPU)",
    )
    parser.add_argument("--rtol", type=_tolerance_argument, help="relative tolerance (with --atol; default by dtype)")
    parser.add_argument("--atol", type=_tolerance_argument, help="absolute tolerance (with --rtol; default by dtype)")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module to import first, e.g. the one registering the package's custom ops (repeatable)",
    )
    # The interpreter that verifies packages (server.VerifyServer): requests on stdin, answers to this descriptor.
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--answers-fd", type=int, help=argparse.SUPPRESS)
    return parser


def package_files(argument: str) -> list[Path]:
    """The package ``argument`` names, or a directory's ``.pt2`` files (below it, sorted), a broken link among them
    too, which the check then names."""
    path = Path(argument)
    if not path.is_dir():
        return [path]
    found = sorted(entry for entry in path.rglob("*.pt2") if entry.is_symlink() or entry.is_file())
    if not found:
        raise AOTIVerifyError(f"{path}: a directory without .pt2 packages")
    return found


def _print(path: Path, outcome: Verified | AOTIVerifyError) -> None:
    if isinstance(outcome, AOTIVerifyError):
        print(f"FAILED {outcome}", flush=True)
        return
    print(f"ok {path} on {outcome.device}", flush=True)
    for line in outcome.lines:
        print(f"  {line}", flush=True)


def _serve(options: argparse.Namespace) -> int:
    """The verifying interpreter: say it is ready, then verify each package stdin names, in this process, and
    answer as soon as it is known (server.VerifyServer reads the answers). It ends at the end of stdin, or after
    an answer marked last: a package left the CUDA context unusable, which the next package must not inherit."""
    answers = os.fdopen(options.answers_fd, "w")

    def answer(record: dict[str, Any]) -> None:
        sys.stderr.flush()  # what the package printed comes before its answer
        answers.write(json.dumps(record) + "\n")
        answers.flush()

    answer({"ready": os.getpid()})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            verified = verify_package(
                request["package"], device=request["device"], rtol=options.rtol, atol=options.atol
            )
            answer({"device": verified.device, "lines": list(verified.lines)})
        except AOTIVerifyError as error:
            problem = _cuda_context_problem()
            answer({"error": str(error), **({"last": True} if problem else {})})
            if problem:
                return 0
    return 0


def _cuda_context_problem() -> str | None:
    """Why this process's CUDA context is unusable (a package's illegal memory access), if it is."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return None
    from pytest_aoti.core.compiler import cuda_context_problem

    return cuda_context_problem()


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    if (options.rtol is None) != (options.atol is None):
        parser.error("--rtol and --atol: give both or neither")
    if not options.packages and not options.serve:
        parser.error("the following arguments are required: PACKAGE")
    for module in options.imports:
        try:
            importlib.import_module(module)
        except Exception as error:  # whatever the user's module raises: one line, then stop
            # The verifying interpreter's stdout goes nowhere: its parent reads the last line of its stderr.
            print(
                f"FAILED --import {module}: {type(error).__name__}: {error}",
                file=sys.stderr if options.serve else sys.stdout,
            )
            return 2
    if options.serve:
        return _serve(options)
    failed = 0
    packages: list[Path] = []
    for argument in options.packages:
        try:
            packages += package_files(argument)
        except AOTIVerifyError as error:
            failed += 1
            print(f"FAILED {error}", flush=True)
    checked = verify_in_children(
        packages, device=options.device, rtol=options.rtol, atol=options.atol, imports=options.imports
    )
    try:
        for path, outcome in checked:
            failed += isinstance(outcome, AOTIVerifyError)
            _print(path, outcome)
    except Terminated:
        print("SIGTERM: the verifying interpreter was ended and its temp files removed", file=sys.stderr)
        return 128 + signal.SIGTERM
    return 1 if failed else 0
