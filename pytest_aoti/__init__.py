"""pytest-aoti: test PyTorch models compiled with AOTInductor.

The core works without pytest: ``compile_model``/``check_model`` export, compile and load a model and return a
``CompiledModel`` that checks its invariants on every call. Torch is imported only when one of those is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_aoti.core.errors import AOTICompileError, AOTIExportError, AOTIInvariantError

if TYPE_CHECKING:
    from pytest_aoti.core.cache import PackageCache, package_key
    from pytest_aoti.core.compiler import CompiledModel, check_model, compile_model
    from pytest_aoti.core.strategies import DrawnInputs, dynamic_inputs, input_shapes

__all__ = [
    "AOTICompileError",
    "AOTIExportError",
    "AOTIInvariantError",
    "CompiledModel",
    "DrawnInputs",
    "PackageCache",
    "check_model",
    "compile_model",
    "dynamic_inputs",
    "input_shapes",
    "package_key",
]

_LAZY = {
    "CompiledModel": "pytest_aoti.core.compiler",
    "check_model": "pytest_aoti.core.compiler",
    "compile_model": "pytest_aoti.core.compiler",
    "PackageCache": "pytest_aoti.core.cache",
    "package_key": "pytest_aoti.core.cache",
    "dynamic_inputs": "pytest_aoti.core.strategies",
    "input_shapes": "pytest_aoti.core.strategies",
    "DrawnInputs": "pytest_aoti.core.strategies",
}


def __getattr__(name: str) -> Any:
    """Import torch-bound names on first use, so ``import pytest_aoti`` (and the plugin) stay torch-free."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pytest_aoti' has no attribute {name!r}")
