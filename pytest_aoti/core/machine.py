"""This machine as a package and its records see it, read once per process and without importing torch: the CPU,
the C++ compiler Inductor builds with, torch and the CUDA it was built for (:func:`machine_identity`); and Inductor's
per-user cache dir (:func:`inductor_cache_dir`).

In the core because the package cache's key is the compiler's, and it depends on the same facts as the records that
the features keep (goldens' environment, bundled I/O, repro bundles, benchmark baselines): one reading of each, so
two of them cannot disagree. :func:`cpu_model` and :func:`inductor_cache_dir` are also copied, source and all,
into a repro bundle's ``repro.py``, which runs without pytest-aoti: they import only the standard library, inside.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CxxCompiler:
    """The C++ compiler Inductor builds a CPU package and the wrapper with (its default: ``$CXX``, else ``g++``;
    ``clang++`` on macOS), read without importing Inductor."""

    command: str  # as Inductor runs it
    path: str | None  # where PATH finds it (None: nowhere)
    version: str  # the first line of its ``--version``, or why there is none

    @property
    def identity(self) -> str:
        """The compiler as the package cache's key and the ISA probes' record know it: what Inductor runs and what
        it says it is. Not where PATH finds it: two processes of one machine may differ in PATH alone (a ccache
        dir first), and another build of the compiler tells its own version line."""
        return f"{self.command}: {self.version}"


@dataclass(frozen=True)
class MachineIdentity:
    """What a package built here depends on besides the model and Inductor's configs."""

    arch: str  # platform.machine()
    cpu_model: str
    cpu_flags: tuple[str, ...]  # sorted; what Inductor's vector ISA probes depend on
    cxx: CxxCompiler
    torch: str  # the installed torch's version
    cuda: str | None  # the CUDA it was built for (None: a CPU build)


def cpu_model() -> str:
    """The CPU's model name (a CPU package is built with ``-march=native``), else what the platform calls it."""
    import platform

    try:
        with open("/proc/cpuinfo") as cpuinfo:
            found = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), None)
    except OSError:
        found = None
    return found or platform.processor() or platform.machine()


def inductor_cache_dir() -> Path:
    """Inductor's default cache dir (``torch._inductor.runtime.cache_dir_utils.default_cache_dir``), without
    importing Inductor: ``torchinductor_<user>`` in the temp dir, ``uid_<uid>`` for a user with no passwd entry (a
    container run under an arbitrary uid). ``TORCHINDUCTOR_CACHE_DIR`` overrides it, where it is set."""
    import getpass
    import os
    import re
    import tempfile

    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def _cpu_flags() -> tuple[str, ...]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split(":", 1)[1] for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return tuple(sorted(flags.split()))


def _cxx_compiler() -> CxxCompiler:
    command = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    path = shutil.which(command)
    try:
        output = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as error:  # no compiler: say so rather than fail over a record
        return CxxCompiler(command, path, f"unknown ({type(error).__name__})")
    return CxxCompiler(command, path, output.splitlines()[0].strip() if output.strip() else command)


def _torch_versions() -> tuple[str, str | None]:
    """torch's version and its CUDA's, from ``torch/version.py`` (plain assignments) without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "not installed", None
    found: dict[str, object] = {}
    try:
        source = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text(encoding="utf-8")
    except OSError:
        source = ""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            with contextlib.suppress(ValueError):
                found[target.id] = ast.literal_eval(value)
    cuda = found.get("cuda")
    return str(found.get("__version__", "unknown")), str(cuda) if cuda is not None else None


@functools.cache
def machine_identity() -> MachineIdentity:
    """This machine, read once per process."""
    torch_version, cuda = _torch_versions()
    return MachineIdentity(platform.machine(), cpu_model(), _cpu_flags(), _cxx_compiler(), torch_version, cuda)
