"""``@pytest.mark.aoti_deploy`` and ``--aoti-deploy-check``: the deployment checks (:mod:`.checks`) run on each
package a test's ``aoti_compile``/``aoti_check`` builds, through pytest-aoti's ``pytest_aoti_package_built`` hook.
The marker's arguments are checked at collection: a bad one, or a marker that would check nothing, is a collection
error naming the test, the marker and the argument. Importing this module does not import torch."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.settings import add_option, option_value

if TYPE_CHECKING:
    from pytest_aoti.hookspecs import BuildRequest, BuiltPackage

DEPLOY_CHECK_DESC = (
    "check that every package the aoti fixtures build runs stand-alone: in a fresh interpreter, from an empty "
    "directory, with an empty Inductor cache and without the tests' directories on sys.path"
)
MARKER = (
    "aoti_deploy(*, standalone=False, threads=0, calls=4, num_runners=4, weights=False, cuda_graph=False, "
    "probe_dims=False, device_matrix=False): check each package the test's aoti_compile/aoti_check builds as it will "
    "be deployed: stand-alone in a fresh interpreter (standalone=True; every package with --aoti-deploy-check), from "
    "`threads` threads x `calls` calls with num_runners runners, a weight swap through load_constants and back "
    "(weights=True), a CUDA graph capture and replay (cuda_graph=True), each dynamic dim at its min, max, 1 and 2 "
    "against eager (probe_dims=True), on every visible GPU, loaded with each device_index (device_matrix=True)"
)
# The fixtures whose packages are checked: one test's own builds (aoti_compile_shared's serve a whole module).
CHECKED_FIXTURES = ("aoti_compile", "aoti_check")


def _aoti_deploy_signature(
    *,
    standalone: bool = False,
    threads: int = 0,
    calls: int = 4,
    num_runners: int = 4,
    weights: bool = False,
    cuda_graph: bool = False,
    probe_dims: bool = False,
    device_matrix: bool = False,
) -> None: ...


@dataclass(frozen=True)
class DeployRequest:
    """Which deployment checks run on each package a test builds (``@pytest.mark.aoti_deploy``)."""

    standalone: bool = False
    threads: int = 0  # 0: no concurrency check
    calls: int = 4
    num_runners: int = 4
    weights: bool = False  # swap the weights through load_constants and back
    cuda_graph: bool = False  # capture into a CUDA graph (run_single_threaded=True) and replay
    probe_dims: bool = False  # each dynamic dim at min, max, 1 and 2 against eager
    device_matrix: bool = False  # loaded and run on every visible GPU, in a fresh interpreter each

    @property
    def any(self) -> bool:
        checks = (self.standalone, self.threads, self.weights, self.cuda_graph, self.probe_dims, self.device_matrix)
        return any(checks)


deploy_check_key = pytest.StashKey[bool]()
deploy_request_key = pytest.StashKey[DeployRequest]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "deploy-check", DEPLOY_CHECK_DESC, flag=True, ini_type="bool", default=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.stash[deploy_check_key] = _deploy_check(config)


def _deploy_check(config: pytest.Config) -> bool:
    """``--aoti-deploy-check``, else its ini twin (a value pytest cannot read as a bool is a usage error)."""
    return bool(option_value(config, "aoti_deploy_check")[0])


_marker_problem_key = pytest.StashKey[str]()


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Generator[None, Any, Any]:
    """Check each test's ``aoti_deploy`` marker as it is collected: a bad one fails that test alone, at its setup,
    with one line naming the test (as a bad ``aoti_ima`` argument does), and the rest of the session runs. The same
    with or without xdist (a usage error raised in a worker would be an INTERNALERROR)."""
    result = yield
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, pytest.Item):
            try:
                item.stash[deploy_request_key] = deploy_request(item, item.config.stash[deploy_check_key])
            except pytest.UsageError as error:
                item.stash[_marker_problem_key] = str(error)
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    problem = item.stash.get(_marker_problem_key, None)
    if problem is not None:
        pytest.fail(problem, pytrace=False)  # before any fixture: nothing is built for checks that cannot run


def _flag(value: Any, where: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise pytest.UsageError(f"{where}: {name}= expected True or False, got {value!r}")
    return value


def _count(value: Any, where: str, name: str, *, least: int) -> int:
    # bool is an int to Python, and threads=True is surely not "one thread".
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise pytest.UsageError(f"{where}: {name}= expected a whole number >= {least}, got {value!r}")
    return value


def deploy_request(item: pytest.Item, deploy_check: bool) -> DeployRequest:
    """The checks ``item``'s packages get: its marker's, and stand-alone for all with ``--aoti-deploy-check``. A
    :class:`pytest.UsageError` names the test, the marker and what is wrong with it: a bad argument, a marker that
    names no check, ``calls``/``num_runners`` without ``threads``, a test that builds no package to check."""
    marker = item.get_closest_marker("aoti_deploy")
    if marker is None:
        return DeployRequest(standalone=deploy_check)
    where = f"{item.nodeid}: @pytest.mark.aoti_deploy"
    request = _marker_request(marker, where)
    _refuse_what_checks_nothing(item, marker, request, where)
    return dataclasses.replace(request, standalone=True) if deploy_check else request


def _marker_request(marker: pytest.Mark, where: str) -> DeployRequest:
    """The marker's arguments, bound through its signature (Python names a wrong keyword) and each checked."""
    try:
        args = inspect.signature(_aoti_deploy_signature).bind(*marker.args, **marker.kwargs)
    except TypeError as error:
        raise pytest.UsageError(f"{where}: {error}") from None
    args.apply_defaults()
    given = args.arguments
    return DeployRequest(
        standalone=_flag(given["standalone"], where, "standalone"),
        threads=_count(given["threads"], where, "threads", least=0),
        calls=_count(given["calls"], where, "calls", least=1),
        num_runners=_count(given["num_runners"], where, "num_runners", least=1),
        weights=_flag(given["weights"], where, "weights"),
        cuda_graph=_flag(given["cuda_graph"], where, "cuda_graph"),
        probe_dims=_flag(given["probe_dims"], where, "probe_dims"),
        device_matrix=_flag(given["device_matrix"], where, "device_matrix"),
    )


