"""One error family: every exception pytest-aoti raises derives from ``AOTIError`` and keeps the builtin its users
catch; each class declares its failure kind, which triage reads; every documented ``pytest_aoti.X`` imports."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import pytest_aoti
from pytest_aoti import (
    AOTIBenchmarkError,
    AOTICompileError,
    AOTIDeployError,
    AOTIError,
    AOTIExportError,
    AOTIMismatchError,
    AOTISnapshotError,
    AOTISpecializationError,
    AOTITypeError,
    AOTIUsageError,
    AOTIValueError,
    AOTIVerifyError,
)
from pytest_aoti.core.errors import failure_kind
from pytest_aoti.core.protocol import FailureKind
from pytest_aoti.debug.triage import not_rerun_reason

ROOT = Path(__file__).parents[2]
_DOTTED = re.compile(r"\bpytest_aoti(?:\.[A-Za-z_]\w*)+")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RECORD_PAGES = {"benchmarks.md", "gpu-validation.md", "torch-private-apis.md"}


def _documented_names() -> list[tuple[str, str]]:
    """Each ``pytest_aoti.X`` the README and the documentation site name (their captured runs included: they show
    this version's output), and each that the record pages (benchmarks, GPU validation) name outside code blocks
    (the code blocks there are logs of the runs an entry records, made by the version of their day), as
    ``(where, name)``."""
    found: dict[str, str] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        in_block = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _FENCE.match(line):
                in_block = not in_block
                continue
            if in_block and path.name in _RECORD_PAGES:
                continue
            for name in _DOTTED.findall(line):
                found.setdefault(name, f"{path.relative_to(ROOT)}:{number}")
    return sorted((where, name) for name, where in found.items())


def _resolve(name: str) -> object:
    """What a dotted name names: the longest module prefix imported, the rest read as attributes."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            found: object = importlib.import_module(module_name)
        except ModuleNotFoundError as missing:
            if missing.name != module_name:
                raise  # the module exists, and something it imports does not
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(name)


@pytest.mark.parametrize(("where", "name"), _documented_names())
def test_every_documented_name_imports(where: str, name: str) -> None:
    try:
        _resolve(name)
    except (ImportError, AttributeError) as error:
        problem = str(error)
    else:
        return
    pytest.fail(f"{where} names {name}, which does not import: {problem}", pytrace=False)


def test_the_readme_names_are_found() -> None:
    names = {name for _, name in _documented_names()}
    assert {"pytest_aoti.AOTIInvariantError", "pytest_aoti.AOTIMismatchError", "pytest_aoti.verify"} <= names


def _exceptions_defined_in_the_package() -> dict[str, type[BaseException]]:
    """Every public exception (and warning) class a module of pytest_aoti defines, by its qualified name."""
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(pytest_aoti.__path__, "pytest_aoti."):
        if module_info.name.endswith("__main__"):
            continue  # runs a command line when imported
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


# Raised and caught inside pytest-aoti, never seen by a test: not exported.
_INTERNAL = {
    "pytest_aoti.core.protocol.ProtocolError": "a child's event stream this side cannot read; the parent reports it",
    "pytest_aoti.shared.figure_data.FigureDataError": "a picture record the pictures plugin cannot read; it says so",
    "pytest_aoti.benchmark.errors.BaselineError": "aoti_benchmark fails the test with its message",
    "pytest_aoti.verify.server.Terminated": "the verify server's own shutdown signal (a BaseException)",
    "pytest_aoti.core.cache_files.RefusedCacheFile": "a file in a cache dir that is not read; a warning says so",
    "pytest_aoti.forkserver.wire.WireError": "a fork server message this side cannot read; that child starts fresh",
}


def test_every_public_exception_is_exported_from_pytest_aoti_and_is_an_aoti_error() -> None:
    defined = _exceptions_defined_in_the_package()
    assert set(_INTERNAL) <= set(defined), "an internal exception listed here is gone: drop it from _INTERNAL"
    exported = {name: getattr(pytest_aoti, name) for name in pytest_aoti.__all__}
    exported_exceptions = {
        name: value for name, value in exported.items() if inspect.isclass(value) and issubclass(value, BaseException)
    }
    missing = {
        qualified
        for qualified, error in defined.items()
        if qualified not in _INTERNAL and exported_exceptions.get(error.__name__) is not error
    }
    assert not missing, f"public exceptions not exported from pytest_aoti: {sorted(missing)}"
    not_ours = sorted(name for name, error in exported_exceptions.items() if not issubclass(error, AOTIError))
    assert not not_ours, f"exported exceptions that are no AOTIError: {not_ours}"
    assert issubclass(exported["AOTICacheWarning"], Warning) and issubclass(exported["AOTIRemoteCacheWarning"], Warning)


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (AOTIMismatchError, AssertionError),
        (AOTISnapshotError, AssertionError),
        (AOTIDeployError, AssertionError),
        (AOTIVerifyError, AssertionError),
        (AOTIBenchmarkError, AssertionError),
        (AOTITypeError, TypeError),
        (AOTIValueError, ValueError),
    ],
)
def test_each_error_keeps_the_builtin_its_users_catch(error: type[AOTIError], builtin: type[Exception]) -> None:
    assert issubclass(error, AOTIError) and issubclass(error, builtin)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (AOTISnapshotError("golden differs"), "snapshot"),
        (AOTIDeployError("standalone: failed"), "deploy"),
        (AOTIBenchmarkError("slower than the baseline"), "benchmark"),
        (AOTIExportError("data-dependent control flow"), "export"),
        (AOTISpecializationError("dim 0 was made static"), "export"),
        (AOTICompileError("C++ compile error"), "compile"),
        (AOTITypeError("inductor_configs: expected a dict"), "usage"),
        (AOTIValueError("inductor_configs: unknown Inductor config key 'x'"), "usage"),
        (AOTIVerifyError("bundled.pt2: no such file"), "other"),
    ],
)
def test_the_failure_kind_is_read_from_the_class(error: AOTIError, kind: str) -> None:
    assert failure_kind(error) == kind


