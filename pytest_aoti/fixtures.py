"""The fixtures users call (``aoti_device``, ``aoti_compile``, ``aoti_check``, ``aoti_compile_shared``): thin glue
over ``core.compiler.compile_model`` / ``check_model``, with the session's
package cache, packages and their extraction dirs under pytest's tmp dirs, and loaded packages released at the end
of each test. Registered in every role (parent, xdist worker, child)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Generator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.cache.session import session_cache
from pytest_aoti.core.errors import AOTICompileError, AOTIExportError, AOTITypeError
from pytest_aoti.core.observers import NO_OBSERVERS, CallObservers
from pytest_aoti.roles import uses_aoti, worker_id
from pytest_aoti.settings import item_settings, session_temp_key, settings_key

if TYPE_CHECKING:
    import torch

    from pytest_aoti.core.compiler import CompiledModel

compiled_key = pytest.StashKey[list["CompiledModel"]]()


def resolve_device(name: str, worker: str | None = None) -> torch.device:
    """``auto``/``cpu``/``cuda``/``cuda:N`` to a torch.device, an xdist worker's ``auto``/``cuda`` to its own GPU
    (:mod:`pytest_aoti.core.devices`); skips the test when the CUDA device is absent."""
    import torch

    from pytest_aoti.core.devices import choose_device, visible_cuda_devices, xdist_worker_index

    count = visible_cuda_devices()
    device = torch.device(choose_device(name, xdist_worker_index(worker), count))
    if device.type == "cuda":
        if not count:
            pytest.skip(f"aoti_device {name!r}: CUDA is not available on this machine")
        if device.index is not None and device.index >= count:
            pytest.skip(f"aoti_device {name!r}: only {count} CUDA device(s) here")
    return device


# The device this process's tests run on, as the JUnit property shows it: named when the fixture resolves it, while
# the CUDA context is still healthy (after an illegal memory access every CUDA call fails, the name's too).
device_property_key = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def aoti_device(request: pytest.FixtureRequest) -> torch.device:
    """The device to compile for, from ``--aoti-device`` / ini ``aoti_device``; under xdist, ``auto`` gives each
    worker its own GPU. It is also made the current CUDA device, so a test's plain ``"cuda"`` tensors land there."""
    pytestconfig = request.config
    if pytestconfig.pluginmanager.has_plugin("tmpdir"):  # every aoti fixture starts here: see session_temp_key
        pytestconfig.stash[session_temp_key] = request.getfixturevalue("tmp_path_factory")

    device = resolve_device(pytestconfig.stash[settings_key].device, worker_id(pytestconfig))
    shown = str(device)
    if device.type == "cuda" and device.index is not None:
        import torch

        torch.cuda.set_device(device)
        shown = f"{device} ({torch.cuda.get_device_name(device)})"
    pytestconfig.stash[device_property_key] = shown
    return device


def _fail_on_build_error(build: Callable[..., CompiledModel], fulltrace: bool) -> Callable[..., CompiledModel]:
    """Export/compile failures fail the test with the one-line summary first and the full traceback after. Any
    other failure keeps its traceback without pluggy's hook calls (unless ``--fulltrace``): with this wrapper and
    the fixtures' own frames hidden (``__tracebackhide__``), it ends at the test's line, or goes on into the
    user's model or conftest where the error was raised there."""

    def wrapper(*args: Any, **kwargs: Any) -> CompiledModel:
        __tracebackhide__ = True
        try:
            return build(*args, **kwargs)
        except (AOTIExportError, AOTICompileError) as error:
            from pytest_aoti.core.compiler import full_traceback

            message = f"{error}\n\n{full_traceback(error.__cause__ or error)}"
            # From None: pytest prints no chain before the summary line. The error stays the failure's context, its
            # kind read from there (errors.failure_kind): the debug triage does not rerun a model export rejected or
            # a compile that raised.
            raise pytest.fail.Exception(message, pytrace=False) from None
        except Exception as error:
            if fulltrace:
                raise
            # The same exception, its chain as it was: only pluggy's frames leave its traceback.
            raise error.with_traceback(_without_hook_calls(error.__traceback__))  # noqa: B904

    return wrapper


