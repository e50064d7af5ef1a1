"""The torch releases pytest-aoti claims and has tested, and what to say about the one installed, read from its
package metadata without importing torch (the plugin loads before any test, and importing torch costs seconds).

``.ci/run`` runs the suite on each of ``TESTED``; docs/torch-private-apis.md names the private APIs checked on them.
"""

from __future__ import annotations

import importlib.metadata

from packaging.version import InvalidVersion, Version

from pytest_aoti.core.errors import AOTIError

# pyproject.toml's ``torch>=2.11``: the private loader and package APIs moved between earlier releases.
OLDEST = (2, 11)
# The releases .ci/run tests: the oldest we claim, the pinned one, the newest.
TESTED = ("2.11.0", "2.13.0", "2.14.1")
NEWEST_TESTED = TESTED[-1]


def installed_torch_version() -> str | None:
    """The installed torch's version as its package metadata says (``2.13.0+cpu``), or None where torch has none
    (a source tree on ``PYTHONPATH``): nothing to check then."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def release_key(version: str) -> tuple[int, tuple[int, ...]] | None:
    """What orders releases, as PEP 440 does: the epoch, then the release numbers (``1!2.13.0`` -> ``(1, (2, 13,
    0))``, newer than any ``2.x``; ``2.15.0.dev20260101+cpu`` -> ``(0, (2, 15, 0))``). Pre-, post- and dev-release
    parts and the local label are left out: a source build of a release counts as that release. None for a string
    that is no PEP 440 version. Parsed by ``packaging`` (a pytest dependency), not by hand."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    return parsed.epoch, parsed.release


def too_old_problem(version: str | None) -> str | None:
    """The one line that stops a session on a torch older than pytest-aoti needs, or None. A pre-release of the
    oldest release (``2.11.0a0+git...``, a source build) counts as that release."""
    key = release_key(version) if version is not None else None
    if key is None or (key[0], key[1][:2]) >= (0, OLDEST):
        return None
    needed = ".".join(map(str, OLDEST))
    return f"pytest-aoti needs torch>={needed}; torch {version} is installed (pip install 'torch>={needed}')"


def untested_note(version: str | None) -> str | None:
    """``untested torch X`` for a torch newer than the newest release tested (or one whose version cannot be read),
    for the header; None for a tested or older one."""
    if version is None:
        return None
    key = release_key(version)
    newest = release_key(NEWEST_TESTED)
    if key is not None and newest is not None and key <= newest:
        return None
    return f"untested torch {version} (newest tested: {NEWEST_TESTED})"


class MissingTorchAPI(AOTIError, RuntimeError):
    """A private torch symbol pytest-aoti reaches for is missing from the installed torch: a release moved or
    renamed it. A RuntimeError, so that callers with a fallback (the package loader's) take it."""

    def __init__(self, symbol: str, torch_version: str, detail: str = "") -> None:
        self.symbol = symbol
        tested = ", ".join(TESTED)
        super().__init__(
            f"{symbol} is missing in torch {torch_version}{f' ({detail})' if detail else ''}; pytest-aoti was "
            f"tested on torch {tested} (docs/torch-private-apis.md)"
        )
