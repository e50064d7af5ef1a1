"""The aoti_compile / aoti_check fixtures and their invariants, through real CPU compiles in a pytest subprocess.

One subprocess runs many user tests (each compile costs seconds); the assertions read each test's own outcome and
failure text.
"""

from __future__ import annotations

import pytest

from tests.conftest import RunPytest

USER_TESTS = r"""
import pytest
import torch
from torch.export import Dim

from aoti_models import MLP, LogModel, RowScale
from pytest_aoti import AOTIInvariantError


def test_mlp_matches_eager(aoti_check, aoti_device):
    compiled = aoti_check(MLP(), (torch.randn(4, 8),), more_inputs=[(torch.randn(4, 8),)])
    assert compiled.device == aoti_device
    assert compiled.package_path.suffix == ".pt2"
    assert compiled.exported_program is not None


def test_wrong_shape(aoti_compile):
    compiled = aoti_compile(MLP(), (torch.randn(4, 8),))
    compiled(torch.randn(5, 8))


def test_wrong_dtype(aoti_compile):
    compiled = aoti_compile(MLP(), (torch.randn(4, 8),))
    compiled(torch.randn(4, 8, dtype=torch.float64))


def test_wrong_device(aoti_compile):
    compiled = aoti_compile(MLP(), (torch.randn(4, 8),))
    compiled(torch.randn(4, 8, device="meta"))


def test_invariant_error_fields(aoti_compile):
    compiled = aoti_compile(MLP(), (torch.randn(4, 8),))
    with pytest.raises(AOTIInvariantError) as caught:
        compiled(torch.randn(4, 9))
    error = caught.value
    assert (error.invariant, error.side, error.index, error.name) == ("input_shape", "input", 0, "x")
    assert isinstance(error, AssertionError)


def test_nan_output(aoti_compile):
    compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
    compiled(-torch.ones(4, 3))


def test_nan_allowed_per_call(aoti_compile):
    compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
    out = compiled.call((-torch.ones(4, 3),), allow_nonfinite=True)
    assert torch.isnan(out).all()


@pytest.mark.aoti(allow_nonfinite=True)
def test_nan_allowed_by_marker(aoti_compile):
    compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
    assert torch.isnan(compiled(-torch.ones(4, 3))).all()


def _dynamic(aoti_compile):
    batch = Dim("batch", min=2, max=16)
    return aoti_compile(
        RowScale(), (torch.randn(4, 8), torch.randn(8, 3)), dynamic_shapes={"x": {0: batch}, "y": {0: 2 * batch}}
    )


def test_dynamic_in_range(aoti_compile):
    compiled = _dynamic(aoti_compile)
    for batch in (2, 7, 16):
        out_x, out_y = compiled(torch.randn(batch, 8), torch.randn(2 * batch, 3))
        assert out_x.shape == (batch, 8) and out_y.shape == (2 * batch, 3)


def test_dynamic_above_max(aoti_compile):
    _dynamic(aoti_compile)(torch.randn(17, 8), torch.randn(34, 3))


def test_dynamic_derived_mismatch(aoti_compile):
    _dynamic(aoti_compile)(torch.randn(4, 8), torch.randn(9, 3))


def test_export_failure(aoti_compile):
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    aoti_compile(DataDependent(), (torch.randn(3),))


def test_bad_inductor_config(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),), inductor_configs={"max_autotuen": True})


def test_not_callable(aoti_compile):
    aoti_compile(42, (torch.randn(3),))


def test_non_tensor_input(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8), object()))


def test_kwargs_and_function(aoti_check):
    aoti_check(lambda x, *, scale: x * scale.sigmoid(), (torch.randn(3, 3),), {"scale": torch.randn(3)})
"""


def _failure(result: pytest.RunResult, test: str) -> str:
    """The failure section of one user test in the run's output."""
    text = result.stdout.str()
    start = text.index(f"_ {test} _")
    end = text.find("\n____", start + 1)
    return text[start:] if end == -1 else text[start:end]


def test_invariants_on_real_compiles(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = run_pytest("-p", "no:logging", "-rA")
    result.assert_outcomes(passed=6, failed=10)

    wrong_shape = _failure(result, "test_wrong_shape")
    assert "input 0 ('x'): shape invariant violated: expected (4, 8), got (5, 8)" in wrong_shape
    assert "the compiled package was not run" in wrong_shape

    assert "input 0 ('x'): dtype invariant violated: expected torch.float32, got torch.float64" in _failure(
        result, "test_wrong_dtype"
    )
    assert "input 0 ('x'): device invariant violated: expected cpu, got meta" in _failure(result, "test_wrong_device")

    nan = _failure(result, "test_nan_output")
    assert "output 0: nonfinite invariant violated: expected finite values, got 12 NaN value(s) of 12" in nan
    assert "first at index (0, 0)" in nan

    assert "outside [2, 16]" in _failure(result, "test_dynamic_above_max")
    derived = _failure(result, "test_dynamic_derived_mismatch")
    assert "input 1 ('y'): shape invariant violated: expected (2*s" in derived and "got (9, 3)" in derived

    export = _failure(result, "test_export_failure")
    first_line = next(line for line in export.splitlines()[1:] if line.strip())
    assert first_line.startswith("export failed: "), first_line
    assert "Traceback (most recent call last)" in export

    assert "inductor_configs: unknown Inductor config key 'max_autotuen' (did you mean 'max_autotune'?)" in _failure(
        result, "test_bad_inductor_config"
    )
    assert "model: expected a torch.nn.Module or a callable, got int" in _failure(result, "test_not_callable")
    assert "args[1]: expected a tensor (or a Python scalar), got builtins.object" in _failure(
        result, "test_non_tensor_input"
    )
    assert "INTERNALERROR" not in result.stdout.str()


def test_cuda_device_unavailable_skips(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the skip cannot happen")
    pytester.makepyfile(
        test_user="""
        def test_needs_device(aoti_device):
            raise AssertionError("must not run")

        def test_plain():
            pass
        """
    )
    result = run_pytest("--aoti-device=cuda:1", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*aoti_device 'cuda:1': CUDA is not available on this machine*"])
