"""Shipped packages that verify themselves: inputs, outputs and invariants bundled into the ``.pt2``
(:mod:`.bundled`), ``pytest --aoti-verify`` (:mod:`.plugin`) and ``python -m pytest_aoti.verify``.

``from pytest_aoti.verify import bundle_io`` keeps working; the names load torch only when first used, so that
the plugin's import stays light."""

from __future__ import annotations

from typing import Any

__all__ = ["bundle_io", "verify_in_child", "verify_package", "write_bundled_io"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pytest_aoti.verify import bundled

        return getattr(bundled, name)
    raise AttributeError(f"module 'pytest_aoti.verify' has no attribute {name!r}")
