"""A model's package key is the same in every process: computed in two fresh interpreters, from two checkouts in
different directories, with different hash seeds, for models of the kinds the suites compile. A key that changes
between processes recompiles the model in every run, warm cache or not (issue 52: a tensor-subclass parameter, whose
bytes were read from address 0)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_aoti.core.machine import machine_identity

MODELS = """
import torch
from torch.testing._internal.two_tensor import TwoTensor


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def forward(self, x):
        return self.layers(x)


class ConvBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return self.norm(self.conv(x))


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


class SubclassParameter(torch.nn.Module):
    # PyTorch's test_tensor_subclass_parameter: a parameter that is a tensor subclass.
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(TwoTensor(torch.randn(3, 4), torch.randn(3, 4)))

    def forward(self, x):
        return x + self.p


class BufferAndArange(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.rand(5))

    def forward(self, x):
        return x * self.scale + torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)


class Branches(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


MODELS = {
    "mlp": (lambda: MLP(), (4, 8)),
    "conv_batchnorm": (lambda: ConvBatchNorm().eval(), (2, 3, 8, 8)),
    "multihead_attention": (lambda: Attention().eval(), (2, 5, 16)),
    "tensor_subclass_parameter": (lambda: SubclassParameter(), (3, 4)),
    "buffer_and_arange": (lambda: BufferAndArange(), (2, 5)),
    "cond": (lambda: Branches(), (3,)),
}
"""

KEYS = """
import json
import sys

import torch

sys.path.insert(0, sys.argv[1])
import stability_models

from pytest_aoti.core.cache_key import package_key

keys = {}
for name, (make, shape) in stability_models.MODELS.items():
    torch.manual_seed(0)
    model = make()
    keys[name] = package_key(torch.export.export(model, (torch.randn(*shape),)), {}, torch.device("cpu"))
print(json.dumps(keys))
"""


def _keys_in_a_fresh_interpreter(checkout: Path, hash_seed: str) -> dict[str, str]:
    """Each model's key, computed by a new Python run from ``checkout`` (the models' file is there)."""
    checkout.mkdir(parents=True)
    (checkout / "stability_models.py").write_text(MODELS)
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", KEYS, str(checkout)], cwd=checkout, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    keys: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return keys


def test_every_models_key_is_the_same_in_two_processes(tmp_path: Path) -> None:
    first = _keys_in_a_fresh_interpreter(tmp_path / "checkout-a", hash_seed="1")
    second = _keys_in_a_fresh_interpreter(tmp_path / "elsewhere" / "checkout-b", hash_seed="2")
    assert (
        set(first)
        == set(second)
        == {
            "mlp",
            "conv_batchnorm",
            "multihead_attention",
            "tensor_subclass_parameter",
            "buffer_and_arange",
            "cond",
        }
    )
    changed = sorted(name for name in first if first[name] != second[name])
    assert changed == [], f"keys that changed between two processes: {changed}"


COMPILER_PART = """
import json

import torch

from pytest_aoti.core.cache_key import key_parts
from pytest_aoti.core.machine import machine_identity
from pytest_aoti.core.torch_private import cpp_compiler

program = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
shown = key_parts(program, {}, torch.device("cpu")).shown["compiler"]
print(json.dumps({"inductor": cpp_compiler(), "machine": machine_identity().cxx.identity, "key": shown}))
"""


def test_a_cxx_of_another_compiler_changes_the_key_as_inductor_compiles(tmp_path: Path) -> None:
    """``$CXX`` names the compiler Inductor builds with (read once, when its config is imported): the key's compiler
    part is that one, the machine identity's, not one the key finds by itself."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ here to stand behind another compiler's name")
    other = tmp_path / "other-c++"
    other.write_text('#!/bin/sh\nexec g++ "$@"\n')
    other.chmod(0o755)
    env = {**os.environ, "CXX": str(other)}
    done = subprocess.run(
        [sys.executable, "-c", COMPILER_PART], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["inductor"] == str(other)
    assert seen["key"] == seen["machine"] and seen["key"].startswith(f"{other}: ")
    assert seen["key"] != machine_identity().cxx.identity
