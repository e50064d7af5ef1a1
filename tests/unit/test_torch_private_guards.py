"""A private torch symbol that a release renames or drops, simulated by taking it off the real torch: each guard of
core/torch_private.py falls back or fails with a message naming the symbol and the torch version, never with an
AttributeError from deep inside. Nothing here compiles; the loader is asked for packages that do not exist."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_aoti.core import torch_private
from pytest_aoti.core.compiler import load_package, package_device_problem, validate_inductor_configs
from pytest_aoti.core.errors import AOTICompileError
from pytest_aoti.core.torch_versions import TESTED, MissingTorchAPI

LOADER = "torch._C._aoti.AOTIModelPackageLoader"


def _names_symbol_and_version(message: str, symbol: str) -> None:
    assert f"{symbol} is missing in torch {torch.__version__}" in message, message
    assert f"tested on torch {', '.join(TESTED)} (docs/torch-private-apis.md)" in message, message


@pytest.fixture
def no_package_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch._C._aoti, "AOTIModelPackageLoader")


@pytest.mark.usefixtures("no_package_loader")
def test_a_missing_package_loader_is_named_and_is_a_runtime_error_the_loader_falls_back_on(tmp_path: Path) -> None:
    with pytest.raises(MissingTorchAPI) as raised:
        torch_private.package_loader(str(tmp_path / "model.pt2"), False, 1, -1)
    assert isinstance(raised.value, RuntimeError)  # what compiler._load_package falls back to aoti_load_package on
    assert raised.value.symbol == LOADER
    _names_symbol_and_version(str(raised.value), LOADER)


@pytest.mark.usefixtures("no_package_loader")
def test_a_missing_package_loader_is_a_load_error_naming_it(tmp_path: Path) -> None:
    """The loader falls back to aoti_load_package, which reaches for the same symbol here: the test's failure is
    one AOTICompileError at the load stage that names it and the torch version."""
    package = tmp_path / "model.pt2"
    package.write_bytes(b"not a package")
    with pytest.raises(AOTICompileError) as raised:
        load_package(package, torch.device("cpu"), tmp_path / "extract")
    assert raised.value.stage == "load"
    message = str(raised.value)
    assert message.startswith(f"AOTI load failed: MissingTorchAPI: {LOADER} is missing in torch "), message
    assert "(aoti_load_package reaches for it)" in message
    _names_symbol_and_version(message, LOADER)


@pytest.mark.usefixtures("no_package_loader")
def test_a_missing_metadata_reader_lets_the_loader_speak(tmp_path: Path) -> None:
    """The device check before loading is best effort: without the metadata reader it finds no problem."""
    with pytest.raises(MissingTorchAPI):
        torch_private.package_metadata(str(tmp_path / "model.pt2"))
    assert package_device_problem(tmp_path / "model.pt2", torch.device("cpu")) is None


def test_a_missing_metadata_method_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch._C._aoti.AOTIModelPackageLoader, "load_metadata_from_package")
    with pytest.raises(MissingTorchAPI) as raised:
        torch_private.package_metadata(str(tmp_path / "model.pt2"))
    _names_symbol_and_version(str(raised.value), f"{LOADER}.load_metadata_from_package")


def test_a_missing_portable_config_snapshot_falls_back_to_the_same_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package cache keys on Inductor's config: without ``save_config_portable`` the snapshot is made from
    every key, less the private ones and those Inductor's own cache ignores, and a patched value still shows."""
    import torch._inductor.config as inductor_config
    from torch.utils._config_module import ConfigModule

    portable = torch_private.inductor_config_snapshot()
    monkeypatch.delattr(ConfigModule, "save_config_portable")
    assert not hasattr(inductor_config, "save_config_portable")
    fallback = torch_private.inductor_config_snapshot()
    assert set(fallback) == set(portable)
    with inductor_config.patch({"max_autotune": not inductor_config.max_autotune}):
        assert torch_private.inductor_config_snapshot()["max_autotune"] != fallback["max_autotune"]


def test_a_missing_config_copy_is_named_when_configs_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils._config_module import ConfigModule

    monkeypatch.delattr(ConfigModule, "get_config_copy")
    with pytest.raises(MissingTorchAPI) as raised:
        validate_inductor_configs({"max_autotune": False})
    _names_symbol_and_version(str(raised.value), "torch._inductor.config.get_config_copy")
