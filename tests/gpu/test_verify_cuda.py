"""Verifying CUDA packages in one interpreter: a package whose Triton kernel makes an illegal memory access fails
alone, and the package after it is verified in a new interpreter, not in the context the first one left unusable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.test_cuda_debug import GPU_MODELS

pytestmark = pytest.mark.gpu

# Imported by each interpreter that verifies packages, whose TMPDIR is its own temp dir (the CLI imports it first
# too, to fail early): it notes its pid, so the test counts them.
NOTES_ITS_PID = """
import os

if "pytest-aoti-verify-" in os.environ.get("TMPDIR", ""):
    with open("interpreters.txt", "a") as stream:
        stream.write(f"{os.getpid()}\\n")
"""


def test_a_package_that_poisons_cuda_is_the_last_its_interpreter_verifies(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from pytest_aoti.core.cache import PackageCache
    from pytest_aoti.core.compiler import compile_model
    from pytest_aoti.shared.bundled_io import write_bundled_io
    from pytest_aoti.verify import bundle_io

    (tmp_path / "gpu_models.py").write_text(GPU_MODELS)
    (tmp_path / "notes_its_pid.py").write_text(NOTES_ITS_PID)
    monkeypatch.syspath_prepend(str(tmp_path))
    import gpu_models  # type: ignore[import-not-found]

    cache = PackageCache.open(shared_cache, 2**31)
    dist = tmp_path / "dist"
    x = torch.randn(1024, device="cuda")
    no_shift = torch.zeros(1, dtype=torch.int64, device="cuda")
    gather = compile_model(gpu_models.ShiftedGather(), (x, no_shift), package_dir=tmp_path / "build", cache=cache)
    # Bundled with a shift far outside x: its kernel reads out of bounds on the deployment machine.
    far = torch.full((1,), 2**36, dtype=torch.int64, device="cuda")
    outputs = gather(x, no_shift)
    write_bundled_io(gather.package_path, dist / "a_ima.pt2", gather.exported_program, (x, far), {}, outputs, "cuda")
    gather.release()
    args = (torch.randn(8, 64, device="cuda"),)
    mlp = compile_model(gpu_models.MLP().cuda(), args, package_dir=tmp_path / "build", cache=cache)
    bundle_io(mlp.package_path, mlp.exported_program, args, output=dist / "b_mlp.pt2")
    mlp.release()
    run = subprocess.run(
        [sys.executable, "-m", "pytest_aoti.verify", "--import=gpu_models", "--import=notes_its_pid", "dist"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    # The error (or, should the runtime abort on it, the crash) is the first package's; the second is verified in a
    # new interpreter either way.
    assert "FAILED dist/a_ima.pt2: " in out, out
    assert "ok dist/b_mlp.pt2 on cuda:0" in out, out + run.stderr[-3000:]
    assert len((tmp_path / "interpreters.txt").read_text().split()) == 2
