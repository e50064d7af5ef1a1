"""The errors of what the features share: a package's bundled I/O (:mod:`pytest_aoti.shared.bundled_io`), which
``--aoti-verify``, ``python -m pytest_aoti.verify`` and the deployment checks read."""

from __future__ import annotations

from pytest_aoti.core.errors import AOTIError


class AOTIVerifyError(AOTIError, AssertionError):
    """A package with bundled I/O does not verify on this machine, or is not such a package; names the file."""
