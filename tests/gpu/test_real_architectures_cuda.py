"""Issue 61's verdicts on real architectures, on CUDA (the CPU twin is ``tests/test_real_architectures.py``):
GPT-2's NaN traced to the user's op past the causal mask's -inf, and GPT-2 fed more tokens than it has positions,
whose device-side assert fires while Inductor autotunes at compile time, ending in the kernel, the assert's line and
``self.wpe(position_ids)``."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest
from tests.gpu.test_cuda_debug import _keep

pytestmark = pytest.mark.gpu

GPT2_TESTS = """
import pytest
import torch

transformers = pytest.importorskip("transformers")


class UserActivation(torch.nn.Module):
    def forward(self, h):
        return torch.log(h - 100.0)


def gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=100, use_cache=False)
    return transformers.GPT2Model(config).eval()


def test_gpt2_nan(aoti_check, aoti_device):
    torch.manual_seed(0)
    model = gpt2()
    model.h[1].mlp.act = UserActivation()
    aoti_check(model.to(aoti_device), (torch.randint(0, 100, (1, 16), device=aoti_device),))


def test_gpt2_too_many_tokens(aoti_check, aoti_device):
    torch.manual_seed(0)
    aoti_check(gpt2().to(aoti_device), (torch.randint(0, 100, (1, 80), device=aoti_device),))
"""


def test_gpt2_verdicts_on_cuda(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytest.importorskip("transformers")
    pytester.makepyfile(test_user=GPT2_TESTS)
    result = run_pytest("-p", "no:logging", "--aoti-debug", "-n", "2")
    _keep("gpt2_real_architectures", result)
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert re.search(
        r"^verdict: NaN made by aten\.log\.default \(node log\) at test_user\.py:\d+ in forward: "
        r"return torch\.log\(h - 100\.0\)",
        text,
        re.MULTILINE,
    ), text
    assert re.search(
        r"^verdict: .*in kernel triton_\w+ \(its device-side assert at \S+\.py:\d+: tl\.device_assert.*"
        r"modeling_gpt2\.py:\d+ in forward: position_embeds = self\.wpe\(position_ids\)",
        text,
        re.MULTILINE,
    ), text


# The CPU twin is tests/test_real_architecture_faults.py: a custom op that raises inside the package, and a stateful
# activation (a divergence).
GPT2_RAISE_AND_DIVERGE = """
import pytest
import torch

transformers = pytest.importorskip("transformers")


@torch.library.custom_op("user_faults_cuda::checked_scale", mutates_args=())
def checked_scale(x: torch.Tensor, limit: float) -> torch.Tensor:
    if bool((x.abs() > limit).any()):
        raise ValueError(f"checked_scale: a value past the limit {limit}")
    return x * 2


@checked_scale.register_fake
def _(x, limit):
    return torch.empty_like(x)


class CheckedActivation(torch.nn.Module):
    def forward(self, h):
        return checked_scale(torch.nn.functional.gelu(h), 1e-3)


class CountingActivation(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, h):
        self.calls += 1
        return torch.nn.functional.gelu(h) * self.calls


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=100, use_cache=False)
    return transformers.GPT2Model(config).eval()


def test_custom_op_raises(aoti_compile, aoti_device):
    model = gpt2()
    model.h[0].mlp.act = CheckedActivation()
    ids = torch.randint(0, 100, (1, 16), device=aoti_device)
    aoti_compile(model.to(aoti_device), (ids,))(ids)


def test_stateful_activation(aoti_check, aoti_device):
    model = gpt2()
    model.h[0].mlp.act = CountingActivation()
    ids = [torch.randint(0, 100, (1, 16), device=aoti_device) for _ in range(2)]
    aoti_check(model.to(aoti_device), (ids[0],), more_inputs=[(ids[1],)])
"""


def test_gpt2_custom_op_and_divergence_verdicts_on_cuda(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytest.importorskip("transformers")
    pytester.makepyfile(test_user=GPT2_RAISE_AND_DIVERGE)
    result = run_pytest("-p", "no:logging", "--aoti-debug", "-n", "2")
    _keep("gpt2_raise_and_diverge", result)
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert re.search(
        r"AOTIPackageRunError: a Python op the package calls \(a custom op\) raised at \S*test_user\.py:\d+ in "
        r"checked_scale: ValueError: checked_scale: a value past the limit 0\.001",
        text,
    ), text
    assert re.search(
        r"^verdict: user_faults_cuda\.checked_scale\.default \(node checked_scale\) raises in eager too at "
        r"test_user\.py:\d+ in forward: return checked_scale\(torch\.nn\.functional\.gelu\(h\), 1e-3\)",
        text,
        re.MULTILINE,
    ), text
    assert re.search(
        r"^verdict: [^\n]*; first divergent kernel: triton_\w*gelu\w* \(nodes: [^)]*\) at test_user\.py:\d+ in "
        r"forward: return torch\.nn\.functional\.gelu\(h\) \* self\.calls",
        text,
        re.MULTILINE,
    ), text
