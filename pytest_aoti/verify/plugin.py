"""``pytest --aoti-verify PACKAGE...``: one test item per ``.pt2`` package, which verifies it on this machine against
its bundled inputs and golden outputs, loaded in the session's verifying interpreter (``server.VerifyServer``: one
interpreter verifies the packages in turn, and a package that crashes it fails as that file while a new one goes on
with the next). No test file or model source is needed; JUnit and the summary work as for any test. Also the builder
keyword ``bundle_io=True`` (``aoti_compile(model, args, bundle_io=True)``), through pytest-aoti's build hooks.
Importing this module does not import torch."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.core.devices import assigned_device
from pytest_aoti.roles import worker_id
from pytest_aoti.settings import add_option, option_group, option_value, settings_key
from pytest_aoti.shared.errors import AOTIVerifyError

if TYPE_CHECKING:
    from pytest_aoti.hookspecs import BuiltPackage
    from pytest_aoti.verify.server import VerifyServer

VERIFY_DESC = (
    "collect .pt2 packages given as arguments (or found in given directories, dist/ and build/ included) as tests: "
    "each is loaded in an interpreter of its own (a new one only after a package crashes it) and checked against its "
    "bundled inputs and golden outputs (built with aoti_compile(..., bundle_io=True))"
)
VERIFY_IMPORT_DESC = (
    "a module the interpreter that verifies a package imports first, e.g. the one registering the package's custom "
    "ops (repeatable; ini: one per line)"
)
# The flag's first spelling, which its ini twin (aoti_verify_imports) did not match: still read, with a warning.
OLD_VERIFY_IMPORT_FLAG = "--aoti-verify-import"


@dataclass(frozen=True)
class VerifySettings:
    enabled: bool
    imports: tuple[str, ...]


verify_settings_key = pytest.StashKey[VerifySettings]()
verify_server_key = pytest.StashKey["VerifyServer"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "verify", VERIFY_DESC, flag=True, ini_type="bool", default=False)
    option_group(parser).addoption(
        "--aoti-verify-imports",
        OLD_VERIFY_IMPORT_FLAG,
        action="append",
        default=None,
        dest="aoti_verify_imports",
        metavar="MODULE",
        help=f"{VERIFY_IMPORT_DESC}; {OLD_VERIFY_IMPORT_FLAG}: its old spelling, deprecated",
    )
    parser.addini("aoti_verify_imports", VERIFY_IMPORT_DESC, type="linelist", default=[])


def pytest_configure(config: pytest.Config) -> None:
    enabled, _ = option_value(config, "aoti_verify")
    imports, _ = option_value(config, "aoti_verify_imports")
    if any(arg.split("=")[0] == OLD_VERIFY_IMPORT_FLAG for arg in map(str, config.invocation_params.args)):
        config.issue_config_time_warning(
            pytest.PytestDeprecationWarning(
                f"{OLD_VERIFY_IMPORT_FLAG} is deprecated: use --aoti-verify-imports, spelled as its ini twin "
                "aoti_verify_imports"
            ),
            stacklevel=2,
        )
    config.stash[verify_settings_key] = VerifySettings(bool(enabled), tuple(imports))


def _verifying(config: pytest.Config) -> bool:
    return config.stash[verify_settings_key].enabled


def pytest_aoti_build_options(config: pytest.Config) -> list[str]:
    return ["bundle_io"]


def pytest_aoti_package_built(config: pytest.Config, built: BuiltPackage) -> None:
    """``bundle_io=True``: the package with its example inputs and outputs bundled in becomes the one the test
    gets (``compiled.package_path``)."""
    bundle_io = built.request.feature_options.get("bundle_io", False)
    if not isinstance(bundle_io, bool):
        raise TypeError(f"bundle_io: expected True or False, got {type(bundle_io).__name__} {bundle_io!r}")
    if bundle_io:
        from pytest_aoti.verify.bundled import bundle_built

        request = built.request
        bundle_built(built.compiled, tuple(request.args), dict(request.kwargs), request.package_dir)


def _holds_packages(directory: Path) -> bool:
    for _, _, files in os.walk(directory):
        if any(name.endswith(".pt2") for name in files):
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``--aoti-verify``, a directory pytest skips by name (``norecursedirs``: ``dist``, ``build``) is
    collected when it holds packages: that is where packages are shipped from. ``--ignore`` still applies."""
    if not _verifying(config) or collection_path.name.startswith(".") or not collection_path.is_dir():
        return None
    ignored = [Path(path).resolve() for path in config.getoption("ignore") or ()]
    ignored_globs = config.getoption("ignore_glob") or ()
    if collection_path.resolve() in ignored or any(fnmatch.fnmatch(str(collection_path), g) for g in ignored_globs):
        return None
    skipped_by_name = any(fnmatch.fnmatch(collection_path.name, pattern) for pattern in config.getini("norecursedirs"))
    return False if skipped_by_name and _holds_packages(collection_path) else None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".pt2" and _verifying(parent.config):
        return PackageFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A ``.pt2`` link whose target is gone is not a file, so pytest passes over it: under ``--aoti-verify`` it is
    collected, and fails naming the missing target."""
    report = yield
    if _verifying(collector.config) and isinstance(collector, pytest.Directory) and report.passed:
        with os.scandir(collector.path) as entries:
            broken = sorted(
                Path(entry.path)
                for entry in entries
                if entry.name.endswith(".pt2") and entry.is_symlink() and not os.path.exists(entry.path)
            )
        report.result.extend(PackageFile.from_parent(collector, path=path) for path in broken)
    return report


def _server(config: pytest.Config) -> VerifyServer:
    """This process's verifying interpreter (each xdist worker has its own), ended at the end of the session."""
    if verify_server_key not in config.stash:
        from pytest_aoti.verify.bundled import server_options
        from pytest_aoti.verify.server import VerifyServer

        server = VerifyServer(server_options(None, None, config.stash[verify_settings_key].imports))
        config.add_cleanup(server.close)
        config.stash[verify_server_key] = server
    return config.stash[verify_server_key]


class PackageFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        yield PackageItem.from_parent(self, name=f"verify[{self.path.name}]")


class PackageItem(pytest.Item):
    """Verifies one package: a clear failure (naming the file) for a package that is missing, not an AOTI package,
    corrupted, without bundled I/O, for a device this machine lacks, that crashes its loader, or whose outputs
    moved."""

    def runtest(self) -> None:
        from pytest_aoti.verify.bundled import verify_with
        from pytest_aoti.verify.server import Terminated

        settings = self.config.stash[settings_key]
        device = None if settings.device == "auto" else settings.device
        assigned = assigned_device(settings.device, worker_id(self.config))
        if assigned is not None:  # an xdist worker's GPU (devices.py): a CUDA package runs there
            import torch

            torch.cuda.set_device(assigned)
            device = None if device is None else assigned  # auto: the package's own device type; cuda: this GPU
        try:
            verified = verify_with(_server(self.config), self.path, device=device)
        except Terminated:
            pytest.exit(
                "SIGTERM: pytest-aoti ended the interpreter verifying packages and stops the session", returncode=143
            )
        self.user_properties.append(("aoti_verified", f"{verified.device}: {verified.lines[0]}"))
        self.user_properties.append(("aoti_environment_diff", verified.lines[-1]))
        self.add_report_section("call", "aoti verify", "\n".join(verified.lines))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, AOTIVerifyError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"verify {self.path.name}"
