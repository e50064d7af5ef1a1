"""Runs under conftest_examples/pytest.ini, which sets the plugin's options: see that file."""

import torch
from torch.export import Dim


def test_ini_settings_reached_the_plugin(pytestconfig):
    assert pytestconfig.getini("aoti_debug") is True
    assert pytestconfig.getini("aoti_rerun_timeout") == "600"


def test_dynamic_batch_over_its_range(aoti_compile, aoti_device):
    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * torch.arange(x.shape[1], device=x.device)

    batch = Dim("batch", min=1, max=64)
    compiled = aoti_compile(Scale(), (torch.randn(4, 6),), dynamic_shapes={"x": {0: batch}})
    for size in (1, 2, 33, 64):
        assert compiled(torch.randn(size, 6, device=aoti_device)).shape == (size, 6)
