"""Deployment checks with real compiles: a package runs stand-alone (a fresh interpreter, an empty Inductor cache,
no test directory on sys.path) or fails naming the custom op and its module; 8 threads on a num_runners=4 package
give what serial calls give; a weight swap through load_constants and back matches eager, or names the weights the
package inlined; probing a dynamic dim at its edges finds the size export assumed away; the device matrix of a CPU
package runs it on the CPU in a fresh interpreter. Nothing is left in TMPDIR, not even by the child that crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases, left_behind

HELPER_OPS = """
import torch


@torch.library.custom_op("aoti_deploy_tests::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)
"""

DEPLOY_TESTS = """
import pytest
import torch

from aoti_models import MLP
from helper_ops import twice


class WithHelperOp(torch.nn.Module):
    def forward(self, x):
        return twice(x.sin()) + 1


@pytest.mark.aoti_deploy(standalone=True, threads=8, num_runners=4, device_matrix=True)
def test_self_contained(aoti_compile):
    aoti_compile(MLP().eval(), (torch.randn(4, 8),))


def test_needs_its_helper_module(aoti_compile):
    aoti_compile(WithHelperOp(), (torch.randn(4, 8),))


class OneIsSpecial(torch.nn.Module):
    def forward(self, x):
        # Export traces the example's branch and assumes a dim is not 1 without a guard: the package computes sin
        # for a batch of 1, eager cos.
        return x.cos() if x.shape[0] == 1 else x.sin()


@pytest.mark.aoti_deploy(probe_dims=True)
def test_probe_dims(aoti_compile):
    batch = torch.export.Dim("batch", min=1, max=8)
    aoti_compile(OneIsSpecial(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: batch}})


@pytest.mark.aoti_deploy(weights=True)
def test_weight_swap(aoti_compile):
    aoti_compile(MLP().eval(), (torch.randn(4, 8),), inductor_configs={"always_keep_tensor_constants": True})


@pytest.mark.aoti_deploy(weights=True)
def test_weights_outside_the_package(aoti_check):
    # aoti_check runs the package (its weights loaded from the export) and matches eager; the check then finds
    # that a call before load_constants crashes instead of raising.
    separate = {"aot_inductor.package_constants_in_so": False, "always_keep_tensor_constants": True}
    aoti_check(MLP().eval(), (torch.randn(4, 8),), inductor_configs=separate)


@pytest.mark.aoti_deploy(weights=True)
def test_weight_swap_of_inlined_constants(aoti_compile):
    aoti_compile(MLP().eval(), (torch.randn(4, 8),))

"""


def test_standalone_and_threads(pytester: pytest.Pytester, run_pytest: RunPytest, watched_tmpdir: Path) -> None:
    pytester.makepyfile(helper_ops=HELPER_OPS, test_deploy=DEPLOY_TESTS)
    result = run_pytest("--aoti-deploy-check", "-p", "no:logging", "--junitxml=r.xml")
    result.assert_outcomes(passed=2, failed=4)
    text = result.stdout.str()
    assert (
        "standalone: the package does not run in a fresh interpreter: it calls custom op(s) aoti_deploy_tests::twice "
        f"(defined in module helper_ops ({pytester.path / 'helper_ops.py'}))"
    ) in text
    assert "Could not find schema for aoti_deploy_tests::twice" in text
    assert "weights: the package's constants lack state_dict entries second.bias: a weight swap" in text
    assert "always_keep_tensor_constants" in text
    assert (
        "weights: the package keeps its weights outside the .so (package_constants_in_so=False), and a call before "
        "load_constants crashes the process (SIGSEGV) instead of raising"
    ) in text
    assert "probe_dims: the package against eager at each dynamic dim's edges:" in text
    assert "dim batch in [1, 8]: FAILED at 1: Tensor-likes are not close!" in text
    # A deployment check's failure is not a kernel's: no debug rerun, even under --aoti-debug (not asked here).
    cases = junit_cases(pytester.path / "r.xml")
    # The device each test ran on, for JUnit consumers (one GPU per xdist worker on a multi-GPU host).
    assert cases["test_self_contained"]["properties"]["aoti_device"] == "cpu"
    assert cases["test_self_contained"]["outcomes"] == [] and cases["test_needs_its_helper_module"]["outcomes"] == [
        "failure"
    ]
    # The child that crashes on purpose (a call before load_constants) extracted the package where it is cleaned up.
    assert left_behind(watched_tmpdir) == []