def _refuse_what_checks_nothing(item: pytest.Item, marker: pytest.Mark, request: DeployRequest, where: str) -> None:
    if not request.any:
        raise pytest.UsageError(
            f"{where}: names no check, so it checks nothing; ask for one or more of standalone=True, threads=N, "
            "weights=True, cuda_graph=True, probe_dims=True, device_matrix=True"
        )
    for name in ("calls", "num_runners"):
        if name in marker.kwargs and not request.threads:
            raise pytest.UsageError(
                f"{where}: {name}={marker.kwargs[name]!r} applies to the threads check, which is off (threads=0): "
                "add threads=N to call the package from N threads at once"
            )
    # A marker on a module or class applies to the tests there that build packages; on the test itself, it must.
    own = any(mark.name == "aoti_deploy" for mark in getattr(item, "own_markers", ()))
    if own and not set(CHECKED_FIXTURES) & set(getattr(item, "fixturenames", ())):
        raise pytest.UsageError(
            f"{where}: the checks run on the packages that aoti_compile or aoti_check build in this test, and the "
            "test uses neither, so nothing would be checked"
        )


def _fresh_dir(parent: Path, prefix: str) -> Path:
    """``parent/prefix-N`` for the next N: one per package a test checks."""
    return parent / f"{prefix}-{len(list(parent.glob(f'{prefix}-*')))}"


def pytest_aoti_package_built(config: pytest.Config, built: BuiltPackage) -> None:
    """Run the test's deployment checks on the package it just built; a failed check fails the test."""
    __tracebackhide__ = True
    item = built.request.item
    if item is None:  # aoti_compile_shared: no one test's marker applies
        return
    checks = item.stash.get(deploy_request_key, None)
    if checks is None:  # an item not collected as a Python function (no marker to read)
        checks = deploy_request(item, config.stash[deploy_check_key])
    if checks.any:
        run_checks(checks, built.request, built.compiled)


def run_checks(checks: DeployRequest, request: BuildRequest, compiled: Any) -> None:
    """Each check the request names, on ``compiled`` built from ``request``'s model and inputs."""
    __tracebackhide__ = True
    from pytest_aoti.deploy import checks as deploy

    module, args, kwargs = request.model, tuple(request.args), dict(request.kwargs)
    if checks.probe_dims:
        deploy.probe_dims(compiled, module, args, kwargs)
    if checks.weights:
        deploy.check_weights(compiled, module, args, kwargs)
    if checks.cuda_graph:
        deploy.check_cuda_graph(compiled, module, args, kwargs)
    if checks.threads:
        deploy.check_threads(
            compiled, args, kwargs, threads=checks.threads, calls=checks.calls, num_runners=checks.num_runners
        )
    if checks.device_matrix:
        deploy.check_device_matrix(compiled, args, kwargs, _fresh_dir(request.package_dir, "device-matrix"))
    if checks.standalone:
        deploy.check_standalone(compiled, args, kwargs, _fresh_dir(request.package_dir, "standalone"))
