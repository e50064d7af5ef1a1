"""One package for every GPU of a kind (issue 52). The package key leaves out the GPU index: the same model exported
on cuda:0 and on cuda:1 has one key, a package compiled on cuda:0 is loaded for cuda:1 (``device_index=1``) and
computes there, and the same test on two xdist workers, each on its own GPU, compiles once. A model split over two
GPUs keeps their indices in its key. Needs two visible GPUs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from pytest_aoti.core.cache import PackageCache
from pytest_aoti.core.cache_key import key_parts
from pytest_aoti.core.compiler import compile_model
from tests.conftest import RunPytest
from tests.gpu.test_multi_gpu import _require_two_gpus

pytestmark = pytest.mark.gpu


class Affine(torch.nn.Module):
    """Weights, a buffer and an ``arange`` made in forward on the input's device: each names the GPU in the
    exported program."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.register_buffer("shift", torch.rand(32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        position = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
        return torch.nn.functional.gelu(self.norm(self.linear(x))) + self.shift + position


class Split(torch.nn.Module):
    """A model split over two GPUs: the graph names both, by the user's choice."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__()
        self.first = torch.nn.Linear(16, 16).to(first)
        self.second = torch.nn.Linear(16, 16).to(second)
        self.second_device = second

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)).to(self.second_device))


def _parts(model: torch.nn.Module, x: torch.Tensor) -> tuple[str, str]:
    """The key of ``model`` exported on ``x``, and the GPUs its graph pins (compiled for ``x``'s GPU)."""
    parts = key_parts(torch.export.export(model, (x,)), {}, x.device)
    return parts.key, parts.shown["gpus"]


def test_one_key_on_every_gpu_unless_the_graph_pins_its_gpus() -> None:
    _require_two_gpus()
    torch.manual_seed(0)
    model, x = Affine(), torch.randn(8, 32)
    on_gpu = [_parts(copy.deepcopy(model).to(f"cuda:{i}"), x.to(f"cuda:{i}")) for i in (0, 1)]
    assert on_gpu[0] == on_gpu[1] and on_gpu[0][1] == ""
    torch.manual_seed(0)
    forward = _parts(Split("cuda:0", "cuda:1"), torch.randn(4, 16, device="cuda:0"))
    torch.manual_seed(0)
    backward = _parts(Split("cuda:1", "cuda:0"), torch.randn(4, 16, device="cuda:1"))
    assert forward[1] == backward[1] == "cuda:0,cuda:1"
    assert forward[0] != backward[0]  # each serves only the placement it was compiled for


def test_a_package_compiled_on_one_gpu_computes_on_another(tmp_path: Path) -> None:
    """What an xdist worker on cuda:1 does with the package a worker on cuda:0 compiled: its current device is its
    GPU (the aoti_device fixture sets it), the key is the same, the package is loaded with device_index=1."""
    _require_two_gpus()
    cache = PackageCache.open(tmp_path / "cache", max_bytes=1 << 30)
    assert cache is not None
    torch.manual_seed(0)
    model, x = Affine(), torch.randn(8, 32)
    compiled = []
    for index in (0, 1):
        device = torch.device("cuda", index)
        with torch.cuda.device(index):
            package_dir = tmp_path / f"gpu{index}"
            compiled.append(
                compile_model(copy.deepcopy(model).to(device), (x.to(device),), package_dir=package_dir, cache=cache)
            )
    assert [c.from_cache for c in compiled] == [False, True]
    assert (cache.stats.misses, cache.stats.hits) == (1, 1)
    with torch.cuda.device(1):
        on_one = x.to("cuda:1")
        out = compiled[1](on_one)
        assert out.device == torch.device("cuda", 1)
        torch.testing.assert_close(out, copy.deepcopy(model).to("cuda:1")(on_one), rtol=1e-4, atol=1e-4)
    for built in compiled:
        built.release()


SAME_TEST = """
import os

import torch


def test_same_model(aoti_check, aoti_device):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    compiled = aoti_check(model, (torch.randn(16, 32),))
    out = compiled(torch.randn(16, 32, device=aoti_device))
    assert compiled.device == aoti_device and out.device == aoti_device
    worker = os.environ.get("PYTEST_XDIST_WORKER", "none")
    with open(os.path.join(os.path.dirname(__file__), f"ran-on-{worker}.txt"), "w") as record:
        record.write(f"{aoti_device} from_cache={compiled.from_cache}")
"""


def test_the_same_test_on_two_gpus_compiles_once(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path
) -> None:
    """``-n 2 --dist each``: the test runs on gw0 (cuda:0) and on gw1 (cuda:1); one compiles, the other waits on the
    entry's lock and loads that package for its own GPU."""
    _require_two_gpus()
    pytester.makepyfile(test_same=SAME_TEST)
    result = run_pytest("-p", "no:logging", "-n", "2", "--dist", "each", "-v", cache=tmp_path / "cache")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["aoti cache: 1 hits, 1 misses, *, 1 of them new (no earlier entry)"])
    ran = {path.name: path.read_text() for path in pytester.path.glob("ran-on-gw*.txt")}
    assert sorted(ran) == ["ran-on-gw0.txt", "ran-on-gw1.txt"], ran
    assert ran["ran-on-gw0.txt"].startswith("cuda:0 ") and ran["ran-on-gw1.txt"].startswith("cuda:1 "), ran
    assert sorted(text.split(" ")[1] for text in ran.values()) == ["from_cache=False", "from_cache=True"], ran
    # The one miss had no earlier entry to compare with: counted above, not named (issue 63, item 4).
    assert [line for line in result.stdout.lines if " missed" in line] == []