def test_a_subclass_has_the_kind_of_the_nearest_class_that_declares_one() -> None:
    class GoldenTooOld(AOTISnapshotError):
        pass

    class Custom(AOTIUsageError, KeyError):
        failure_kind = "custom"

    assert failure_kind(GoldenTooOld("x")) == "snapshot"
    assert failure_kind(Custom("x")) == "custom"


def _raised(raise_it: object) -> BaseException:
    try:
        raise_it()  # type: ignore[operator]
    except BaseException as error:
        return error
    raise AssertionError("nothing raised")


def test_a_failure_raised_from_or_in_place_of_an_aoti_error_has_its_kind() -> None:
    """The fixtures fail a test on an export or compile error with a message of their own (``pytest.fail``,
    ``from None``): the failure keeps the error's kind without an attribute stamped onto it."""

    def in_place_of(error: AOTIError) -> None:
        try:
            raise error
        except AOTIError:
            raise pytest.fail.Exception(f"{error}\n\ntraceback", pytrace=False) from None

    def from_(error: AOTIError) -> None:
        raise RuntimeError("wrapped") from error

    def while_handling(error: AOTIError) -> None:
        try:
            raise error
        except AOTIError:
            raise RuntimeError("another failure while reporting it")  # noqa: B904

    assert failure_kind(_raised(lambda: in_place_of(AOTIExportError("x")))) == "export"
    assert failure_kind(_raised(lambda: in_place_of(AOTICompileError("C++ compile error")))) == "compile"
    assert failure_kind(_raised(lambda: in_place_of(AOTICompileError("CUDA error: illegal memory access")))) == (
        "package_error"
    )
    assert failure_kind(_raised(lambda: from_(AOTIBenchmarkError("slower")))) == "benchmark"
    assert failure_kind(_raised(lambda: while_handling(AOTIExportError("x")))) == "other"  # a failure of its own


def test_no_failure_kind_is_stamped_onto_an_exception() -> None:
    stamped = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "pytest_aoti").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "aoti_failure_kind" in line
    ]
    assert not stamped


def test_the_core_names_no_feature() -> None:
    """The features' kinds are declared by their own error classes, and their errors live in their packages (or
    in the shared layer, with the bundled I/O format): the core's kinds and errors module name none."""
    feature_kinds = {AOTISnapshotError.failure_kind, AOTIDeployError.failure_kind, AOTIBenchmarkError.failure_kind}
    assert not feature_kinds & {kind.value for kind in FailureKind}
    errors_source = (ROOT / "pytest_aoti" / "core" / "errors.py").read_text().lower()
    assert not [word for word in (*feature_kinds, "golden", "verify") if word in errors_source]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (AOTIValueError("inductor_configs: unknown Inductor config key 'max_autotuen'"), "called wrongly"),
        (AOTITypeError("aoti_check() got unexpected keyword argument(s) 'probe_dims'"), "repeat the same error"),
        (AOTISnapshotError("golden differs"), "differ from golden outputs recorded earlier"),
        (AOTIDeployError("threads: differed"), "a deployment check failed"),
        (AOTIBenchmarkError("slower"), "a benchmark slower than its baseline"),
    ],
)
def test_triage_does_not_rerun_what_the_error_class_says_a_rerun_cannot_explain(error: AOTIError, said: str) -> None:
    # The kind as it crosses xdist and a child's report: a plain str.
    assert said in str(not_rerun_reason(str(failure_kind(error)), None))


@pytest.mark.parametrize("kind", ["mismatch", "output_nonfinite", "package_error", "other", "verify", None])
def test_triage_reruns_the_other_kinds(kind: str | None) -> None:
    assert not_rerun_reason(kind, None) is None
