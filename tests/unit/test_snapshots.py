"""Golden outputs without a compile: the comparison's numbers, the file format, the file names."""

from __future__ import annotations

import collections
import contextlib
import math
import os
import re
import shutil
import stat
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from pytest_aoti.shared.environment import environment_diff
from pytest_aoti.shared.output_diff import compare
from pytest_aoti.snapshots.errors import AOTISnapshotError
from pytest_aoti.snapshots.files import file_name, snapshot_path
from pytest_aoti.snapshots.golden import GoldenOutputs
from pytest_aoti.snapshots.golden_file import GoldenFile


def test_the_smallest_passing_tolerances_pass_and_anything_smaller_fails() -> None:
    golden = torch.tensor([[1.0, -2.0], [0.5, 4.0]])
    got = golden + torch.tensor([[0.0, 1e-3], [0.0, -2e-2]])
    diff = compare("out", got, golden, rtol=1e-4, atol=1e-5)
    assert diff is not None
    assert (diff.beyond, diff.total, diff.max_abs_at) == (2, 4, (1, 1))
    assert diff.max_abs == pytest.approx(2e-2)
    assert diff.got == pytest.approx(3.98) and diff.golden == 4.0
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


def test_an_empty_golden_file_is_rewritten_by_an_update_and_named_without_one(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    path.write_bytes(b"")
    with pytest.raises(AOTISnapshotError, match=r"golden.safetensors: an empty file, not a golden file; delete it .*"
                                                r"or rewrite it with --aoti-snapshot-update"):  # fmt: skip
        GoldenOutputs(path, missing="write").check("snapshot0", torch.ones(2))
    assert GoldenOutputs(path, missing="fail", update=True).check("snapshot0", torch.ones(2)) == "written"
    assert GoldenOutputs(path, missing="fail").check("snapshot0", torch.ones(2)) == "matched"
    assert GoldenFile.read(path).snapshots == {"cpu/snapshot0": ["cpu/snapshot0"]}


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


def test_test_ids_that_differ_only_where_a_file_name_cannot_hold_them_get_their_own_files() -> None:
    ids = ["t[x*2]", "t[x/2]", "t[x_2]", "t[x%2F2]", "t[x:2]", "t[a::b]", "t[a.b]", "A::t", "A.t", "t[é]", "t[e]"]
    names = [file_name(test_id) for test_id in ids]
    assert len(set(names)) == len(ids), names
    assert all("/" not in name and ":" not in name and "*" not in name for name in names)
    assert file_name("TestA::test_b[cpu-1.5]") == "TestA.test_b[cpu-1.5]"  # a readable id stays as it was


@given(st.text(max_size=12), st.text(max_size=12))
def test_one_golden_file_per_test_id(first: str, second: str) -> None:
    assume(first != second)
    assert file_name(f"test_m[{first}]") != file_name(f"test_m[{second}]")
    assert file_name(f"Test{first}::test_m") != file_name(f"Test{second}::test_m")


def test_complex_outputs_are_compared_on_both_parts(tmp_path: Path) -> None:
    golden = torch.tensor([1 + 2j, 3 - 1j])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "casting complex values to real discards the imaginary part"
        diff = compare("out", torch.tensor([1 + 500j, 3 - 1j]), golden, rtol=1e-5, atol=1e-8)
    assert diff is not None and (diff.beyond, diff.max_abs_at, diff.max_abs) == (1, (0,), 498.0)
    assert "(got (1+500j), golden (1+2j))" in diff.lines(1e-5, 1e-8)[0]
    nan_moved = compare("out", torch.tensor([complex(1, math.nan)]), torch.tensor([complex(math.nan, 1)]), 0, 0)
    assert nan_moved is not None and nan_moved.unmatched_nonfinite == 1
    assert compare("out", torch.tensor([complex(1, math.nan)]), torch.tensor([complex(1, math.nan)]), 0, 0) is None
    # complex128, which safetensors has no code for, is stored and read back as itself.
    path = tmp_path / "golden.safetensors"
    wide = golden.to(torch.complex128) / 3
    assert GoldenOutputs(path, missing="write").check("snapshot0", wide) == "written"
    assert GoldenOutputs(path, missing="fail").check("snapshot0", wide) == "matched"
    with pytest.raises(AOTISnapshotError, match=r"cpu/snapshot0: 1 of 2 element\(s\) beyond tolerance"):
        GoldenOutputs(path, missing="fail").check("snapshot0", wide + torch.tensor([0, 1e-3j]))


def test_an_output_without_leaves_is_a_golden_too(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    assert GoldenOutputs(path, missing="write").check("snapshot0", ()) == "written"
    assert GoldenOutputs(path, missing="fail").check("snapshot0", ()) == "matched"
    with pytest.raises(AOTISnapshotError, match=r"cpu/snapshot0\[0\]: in this run's outputs, not in the golden"):
        GoldenOutputs(path, missing="write").check("snapshot0", (torch.ones(2),))


def test_a_name_that_extends_another_is_its_own_snapshot_and_a_name_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    for expected in ("written", "matched"):
        goldens = GoldenOutputs(path, missing="write")
        assert goldens.check("logits", torch.ones(2), user_name=True) == expected
        assert goldens.check("logits.aux", torch.zeros(3), user_name=True) == expected
        with pytest.raises(ValueError, match=r"snapshot name 'logits' is used twice in this test"):
            goldens.check("logits", torch.ones(2), user_name=True)
    updating = GoldenOutputs(path, missing="write", update=True)
    assert updating.check("logits", torch.full((2,), 2.0), user_name=True) == "updated"
    assert updating.check("logits.aux", torch.zeros(3), user_name=True) == "matched"  # its golden before the update
    assert GoldenOutputs(path, missing="fail").check("logits", torch.full((2,), 2.0), user_name=True) == "matched"
    # A default name the test took for a snapshot of its own is passed over.
    named_first = GoldenOutputs(tmp_path / "other.safetensors", missing="write")
    named_first.check("snapshot0", torch.ones(1), user_name=True)
    assert named_first.next_name("snapshot") == "snapshot1"


def test_two_names_whose_outputs_would_share_a_key_are_refused(tmp_path: Path) -> None:
    pair = collections.namedtuple("pair", ["main", "aux"])
    goldens = GoldenOutputs(tmp_path / "golden.safetensors", missing="write")
    goldens.check("logits.aux", torch.zeros(3), user_name=True)
    with pytest.raises(AOTISnapshotError, match=r"its output 'cpu/logits.aux' is stored for snapshot 'cpu/logits.aux'"):
        goldens.check("logits", pair(torch.ones(1), torch.ones(1)), user_name=True)


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({"environments": "{}"}, "golden file metadata 'others' is missing"),
        ({"others": "{not json", "environments": "{}"}, "golden file metadata 'others' is not JSON"),
        ({"others": "[]", "environments": "{}"}, "golden file metadata 'others' does not have the shape"),
        ({"others": "{}", "environments": '{"cpu": 3}'}, "golden file metadata 'environments' does not have"),
        (
            {"others": "{}", "environments": "{}", "snapshots": '{"cpu/a": ["cpu/b"]}'},
            "golden file metadata 'snapshots' lists",
        ),
    ],
)
def test_a_golden_file_of_ours_with_garbled_metadata(tmp_path: Path, metadata: dict[str, str], problem: str) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "golden.safetensors"
    save_file({"cpu/snapshot0": torch.ones(1)}, str(path), metadata={"format": "pytest-aoti snapshot 1", **metadata})
    with pytest.raises(AOTISnapshotError) as raised:
        GoldenOutputs(path, missing="write").check("snapshot0", torch.ones(1))
    assert str(raised.value).startswith(f"{path}: {problem}")
    assert "restore the file from version control, or delete it" in str(raised.value)


