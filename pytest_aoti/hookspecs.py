"""Hooks pytest-aoti calls, for its own feature plugins, conftests and other plugins (as pytest-xdist publishes its
own in ``newhooks.py``). The features (``snapshots/``, ``verify/``, ``benchmark/``, ``deploy/``) hang on these
and on nothing else of the core's fixtures::

    def pytest_aoti_package_built(config, built):
        print(f"{built.nodeid}: {built.compiled.package_path}")

The records handed out are frozen; their fields are documented here and are the public API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

    from pytest_aoti.core.compiler import CompiledModel
    from pytest_aoti.debug.verdict import PublicVerdict


@dataclass(frozen=True)
class BuildRequest:
    """What a builder fixture (``aoti_compile``, ``aoti_check``, ``aoti_compile_shared``) was asked to build.

    ``item``: the test (None for ``aoti_compile_shared``, which serves a whole module). ``nodeid``: its node id, or
    the module's. ``model``/``args``/``kwargs``: already on the test's device. ``package_dir``: where this test's
    packages go. ``feature_options``: the keyword arguments the test passed that belong to a feature (those named
    by :func:`pytest_aoti_build_options`), not to the core."""

    item: pytest.Item | None
    nodeid: str
    model: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    package_dir: Path
    feature_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuiltPackage:
    """A package the builder fixtures built (or took from the cache) and loaded, before the test gets it."""

    request: BuildRequest
    compiled: CompiledModel


@dataclass(frozen=True)
class MatchedOutputs:
    """One input set of ``aoti_check`` whose package outputs matched eager: ``label`` is ``example`` or
    ``more_inputs[N]``, ``outputs`` the package's outputs on it."""

    request: BuildRequest
    compiled: CompiledModel
    label: str
    outputs: Any


@pytest.hookspec
def pytest_aoti_build_options(config: pytest.Config) -> list[str] | None:
    """The keyword arguments of the builder fixtures that a feature takes (e.g. ``snapshot``, ``bundle_io``). The
    fixtures take them out of the core's arguments and hand them over in ``BuildRequest.feature_options``; a keyword
    that neither the core nor any feature takes is the core's ``TypeError``. A result that is neither None nor a list
    of names fails the test that builds, naming where the hook is implemented."""


@pytest.hookspec(firstresult=True)
def pytest_aoti_build(config: pytest.Config, request: BuildRequest, build: Callable[[], CompiledModel]) -> Any:
    """Build and load one package: the fixtures' own implementation returns ``build()``. A feature that must
    surround every build wraps this hook (``@pytest.hookimpl(wrapper=True)``), as the benchmark lock does. A result
    that is not a ``CompiledModel`` fails the test that builds, naming where the hook is implemented."""


@pytest.hookspec
def pytest_aoti_package_built(config: pytest.Config, built: BuiltPackage) -> None:
    """A package was built and loaded for a test, before the test gets it. Deployment checks and bundled I/O hang
    here; an exception fails the test."""


@pytest.hookspec
def pytest_aoti_matched_outputs(config: pytest.Config, matched: MatchedOutputs) -> None:
    """``aoti_check`` compared one input set with eager and the package's outputs matched. Golden outputs hang
    here; an exception (e.g. a golden mismatch) fails the test."""


@pytest.hookspec
def pytest_aoti_verdict(config: pytest.Config, nodeid: str, verdict: PublicVerdict) -> None:
    """A failed test's debug verdict, once per failure, before it goes on the test's report (a frozen
    :class:`pytest_aoti.debug.verdict.PublicVerdict`). Called in the process that made the verdict: the session,
    the xdist worker that ran the test, or the xdist controller when the test crashed its worker. An exception
    raised here is reported with its traceback and the run goes on."""
