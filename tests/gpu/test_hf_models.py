"""Hugging Face models on a real GPU, built from their configs (no download): a bfloat16 BERT under aoti_check's
default tolerance (the float64 judge), a token id past the vocabulary refused before the package runs (the context
stays healthy for the test after it), and the package of a model that returns a ModelOutput in a fresh interpreter."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest, junit_cases
from tests.gpu.test_cuda_debug import _keep

pytestmark = pytest.mark.gpu

HF_TESTS = """
import pytest
import torch

transformers = pytest.importorskip("transformers")

CONFIG = transformers.BertConfig(
    vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
    max_position_embeddings=64,
)


def ids(device):
    return torch.randint(0, 100, (4, 32), device=device)


def test_bert_bf16(aoti_check, aoti_device):
    model = transformers.BertModel(CONFIG).to(torch.bfloat16).eval()
    aoti_check(model, (ids(aoti_device),), more_inputs=[(ids(aoti_device),)])


def test_bert_token_past_the_vocabulary(aoti_compile, aoti_device):
    compiled = aoti_compile(transformers.BertModel(CONFIG).eval(), (ids(aoti_device),))
    bad = ids(aoti_device)
    bad[1, 3] = 5000
    compiled(bad)


def test_cuda_after(aoti_device):
    assert torch.ones(2, device=aoti_device).sum().item() == 2
"""


def test_hugging_face_bert_on_cuda(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytest.importorskip("transformers")
    pytester.makepyfile(test_user=HF_TESTS)
    result = run_pytest("-p", "no:logging", "--aoti-debug", "-n", "2", "--junitxml=report.xml", "-rA")
    _keep("hf_bert", result)
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()
    assert re.search(
        r"input 0 \('input_ids'\): index invariant violated: expected row indices in \[0, 100\), got 1 value\(s\) "
        r"of 128 outside \(min \d+, max 5000\); first at index \(1, 3\): 5000; it indexes the 100 rows read by "
        r"aten.embedding of embeddings.word_embeddings.weight at ",
        text,
    ), text
    assert "in forward: inputs_embeds = self.word_embeddings(input_ids)" in text
    cases = junit_cases(pytester.path / "report.xml")
    assert cases["test_bert_bf16"]["outcomes"] == []
    # Recorded either way (the judge runs only where assert_close's bfloat16 defaults reject an output).
    print("float64 judge:", cases["test_bert_bf16"]["properties"].get("aoti_float64_judge"))  # type: ignore[union-attr]
