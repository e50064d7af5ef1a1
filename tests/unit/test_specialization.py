"""The specialization audit: a dim asked to be dynamic that export made static fails before compiling, naming the
input, the dim, the size and the likely cause (export only: nothing is compiled)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.export import Dim

from pytest_aoti.core.compiler import compile_model
from pytest_aoti.core.dims import ExportCall, specialized_dims
from pytest_aoti.core.errors import AOTISpecializationError
from pytest_aoti.core.invariants import program_spec


class ReadsWidth(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + torch.ones(int(x.shape[1]))


def _found(model: torch.nn.Module, x: torch.Tensor, dims: dict[int, object]) -> list[str]:
    shapes = {"x": dims}
    ep = torch.export.export(model, (x,), dynamic_shapes=shapes)
    return specialized_dims(ExportCall(model, (x,), {}, shapes), program_spec(ep))


def test_auto_made_static_by_the_model_is_named_with_its_cause() -> None:
    (found,) = _found(ReadsWidth(), torch.randn(4, 16), {0: Dim.AUTO, 1: Dim.AUTO})
    assert found.startswith("input 'x' dim 1 (Dim.AUTO) was specialized to 16 by export; the package accepts only 16")
    assert "int(x.shape[1])" in found


def test_a_size_one_example_is_named_as_the_cause() -> None:
    (found,) = _found(ReadsWidth(), torch.randn(1, 16), {0: Dim.AUTO})
    assert "input 'x' dim 0 (Dim.AUTO) was specialized to 1" in found
    assert "export specializes sizes 0 and 1: give an example of size >= 2" in found


def test_dynamic_and_static_requests_pass() -> None:
    assert _found(ReadsWidth(), torch.randn(4, 16), {0: Dim.AUTO, 1: Dim.STATIC}) == []
    assert _found(ReadsWidth(), torch.randn(4, 16), {0: Dim("batch")}) == []


def test_compile_model_fails_before_compiling(tmp_path: Path) -> None:
    with pytest.raises(AOTISpecializationError, match=r"dim 1 \(Dim.AUTO\) was specialized to 16.*allow_specialized"):
        compile_model(ReadsWidth(), (torch.randn(4, 16),), package_dir=tmp_path, dynamic_shapes={"x": {1: Dim.AUTO}})
    assert not list(tmp_path.iterdir())  # nothing was built
