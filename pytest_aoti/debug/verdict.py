"""Where :class:`pytest_aoti.hookspecs.PublicVerdict` lived before it moved in with the other records the hooks hand
out: kept importable from here for the conftests that annotate ``pytest_aoti_verdict`` with it."""

from __future__ import annotations

from pytest_aoti.hookspecs import PublicVerdict

__all__ = ["PublicVerdict"]
