"""Golden outputs without a compile: the comparison's numbers, the file format, the file names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from pytest_aoti.core.environment import environment_diff
from pytest_aoti.core.errors import AOTISnapshotError
from pytest_aoti.snapshots.files import snapshot_path
from pytest_aoti.snapshots.golden import GoldenOutputs, compare
from pytest_aoti.snapshots.golden_file import GoldenFile


def test_the_smallest_passing_tolerances_pass_and_anything_smaller_fails() -> None:
    golden = torch.tensor([[1.0, -2.0], [0.5, 4.0]])
    got = golden + torch.tensor([[0.0, 1e-3], [0.0, -2e-2]])
    diff = compare("out", got, golden, rtol=1e-4, atol=1e-5)
    assert diff is not None
    assert (diff.beyond, diff.total, diff.max_abs_at) == (2, 4, (1, 1))
    assert diff.max_abs == pytest.approx(2e-2)
    assert (diff.got, diff.golden) == (pytest.approx(3.98), 4.0)
    # Each suggestion passes exactly, with the other tolerance as given; a little less fails.
    assert compare("out", got, golden, rtol=1e-4, atol=diff.needed_atol) is None
    assert compare("out", got, golden, rtol=1e-4, atol=diff.needed_atol * 0.99) is not None
    assert compare("out", got, golden, rtol=diff.needed_rtol, atol=1e-5) is None
    assert compare("out", got, golden, rtol=diff.needed_rtol * 0.99, atol=1e-5) is not None
    assert "passes with atol >= 0.0196 (at rtol 0.0001) or rtol >= 0.004997 (at atol 1e-05)" in "\n".join(
        diff.lines(1e-4, 1e-5)
    )


def test_nan_matches_nan_and_nothing_else() -> None:
    golden = torch.tensor([float("nan"), 1.0, float("inf"), 0.0])
    assert compare("out", golden.clone(), golden, rtol=0, atol=0) is None
    moved = torch.tensor([float("nan"), float("nan"), float("inf"), 1e-3])
    diff = compare("out", moved, golden, rtol=0, atol=0)
    assert diff is not None and diff.unmatched_nonfinite == 1 and diff.beyond == 2
    assert "no tolerance passes" in "\n".join(diff.lines(0, 0))
    # A golden 0 that moved: no rtol can pass it.
    only_zero = compare("out", torch.tensor([1e-3]), torch.tensor([0.0]), rtol=0, atol=0)
    assert only_zero is not None and math.isinf(only_zero.needed_rtol)
    assert "no rtol (a golden value is 0)" in "\n".join(only_zero.lines(0, 0))


def test_dtype_and_shape_changes_are_named() -> None:
    golden = torch.ones(2, 3)
    assert compare("out", golden.to(torch.bfloat16), golden, 0, 0).problem == (  # type: ignore[union-attr]
        "dtype torch.float32 (golden) → torch.bfloat16"
    )
    assert compare("out", torch.ones(3, 2), golden, 0, 0).problem == "shape (2, 3) (golden) → (3, 2)"  # type: ignore[union-attr]


def test_golden_file_round_trips_bf16_and_pytree_names(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    goldens = GoldenOutputs(path, missing="write")
    value = {"logits": (torch.randn(2, 3).to(torch.bfloat16), torch.arange(4)), "meta": 7}
    assert goldens.check("snapshot0", value) == "written"
    stored = GoldenFile.read(path)
    assert set(stored.tensors) == {"cpu/snapshot0['logits'][0]", "cpu/snapshot0['logits'][1]"}
    assert stored.tensors["cpu/snapshot0['logits'][0]"].dtype == torch.bfloat16
    assert torch.equal(stored.tensors["cpu/snapshot0['logits'][0]"], value["logits"][0])  # type: ignore[index]
    assert stored.others == {"cpu/snapshot0['meta']": "7"}
    assert stored.environments["cpu"]["torch"] == torch.__version__
    assert GoldenOutputs(path, missing="fail").check("snapshot0", value) == "matched"
    with pytest.raises(AOTISnapshotError, match=r"cpu/snapshot0\['meta'\]: 7 \(golden\) → 8"):
        GoldenOutputs(path, missing="fail").check("snapshot0", {**value, "meta": 8})


def test_update_drops_what_the_test_no_longer_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    first = GoldenOutputs(path, missing="write")
    first.check("old", torch.ones(2))
    first.check("kept", torch.ones(2))
    assert GoldenOutputs(path, missing="write", update=True).check("kept", torch.zeros(2)) == "updated"
    assert set(GoldenFile.read(path).tensors) == {"cpu/kept"}
    assert not list(tmp_path.glob(".partial-*"))


def test_a_missing_golden_where_none_may_be_written(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    with pytest.raises(AOTISnapshotError, match=r"no golden outputs for snapshot 'snapshot0' on cpu in .*CI is set"):
        GoldenOutputs(path, missing="fail").check("snapshot0", torch.ones(2))
    # A debug rerun neither writes nor fails.
    assert GoldenOutputs(path, missing="skip").check("snapshot0", torch.ones(2)) == "missing"
    assert not path.exists()


def test_a_file_that_is_not_a_golden_file(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    path.write_bytes(b"not safetensors")
    with pytest.raises(AOTISnapshotError, match=r"golden.safetensors: not a readable golden file"):
        GoldenOutputs(path, missing="write").check("snapshot0", torch.ones(2))


def test_environment_diff_names_each_change_but_not_the_package() -> None:
    recorded = {"torch": "2.11.0+cu130", "gpu": "NVIDIA H100 (sm_90)", "package": "a" * 64}
    now = {"torch": "2.13.0", "cpu": "AMD EPYC", "package": "b" * 64}
    assert environment_diff(recorded, now) == [
        "torch 2.11.0+cu130 → 2.13.0",
        "gpu NVIDIA H100 (sm_90) → (none)",
        "cpu (not recorded) → AMD EPYC",
    ]
    assert environment_diff(now, dict(now)) == []


def test_file_names_from_test_ids(tmp_path: Path) -> None:
    test_file = tmp_path / "tests" / "test_model.py"
    assert snapshot_path(test_file, "TestA::test_b[cuda-x/y]") == (
        tmp_path / "tests" / "__aoti_snapshots__" / "test_model" / "TestA.test_b[cuda-x%2Fy].safetensors"
    )
    long = snapshot_path(test_file, "test_" + "x" * 300)
    assert len(long.name) < 255 and long != snapshot_path(test_file, "test_" + "x" * 299)
