"""``pytest --aoti-verify PACKAGE...``: one test item per ``.pt2`` package, which verifies it on this machine against
its bundled inputs and golden outputs (``bundled.verify_package``). No test file or model source is
needed; JUnit and the summary work as for any test. Importing this module does not import torch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.core.devices import assigned_device, workerid
from pytest_aoti.core.errors import AOTIVerifyError
from pytest_aoti.settings import settings_key


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".pt2" and parent.config.stash[settings_key].verify:
        return PackageFile.from_parent(parent, path=file_path)
    return None


class PackageFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        yield PackageItem.from_parent(self, name=f"verify[{self.path.name}]")


class PackageItem(pytest.Item):
    """Verifies one package: a clear failure (naming the file) for a package that is missing, not an AOTI package,
    corrupted, without bundled I/O, for a device this machine lacks, or whose outputs moved."""

    def runtest(self) -> None:
        from pytest_aoti.verify.bundled import verify_package

        settings = self.config.stash[settings_key]
        device = None if settings.device == "auto" else settings.device
        assigned = assigned_device(settings.device, workerid(self.config))
        if assigned is not None:  # an xdist worker's GPU (devices.py): a CUDA package runs there
            import torch

            torch.cuda.set_device(assigned)
            device = None if device is None else assigned  # auto: the package's own device type; cuda: this GPU
        verified = verify_package(self.path, device=device)
        self.user_properties.append(("aoti_verified", f"{verified.device}: {verified.lines[0]}"))
        self.user_properties.append(("aoti_environment_diff", verified.lines[-1]))
        self.add_report_section("call", "aoti verify", "\n".join(verified.lines))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, AOTIVerifyError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"verify {self.path.name}"
