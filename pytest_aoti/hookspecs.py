"""Hooks pytest-aoti calls, for its own feature plugins, conftests and other plugins (as pytest-xdist publishes its
own in ``newhooks.py``). The features (``snapshots/``, ``verify/``, ``benchmark/``, ``deploy/``) hang on these
and on nothing else of the core's fixtures::

    def pytest_aoti_package_built(config, built):
        print(f"{built.nodeid}: {built.compiled.package_path}")

The records handed out are frozen; their fields are documented here and are the public API.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

    from pytest_aoti.core.compiler import CompiledModel


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


class ReportSection(enum.Enum):
    """Where a summary of the session (the CI summary, the ``--aoti-html`` page) shows a property; the value is the
    page's heading."""

    VERDICTS = "Verdicts"
    GOLDENS = "Goldens"
    BENCHMARKS = "Benchmarks"


class PropertyRole(enum.Enum):
    """What a property's value is, so that a summary knows how to show it."""

    VALUE = "value"  # a short value: a table cell
    HEADLINE = "headline"  # the one line that says what was found (the debug verdict): shown first
    REPRODUCE = "reproduce"  # a command that reproduces the finding: shown as code
    RECORD = "record"  # machine-readable JSON that the part shows itself: never shown as text


@dataclass(frozen=True)
class ReportProperty:
    """One JUnit property (a name in a test report's ``user_properties``) that a part writes, and how a summary of
    the session shows it. ``column``: its column's title in the CI summary's table of its section (None: not a
    column). ``per_call``: a test's further calls write it again as ``<name> (<call>)`` (named benchmarks)."""

    name: str
    section: ReportSection
    role: PropertyRole = PropertyRole.VALUE
    column: str | None = None
    per_call: bool = False

    def is_named(self, name: str) -> bool:
        """Whether ``name``, as a report carries it, is this property."""
        return name == self.name or (self.per_call and name.startswith(f"{self.name} ("))


@dataclass(frozen=True)
class ReportProperties:
    """The properties the parts publish (:func:`pytest_aoti_report_properties`), for the summaries that show them."""

    properties: tuple[ReportProperty, ...]

    @classmethod
    def of(cls, *groups: Iterable[ReportProperty]) -> ReportProperties:
        return cls(tuple(chain.from_iterable(groups)))

    def find(self, name: str) -> ReportProperty | None:
        return next((known for known in self.properties if known.is_named(name)), None)

    def section_of(self, name: str) -> ReportSection:
        """A property's section; one that no part publishes (the core's, a conftest's) is shown with the verdicts."""
        known = self.find(name)
        return known.section if known is not None else ReportSection.VERDICTS

    def role_of(self, name: str) -> PropertyRole:
        known = self.find(name)
        return known.role if known is not None else PropertyRole.VALUE

    def columns(self, section: ReportSection) -> tuple[ReportProperty, ...]:
        """The section's columns in the CI summary, in the order their part publishes them."""
        return tuple(known for known in self.properties if known.section is section and known.column is not None)


def report_properties(config: pytest.Config, *below: Iterable[ReportProperty]) -> ReportProperties:
    """The properties the features publish through the hook, after ``below``: those of the layers below the
    features (the debug rerun's), which a feature imports."""
    published = config.hook.pytest_aoti_report_properties(config=config)
    for group in published:
        if not isinstance(group, list | tuple) or not all(isinstance(known, ReportProperty) for known in group):
            expected = "expected a list of pytest_aoti.hookspecs.ReportProperty"
            raise pytest.UsageError(f"pytest_aoti_report_properties returned {group!r}: {expected}")
    return ReportProperties.of(*below, *published)


@pytest.hookspec
def pytest_aoti_report_properties(config: pytest.Config) -> list[ReportProperty] | None:
    """The JUnit properties a part writes on test reports, as :class:`ReportProperty` records: the features' names
    for the summaries of other features (the CI summary, the ``--aoti-html`` page), which may not import them."""


@dataclass(frozen=True)
class PublicVerdict:
    """One failed test's debug verdict, rendered once (:func:`pytest_aoti.debug.reporting.render`): each fact once.
    The report section, the JUnit properties and the summaries show these same strings. A conftest that files each
    verdict::

        def pytest_aoti_verdict(config, nodeid, verdict):
            if verdict.reproduced and verdict.suspect_kernel:
                tracker.file(nodeid, verdict.headline, verdict.reproduce)

    - ``nodeid``: the test's node id.
    - ``failure_kind``: the test's own kind of failure as pytest-aoti classified it (``mismatch``,
      ``output_nonfinite``, ``compile``, … , ``crash``), or None where none is known.
    - ``headline``: the verdict in one line (JUnit ``aoti_verdict``, the ``aoti`` summary's line).
    - ``details``: the report section ``aoti debug rerun`` below its first line (``verdict: <headline>``): each
      stage, the logs' trimmed tails; :attr:`text` is the whole section.
    - ``rerun_outcome``: how the rerun the verdict describes ended (``crashed with SIGSEGV``, ``failed: …``), or None
      without a rerun (JUnit ``aoti_rerun_outcome`` then says ``not rerun``).
    - ``not_rerun``: why the test was not rerun at all, or None when it was.
    - ``reproduced``: whether any rerun failed as the test did; ``reproduction``: ``consistent (2 of 2 reruns)``,
      ``flaky (1 of 3 reruns)``, ``did not reproduce (0 of 3 reruns)``, or None without a rerun; ``flaky``: some
      reruns failed and some passed.
    - ``suspect_kernel``: the kernel that never finished; for a NaN/Inf, the kernel that wrote the first
      non-finite buffer; else the last one that completed (None for a crash while no kernel ran);
      ``first_nonfinite_kernel``: the kernel that wrote the first buffer holding NaN/Inf (``model input`` when an
      input held it), and ``first_nonfinite_buffer`` that buffer (or input).
    - ``numerics``: stage numerics' answer in one line (the first divergent kernel, or why none diverged), or None
      where it did not run; ``first_divergent_kernel``: that kernel, or None (JUnit ``aoti_first_divergent_kernel``
      says ``none`` where stage numerics compared and no kernel diverged).
    - ``sanitizer``: compute-sanitizer's first error, or None; ``minified``: stage minify's smaller graph
      (``6 -> 2 nodes: <its repro.py>``), or None.
    - ``source_line``: the user's line the verdict points at, the one its headline leads with (``kernel: at
      model.py:42 in forward: …``).
    - ``signal``: the signal that ended the rerun (``SIGSEGV``), or None.
    - ``reproduce``: a shell line that reruns the first rerun by hand, or None without a rerun.
    - ``bundle``: the repro bundle's directory (``python repro.py`` in it), or None.
    """

    nodeid: str
    failure_kind: str | None
    headline: str
    details: str
    rerun_outcome: str | None
    not_rerun: str | None
    reproduced: bool
    reproduction: str | None
    flaky: bool
    suspect_kernel: str | None
    first_nonfinite_kernel: str | None
    first_nonfinite_buffer: str | None
    numerics: str | None
    first_divergent_kernel: str | None
    sanitizer: str | None
    minified: str | None
    source_line: str | None
    signal: str | None
    reproduce: str | None
    bundle: Path | None

    @property
    def text(self) -> str:
        """The report section ``aoti debug rerun``, whole: the headline's line, then :attr:`details`."""
        first = f"verdict: {self.headline}"
        return f"{first}\n{self.details}" if self.details else first


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
    :class:`PublicVerdict`). Called in the process that made the verdict: the session,
    the xdist worker that ran the test, or the xdist controller when the test crashed its worker. An exception
    raised here is reported with its traceback and the run goes on."""
