"""tests/gpu needs a CUDA device: without one every test here is skipped with a reason, never errors."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="tests/gpu needs a CUDA device")
    for item in items:
        if "tests/gpu/" in item.nodeid:
            item.add_marker(skip)
