"""Every debug path on a real CUDA GPU: a Triton kernel's illegal memory access, the poisoned context after it,
a NaN made inside the model, a CPU input to a CUDA package, and a package that segfaults at load."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases

pytestmark = pytest.mark.gpu

GPU_MODELS = '''
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def gather_shift_kernel(x_ptr, shift_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    shift = tl.load(shift_ptr)
    values = tl.load(x_ptr + offsets + shift, mask=mask)
    tl.store(out_ptr + offsets, values, mask=mask)


@triton_op("aoti_gpu_tests::gather_shift", mutates_args={})
def gather_shift(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(gather_shift_kernel)[(triton.cdiv(n, 128),)](x, shift, out, n, BLOCK=128)
    return out


class ShiftedGather(torch.nn.Module):
    """Reads x at an offset taken from a tensor at run time: compiled with 0, run with 2**36 -> IMA."""

    def forward(self, x, shift):
        return gather_shift(x * 2, shift) + 1


class LogModel(torch.nn.Module):
    def forward(self, x):
        return torch.log(x) * 2 + 1


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.linear(x))


def ima(aoti_compile, device):
    x = torch.randn(1024, device=device)
    compiled = aoti_compile(ShiftedGather(), (x, torch.zeros(1, dtype=torch.int64, device=device)))
    out = compiled(x, torch.full((1,), 2**36, dtype=torch.int64, device=device))
    torch.cuda.synchronize()
    return out
'''

IMA_TESTS = r"""
import pytest
import torch
from gpu_models import MLP, ima


{marker}
def test_ima(aoti_compile, aoti_device):
    ima(aoti_compile, aoti_device)


@pytest.mark.parametrize("batch", [8, 16])
def test_after_ima(aoti_check, aoti_device, batch):
    aoti_check(MLP(), (torch.randn(batch, 64),))


def test_cpu_input_to_cuda_package(aoti_compile):
    from pytest_aoti import AOTIInvariantError
    compiled = aoti_compile(MLP(), (torch.randn(8, 64),))
    with pytest.raises(AOTIInvariantError, match=r"device invariant violated: expected cuda:\d+, got cpu"):
        compiled(torch.randn(8, 64))
"""


def _keep(name: str, result: pytest.RunResult) -> None:
    """Save the run's output for docs/gpu-validation.md when AOTI_GPU_EVIDENCE_DIR is set."""
    evidence = os.environ.get("AOTI_GPU_EVIDENCE_DIR")
    if evidence:
        Path(evidence, f"{name}.txt").write_text(result.stdout.str() + "\n--- stderr ---\n" + result.stderr.str())


def _write(pytester: pytest.Pytester, tests: str) -> None:
    pytester.makepyfile(gpu_models=GPU_MODELS, test_user=tests)


def _assert_ima_verdict(text: str) -> None:
    assert "suspect kernel: gather_shift_kernel_0 (launched, never finished)" in text
    assert "in kernel gather_shift_kernel_0 (before_launch with no after_launch)" in text
    assert "[ before_launch: gather_shift_kernel_0 ]" in text
    assert "CUDA error: an illegal memory access was encountered" in text
    assert "reproduce (kernels): cd " in text and "CUDA_LAUNCH_BLOCKING=1" in text


