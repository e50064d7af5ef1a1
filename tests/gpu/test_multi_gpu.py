"""A multi-GPU host: under ``-n 2`` each xdist worker takes its own GPU (its children too), an illegal memory access
poisons only its worker's GPU, the device matrix runs a package on every GPU and names the index it fails on, and a
repro bundle of a call on cuda:1 (its ``repro.py``, a minify judge) runs there. The scenarios need two visible GPUs;
the bundle's tests run on one GPU too (on cuda:0)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pytest_aoti.debug.bundle import write_inputs, write_program
from tests.conftest import RunPytest, junit_cases
from tests.gpu.test_cuda_debug import GPU_MODELS, _keep

pytestmark = pytest.mark.gpu

SPREAD_TESTS = """
import pytest
import torch
from gpu_models import MLP, ima


class Deep(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.first = torch.nn.Linear(width, width)
        self.second = torch.nn.Linear(width, 16)

    def forward(self, x):
        return self.second(torch.tanh(self.first(x)))


@pytest.mark.parametrize("width", [24, 40, 56, 72])
def test_model(aoti_check, aoti_device, width):
    aoti_check(Deep(width), (torch.randn(8, width),))
    # The worker's GPU is also the current device: a test's plain "cuda" tensors land on it.
    assert torch.cuda.current_device() == aoti_device.index
    assert torch.empty(1, device="cuda").device == aoti_device


@pytest.mark.xdist_group("poisoned")
def test_ima(aoti_compile, aoti_device):
    ima(aoti_compile, aoti_device)


@pytest.mark.xdist_group("poisoned")
@pytest.mark.parametrize("batch", [8, 16])
def test_after_ima(aoti_check, batch):
    aoti_check(MLP(), (torch.randn(batch, 64),))
"""


def _require_two_gpus() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two visible GPUs (a multi-GPU host)")


def test_workers_spread_over_the_gpus_and_a_poison_stays_on_its_gpu(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    _require_two_gpus()
    pytester.makepyfile(gpu_models=GPU_MODELS, test_user=SPREAD_TESTS)
    result = run_pytest("-p", "no:logging", "-n", "2", "--dist", "loadgroup", "--junitxml=r.xml", "-rA")
    _keep("multi_gpu_spread", result)
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["aoti: device=auto (one GPU per xdist worker, * visible: gw0→cuda:0, gw1→cuda:1)*"])
    cases = junit_cases(pytester.path / "r.xml")
    # Under --dist loadgroup, pytest 8 names a grouped test "test_ima@poisoned" (pytest 9 does not).
    cases = {name.split("@")[0]: case for name, case in cases.items()}
    devices = {name: str(case["properties"]["aoti_device"]) for name, case in cases.items()}  # type: ignore[index]
    assert {device.split(" ")[0] for device in devices.values()} == {"cuda:0", "cuda:1"}, devices
    poisoned = devices["test_ima"].split(" ")[0]
    # The tests after the IMA ran in isolated children (the worker's context was poisoned), on their worker's GPU:
    # the child was pinned to it, not to cuda:0.
    for batch in (8, 16):
        assert devices[f"test_after_ima[{batch}]"].split(" ")[0] == poisoned, devices
    assert "the CUDA context was poisoned by test_user.py::test_ima" in result.stdout.str()
    # The other worker, on the other GPU, never saw the poison: its tests ran in-process and passed.
    healthy = [name for name, device in devices.items() if not device.startswith(poisoned)]
    assert healthy and all(cases[name]["outcomes"] == [] for name in healthy), (healthy, cases)


MATRIX_TESTS = """
import pytest
import torch


@torch.library.custom_op("aoti_multi_gpu::first_gpu_only", mutates_args=())
def first_gpu_only(x: torch.Tensor) -> torch.Tensor:
    # Stands for a package that only works on cuda:0 (upstream: pytorch#136369, #141042, #152087).
    if x.device.index != 0:
        raise RuntimeError(f"first_gpu_only: works on cuda:0 only, got {x.device}")
    return x * 2


@first_gpu_only.register_fake
def _(x):
    return torch.empty_like(x)


class Portable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.linear(x)) + 1


class FirstGpuOnly(torch.nn.Module):
    def forward(self, x):
        return first_gpu_only(x.sin()) + 1


@pytest.mark.aoti_deploy(device_matrix=True)
def test_portable(aoti_compile):
    aoti_compile(Portable(), (torch.randn(8, 32),))


@pytest.mark.aoti_deploy(device_matrix=True)
def test_first_gpu_only(aoti_compile):
    aoti_compile(FirstGpuOnly(), (torch.randn(8, 32),))
"""


def test_device_matrix_names_the_gpu_a_package_fails_on(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    _require_two_gpus()
    pytester.makepyfile(test_matrix=MATRIX_TESTS)
    result = run_pytest("-p", "no:logging", "-rA")
    _keep("multi_gpu_matrix", result)
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert re.search(
        r"device_matrix: the package \(built on cuda:0\) fails on cuda:1(, cuda:\d+)* of the \d+ visible", text
    )
    assert "cuda:0: ok" in text
    assert "cuda:1: FAILED: " in text and "first_gpu_only: works on cuda:0 only, got cuda:1" in text


class _Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2


@pytest.fixture(scope="module")
def bundle_on_the_last_gpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repro bundle, as the debug child of the xdist worker on the last GPU writes one, of a call that runs
    correctly: the program, its weights and the call's inputs on that GPU, and the package that ran it. On a
    multi-GPU host that is not cuda:0, the loader's default (what these tests are for); on one GPU they still run the
    CUDA paths of repro.py and of a minify judge."""
    device = f"cuda:{torch.cuda.device_count() - 1}"
    bundle, built = tmp_path_factory.mktemp("bundle-last-gpu"), tmp_path_factory.mktemp("built")
    model, inputs = _Affine().to(device), (torch.randn(8, 32, device=device),)
    program = torch.export.export(model, inputs)
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(built / "package.pt2"))
    write_program(bundle, program, Path(package), {}, [])
    write_inputs(bundle, inputs, {})
    return bundle


@pytest.mark.parametrize("args", [(), ("--recompile",)], ids=["the package that failed", "recompiled"])
def test_repro_runs_on_the_gpu_the_call_ran_on(bundle_on_the_last_gpu: Path, args: tuple[str, ...]) -> None:
    """Loaded for cuda:0 (the loader's default) on a multi-GPU host, the package would compute on the wrong GPU: its
    outputs would not be where eager's are (a false "differs from eager") or its kernels would fault on memory of
    another GPU."""
    repro = subprocess.run(
        [sys.executable, str(bundle_on_the_last_gpu / "repro.py"), *args], capture_output=True, text=True
    )
    print(repro.stdout)
    assert repro.returncode == 0, repro.stdout + repro.stderr
    said = "repro: recompiling the exported program" if args else "repro: running package.pt2, the package that failed"
    assert said in repro.stdout
    assert "not reproduced: no crash, no NaN/Inf, and the package matches" in repro.stdout


def test_a_minify_judge_runs_its_candidate_on_the_gpu_the_call_ran_on(bundle_on_the_last_gpu: Path) -> None:
    candidate = bundle_on_the_last_gpu / "candidate"
    shutil.copytree(bundle_on_the_last_gpu, candidate)
    judge = subprocess.run(
        [sys.executable, "-m", "pytest_aoti.debug.minify", "--judge", str(candidate)], capture_output=True, text=True
    )
    assert judge.returncode == 0, judge.stdout + judge.stderr