def test_a_snapshot_directory_that_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "snapshots").write_text("a file where the directory goes")
    path = tmp_path / "snapshots" / "test_m" / "test_a.safetensors"
    with pytest.raises(AOTISnapshotError, match=rf"cannot write golden file {re.escape(str(path))}: Not a directory"):
        GoldenOutputs(path, missing="write").check("snapshot0", torch.ones(1))
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o555)
    with _unwritable_even_for_root(read_only):
        with pytest.raises(
            AOTISnapshotError, match=r"cannot write golden file .*: (Permission denied|Operation not permitted)"
        ):
            GoldenOutputs(read_only / "a" / "t.safetensors", missing="write").check("snapshot0", torch.ones(1))
    assert not list(read_only.iterdir())


@contextlib.contextmanager
def _unwritable_even_for_root(directory: Path) -> Iterator[None]:
    """A 0555 directory, which root writes into anyway: as root, made immutable (``chattr +i``) while in use."""
    if not os.access(directory, os.W_OK):
        yield
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(directory)], capture_output=True).returncode != 0:
        pytest.skip("root writes into read-only directories, and this file system cannot make one immutable")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(directory)], check=True)


def _generator() -> Iterator[int]:
    yield 1


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (object(), "snapshot 'snapshot0': a value of type object; a snapshot holds tensors and plain values"),
        (
            _generator(),
            "snapshot 'snapshot0': a value of type generator (a generator or iterator: pass list(...) of it)",
        ),
        ({"w": torch.eye(2).to_sparse()}, "snapshot \"snapshot0['w']\": a tensor of layout torch.sparse_coo"),
    ],
)
def test_values_a_golden_file_cannot_hold_are_refused(tmp_path: Path, value: object, problem: str) -> None:
    path = tmp_path / "golden.safetensors"
    with pytest.raises(TypeError) as raised:
        GoldenOutputs(path, missing="write").check("snapshot0", value)
    assert str(raised.value).startswith(problem) and " at 0x" not in str(raised.value)
    assert not path.exists()


