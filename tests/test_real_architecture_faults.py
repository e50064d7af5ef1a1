"""Faults on a real architecture (issue 61 item 6): transformers' GPT-2 from a tiny config made in code (random weights,
no download), fed more tokens than it has positions (the position ids are made inside the model, so no input check
sees them, and the CPU kernel's index check fails), with a user's custom op that raises inside it, and with a user's
stateful activation (a divergence). The plain failure names the kernel or the op's line, with no torch frames; the
verdict of ``--aoti-debug`` leads with the op where eager's replay of the failing call stops too, its line and the
bad index; the divergence's names the first divergent kernel and the user's line. The NaN faults are
``tests/test_real_architectures.py``'s; the replay alone, on more architectures, is
``tests/unit/test_origin_real_architectures.py``'s."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest

pytest.importorskip("transformers", reason="the real-architecture scenarios need transformers (pip install .[test])")

# One model (a dynamic sequence length), so the three faults share the test's package and the first two their stage
# kernels' package. Stage kernels alone (the marker's stages=): its log has the kernel and the index check, and the
# bundle it records is what the eager replay runs; stage tensors' printer would add a compile and nothing these
# verdicts use.
FAULTS = """
import pytest
import torch
from transformers import GPT2Config, GPT2Model

CHECKING = {"on": True}  # read when the op runs: one compiled package serves all three faults


@torch.library.custom_op("user_faults::checked_scale", mutates_args=())
def checked_scale(x: torch.Tensor, limit: float) -> torch.Tensor:
    if CHECKING["on"] and bool((x.abs() > limit).any()):
        raise ValueError(f"checked_scale: a value past the limit {limit}")
    return x * 2


@checked_scale.register_fake
def _(x, limit):
    return torch.empty_like(x)


class UserActivation(torch.nn.Module):
    # A custom op with a check of its own, and state: export bakes the call count it traced with, eager counts on.
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, h):
        self.calls += 1
        return checked_scale(torch.nn.functional.gelu(h), 1e-3) * self.calls


def gpt2():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=32, vocab_size=50, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2Model(config).eval()
    model.h[0].mlp.act = UserActivation()
    return model


SEQ = {"input_ids": {1: torch.export.Dim("seq", min=2, max=64)}}


@pytest.mark.aoti_ima(stages=["kernels"])
def test_too_many_tokens(aoti_compile):
    # 40 tokens, 32 positions: the position ids are made inside the model (an arange), so no input check sees them.
    compiled = aoti_compile(gpt2(), (torch.randint(0, 50, (1, 8)),), dynamic_shapes=SEQ)
    compiled(torch.randint(0, 50, (1, 40)))


@pytest.mark.aoti_ima(stages=["kernels"])
def test_custom_op_raises(aoti_compile):
    ids = torch.randint(0, 50, (1, 8))
    aoti_compile(gpt2(), (ids,), dynamic_shapes=SEQ)(ids)


def test_stateful_activation(aoti_check, monkeypatch):
    monkeypatch.setitem(CHECKING, "on", False)
    # Export traces one call ahead, as eager's first call: the second input set is where they part.
    ids = [torch.randint(0, 50, (1, 8)) for _ in range(2)]
    aoti_check(gpt2(), (ids[0],), dynamic_shapes=SEQ, more_inputs=[(ids[1],)])
"""


def test_an_index_a_custom_op_and_a_stateful_module_in_gpt2_name_the_op_and_the_line(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makepyfile(test_faults=FAULTS)
    result = run_pytest("--aoti-debug", "-p", "no:logging")
    result.assert_outcomes(failed=3)
    text = result.stdout.str()
    # The plain failures: pytest-aoti's error, naming the kernel or the custom op's line; no C++ frames.
    assert re.search(
        r"AOTIPackageRunError: the package raised in kernel cpp_fused_\w*embedding\w*: index out of bounds: \w+ < 32 ",
        text,
    ), text
    assert re.search(
        r"AOTIPackageRunError: a Python op the package calls \(a custom op\) raised at \S*test_faults\.py:\d+ in "
        r"checked_scale: ValueError: checked_scale: a value past the limit 0\.001",
        text,
    ), text
    # torch's C++ frames stay out of the traceback (the C++ runtime's own print to stderr is captured apart).
    assert not re.search(r"^E\s+frame #\d+", text, re.MULTILINE), text
    # The verdicts lead with the op, its line and the bad index; then the kernel the package ran.
    index = re.search(
        r"^verdict: index out of range in aten\.embedding\.default \(node \w+\) at \S*modeling_gpt2\.py:\d+ in "
        r"forward: position_embeds = self\.wpe\(position_ids\): index 39 outside \[0, 32\) \(dim 0 of a 32x16 table\); "
        r"its inputs: [^\n]*max 39[^\n]*; in the package: (?P<kernel>cpp_fused_\w*embedding\w*);",
        text,
        re.MULTILINE,
    )
    assert index is not None, text
    line = next(line for line in text.splitlines() if line.startswith("verdict: index out of range"))
    assert f"in kernel {index['kernel']} (before_launch with no after_launch) at " in line, line
    assert "bad input" not in line, line  # the token ids are in their range: no input is blamed for the position
    assert re.search(
        r"^verdict: user_faults\.checked_scale\.default \(node checked_scale\) raises in eager too at "
        r"test_faults\.py:\d+ in forward: return checked_scale\(torch\.nn\.functional\.gelu\(h\), 1e-3\) "
        r"\* self\.calls: ValueError: checked_scale: a value past the limit 0\.001; its inputs: gelu \(1x8x64: "
        r"[^)]*\); in the package: aoti_torch_cpu_checked_scale;",
        text,
        re.MULTILINE,
    ), text
    # The divergence: the first divergent kernel is the user's activation's, not transformers' mask kernel (whose
    # cumsum an extern call finishes and whose diff no buffer holds).
    divergent = re.search(
        r"^verdict: [^\n]*; first divergent kernel: (?P<kernel>cpp_fused_\w*mul\w*) \(nodes: [^)]*\) at "
        r"test_faults\.py:\d+ in forward: return checked_scale\(torch\.nn\.functional\.gelu\(h\), 1e-3\) "
        r"\* self\.calls",
        text,
        re.MULTILINE,
    )
    assert divergent is not None, text
    assert "the difference comes from export, not Inductor" in text, text
