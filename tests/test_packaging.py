"""The wheel users install: typed (py.typed), with the pytest11 entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_py_typed_and_the_entry_point(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "pytest_aoti", source / "pytest_aoti", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("pytest_aoti-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pytest_aoti/py.typed" in names
    assert "pytest_aoti/plugin.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "aoti = pytest_aoti.plugin" in zipfile.ZipFile(wheel).read(entry_points).decode()
