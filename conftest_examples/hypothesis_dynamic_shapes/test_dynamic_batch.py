"""Dynamic shapes with Hypothesis: compile once (module scope), then draw inputs over the package's whole Dim range,
boundaries first. A failure comes back shrunk to the smallest failing shape."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.export import Dim

from pytest_aoti import dynamic_inputs
class TokenMixer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mixed = self.proj(tokens).softmax(dim=-1)
        return mixed * mask.unsqueeze(-1)


@pytest.fixture(scope="module")
def mixer(aoti_compile_shared):
    batch = Dim("batch", min=1, max=32)
    seq = Dim("seq", min=2, max=128)
    return aoti_compile_shared(
        TokenMixer().eval(),
        (torch.randn(4, 8, 16), torch.ones(4, 8)),
        dynamic_shapes={"tokens": {0: batch, 1: seq}, "mask": {0: batch, 1: seq}},
    )


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_matches_eager_over_the_range(mixer, data):
    tokens, mask = data.draw(dynamic_inputs(mixer))
    assert tokens.shape[:2] == mask.shape
    torch.testing.assert_close(mixer(tokens, mask), mixer.exported_program.module()(tokens, mask))
