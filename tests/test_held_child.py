"""A held child: started before its turn (its imports overlap the stage before it), then released with the
environment variables that stage decided, or discarded. Real processes, driven from a test the way debug_rerun
drives them."""

from __future__ import annotations

import pytest

from tests.conftest import plugin_args

HELD_TESTS = """
import os
from pathlib import Path

import pytest

from pytest_aoti.child import HeldChild

FILTER = "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT"
in_child = pytest.mark.skipif(not os.environ.get("PYTEST_AOTI_CHILD"), reason="runs in the held child")
in_parent = pytest.mark.skipif(bool(os.environ.get("PYTEST_AOTI_CHILD")), reason="drives the held child")


@in_child
def test_target():
    import torch._inductor.config as inductor_config

    # Inductor read its config before the filter was known: the child applied it as the import would have.
    assert os.environ[FILTER] == "cpp_fused_log_1"
    assert inductor_config.aot_inductor.filtered_kernel_names == "cpp_fused_log_1"
    assert os.environ["KEPT"] == "from the start"


def hold(request, workdir, limit=120.0):
    return HeldChild(
        request.config,
        "test_held.py::test_target",
        test_path=Path(__file__),
        stage="tensors",
        env={"KEPT": "from the start"},
        workdir=workdir,
        hold_limit=limit,
    )


@in_parent
def test_released_child_runs_with_the_late_environment(request, tmp_path):
    run = hold(request, tmp_path).release({FILTER: "cpp_fused_log_1"}, timeout=120)
    assert run.outcome == "passed", run.log
    assert f"{FILTER}=cpp_fused_log_1" in run.reproduce and "KEPT='from the start'" in run.reproduce
    assert "PYTEST_AOTI_HOLD" not in run.reproduce


@in_parent
def test_discarded_child_ends_and_leaves_nothing(request, tmp_path):
    held = hold(request, tmp_path)
    held.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    held.discard()  # twice is harmless


@in_parent
def test_child_held_past_its_limit_gives_up(request, tmp_path):
    held = hold(request, tmp_path, limit=0.1)  # over before its imports are done
    run = held.release({FILTER: "cpp_fused_log_1"}, timeout=30)
    assert run.outcome == "error" and "exited with code 0 before reporting" in run.error, run.log
"""


def test_held_child(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_held=HELD_TESTS)
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-n", "0", timeout=300)
    result.assert_outcomes(passed=3, skipped=1)
