"""A CPU regression suite over a small model zoo: each model is compiled once per run (then served from the
package cache) and compared with eager on several input sets."""

import pytest
import torch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.head(features)


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(embed_dim=16, num_heads=2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=False)[0]


ZOO = {
    "mlp": (MLP, lambda: (torch.randn(8, 32),)),
    "conv": (ConvNet, lambda: (torch.randn(2, 3, 16, 16),)),
    "attention": (Attention, lambda: (torch.randn(2, 5, 16),)),
}


@pytest.fixture(scope="session")
def aoti_device() -> torch.device:
    """Pin this suite to the CPU, whatever --aoti-device says."""
    return torch.device("cpu")


@pytest.fixture(params=sorted(ZOO))
def zoo_entry(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], list]:
    model_class, make_inputs = ZOO[request.param]
    return model_class().eval(), make_inputs(), [make_inputs() for _ in range(2)]
