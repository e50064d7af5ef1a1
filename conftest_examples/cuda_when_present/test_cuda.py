import pytest
import torch


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(64)
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(self.norm(x)).relu()


@pytest.mark.aoti_ima(timeout=600)
def test_block_fp32(aoti_check):
    aoti_check(Block(), (torch.randn(16, 64),))


def test_block_bf16(aoti_check):
    aoti_check(Block().to(torch.bfloat16), (torch.randn(16, 64, dtype=torch.bfloat16),), rtol=2e-2, atol=2e-2)


def test_cpu_input_is_rejected_before_the_package_runs(aoti_compile, aoti_device):
    from pytest_aoti import AOTIInvariantError
    compiled = aoti_compile(Block(), (torch.randn(16, 64),))
    with pytest.raises(
        AOTIInvariantError, match=r"input 0 \('x'\): device invariant violated: expected cuda:0, got cpu"
    ):
        compiled(torch.randn(16, 64))
