"""One GPU per xdist worker: which device each worker, its children and the header get (pure functions; the
multi-GPU run itself is in tests/gpu/test_multi_gpu.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_aoti.core.devices import assigned_device, choose_device, worker_map, xdist_worker_index
from pytest_aoti.debug.child_args import strip_parent_only, without_xdist_group
from pytest_aoti.roles import worker_id


@pytest.mark.parametrize(
    ("setting", "worker", "gpus", "expected"),
    [
        ("auto", None, 0, "cpu"),  # a CPU machine
        ("auto", 3, 0, "cpu"),
        ("auto", None, 2, "cuda:0"),  # not under xdist: the first GPU
        ("auto", 0, 2, "cuda:0"),
        ("auto", 1, 2, "cuda:1"),
        ("auto", 2, 2, "cuda:0"),  # more workers than GPUs: round robin
        ("auto", 7, 8, "cuda:7"),
        ("auto", 5, 1, "cuda:0"),  # one GPU: every worker on it, as before
        ("cuda", 1, 2, "cuda:1"),  # plain "cuda" spreads too
        ("cuda", 1, 0, "cuda"),  # and without a GPU stays cuda (the fixture skips)
        ("cuda:1", 0, 2, "cuda:1"),  # an index pins every worker
        ("cuda:0", 3, 4, "cuda:0"),
        ("cpu", 1, 2, "cpu"),
    ],
)
def test_each_worker_takes_its_share_of_the_gpus(setting: str, worker: int | None, gpus: int, expected: str) -> None:
    assert choose_device(setting, worker, gpus) == expected


def test_the_worker_index_comes_from_xdist_s_workerinput() -> None:
    assert xdist_worker_index("gw12") == 12
    assert xdist_worker_index(None) is None
    assert xdist_worker_index("popen-gw1") is None

    # Not from PYTEST_XDIST_WORKER: a pytest started inside a worker (pytester, a script) inherits it.
    worker = SimpleNamespace(workerinput={"workerid": "gw3"})
    assert worker_id(worker) == "gw3"  # type: ignore[arg-type]
    assert worker_id(SimpleNamespace()) is None  # type: ignore[arg-type]


def test_the_header_maps_workers_to_gpus() -> None:
    assert worker_map("auto", 3, 2) == ["gw0→cuda:0", "gw1→cuda:1", "gw2→cuda:0"]


def test_a_child_is_pinned_only_when_a_worker_took_a_gpu() -> None:
    # This machine's GPUs decide the rest (tests/gpu covers a GPU host); a pinned setting or a non-worker never is.
    assert assigned_device("cuda:1", "gw0") is None
    assert assigned_device("auto", None) is None
    assert assigned_device("cpu", "gw1") is None


def test_the_parents_device_choice_is_what_a_child_repeats() -> None:
    # The child's line drops scheduling options but keeps --aoti-device; the pin is appended after the user's own,
    # so argparse takes it (the last one wins).
    assert strip_parent_only(["-n", "2", "--aoti-device=auto", "t.py"]) == ["--aoti-device=auto", "t.py"]


@pytest.mark.parametrize(
    ("nodeid", "outside_xdist"),
    [
        ("t.py::test_after_ima[8]@poisoned", "t.py::test_after_ima[8]"),  # --dist loadgroup's suffix
        ("t.py::test_ima@poisoned", "t.py::test_ima"),
        ("t.py::test_mail[a@b]", "t.py::test_mail[a@b]"),  # an @ in a parameter id stays
        ("t.py::test_mail[a@b]@group", "t.py::test_mail[a@b]"),
        ("t.py::TestX::test_y", "t.py::TestX::test_y"),
    ],
)
def test_a_child_selects_the_test_without_its_xdist_group(nodeid: str, outside_xdist: str) -> None:
    assert without_xdist_group(nodeid) == outside_xdist


def test_a_workers_child_and_its_reproduce_line_name_the_workers_gpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This machine has no GPU: the share a worker would get on a two-GPU host is given, the command line is real.
    import pytest_aoti.debug.child as child

    config = pytester.parseconfigure("-p", "no:cacheprovider", "--aoti-device=auto", "-k", "x")
    monkeypatch.setattr(child, "assigned_device", lambda setting, worker: "cuda:1" if setting == "auto" else None)
    command = child.child_command(config, capture=True)
    assert command[-1] == "--aoti-device=cuda:1" and "--aoti-device=auto" in command
    # argparse takes the last one: the child runs on the worker's GPU, not on cuda:0.
    assert command.index("--aoti-device=cuda:1") > command.index("--aoti-device=auto")
