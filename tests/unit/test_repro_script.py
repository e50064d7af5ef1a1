"""What a repro bundle's ``repro.py`` runs: the package that failed when this machine's torch built it, else a
recompile (saying why). End to end: a crash reproduced on the package that failed (tests/test_debug_rerun.py), a NaN
both ways (tests/test_cache.py). Here the decision alone, for each reason, on a bundle whose program is not a program
(the script stops where it loads it: no compile). What a crashing repro leaves in $TMPDIR, on a real package, is in
tests/test_repro_tmpdir.py (it compiles one)."""

from __future__ import annotations

import json
import runpy
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_aoti.debug.bundle import REPRO_SCRIPT, _versions


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
