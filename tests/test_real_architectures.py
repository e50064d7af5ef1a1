"""Verdicts on real architectures (issue 61): transformers models built from tiny configs in code (random weights, no
download), with faults injected the way a user's bug brings them. Each case asserts the op, the kernel where one is
known, and the user's line. The GPU twin is ``tests/gpu/test_real_architectures_cuda.py``."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest

pytest.importorskip("transformers", reason="the real-architecture scenarios need transformers (pip install .[test])")

# GPT-2 (an additive causal mask: its -inf is by design) with a user's activation that makes a NaN in block 1, and a
# ResNet whose BatchNorm has negative running variances (a checkpoint converted with the wrong sign), fused by
# Inductor with the ReLU after it. One inner session: one fork of the warm server, one debug rerun per test.
NAN_MODELS = """
import torch
from transformers import GPT2Config, GPT2Model, ResNetConfig, ResNetModel


class UserActivation(torch.nn.Module):
    def forward(self, h):
        return torch.log(h - 100.0)


def test_gpt2_nan(aoti_check):
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=32, vocab_size=50, use_cache=False)
    model = GPT2Model(config).eval()
    model.h[1].mlp.act = UserActivation()
    aoti_check(model, (torch.randint(0, 50, (1, 8)),))


def test_resnet_negative_variance(aoti_check):
    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
    model = ResNetModel(config).eval()
    norm = model.encoder.stages[1].layers[0].layer[0].normalization
    with torch.no_grad():
        norm.running_var[:4] = -1.0
    aoti_check(model, (torch.randn(1, 3, 32, 32),))
"""


def test_a_nan_in_a_real_decoder_and_a_fused_batch_norm_is_traced_to_the_op_that_made_it(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """GPT-2's NaN is not blamed on the causal mask's -inf but on the user's log, with its line; the ResNet's is
    blamed on the BatchNorm (``transformers``' ``self.normalization(hidden_state)``), not on the ReLU fused after it."""
    pytester.makepyfile(test_models=NAN_MODELS)
    result = run_pytest("--aoti-debug", "-p", "no:logging")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    gpt2 = re.search(
        r"^verdict: NaN made by aten\.log\.default \(node log\) at test_models\.py:\d+ in forward: "
        r"return torch\.log\(h - 100\.0\)",
        text,
        re.MULTILINE,
    )
    assert gpt2 is not None, text
    resnet = re.search(
        r"^verdict: NaN made by aten\.batch_norm\.default \(node (\w+)\) at \S*modeling_resnet\.py:\d+ "
        r"in forward: [^\n]*normalization",
        text,
        re.MULTILINE,
    )
    assert resnet is not None, text
    # The verdicts lead with the op, not with the kernel's first line or the mask kernel.
    for line in re.findall(r"^verdict: [^\n]*", text, re.MULTILINE):
        assert line.startswith("verdict: NaN made by"), line


# transformers' RWKV returns its state in a custom container: the package returns more leaves than the exported
# output spec holds, and torch's package call raises a bare ValueError from its pytree code.
RWKV = """
import torch
from transformers import RwkvConfig, RwkvModel


def test_rwkv(aoti_check):
    torch.manual_seed(0)
    config = RwkvConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, attention_hidden_size=16,
                        intermediate_size=32, context_length=16)
    aoti_check(RwkvModel(config).eval(), (torch.randint(0, 50, (1, 4)),))
"""


def test_a_package_whose_outputs_do_not_fit_its_spec_is_a_pytest_aoti_error(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """Issue 61 item 5: RWKV's package returns more outputs than its spec holds; the failure says so, with no torch
    frames."""
    pytester.makepyfile(test_rwkv=RWKV)
    result = run_pytest("-p", "no:logging")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert re.search(
        r"AOTIOutputSpecError: the package returned \d+ outputs, but its exported output spec \(RwkvOutput\) holds "
        r"\d+",
        text,
    ), text
    assert "_pytree.py" not in text and "torch/_inductor" not in text, text


EXPORT_CHANGES = """
import torch


class TakesAnotherPathUnderExport(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            return torch.sin(x) * 2
        return torch.sin(x)


def test_export_changed(aoti_check):
    aoti_check(TakesAnotherPathUnderExport(), (torch.randn(4, 4),))
"""


def test_a_mismatch_that_export_made_says_so_not_that_the_package_is_less_accurate(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """Issue 61 item 3: without --aoti-debug, a mismatch whose exported program already differs from eager (a branch
    on ``torch.compiler.is_exporting()``, as transformers has) says "export changed the model"."""
    pytester.makepyfile(test_export=EXPORT_CHANGES)
    result = run_pytest("-p", "no:logging")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert (
        "AOTIMismatchError: export changed the model at graph node sin (aten.sin.default), made at test_export.py:7 "
        "in forward: return torch.sin(x) * 2, a line eager did not run: the exported program run eagerly"
    ) in text, text
    assert "less accurate" not in text, text


def test_a_real_architecture_branching_on_export_names_its_line() -> None:
    """Issue 61 item 3 on a real architecture: a GPT-2 block's MLP wrapped in a user's module that branches on
    ``torch.compiler.is_exporting()`` (as transformers' own code does) is named at its line."""
    import torch
    from transformers import GPT2Config, GPT2Model

    from pytest_aoti.core.export_paths import first_node_off_eagers_path

    config = GPT2Config(
        n_layer=2, n_embd=16, n_head=2, n_positions=16, vocab_size=64, use_cache=False, bos_token_id=0, eos_token_id=0
    )
    model = GPT2Model(config).eval()

    class ScaledUnderExport(torch.nn.Module):
        def __init__(self, mlp: torch.nn.Module) -> None:
            super().__init__()
            self.mlp = mlp

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            out = self.mlp(h)
            if torch.compiler.is_exporting():
                out = out * 0.5
            return out

    model.h[1].mlp = ScaledUnderExport(model.h[1].mlp)
    ids = torch.randint(0, 64, (1, 8))
    program = torch.export.export(model, (ids,))
    found = first_node_off_eagers_path(program, model, (ids,), {})
    assert found is not None and found.line.text == "out = out * 0.5", found
