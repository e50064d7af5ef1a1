"""Where a repro bundle imports a custom op's module from: the root a fresh interpreter needs on ``sys.path``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_aoti.debug.bundle import import_root


def _write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("module", "file", "expected_module", "expected_root"),
    [
        ("aoti_models", "proj/aoti_models.py", "aoti_models", "proj"),
        ("tests.ops", "proj/tests/ops.py", "tests.ops", "proj"),
        ("tests.kernels.ops", "proj/tests/kernels/ops.py", "tests.kernels.ops", "proj"),
        ("mylib", "proj/src/mylib/__init__.py", "mylib", "proj/src"),
        # pytest's importlib mode names modules after paths that do not mirror packages: import the file itself.
        ("tests.weird.ops", "proj/tests/ops.py", "ops", "proj/tests"),
    ],
)
def test_the_import_root_mirrors_the_dotted_name(
    tmp_path: Path, module: str, file: str, expected_module: str, expected_root: str
) -> None:
    defined = _write(tmp_path / file, "REGISTERED = True\n")
    for package in defined.parents:  # every directory under the project (but src/) is a package
        if package != tmp_path / "proj" and package.name != "src" and tmp_path in package.parents:
            (package / "__init__.py").touch()
    assert import_root(module, defined) == (expected_module, (tmp_path / expected_root).resolve())
    # And a fresh interpreter, from elsewhere, imports it that way.
    name, root = import_root(module, defined)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(root)!r}); import {name}; assert {name}.REGISTERED",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
