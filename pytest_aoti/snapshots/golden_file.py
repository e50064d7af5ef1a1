"""The golden file's format: a safetensors file whose tensors are ``<device class>/<snapshot name><pytree path>``, and
whose metadata holds the other leaves (by ``repr``), each device class's environment, and which keys belong to which
snapshot (so that ``logits`` and ``logits.aux`` stay two snapshots, and a snapshot of ``()`` is a golden too).

Files recorded before the snapshot lists existed are read by name prefix, as they were written."""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pytest_aoti.shared.bundled_io import readable_as_umask_allows
from pytest_aoti.snapshots.errors import AOTISnapshotError

FORMAT = "pytest-aoti snapshot 1"
# safetensors has no complex128: such tensors are stored as float64 pairs (torch.view_as_real), listed here.
_AS_REAL = "complex128"


@functools.cache
def safetensors_stores(dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` can go in a golden file (complex128 can, as float64 pairs)."""
    if dtype == torch.complex128:
        return True
    from safetensors.torch import save

    try:
        save({"probe": torch.empty(0, dtype=dtype)})
    except (KeyError, ValueError, TypeError, RuntimeError):  # safetensors has no code for this dtype
        return False
    return True


def _is_text_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _is_environments(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is_text_map(v) for k, v in value.items())


def _is_key_lists(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(key, str) for key in v) for k, v in value.items()
    )


def _is_key_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(key, str) for key in value)


def _metadata_field(path: Path, metadata: dict[str, str], name: str, valid: Callable[[Any], bool], default: Any) -> Any:
    """One JSON field of the metadata, or an error naming the file and the field. ``default``: None where the field
    is required, else what a file from before the field existed means."""
    garbled = f"{path}: golden file metadata {name!r}"
    remedy = "restore the file from version control, or delete it to record its goldens anew"
    if name not in metadata:
        if default is None:
            raise AOTISnapshotError(f"{garbled} is missing: {remedy}")
        return default
    try:
        value = json.loads(metadata[name])
    except ValueError:
        raise AOTISnapshotError(f"{garbled} is not JSON ({metadata[name][:60]!r}): {remedy}") from None
    if not valid(value):
        raise AOTISnapshotError(f"{garbled} does not have the shape pytest-aoti writes: {remedy}")
    return value


def _complex_again(path: Path, tensors: dict[str, torch.Tensor], keys: list[str]) -> None:
    for key in keys:
        pair = tensors.get(key)
        if pair is None or pair.dtype != torch.float64 or pair.dim() == 0 or pair.shape[-1] != 2:
            raise AOTISnapshotError(f"{path}: golden file metadata {_AS_REAL!r} names {key!r}, not stored as pairs")
        # A copy, not a view: safetensors places a tensor at any 8-byte offset of the file, and complex128 kernels
        # read 16-byte aligned memory (a view of a misaligned pair segfaults in isfinite / abs).
        tensors[key] = torch.view_as_complex(pair.clone(memory_format=torch.contiguous_format))


@dataclass
class GoldenFile:
    """A test's golden file: its tensors, other leaves, per-device-class environments and each snapshot's keys."""

    path: Path
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    others: dict[str, str] = field(default_factory=dict)
    environments: dict[str, dict[str, str]] = field(default_factory=dict)
    snapshots: dict[str, list[str]] = field(default_factory=dict)  # ``cpu/name`` → its keys

    @classmethod
    def read(cls, path: Path, *, empty_holds_none: bool = False) -> GoldenFile:
        """The file at ``path``; none there holds no goldens. An empty file (pytest-aoti writes none: its writes
        are atomic) holds none where ``empty_holds_none`` (an update, which rewrites it), else is an error."""
        if not path.exists():
            return cls(path)
        if path.stat().st_size == 0:
            if empty_holds_none:
                return cls(path)
            raise AOTISnapshotError(
                f"{path}: an empty file, not a golden file; delete it to record its goldens anew, or rewrite it with "
                "--aoti-snapshot-update"
            )
        from safetensors import SafetensorError, safe_open
        from safetensors.torch import load_file

        try:
            with safe_open(str(path), framework="pt") as handle:
                metadata = handle.metadata() or {}
            tensors = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as error:
            raise AOTISnapshotError(f"{path}: not a readable golden file ({error}); delete it to record anew") from None
        if metadata.get("format") != FORMAT:
            raise AOTISnapshotError(f"{path}: not a pytest-aoti golden file (format {metadata.get('format')!r})")
        others = _metadata_field(path, metadata, "others", _is_text_map, None)
        environments = _metadata_field(path, metadata, "environments", _is_environments, None)
        snapshots = _metadata_field(path, metadata, "snapshots", _is_key_lists, {})
        _complex_again(path, tensors, _metadata_field(path, metadata, _AS_REAL, _is_key_list, []))
        listed = {key for keys in snapshots.values() for key in keys}
        absent = sorted(listed - set(tensors) - set(others))
        if absent:
            raise AOTISnapshotError(
                f"{path}: golden file metadata 'snapshots' lists {absent[0]!r}, which the file does not hold: restore "
                "the file from version control, or delete it to record its goldens anew"
            )
        return cls(path, tensors, others, environments, snapshots)

    def has(self, full_name: str) -> bool:
        """Whether the file holds a golden for ``cpu/name`` (an empty one too: the outputs of a model returning ``()``
        have no leaves)."""
        tensors, others = self.entries(full_name)
        return full_name in self.snapshots or bool(tensors or others)

    def entries(self, full_name: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        if full_name in self.snapshots:
            keys = set(self.snapshots[full_name])
        else:  # a file from before the snapshot lists: its snapshot's keys by name prefix, unless listed as another's
            listed = {key for keys in self.snapshots.values() for key in keys}
            keys = {
                key
                for key in [*self.tensors, *self.others]
                if key not in listed and (key == full_name or key.startswith((full_name + "[", full_name + ".")))
            }
        return (
            {key: value for key, value in self.tensors.items() if key in keys},
            {key: value for key, value in self.others.items() if key in keys},
        )

    def replace(self, full_name: str, tensors: dict[str, torch.Tensor], others: dict[str, str]) -> None:
        """Make ``tensors`` and ``others`` the golden of snapshot ``full_name`` (``cpu/name``)."""
        old_tensors, old_others = self.entries(full_name)
        for key in [*tensors, *others]:
            if key in old_tensors or key in old_others:
                continue
            owner = next((name for name, keys in self.snapshots.items() if key in keys), None)
            if owner is not None or key in self.tensors or key in self.others:
                raise AOTISnapshotError(
                    f"snapshot {full_name!r}: its output {key!r} is stored for snapshot {owner or 'another'!r} in "
                    f"{self.path} (a snapshot name that is another's plus a pytree path): rename one of them"
                )
        self._drop(set(old_tensors) | set(old_others))
        self.tensors.update({key: value.detach().cpu().contiguous().clone() for key, value in tensors.items()})
        self.others.update(others)
        self.snapshots[full_name] = sorted([*tensors, *others])

    def clear(self, device_class: str) -> None:
        """Drop every golden of one device class (``cpu``)."""
        prefix = f"{device_class}/"
        self._drop({key for key in [*self.tensors, *self.others] if key.startswith(prefix)})
        self.snapshots = {name: keys for name, keys in self.snapshots.items() if not name.startswith(prefix)}

    def _drop(self, keys: set[str]) -> None:
        for key in keys:
            self.tensors.pop(key, None)
            self.others.pop(key, None)

    def write(self) -> None:
        """Atomically (a partial file never replaces a good one), readable as the umask allows."""
        from safetensors.torch import save_file

        as_real = sorted(key for key, value in self.tensors.items() if value.dtype == torch.complex128)
        stored = {key: torch.view_as_real(value) if key in as_real else value for key, value in self.tensors.items()}
        metadata = {
            "format": FORMAT,
            "others": json.dumps(self.others, sort_keys=True),
            "environments": json.dumps(self.environments, sort_keys=True),
            "snapshots": json.dumps(self.snapshots, sort_keys=True),
            _AS_REAL: json.dumps(as_real),
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, partial = tempfile.mkstemp(prefix=".partial-", suffix=".safetensors", dir=self.path.parent)
            os.close(handle)
            try:
                save_file(stored, partial, metadata=metadata)
                readable_as_umask_allows(partial)  # after saving: safetensors makes the file anew, 0600
                os.replace(partial, self.path)
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)
        except OSError as error:
            raise AOTISnapshotError(
                f"cannot write golden file {self.path}: {error.strerror or error} ({error.filename}); golden files "
                "are recorded beside the test file: make that directory writable"
            ) from None
