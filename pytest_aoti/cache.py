"""A content-addressed cache of compiled ``.pt2`` packages, shared by tests, runs and xdist workers.

AOTInductor has no whole-artifact cache (the FX graph cache is off in AOT mode), so every compile re-runs codegen and
the C++ compiler. The key covers everything that changes the artifact; entries are written atomically, checksummed
(loading a package dlopens native code: a corrupt one must never load) and evicted least-recently-used.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

# Environment variables read at codegen time; a debug rerun sets several of them.
_CODEGEN_ENV_PREFIXES = ("TORCHINDUCTOR_", "AOT_INDUCTOR_", "AOTI_", "INDUCTOR_", "TORCH_COMPILE_")
_CODEGEN_ENV_NAMES = ("DUMP_AOTI_MINIFIER", "CXX", "CC", "CUDA_HOME")
# Where caches live changes no artifact (and Inductor sets TORCHINDUCTOR_CACHE_DIR itself on first use).
_NOT_CODEGEN_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


class AOTICacheWarning(UserWarning):
    """The package cache cannot be used safely and was turned off."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    compile_seconds: float = 0.0
    saved_seconds: float = 0.0
    corrupt: int = 0

    def as_dict(self) -> dict[str, float]:
        return dict(vars(self))


def _hash_tensor(digest: Any, name: str, tensor: torch.Tensor) -> None:
    digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.stride()}:{tensor.dtype}:{tensor.device}".encode())
    if tensor.device.type != "meta" and tensor.numel() > 0:
        # Raw bytes of a contiguous CPU copy; bytes(untyped_storage) walks it element by element (slow).
        flat = tensor.detach().cpu().contiguous()
        digest.update(ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()))


@functools.cache
def _compiler_identity() -> str:
    # Inductor's default choice (CXX, else the platform compiler), without importing Inductor on a cache hit.
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "c++"
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = "unknown"
    return f"{compiler}:{version.splitlines()[0] if version else ''}"


def _device_identity(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda:{props.name}:sm{props.major}{props.minor}:{torch.version.cuda}"
    return f"{device.type}:{torch.backends.cpu.get_cpu_capability()}"


def codegen_environment(environ: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    return {
        name: value
        for name, value in sorted(environ.items())
        if (name.startswith(_CODEGEN_ENV_PREFIXES) or name in _CODEGEN_ENV_NAMES) and name not in _NOT_CODEGEN_ENV
    }


def package_key(ep: ExportedProgram, inductor_configs: dict[str, Any], device: torch.device) -> str:
    """A stable sha256 over everything that changes the compiled artifact (see the module docstring)."""
    import torch

    digest = hashlib.sha256()
    for part in (
        torch.__version__,
        ep.graph_module.print_readable(print_output=False, include_stride=True, include_device=True),
        str(ep.graph_signature),
        str(ep.call_spec.in_spec),
        str(ep.call_spec.out_spec),
        repr(sorted((str(k), str(v)) for k, v in ep.range_constraints.items())),
        repr(sorted((k, repr(v)) for k, v in inductor_configs.items())),
        json.dumps(codegen_environment()),
        _device_identity(device),
        _compiler_identity(),
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    for node in ep.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        if isinstance(value, torch.Tensor):
            digest.update(f"{node.name}:{tuple(value.shape)}:{value.stride()}:{value.dtype}:{value.device}".encode())
    for name, tensor in sorted(ep.state_dict.items()):
        _hash_tensor(digest, name, tensor)
    for name, constant in sorted(ep.constants.items()):
        if isinstance(constant, torch.Tensor):
            _hash_tensor(digest, name, constant)
        else:
            digest.update(f"{name}:{constant!r}".encode())
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-aoti"


def clear_cache_dir(root: Path) -> None:
    """Empty the cache (``--aoti-cache-clear``); the directory itself stays."""
    if not root.is_dir():
        return
    for child in root.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def unsafe_reason(directory: Path) -> str | None:
    """Why a cache dir must not be trusted with native code, or None when it is private to this user."""
    info = directory.stat()
    if info.st_uid != os.getuid():
        return f"it is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write to it (mode {stat.filemode(info.st_mode)})"
    return None


@dataclass
class PackageCache:
    """Compiled packages under ``root/<key[:2]>/<key>.pt2`` with a JSON sidecar holding their checksum."""

    root: Path
    max_bytes: int
    stats: CacheStats = field(default_factory=CacheStats)

    @classmethod
    def open(cls, root: Path, max_bytes: int) -> PackageCache | None:
        """Create ``root`` private to the user; warn and return None when it is not safe to load packages from."""
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        reason = unsafe_reason(root)
        if reason is not None:
            warnings.warn(
                AOTICacheWarning(
                    f"pytest-aoti: not using the package cache at {root}: {reason}; compiling without a cache"
                ),
                stacklevel=2,
            )
            return None
        return cls(root, max_bytes)

    def key_for(self, ep: ExportedProgram, inductor_configs: dict[str, Any], device: torch.device) -> str:
        return package_key(ep, inductor_configs, device)

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.pt2", folder / f"{key}.json"

    @contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Hold the entry's lock: a second process asking for the same package waits, then hits."""
        folder = self.root / key[:2]
        folder.mkdir(mode=0o700, exist_ok=True)
        with FileLock(str(folder / f"{key}.lock")):
            yield

    def lookup(self, key: str) -> Path | None:
        package, sidecar = self._paths(key)
        if not package.exists() or not sidecar.exists():
            self.stats.misses += 1
            return None
        try:
            record = json.loads(sidecar.read_text())
            intact = package.stat().st_size == record["size"] and _file_sha256(package) == record["sha256"]
        except (OSError, ValueError, KeyError):
            intact = False
        if not intact:
            self.stats.corrupt += 1
            self.stats.misses += 1
            package.unlink(missing_ok=True)
            sidecar.unlink(missing_ok=True)
            return None
        os.utime(package)  # least-recently-used eviction goes by mtime
        self.stats.hits += 1
        self.stats.saved_seconds += float(record.get("compile_seconds", 0.0))
        return package

    def store(self, key: str, built: Path, compile_seconds: float) -> Path:
        """Move a freshly built package into the cache atomically and return its cached path."""
        self.stats.compile_seconds += compile_seconds
        package, sidecar = self._paths(key)
        package.parent.mkdir(mode=0o700, exist_ok=True)
        record = {"sha256": _file_sha256(built), "size": built.stat().st_size, "compile_seconds": compile_seconds}
        for target, write in (
            (package, lambda tmp: shutil.copyfile(built, tmp)),
            (sidecar, lambda tmp: Path(tmp).write_text(json.dumps(record))),
        ):
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
            os.close(fd)
            try:
                write(tmp)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        self.evict(keep=package)
        return package

    def evict(self, keep: Path | None = None) -> None:
        """Delete least-recently-used packages until the cache fits ``max_bytes`` (``keep`` always stays)."""
        packages = sorted(self.root.glob("*/*.pt2"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in packages)
        for oldest in packages:
            if total <= self.max_bytes:
                break
            if oldest == keep:
                continue
            total -= oldest.stat().st_size
            oldest.unlink(missing_ok=True)
            oldest.with_suffix(".json").unlink(missing_ok=True)