def _without_hook_calls(traceback: TracebackType | None) -> TracebackType | None:
    """``traceback`` without pluggy's frames: the calls of pytest-aoti's hooks from its fixtures. pytest hides them
    as its own internals (``filter_traceback``) only where it cannot find the test's frame, which it can here."""
    import pluggy

    pluggy_dir = Path(pluggy.__file__).parent
    kept: list[TracebackType] = []
    while traceback is not None:
        if not Path(traceback.tb_frame.f_code.co_filename).is_relative_to(pluggy_dir):
            kept.append(traceback)
        traceback = traceback.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _where_implemented(config: pytest.Config, name: str) -> str:
    """Where the implementations of one of pytest-aoti's hooks that are not pytest-aoti's own live: the conftests
    and plugins that could have returned a bad result."""
    places = []
    for impl in getattr(config.hook, name).get_hookimpls():
        if getattr(impl.function, "__module__", "").startswith("pytest_aoti."):
            continue
        code = getattr(impl.function, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(impl.function)
        places.append(
            where
            if impl.plugin_name == getattr(code, "co_filename", None)
            else f"{where} (plugin {impl.plugin_name!r})"
        )
    if not places:
        return ""
    return f"; implemented at {places[0]}" if len(places) == 1 else f"; implemented at one of {', '.join(places)}"


def _shown(value: Any) -> str:
    """A hook's result as a message shows it: its repr (cut short) and its type."""
    text = repr(value)
    return f"{text if len(text) <= 200 else text[:197] + '...'} ({type(value).__name__})"


def _feature_keywords(config: pytest.Config) -> set[str]:
    """The builder keywords the features take (``pytest_aoti_build_options``); a result that is no list of names is
    a TypeError naming where the hook is implemented."""
    __tracebackhide__ = True
    keywords: set[str] = set()
    for names in config.hook.pytest_aoti_build_options(config=config):
        if isinstance(names, str | bytes) or not isinstance(names, list | tuple | set | frozenset):
            raise AOTITypeError(
                f"pytest_aoti_build_options returned {_shown(names)}, not a list of keyword names"
                + _where_implemented(config, "pytest_aoti_build_options")
            )
        bad = [name for name in names if not isinstance(name, str)]
        if bad:
            raise AOTITypeError(
                f"pytest_aoti_build_options returned {_shown(names)}: {_shown(bad[0])} is not a keyword name"
                + _where_implemented(config, "pytest_aoti_build_options")
            )
        keywords.update(names)
    return keywords


def _built(config: pytest.Config, result: Any) -> CompiledModel:
    """The result of ``pytest_aoti_build``, once it is a compiled model."""
    __tracebackhide__ = True
    from pytest_aoti.core.compiler import CompiledModel

    if not isinstance(result, CompiledModel):
        raise AOTITypeError(
            f"pytest_aoti_build returned {_shown(result)}, not the CompiledModel that build() returns"
            + _where_implemented(config, "pytest_aoti_build")
            + " (an implementation returns build()'s result, or None to leave the build to the next one)"
        )
    return result


def _seed() -> None:
    """Seed torch at setup so a model built with random weights is the same every run and hits the cache."""
    import torch

    torch.manual_seed(0)


def _moved(value: Any, device: torch.device) -> Any:
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda leaf: leaf.to(device) if isinstance(leaf, torch.Tensor) else leaf, value)


def _accepted_keywords(core: Callable[..., CompiledModel], feature_keywords: set[str]) -> set[str]:
    """The keywords a test may pass a compile fixture: the core's own (not the ones the fixture fills in) and the
    features' (``pytest_aoti_build_options``)."""
    internal = {"model", "args", "kwargs", "package_dir", "cache", "observers", "on_matched"}
    parameters = inspect.signature(core).parameters
    own = {name for name, parameter in parameters.items() if parameter.kind is not parameter.VAR_KEYWORD}
    if len(own) < len(parameters):  # check_model hands the rest to compile_model
        from pytest_aoti.core.compiler import compile_model

        own |= set(inspect.signature(compile_model).parameters)
    return (own | feature_keywords) - internal


def _refuse_unknown_keywords(fixture_name: str, options: dict[str, Any], accepted: set[str]) -> None:
    __tracebackhide__ = True
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise AOTITypeError(
            f"{fixture_name}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(sorted(accepted))} (options such as probe_dims= or threads= belong to markers: "
            "pytest --markers lists them)"
        )