def test_ima_marked_without_xdist_and_the_tests_after_it(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    _write(pytester, IMA_TESTS.format(marker="@pytest.mark.aoti_ima(stages=('kernels',))"))
    result = run_pytest("-p", "no:logging", "-rA")
    _keep("ima_marked_plain", result)
    text = result.stdout.str()
    result.assert_outcomes(passed=3, failed=1)
    _assert_ima_verdict(text)
    # Marked and not under xdist: the test ran in a fresh subprocess from the start, so the IMA never reached this
    # process's CUDA context, and the tests after it ran here.
    assert "ran in a fresh subprocess: debug reruns are on and this session runs tests in-process" in text


def test_ima_under_aoti_debug_with_xdist(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    _write(pytester, IMA_TESTS.format(marker=""))
    result = run_pytest("-p", "no:logging", "--aoti-debug", "-n", "4")
    _keep("ima_debug_xdist", result)
    result.assert_outcomes(passed=3, failed=1)
    _assert_ima_verdict(result.stdout.str())
    result.stdout.fnmatch_lines(["*= aoti =*", "test_user.py::test_ima: crashed with SIG*gather_shift_kernel_0*"])


def test_nan_made_inside_the_model(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    _write(
        pytester,
        """
        import pytest
        import torch
        from gpu_models import LogModel

        @pytest.mark.aoti_ima
        def test_nan(aoti_compile, aoti_device):
            compiled = aoti_compile(LogModel(), (torch.rand(64, 64) + 0.5,))
            compiled(-torch.ones(64, 64, device=aoti_device))
        """,
    )
    result = run_pytest("-p", "no:logging")
    _keep("nan_inside", result)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "output 0: nonfinite invariant violated" in text
    assert "At least one NaN in buf" in text or "At least one INF in buf" in text
    result.stdout.re_match_lines([r"first NaN/Inf: triton_\w+ buf\d+ \(mean -?nan"])
    # The NaN assert stops the package where the test saw a NaN output: one failure, named on the model's line.
    assert "not the test's failure" not in text
    assert "at gpu_models.py:" in text and "in forward: return torch.log(x) * 2 + 1" in text


def test_segfault_at_load_names_the_libstdcxx_remedy(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "libstdc++" not in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("this scenario removes LD_PRELOAD=libstdc++.so.6, which this run does not set")
    monkeypatch.delenv("LD_PRELOAD")
    _write(
        pytester,
        """
        import torch
        from gpu_models import MLP

        def test_load(aoti_check):
            aoti_check(MLP(), (torch.randn(8, 64),))
        """,
    )
    result = run_pytest("-p", "no:logging", "--aoti-isolate")
    _keep("load_segfault", result)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*crashed with SIGSEGV in an isolated subprocess (pytest-aoti)*",
            "*last phase: load*",
            "*hint: the process crashed while loading the AOTI package*LD_PRELOAD=libstdc++.so.6*",
        ]
    )


def test_hypothesis_stops_shrinking_on_a_poisoned_context(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    _write(
        pytester,
        """
        import pytest
        import torch
        from hypothesis import given, settings, strategies as st
        from torch.export import Dim

        from gpu_models import ShiftedGather
        from pytest_aoti import dynamic_inputs
        @pytest.fixture(scope="module")
        def gather(aoti_compile_shared, aoti_device):
            n = Dim("n", min=128, max=4096)
            x = torch.randn(1024)
            shift = torch.zeros(1, dtype=torch.int64)
            return aoti_compile_shared(ShiftedGather(), (x, shift), dynamic_shapes={"x": {0: n}, "shift": None})


        @settings(max_examples=60, deadline=None, database=None)
        @given(data=st.data())
        def test_gather(gather, data):
            x, _ = data.draw(dynamic_inputs(gather))
            # Out of bounds only for long inputs: every later CUDA call fails with the inherited error.
            shift = torch.full((1,), 2**36 if x.shape[0] > 600 else 0, dtype=torch.int64, device=x.device)
            gather(x, shift)
            torch.cuda.synchronize()
        """,
    )
    result = run_pytest("-p", "no:logging", hypothesis=True)
    _keep("hypothesis_poisoned", result)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    match = re.search(r"Draw 1: inputs_with_shapes\(\s*(?:E\s+)?\(\((\d+),\), \(1,\)\)", text)
    assert match is not None, text[-5000:]
    assert int(match.group(1)) > 600, "Hypothesis shrank toward an example that only failed because of the poison"


SCALE_MODEL = """
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * FACTOR, mask=mask)


@triton_op("aoti_gpu_tests::scale", mutates_args={})
def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(scale_kernel)[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out


class Scale(torch.nn.Module):
    def forward(self, x):
        return scale(x) + 1
"""


def test_an_edited_triton_kernel_is_a_cache_miss(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """The graph names a user Triton kernel by a side-table index: the key must hash the kernel's source, or the
    edited kernel's run would load the stale package (seen on an H100 before the key covered it)."""
    pytester.makepyfile(
        test_user="""
        import torch
        from scale_model import Scale

        def test_scale(aoti_check, aoti_device):
            compiled = aoti_check(Scale(), (torch.randn(256, device=aoti_device),))
            print("FROM_CACHE", compiled.from_cache)
        """
    )
    cache = pytester.path / "cache"
    outputs = []
    for factor in ("2.0", "3.0"):
        pytester.makepyfile(scale_model=SCALE_MODEL.replace("FACTOR", factor))
        result = run_pytest("-s", "-p", "no:logging", cache=cache)
        outputs.append(result.stdout.str())
        result.assert_outcomes(passed=1)  # package and eager agree: the package computes with this factor
        result.stdout.fnmatch_lines(["*FROM_CACHE False*"])
    _keep("triton_kernel_edit", result)
    assert len(list(cache.glob("*/*.pt2"))) == 2


def test_out_of_range_embedding_index_names_the_bad_value(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """A token id of 5000 into a 100-row table: the verdict leads with the device assert and the bad input's max."""
    _write(
        pytester,
        """
        import pytest
        import torch

        class Embed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.table = torch.nn.Embedding(100, 16)

            def forward(self, ids):
                return self.table(ids) * 2

        @pytest.mark.aoti_ima
        @pytest.mark.aoti(allow_out_of_range=True)  # past the input check, to the device-side assert
        def test_embedding(aoti_compile, aoti_device):
            compiled = aoti_compile(Embed(), (torch.randint(0, 100, (4, 8)),))
            compiled(torch.full((4, 8), 5000, dtype=torch.int64, device=aoti_device))
        """,
    )
    result = run_pytest("-p", "no:logging")
    _keep("embedding_assert", result)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "device-side assert `index out of bounds: 0 <= tmp" in text
    assert re.search(r"bad input: \w+ \(min 5000, max 5000, .*outside the asserted range \[0, 100\)", text), text
    assert "repro bundle: " in text
    # The asserting kernel's line in the user's model.
    assert re.search(r"^verdict: .* at test_user.py:\d+ in forward: return self.table\(ids\) \* 2", text, re.M), text


def test_sanitizer_stage_and_repro_bundle_on_an_ima(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    _write(pytester, IMA_TESTS.format(marker="@pytest.mark.aoti_ima(stages=('kernels', 'sanitizer'))"))
    result = run_pytest("-p", "no:logging", "-k", "test_ima")
    _keep("ima_sanitizer", result)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    _assert_ima_verdict(text)
    assert re.search(r"^sanitizer: Invalid __global__ read of size \d+ bytes? in \w*gather_shift_kernel", text, re.M)
    bundle = re.search(r"^repro bundle: (\S+) \(python repro.py: needs importable: gpu_models", text, re.MULTILINE)
    assert bundle is not None, text
    clean = pytester.path / "clean"
    clean.mkdir()
    repro = subprocess.run(
        [sys.executable, str(Path(bundle.group(1)) / "repro.py")], cwd=clean, capture_output=True, text=True
    )
    assert repro.returncode != 0
    # On the package that failed (this GPU, this torch built it): no compile.
    assert "repro: running package.pt2, the package that failed" in repro.stdout
    assert "illegal memory access" in repro.stdout + repro.stderr


def test_numerics_names_the_divergent_triton_kernel(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """The planted divergence of tests/test_numerics.py on CUDA: a call counter export bakes in and eager reads
    afresh, in the pointwise stage between two matmuls. The verdict names that stage's Triton kernel."""
    _write(
        pytester,
        """
        import torch

        class Counter(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.first = torch.nn.Linear(64, 128)
                self.second = torch.nn.Linear(128, 32)
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                h = torch.relu(self.first(x)) * self.calls + 0.5
                return torch.softmax(self.second(h), dim=-1)

        def test_counter(aoti_check, aoti_device):
            x = torch.randn(16, 64, device=aoti_device)
            aoti_check(Counter(), (x,), more_inputs=[(torch.randn(16, 64, device=aoti_device),)])
        """,
    )
    result = run_pytest("-p", "no:logging", "--aoti-debug", "--junitxml=report.xml")
    _keep("numerics_counter", result)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    found = re.search(r"first divergent kernel: (triton_\w+) \(nodes: ([^)]*)\)", text)
    assert found is not None, text
    assert "mul" in found.group(2).split(", ") and "softmax" not in found.group(2), text
    assert "inputs matched eager" in text
    assert "the difference comes from export, not Inductor" in text
    assert re.search(r"stage numerics \(printer=1, provenance tracking\): failed: .* \[[\d.]+ s\]", text)
    assert "in forward: h = torch.relu(self.first(x)) * self.calls + 0.5" in text, text


DEVICE_ASSERT_THEN_HEALTHY = """
import pytest
import torch

from gpu_models import MLP


class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(100, 16)

    def forward(self, ids):
        return self.table(ids) * 2


def test_embedding_checked(aoti_compile, aoti_device):
    # Without the marker the input check refuses the id: the package never runs, the context stays healthy.
    compiled = aoti_compile(Embed(), (torch.randint(0, 100, (4, 8)),))
    compiled(torch.full((4, 8), 5000, dtype=torch.int64, device=aoti_device))


@pytest.mark.aoti(allow_out_of_range=True)  # past the input check, to the device-side assert
def test_embedding(aoti_compile, aoti_device):
    compiled = aoti_compile(Embed(), (torch.randint(0, 100, (4, 8)),))
    compiled(torch.full((4, 8), 5000, dtype=torch.int64, device=aoti_device))


def test_cuda_after(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 64),))


def test_cpu_after():
    assert torch.ones(2).sum() == 2
"""


def test_device_assert_under_plain_aoti_debug_ends_only_its_test(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """A device-side assert (an abort when it escapes, a poisoned context when the call's synchronize catches it):
    under plain ``--aoti-debug`` (no ``-n``) the session runs as one supervised xdist worker; the failing test gets
    its verdict and the tests after it run, the CUDA one in a fresh subprocess."""
    _write(pytester, DEVICE_ASSERT_THEN_HEALTHY)
    result = run_pytest("-p", "no:logging", "--aoti-debug", "--junitxml=report.xml")
    _keep("device_assert_plain_debug", result)
    result.assert_outcomes(passed=2, failed=2)
    text = result.stdout.str()
    assert "crash guard: one xdist worker" in text
    assert "input 0 ('ids'): index invariant violated: expected row indices in [0, 100), got 32 value(s)" in text
    assert "the failure is an input check raised before the package ran; a debug rerun cannot tell more" in text
    assert "device-side assert `index out of bounds: 0 <= tmp" in text
    # The exception the test raised and the rerun's abort are one CUDA error.
    assert "not the test's failure" not in text
    assert "at test_user.py:" in text and "in forward: return self.table(ids) * 2" in text
    cases = junit_cases(pytester.path / "report.xml")
    assert set(cases) == {"test_embedding_checked", "test_embedding", "test_cuda_after", "test_cpu_after"}
    assert cases["test_embedding_checked"]["outcomes"] == ["failure"]
    assert cases["test_embedding"]["outcomes"] == ["failure"]
    # The device of the failed test (its worker crashed, or its context was poisoned) and of the test after it (in a
    # fresh subprocess), for JUnit consumers that group by device.
    for name in ("test_embedding", "test_cuda_after"):
        assert str(cases[name]["properties"]["aoti_device"]).startswith("cuda:0"), cases[name]  # type: ignore[index]


GOLDEN_TESTS = """
import os
import shutil

import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, x):
        h = self.proj(x)
        return {"logits": h, "low": torch.softmax(h, -1).to(torch.bfloat16)}


def test_golden(aoti_check, aoti_device):
    torch.manual_seed(0)
    aoti_check(Head().eval(), (torch.randn(4, 16),), snapshot=True)


def test_ship(aoti_compile, aoti_device):
    torch.manual_seed(0)
    compiled = aoti_compile(Head().eval(), (torch.randn(4, 16),), bundle_io=True)
    os.makedirs("dist", exist_ok=True)
    shutil.copy(compiled.package_path, "dist/head.pt2")
"""


def test_goldens_and_a_self_verifying_package_on_cuda(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """Record golden outputs on the GPU (the environment names the GPU), match them on the second run, and verify
    the CUDA package with bundled I/O from a directory without the model's source."""
    _write(pytester, GOLDEN_TESTS)
    first = run_pytest("-p", "no:logging")
    _keep("golden_first", first)
    first.assert_outcomes(passed=2)
    assert "aoti snapshot written" in first.stdout.str()
    second = run_pytest("-p", "no:logging")
    _keep("golden_second", second)
    second.assert_outcomes(passed=2)
    assert "aoti snapshot written" not in second.stdout.str()
    from safetensors import safe_open

    golden = pytester.path / "__aoti_snapshots__" / "test_user" / "test_golden.safetensors"
    with safe_open(str(golden), framework="pt") as stored:
        assert "cuda/check0.example['low']" in set(stored.keys())
        environments = stored.metadata()["environments"]
    assert '"gpu": "NVIDIA' in environments and "sm_" in environments
    deploy = pytester.path / "deploy"
    deploy.mkdir()
    verified = subprocess.run(
        [sys.executable, "-m", "pytest_aoti.verify", str(pytester.path / "dist" / "head.pt2")],
        cwd=deploy, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    evidence = os.environ.get("AOTI_GPU_EVIDENCE_DIR")
    if evidence:
        Path(evidence, "golden_verify.txt").write_text(verified.stdout + verified.stderr)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "on cuda:0" in verified.stdout and "environment diff (recorded → now): none" in verified.stdout
    # The environment guard: the same package with its build metadata naming another compute capability.
    import json
    import zipfile

    with zipfile.ZipFile(pytester.path / "dist" / "head.pt2") as reader, zipfile.ZipFile(deploy / "sm80.pt2", "w") as w:
        for info in reader.infolist():
            data = reader.read(info)
            if info.filename.endswith("wrapper_metadata.json"):
                metadata = json.loads(data)
                assert metadata["AOTI_COMPUTE_CAPABILITY"] == "90", metadata  # what AOTI records on an H100
                data = json.dumps({**metadata, "AOTI_COMPUTE_CAPABILITY": "80"}).encode()
            w.writestr(info, data)
    guarded = subprocess.run(
        [sys.executable, "-m", "pytest_aoti.verify", "sm80.pt2"], cwd=deploy, capture_output=True, text=True
    )
    if evidence:
        Path(evidence, "guard_sm80.txt").write_text(guarded.stdout + guarded.stderr)
    assert guarded.returncode == 1
    assert re.search(r"the package's kernels were built for compute capability 80; NVIDIA .+ is \d+", guarded.stdout), (
        guarded.stdout
    )


DEPLOY_TESTS = """
import pytest
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 256)
        self.down = torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


@pytest.mark.aoti_deploy(standalone=True, threads=8, num_runners=4, weights=True, cuda_graph=True)
def test_deploy(aoti_compile, aoti_device):
    aoti_compile(Block().eval(), (torch.randn(16, 64),), inductor_configs={"always_keep_tensor_constants": True})
"""


def test_deployment_checks_on_cuda(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """A CUDA package stand-alone, from 8 threads on 4 runners, through a weight swap and back, and replayed in a
    CUDA graph (run_single_threaded=True)."""
    _write(pytester, DEPLOY_TESTS)
    result = run_pytest("-p", "no:logging", "-rA")
    _keep("deploy_checks", result)
    result.assert_outcomes(passed=1)


def test_benchmark_baseline_then_a_planted_slowdown_on_cuda(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """Record a CUDA package's baseline over two runs (its run memory measured on the GPU), pass against it, then
    fail against a baseline whose package was 10,000x faster, judged normalized by the calibration."""
    from tests.test_benchmarks import BENCHMARKED, _planted_slowdown

    _write(pytester, BENCHMARKED)
    quick = ("--aoti-benchmark-min-time=0.5", "--aoti-benchmark-tolerance=50", "-p", "no:logging")
    for number in range(2):  # the spread between runs needs two recorded runs, each its own process
        recorded = run_pytest("--aoti-benchmark-update", *quick, "test_user.py::test_speed")
        _keep(f"benchmark_record_{number}", recorded)
        recorded.assert_outcomes(passed=1)
    again = run_pytest("--aoti-benchmark", *quick)
    _keep("benchmark_again", again)
    again.assert_outcomes(passed=2)
    # The package's run memory is measured on the GPU (max_memory_allocated around one call).
    again.stdout.fnmatch_lines(["test_user.py::test_speed *ms*load +*, run *"])
    _planted_slowdown(pytester.path / "__aoti_benchmarks__" / "test_user.json")
    slow = run_pytest("--aoti-benchmark", *quick, "test_user.py::test_speed")
    _keep("benchmark_slow", slow)
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        ["*aoti_benchmark: test_speed: slower than the baseline: *normalized by the calibration*"]
    )
