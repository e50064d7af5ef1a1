"""The bundled-I/O format: sample inputs, the outputs the package gave on them, its invariants and the environment it
ran in, written into a copy of the ``.pt2`` as ``<archive root>/pytest_aoti/io.safetensors`` (not under the
archive's ``extra/``, whose files torch's loader decodes as text). ``pytest_aoti.verify`` reads and checks it; the
deployment checks write it for their stand-alone run."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from pytest_aoti.core.invariants import program_spec, spec_to_json
from pytest_aoti.shared.environment import environment
from pytest_aoti.shared.errors import AOTIVerifyError

IO_MEMBER = "pytest_aoti/io.safetensors"
FORMAT = "pytest-aoti bundled io 1"


def archive_root(names: Sequence[str]) -> str | None:
    """The archive's root dir (``model/``), where ``data/aotinductor/`` marks an AOTI package."""
    for name in names:
        root, _, rest = name.partition("/")
        if rest.startswith("data/aotinductor/"):
            return root
    return None


def readable_as_umask_allows(path: str) -> None:
    """mkstemp makes files only their owner can read; a package to ship is made as ``open`` would make it."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _payload(
    exported_program: ExportedProgram,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    outputs: Any,
    device_type: str,
    package_key: str | None,
) -> bytes:
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
        "environment": json.dumps(environment(device_type, package_key)),
    }
    return save(tensors, metadata=metadata)


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
    payload = _payload(exported_program, args, kwargs, outputs, device_type, package_key)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=".partial-", suffix=".pt2", dir=target.parent)
    os.close(handle)
    readable_as_umask_allows(partial)
    try:
        with zipfile.ZipFile(source) as reader, zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as writer:
            root = archive_root(reader.namelist())
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
