"""Bundled I/O without a compile: the errors a bad package gets (moved from tests/unit/test_snapshots.py, so that
the golden outputs' tests and the verify feature's are apart, as the features are)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch

from pytest_aoti import AOTIVerifyError
from pytest_aoti.verify.bundled import IO_MEMBER, main, verify_package


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _io_member(metadata: dict[str, str]) -> bytes:
    from safetensors.torch import save

    return save({"input.0": torch.ones(2)}, metadata=metadata)


def test_verify_names_what_is_wrong_with_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        tmp_path / "missing.pt2": "missing.pt2: no such file",
        tmp_path.joinpath("text.pt2"): "text.pt2: not a readable .pt2 archive (File is not a zip file",
        _archive(tmp_path / "other.pt2", {"model/data.pkl": b"x"}): "other.pt2: not an AOTI package",
        _archive(tmp_path / "plain.pt2", {"model/data/aotinductor/model/x.so": b"x"}): (
            "plain.pt2: carries no bundled inputs and outputs; build it with aoti_compile(..., bundle_io=True)"
        ),
    }
    tmp_path.joinpath("text.pt2").write_text("not a zip")
    for path, message in cases.items():
        with pytest.raises(AOTIVerifyError) as raised:
            verify_package(path)
        assert message in str(raised.value)
    assert main([str(path) for path in cases]) == 1
    assert capsys.readouterr().out.count("FAILED ") == len(cases)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_verify_a_cuda_package_on_a_machine_without_cuda(tmp_path: Path) -> None:
    metadata = {
        "format": "pytest-aoti bundled io 1",
        "device": "cuda",
        "environment": json.dumps({"gpu": "NVIDIA H100 80GB HBM3 (sm_90)"}),
    }
    package = _archive(
        tmp_path / "cuda.pt2", {"model/data/aotinductor/model/x.so": b"x", f"model/{IO_MEMBER}": _io_member(metadata)}
    )
    with pytest.raises(
        AOTIVerifyError,
        match=r"cuda.pt2: built for CUDA \(recorded on NVIDIA H100 80GB HBM3 \(sm_90\)\); this machine has no CUDA",
    ):
        verify_package(package)


def test_a_device_torch_does_not_know_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--device", "bogus", "model.pt2"])
    assert exited.value.code == 2
    assert "argument --device: unknown device 'bogus'; expected cpu, cuda or cuda:N" in capsys.readouterr().err


def test_directories_are_walked_for_packages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nested = tmp_path / "dist" / "v2" / "plain.pt2"
    nested.parent.mkdir(parents=True)
    _archive(nested, {"model/data/aotinductor/model/x.so": b"x"})
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "dist"), str(tmp_path / "empty")]) == 1
    out = capsys.readouterr().out
    assert f"FAILED {nested}: carries no bundled inputs and outputs" in out
    assert f"FAILED {tmp_path / 'empty'}: a directory without .pt2 packages" in out


def test_verify_collects_dist_and_build_but_not_what_is_ignored(pytester: pytest.Pytester) -> None:
    for package in ("dist/model.pt2", "build/v1/model.pt2", "src/model.pt2", "skipped/model.pt2"):
        pytester.path.joinpath(package).parent.mkdir(parents=True, exist_ok=True)
        pytester.path.joinpath(package).write_bytes(b"not opened at collection")
    pytester.path.joinpath("build", "test_helper.py").write_text("def test_nothing(): pass\n")
    pytester.path.joinpath("node_modules").mkdir()
    pytester.path.joinpath("node_modules", "test_vendored.py").write_text("def test_nothing(): pass\n")
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--aoti-verify", "--collect-only", "-q", "--ignore=skipped"
    )
    collected = {line.split("::")[0] for line in result.stdout.lines if "::" in line}
    # dist/ and build/ hold packages: collected whole, though norecursedirs skips them; node_modules holds none.
    assert collected == {"dist/model.pt2", "build/v1/model.pt2", "build/test_helper.py", "src/model.pt2"}
