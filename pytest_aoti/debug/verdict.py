"""Where :class:`pytest_aoti.hookspecs.PublicVerdict` lived before it moved in with the other records the hooks hand
out. Deprecated: kept importable from here for the conftests that annotate ``pytest_aoti_verdict`` with it, with a
DeprecationWarning at their line. No module of pytest-aoti imports it (tests/unit/test_public_modules.py)."""

from __future__ import annotations

import warnings
from typing import Any

MOVED = (
    "pytest_aoti.debug.verdict.PublicVerdict is deprecated: import it from pytest_aoti.hookspecs "
    "(from pytest_aoti.hookspecs import PublicVerdict)"
)


def __getattr__(name: str) -> Any:
    """``PublicVerdict``, with the warning at the line that asked for it (PEP 562)."""
    if name == "PublicVerdict":
        from pytest_aoti.hookspecs import PublicVerdict

        warnings.warn(MOVED, DeprecationWarning, stacklevel=2)
        return PublicVerdict
    raise AttributeError(f"module 'pytest_aoti.debug.verdict' has no attribute {name!r}")
