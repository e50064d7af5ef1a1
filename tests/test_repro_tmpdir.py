"""What a crashing repro leaves in $TMPDIR, on a real package (moved from tests/unit/test_repro_script.py: it
compiles one, and the unit layer compiles nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_aoti.debug.bundle import import_root, write_inputs, write_program
from tests.conftest import left_behind


@pytest.fixture(scope="module")
def crashing_bundle(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """A bundle as the debug child writes it, of a real package whose custom op segfaults on these inputs. The
    package comes from the suite's shared cache: the crash scenarios compile the same model on the same inputs."""
    import torch

    from pytest_aoti.core.cache import PackageCache
    from pytest_aoti.core.compiler import compile_model
    from tests import aoti_models

    bundle = tmp_path_factory.mktemp("crashing-bundle")
    cache = PackageCache.open(shared_cache, max_bytes=1 << 31)
    compiled = compile_model(aoti_models.Crashy(), (torch.randn(4, 3),), package_dir=bundle / "built", cache=cache)
    module, root = import_root(aoti_models.__name__, Path(aoti_models.__file__))
    imports = [{"module": module, "path": str(root)}]
    write_program(bundle, compiled.exported_program, compiled.package_path, {}, imports)
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
