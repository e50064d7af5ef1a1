"""A suite that runs on CUDA where present and skips (never errors) elsewhere."""

import pytest
import torch


@pytest.fixture(scope="session")
def aoti_device() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    return torch.device("cuda:0")
