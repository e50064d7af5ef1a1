"""pytest-aoti: test PyTorch models compiled with AOTInductor.

The core works without pytest: ``compile_model``/``check_model`` export, compile and load a model and return a
``CompiledModel`` that checks its invariants on every call. Torch is imported only when one of those is used.

The exceptions and warnings a test meets derive from ``AOTIError``, and each is importable from here. This module and
``pytest_aoti.hookspecs`` (the hooks and the records they hand out) are pytest-aoti's public Python API; every other
module is internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Each package's errors, imported here (they import no torch) so that every error class, and the failure kind it
# declares, is known wherever a pytest-aoti module is: triage reads a feature's kind from its class.
from pytest_aoti.benchmark.errors import AOTIBenchmarkError
from pytest_aoti.core.errors import (
    AOTICompileError,
    AOTIDtypeFromEagerWarning,
    AOTIError,
    AOTIExportError,
    AOTIInvariantError,
    AOTIMismatchError,
    AOTIOutputSpecError,
    AOTIPackageRunError,
    AOTISpecializationError,
    AOTITypeError,
    AOTIUsageError,
    AOTIValueError,
    AOTIWarning,
)
from pytest_aoti.deploy.errors import AOTIDeployError
from pytest_aoti.shared.errors import AOTIVerifyError
from pytest_aoti.snapshots.errors import AOTISnapshotError

if TYPE_CHECKING:
    from pytest_aoti.core.cache import PackageCache
    from pytest_aoti.core.cache_files import AOTICacheWarning
    from pytest_aoti.core.cache_key import package_key
    from pytest_aoti.core.compiler import CompiledModel, check_model, compile_model
    from pytest_aoti.core.remote_cache import AOTIRemoteCacheWarning
    from pytest_aoti.core.strategies import DrawnInputs, dynamic_inputs, input_shapes
    from pytest_aoti.core.torch_versions import MissingTorchAPI
    from pytest_aoti.verify.bundled import bundle_io, verify_package

__all__ = [
    "AOTIBenchmarkError",
    "AOTICacheWarning",
    "AOTICompileError",
    "AOTIDeployError",
    "AOTIDtypeFromEagerWarning",
    "AOTIError",
    "AOTIExportError",
    "AOTIInvariantError",
    "AOTIMismatchError",
    "AOTIOutputSpecError",
    "AOTIPackageRunError",
    "AOTIRemoteCacheWarning",
    "AOTISnapshotError",
    "AOTISpecializationError",
    "AOTITypeError",
    "AOTIUsageError",
    "AOTIValueError",
    "AOTIVerifyError",
    "AOTIWarning",
    "CompiledModel",
    "DrawnInputs",
    "MissingTorchAPI",
    "PackageCache",
    "bundle_io",
    "check_model",
    "compile_model",
    "dynamic_inputs",
    "input_shapes",
    "package_key",
    "verify_package",
]

_LAZY = {
    "CompiledModel": "pytest_aoti.core.compiler",
    "check_model": "pytest_aoti.core.compiler",
    "compile_model": "pytest_aoti.core.compiler",
    "AOTICacheWarning": "pytest_aoti.core.cache_files",
    "PackageCache": "pytest_aoti.core.cache",
    "package_key": "pytest_aoti.core.cache_key",
    "AOTIRemoteCacheWarning": "pytest_aoti.core.remote_cache",
    "dynamic_inputs": "pytest_aoti.core.strategies",
    "input_shapes": "pytest_aoti.core.strategies",
    "DrawnInputs": "pytest_aoti.core.strategies",
    "MissingTorchAPI": "pytest_aoti.core.torch_versions",
    "bundle_io": "pytest_aoti.verify.bundled",
    "verify_package": "pytest_aoti.verify.bundled",
}


def __getattr__(name: str) -> Any:
    """Import the names of heavier modules on first use, so ``import pytest_aoti`` (and the plugin) stay torch-free."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pytest_aoti' has no attribute {name!r}")
