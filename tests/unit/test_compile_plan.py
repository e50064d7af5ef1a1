"""How xdist workers share the host (pytest_aoti/core/compile_plan.py), pure logic: each worker's compile threads,
the compile seconds the cache's sidecars recorded, the longest recorded compiles first."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_aoti.core.compile_plan import compile_threads_per_worker, longest_first, recorded_compile_seconds


@pytest.mark.parametrize(
    ("cores", "workers", "threads"),
    [(2, 2, 1), (16, 15, 1), (16, 4, 4), (16, 1, 16), (64, 1, 32), (3, 2, 1), (1, 4, 1), (17, 2, 8)],
)
def test_each_worker_gets_its_share_of_the_cores(cores: int, workers: int, threads: int) -> None:
    assert compile_threads_per_worker(cores, workers) == threads


@pytest.mark.parametrize(("cores", "workers"), [(0, 2), (4, 0), (-1, 1)])
def test_no_cores_or_no_workers_is_an_error_naming_both(cores: int, workers: int) -> None:
    with pytest.raises(ValueError, match=f"got {cores} cores and {workers} workers"):
        compile_threads_per_worker(cores, workers)


def test_the_longest_recorded_compile_goes_first_and_unrecorded_tests_before_them() -> None:
    nodeids = ["t.py::short", "t.py::new", "t.py::long", "t.py::middle", "t.py::also_new"]
    seconds = {"t.py::short": 1.0, "t.py::long": 30.0, "t.py::middle": 9.5, "t.py::gone": 99.0}
    order = [nodeids[index] for index in longest_first(nodeids, seconds)]
    assert order == ["t.py::new", "t.py::also_new", "t.py::long", "t.py::middle", "t.py::short"]


def test_ties_and_a_run_without_records_keep_the_collection_order() -> None:
    nodeids = ["a", "b", "c"]
    assert longest_first(nodeids, {}) == [0, 1, 2]
    assert longest_first(nodeids, {"a": 2.0, "b": 2.0, "c": 2.0}) == [0, 1, 2]


def _sidecar(root: Path, key: str, record: object) -> None:
    folder = root / key[:2]
    folder.mkdir(exist_ok=True)
    (folder / f"{key}.json").write_text(json.dumps(record))


def test_recorded_seconds_are_summed_per_test_and_bad_sidecars_are_left_out(tmp_path: Path) -> None:
    _sidecar(tmp_path, "a" * 64, {"owner": "t.py::x", "compile_seconds": 4.0, "sha256": "", "size": 1})
    _sidecar(tmp_path, "b" * 64, {"owner": "t.py::x", "compile_seconds": 2.5})  # a second input set, same test
    _sidecar(tmp_path, "c" * 64, {"owner": "t.py::y", "compile_seconds": 7})
    _sidecar(tmp_path, "d" * 64, {"compile_seconds": 50.0})  # an older version's: no owner
    _sidecar(tmp_path, "e" * 64, {"owner": "t.py::z", "compile_seconds": -1.0})
    _sidecar(tmp_path, "f" * 64, {"owner": "t.py::z", "compile_seconds": "10"})
    _sidecar(tmp_path, "0" * 64, ["not", "a", "record"])
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / f"{'1' * 64}.json").write_text("{not json")
    os.symlink("/dev/zero", tmp_path / "11" / f"{'2' * 64}.json")  # refused, never read
    assert recorded_compile_seconds(tmp_path) == {"t.py::x": 6.5, "t.py::y": 7.0}