def _builder(
    core: Callable[..., CompiledModel],
    config: pytest.Config,
    device: torch.device,
    package_dir: Path,
    record: list[CompiledModel],
    item: pytest.Item | None,
    nodeid: str,
    *,
    allow_nonfinite: bool = False,
    restride_inputs: bool = False,
    allow_out_of_range: bool = False,
    compares_with_eager: bool = False,
) -> Callable[..., CompiledModel]:
    """What the compile fixtures hand to tests: ``core`` (compile_model or check_model) on ``device``, with the
    session's cache, build failures as test failures, and each build shown to the features through the hooks of
    :mod:`pytest_aoti.hookspecs` (the keywords they take go to them, not to the core)."""
    from pytest_aoti.core.compiler import as_module
    from pytest_aoti.hookspecs import BuildRequest, BuiltPackage, MatchedOutputs

    # Opened when a test asks for a builder, not at its first build: an unusable cache dir is reported right away.
    cache = session_cache(config)
    observers = config.stash.get(call_observers_key, NO_OBSERVERS)

    def build(model: Any, args: Any, kwargs: dict[str, Any] | None = None, **options: Any) -> CompiledModel:
        __tracebackhide__ = True
        # Asked at each build, so that a hook's bad result fails the test that builds, with the test's own line.
        feature_keywords = _feature_keywords(config)
        accepted = _accepted_keywords(core, feature_keywords)
        _refuse_unknown_keywords("aoti_check" if compares_with_eager else "aoti_compile", options, accepted)
        options = _with_defaults(options, device, allow_nonfinite, restride_inputs, allow_out_of_range)
        feature_options = {name: options.pop(name) for name in list(options) if name in feature_keywords}
        module = as_module(model).to(device)
        request = BuildRequest(
            item=item,
            nodeid=nodeid,
            model=module,
            args=_moved(args, device),
            kwargs=_moved(kwargs or {}, device),
            package_dir=package_dir,
            feature_options=feature_options,
        )
        if compares_with_eager:
            options["on_matched"] = _matched_outputs_hook(config, request, MatchedOutputs)

        def build_and_load() -> CompiledModel:
            __tracebackhide__ = True
            inputs = (module, _moved(args, device), _moved(kwargs, device))
            # The cache names the test in the entries it writes and in its misses.
            with cache.building_for(nodeid) if cache is not None else contextlib.nullcontext():
                return core(*inputs, package_dir=package_dir, cache=cache, observers=observers, **options)

        compiled = _built(config, config.hook.pytest_aoti_build(config=config, request=request, build=build_and_load))
        record.append(compiled)
        config.hook.pytest_aoti_package_built(config=config, built=BuiltPackage(request=request, compiled=compiled))
        return compiled

    return _fail_on_build_error(build, fulltrace=bool(config.getoption("fulltrace", False)))


def _with_defaults(
    options: dict[str, Any],
    device: torch.device,
    allow_nonfinite: bool,
    restride_inputs: bool,
    allow_out_of_range: bool,
) -> dict[str, Any]:
    """A build's keywords with the marker's flags as defaults, and ``more_inputs`` moved to ``device``."""
    if isinstance(options.get("more_inputs"), list | tuple):  # anything else: check_model names what is wrong
        options["more_inputs"] = [_moved(extra, device) for extra in options["more_inputs"]]
    options.setdefault("allow_nonfinite", allow_nonfinite)
    options.setdefault("restride_inputs", restride_inputs)
    options.setdefault("allow_out_of_range", allow_out_of_range)
    return options


def _matched_outputs_hook(config: pytest.Config, request: Any, record: Any) -> Callable[[str, Any, Any], None]:
    """``check_model``'s ``on_matched``: each input set whose package outputs matched eager, to the features."""

    def matched(label: str, outputs: Any, compiled: CompiledModel) -> None:
        __tracebackhide__ = True
        config.hook.pytest_aoti_matched_outputs(
            config=config, matched=record(request=request, compiled=compiled, label=label, outputs=outputs)
        )

    return matched


@pytest.hookimpl(trylast=True)
def pytest_aoti_build(config: pytest.Config, request: Any, build: Callable[[], CompiledModel]) -> CompiledModel:
    """The build itself; features that must surround it wrap this hook."""
    __tracebackhide__ = True
    return build()


# What a debug child's session plugs into every call of the core (the repro bundle, numerics' captures):
# ``debug.child_session`` sets it; the user's session has none.
call_observers_key = pytest.StashKey[CallObservers]()


