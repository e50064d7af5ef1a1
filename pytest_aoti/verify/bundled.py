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
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from pytest_aoti.core.compiler import one_line
from pytest_aoti.core.errors import AOTICompileError, AOTIVerifyError
from pytest_aoti.core.invariants import (
    check_inputs,
    check_outputs,
    literal_value,
    program_spec,
    spec_from_json,
    spec_to_json,
)
from pytest_aoti.snapshots import golden as snapshots

IO_MEMBER = "pytest_aoti/io.safetensors"
FORMAT = "pytest-aoti bundled io 1"
BUILD_HINT = (
    "build it with aoti_compile(..., bundle_io=True) or pytest_aoti.verify.bundle_io(package, exported_program, args)"
)


def _archive_root(names: Sequence[str]) -> str | None:
    """The archive's root dir (``model/``), where ``data/aotinductor/`` marks an AOTI package."""
    for name in names:
        root, _, rest = name.partition("/")
        if rest.startswith("data/aotinductor/"):
            return root
    return None


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


def write_bundled_io(
    source: Path,
    target: Path,
    exported_program: ExportedProgram,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    outputs: Any,
    device_type: str,
    package_key: str | None = None,
) -> None:
    """Copy ``source`` to ``target`` with the I/O member (re)written; ``target`` appears whole or not at all."""
    from safetensors.torch import save

    flat_inputs, in_spec = pytree.tree_flatten((tuple(args), kwargs))
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, str] = {}
    strides: dict[str, list[int]] = {}
    for index, leaf in enumerate(flat_inputs):
        if isinstance(leaf, torch.Tensor):
            tensors[f"input.{index}"] = leaf.detach().cpu().contiguous()
            strides[str(index)] = list(leaf.stride())
        else:
            scalars[str(index)] = repr(leaf)
    for index, leaf in enumerate(pytree.tree_leaves(outputs)):
        if isinstance(leaf, torch.Tensor):
            tensors[f"output.{index}"] = leaf.detach().cpu().contiguous()
    metadata = {
        "format": FORMAT,
        "device": device_type,
        "in_spec": pytree.treespec_dumps(in_spec),
        "scalars": json.dumps(scalars),
        "strides": json.dumps(strides),
        "outputs": str(len(pytree.tree_leaves(outputs))),
        "spec": json.dumps(spec_to_json(program_spec(exported_program))),
        "environment": json.dumps(snapshots.environment(device_type, package_key)),
    }
    payload = save(tensors, metadata=metadata)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=".partial-", suffix=".pt2", dir=target.parent)
    os.close(handle)
    snapshots.readable_as_umask_allows(partial)
    try:
        with zipfile.ZipFile(source) as reader, zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as writer:
            root = _archive_root(reader.namelist())
            if root is None:
                raise AOTIVerifyError(f"{source}: not an AOTI package (no data/aotinductor/ in the archive)")
            for info in reader.infolist():
                if info.filename != f"{root}/{IO_MEMBER}":
                    with reader.open(info) as member, writer.open(info, "w") as copy:
                        shutil.copyfileobj(member, copy, 1 << 20)
            writer.writestr(f"{root}/{IO_MEMBER}", payload)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


@dataclass(frozen=True)
class Verified:
    """What :func:`verify_package` checked: one line each."""

    path: Path
    device: str
    lines: tuple[str, ...]


def _read_io(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The bundled tensors and metadata, or a clear error for a file that is not a package with bundled I/O."""
    from safetensors.torch import load

    if not path.exists():
        raise AOTIVerifyError(f"{path}: no such file")
    if not path.is_file():
        raise AOTIVerifyError(f"{path}: not a file")
    try:
        with zipfile.ZipFile(path) as archive:
            root = _archive_root(archive.namelist())
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


def _run_device(path: Path, metadata: dict[str, str], device: str | None) -> torch.device:
    built_for = metadata["device"]
    recorded = json.loads(metadata["environment"])
    if device:
        wanted = torch.device(device)
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


def verify_package(
    package: str | os.PathLike[str], *, device: str | None = None, rtol: float | None = None, atol: float | None = None
) -> Verified:
    """Load ``package`` on this machine, run its bundled inputs through its invariants and compare its outputs
    with the bundled golden outputs (tolerances by dtype unless given). Raises :class:`AOTIVerifyError`, naming
    the file, for anything that does not hold."""
    from pytest_aoti.core.compiler import load_package

    path = Path(package)
    tensors, metadata = _read_io(path)
    run_device = _run_device(path, metadata, device)
    spec = spec_from_json(json.loads(metadata["spec"]))
    flat, in_spec = _inputs(tensors, metadata, run_device)
    recorded = json.loads(metadata["environment"])
    changed = snapshots.environment_diff(recorded, snapshots.environment(run_device.type))
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
            check_outputs(spec, leaves, run_device, bound)
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
    tolerance = f"rtol={rtol:g}, atol={atol:g}" if rtol is not None and atol is not None else "dtype defaults"
    return Verified(
        path,
        str(run_device),
        (
            f"{len(flat)} input(s) and {len(leaves)} output(s) hold the package's invariants; outputs match the "
            f"bundled golden outputs ({tolerance})",
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
        out_rtol, out_atol = (
            (rtol, atol) if rtol is not None and atol is not None else snapshots.default_tolerance(golden.dtype)
        )
        diff = snapshots.compare(f"output {index}", leaf, golden, out_rtol, out_atol)
        if diff is not None:
            found += diff.lines(out_rtol, out_atol)
    if len(leaves) != golden_count:
        found.append(f"{len(leaves)} output(s), the golden has {golden_count}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_aoti.verify",
        description="Check AOTI packages built with bundled I/O on this machine: load each, run its sample inputs "
        "through its invariants, and compare its outputs with its golden outputs.",
    )
    parser.add_argument("packages", nargs="+", metavar="PACKAGE", help=".pt2 files built with bundle_io")
    parser.add_argument("--device", help="device to run on (default: the package's own: cpu, or the current GPU)")
    parser.add_argument("--rtol", type=float, help="relative tolerance (with --atol; default by dtype)")
    parser.add_argument("--atol", type=float, help="absolute tolerance (with --rtol; default by dtype)")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module to import first, e.g. the one registering the package's custom ops (repeatable)",
    )
    options = parser.parse_args(argv)
    if (options.rtol is None) != (options.atol is None):
        parser.error("--rtol and --atol: give both or neither")
    for module in options.imports:
        try:
            importlib.import_module(module)
        except Exception as error:  # whatever the user's module raises: one line, then stop
            print(f"FAILED --import {module}: {type(error).__name__}: {error}")
            return 2
    failed = 0
    for package in options.packages:
        try:
            verified = verify_package(package, device=options.device, rtol=options.rtol, atol=options.atol)
        except AOTIVerifyError as error:
            failed += 1
            print(f"FAILED {error}")
            continue
        print(f"ok {verified.path} on {verified.device}")
        for line in verified.lines:
            print(f"  {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
