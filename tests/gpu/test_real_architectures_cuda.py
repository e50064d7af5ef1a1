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