def _per_test_builder(
    core: Callable[..., CompiledModel],
    request: pytest.FixtureRequest,
    device: torch.device,
    tmp_path: Path,
    *,
    compares_with_eager: bool = False,
) -> Generator[Callable[..., CompiledModel], None, None]:
    """A builder for one test: packages in its tmp dir, its ``aoti`` marker's settings; the packages it loaded are
    released when the test ends (their extraction dirs go with them)."""
    _seed()
    resolved = item_settings(request.node)
    record = request.node.stash.setdefault(compiled_key, [])
    yield _builder(
        core,
        request.config,
        device,
        tmp_path / "aoti-packages",
        record,
        request.node,
        request.node.nodeid,
        allow_nonfinite=resolved.allow_nonfinite,
        restride_inputs=resolved.restride_inputs,
        allow_out_of_range=resolved.allow_out_of_range,
        compares_with_eager=compares_with_eager,
    )
    for compiled in record:
        compiled.release()


@pytest.fixture
def aoti_compile(
    request: pytest.FixtureRequest, aoti_device: torch.device, tmp_path: Path
) -> Generator[Callable[..., CompiledModel], None, None]:
    """``aoti_compile(model, args, kwargs=None, *, dynamic_shapes=None, inductor_configs=None, strict=False)``:
    move the model and inputs to ``aoti_device``, export, compile (or take from the cache), load; the result checks
    its invariants on every call."""
    from pytest_aoti.core.compiler import compile_model

    yield from _per_test_builder(compile_model, request, aoti_device, tmp_path)


@pytest.fixture
def aoti_check(
    request: pytest.FixtureRequest, aoti_device: torch.device, tmp_path: Path
) -> Generator[Callable[..., CompiledModel], None, None]:
    """``aoti_check(model, args, kwargs=None, *, more_inputs=(), rtol=None, atol=None, snapshot=False, ...)``:
    compile as ``aoti_compile`` does, then compare package and eager on the example inputs and every extra input
    set; with ``snapshot=True`` also hold the package's outputs against golden outputs recorded earlier
    (``snapshot_rtol``/``snapshot_atol``: that comparison's tolerances, default by dtype)."""
    from pytest_aoti.core.compiler import check_model

    yield from _per_test_builder(check_model, request, aoti_device, tmp_path, compares_with_eager=True)


@pytest.fixture(scope="module")
def aoti_compile_shared(
    request: pytest.FixtureRequest, aoti_device: torch.device, tmp_path_factory: pytest.TempPathFactory
) -> Generator[Callable[..., CompiledModel], None, None]:
    """``aoti_compile`` for module-scoped fixtures: compile once, use in many tests or Hypothesis examples
    (function-scoped fixtures and ``@given`` do not mix). Released when the module's tests are done."""
    from pytest_aoti.core.compiler import compile_model

    _seed()
    record: list[CompiledModel] = []
    package_dir = tmp_path_factory.mktemp("aoti-packages")
    yield _builder(compile_model, request.config, aoti_device, package_dir, record, None, request.node.nodeid)
    for compiled in record:
        compiled.release()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    compiled = item.stash.get(compiled_key, [])
    device = item.config.stash.get(device_property_key, None)
    # The setup report's device, for a process that logs a test that crashed: debug.crash_route.stamp_test_report.
    if device is not None and uses_aoti(item) and report.when == "teardown":
        report.user_properties = [*report.user_properties, ("aoti_device", device)]
    if report.when == "teardown" and compiled:
        report.user_properties = [
            *report.user_properties,
            ("aoti_packages", ", ".join(str(c.package_path) for c in compiled)),
            ("aoti_from_cache", ", ".join(str(c.from_cache) for c in compiled)),
        ]
        accepted = [note for c in compiled for note in c.accepted_by_float64]
        if accepted:
            report.user_properties = [*report.user_properties, ("aoti_float64_judge", "\n".join(accepted))]
        trusted = [note for c in compiled for note in c.eager_over_metadata]
        if trusted:
            report.user_properties = [*report.user_properties, ("aoti_dtype_from_eager", "\n".join(trusted))]
        missed = [c.cache_miss for c in compiled if c.cache_miss]
        if missed:
            report.user_properties = [*report.user_properties, ("aoti_cache_miss", "\n".join(missed))]
    return report
