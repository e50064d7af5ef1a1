"""What a repro bundle's ``repro.py`` runs: the package that failed when this machine's torch built it, else a
recompile (saying why). End to end: a crash reproduced on the package that failed (tests/test_debug_rerun.py), a NaN
both ways (tests/test_cache.py). Here the decision alone, for each reason, on a bundle whose program is not a program
(the script stops where it loads it: no compile); and what a crashing repro leaves in $TMPDIR, on a real package."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_aoti.debug.bundle import REPRO_SCRIPT, _versions, import_root, write_inputs, write_program
from tests.conftest import left_behind


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in {
        "repro.py": REPRO_SCRIPT,
        "env.json": "{}",
        "custom_ops.json": "[]",
        "inductor_configs.json": "{}",
        "versions.json": json.dumps(_versions()),
        "package.pt2": "not a package",
        "exported_program.pt2": "not a program",
    }.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setenv("PYTEST_AOTI_REPRO", "1")  # as after its re-exec under the recorded environment
    return tmp_path


def _decision(bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    monkeypatch.setattr(sys, "argv", [str(bundle / "repro.py"), *args])
    with pytest.raises(zipfile.BadZipFile):  # torch.export.load, of the program that is not one
        runpy.run_path(str(bundle / "repro.py"), run_name="__main__")
    return capsys.readouterr().out.strip()


def test_the_package_that_failed_runs_where_it_was_built(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _decision(bundle, monkeypatch, capsys) == (
        "repro: running package.pt2, the package that failed (--recompile to rebuild it)"
    )


def test_asked_to_it_recompiles(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _decision(bundle, monkeypatch, capsys, "--recompile") == (
        "repro: recompiling the exported program under the recorded environment (--recompile)"
    )


@pytest.mark.parametrize("key", ["torch", "cpu", "cuda"])
def test_on_another_machine_or_torch_it_recompiles(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    versions = json.loads((bundle / "versions.json").read_text())
    here = versions[key]
    versions[key] = "elsewhere"
    (bundle / "versions.json").write_text(json.dumps(versions))
    assert _decision(bundle, monkeypatch, capsys) == (
        "repro: recompiling the exported program under the recorded environment "
        f"(package.pt2 was built with {key} elsewhere, this machine has {here})"
    )


def test_a_bundle_without_its_package_recompiles(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (bundle / "package.pt2").unlink()
    assert _decision(bundle, monkeypatch, capsys) == (
        "repro: recompiling the exported program under the recorded environment (no package.pt2 in the bundle)"
    )


@pytest.fixture(scope="module")
def crashing_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle as the debug child writes it, of a real package whose custom op segfaults on these inputs."""
    import torch

    from tests import aoti_models

    bundle = tmp_path_factory.mktemp("crashing-bundle")
    program = torch.export.export(aoti_models.Crashy(), (torch.randn(4, 3),))
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(bundle / "built.pt2"))
    module, root = import_root(aoti_models.__name__, Path(aoti_models.__file__))
    write_program(bundle, program, Path(package), {}, [{"module": module, "path": str(root)}])
    write_inputs(bundle, (torch.full((4, 3), 1000.0),), {})
    return bundle


def test_a_crashing_repro_leaves_nothing_in_tmpdir(crashing_bundle: Path, watched_tmpdir: Path) -> None:
    """The loader extracts the package into $TMPDIR and a crash never cleans it: repro.py runs the package in a
    child whose TMPDIR it removes, and exits as a shell reports the crash (128 + SIGSEGV)."""
    repro = subprocess.run(
        [sys.executable, str(crashing_bundle / "repro.py")], capture_output=True, text=True, timeout=600
    )
    assert repro.returncode == 139, repro.stdout + repro.stderr
    assert "repro: running package.pt2, the package that failed" in repro.stdout
    assert "reproduced: crashed with SIGSEGV" in repro.stderr
    assert left_behind(watched_tmpdir) == []