def test_a_name_that_is_not_a_string(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"^snapshot name: expected a string, got int 5$"):
        GoldenOutputs(tmp_path / "golden.safetensors", missing="write").check(5, torch.ones(1), user_name=True)  # type: ignore[arg-type]


def test_golden_files_are_as_readable_as_the_umask_allows(tmp_path: Path) -> None:
    path = tmp_path / "golden.safetensors"
    previous = os.umask(0o022)
    try:
        GoldenOutputs(path, missing="write").check("snapshot0", torch.ones(1))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_golden_file_from_before_the_snapshot_lists_still_matches_and_update_rewrites_it(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "golden.safetensors"
    legacy = {"format": "pytest-aoti snapshot 1", "others": '{"cpu/logits.aux[1]": "7"}', "environments": "{}"}
    save_file({"cpu/logits": torch.ones(2), "cpu/logits.aux[0]": torch.zeros(3)}, str(path), metadata=legacy)
    assert GoldenOutputs(path, missing="fail").check("logits.aux", (torch.zeros(3), 7), user_name=True) == "matched"
    # Read by name prefix, as it was written, "logits" took "logits.aux" too; an update separates them for good.
    with pytest.raises(AOTISnapshotError, match=r"cpu/logits.aux\[0\]: in the golden, not in this run's outputs"):
        GoldenOutputs(path, missing="fail").check("logits", torch.ones(2), user_name=True)
    updating = GoldenOutputs(path, missing="fail", update=True)
    assert updating.check("logits", torch.ones(2), user_name=True) == "updated"
    assert updating.check("logits.aux", (torch.zeros(3), 7), user_name=True) == "matched"  # and rewritten
    assert GoldenFile.read(path).snapshots == {
        "cpu/logits": ["cpu/logits"],
        "cpu/logits.aux": ["cpu/logits.aux[0]", "cpu/logits.aux[1]"],
    }
    assert GoldenOutputs(path, missing="fail").check("logits", torch.ones(2), user_name=True) == "matched"


def test_a_boolean_mismatch_suggests_no_tolerance() -> None:
    diff = compare("mask", torch.tensor([True, False, True]), torch.tensor([True, True, True]), rtol=0, atol=0)
    assert diff is not None and diff.beyond == 1
    assert diff.lines(0, 0)[1] == "  booleans compare exactly: no tolerance passes"
    counts = compare("count", torch.tensor([1, 5]), torch.tensor([1, 2]), rtol=0, atol=0)
    assert counts is not None and "passes with atol >= 3" in counts.lines(0, 0)[1]  # integers do take an atol
