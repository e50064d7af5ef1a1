"""The aoti_compile / aoti_check fixtures and their invariants, through real CPU compiles in a pytest subprocess.

One subprocess runs many user tests (each compile costs seconds); the assertions read each test's own outcome and
failure text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RunPytest, failure_section, left_behind

USER_TESTS = r"""
import os
import warnings

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


def dict_input(x, d, *, scale):
    # A function, not a module, with a dict input, a keyword argument and a dict output holding None (an unused
    # optional output, as in a Hugging Face ModelOutput): the tests that call it share one package.
    return {"hidden": None, "y": (x + d["a"] * 2 - d["b"]) * scale.sigmoid()}


def _dict_inputs():
    return (torch.randn(3, 2), {"a": torch.randn(3, 2), "b": torch.randn(3, 2)}), {"scale": torch.randn(2)}


def test_kwargs_and_function(aoti_check):
    aoti_check(dict_input, *_dict_inputs())


class Dropping(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)
        # A constant of this process: the package key differs per run, so this run compiles it whatever the
        # shared cache holds (the warnings check below needs a compile in this process).
        self.register_buffer("run_id", torch.tensor(float(os.getpid())))

    def forward(self, x):
        warnings.warn("the model's own warning")
        return self.drop(self.lin(x)) + self.run_id * 0


def test_dropout_in_training_mode(aoti_check):
    aoti_check(Dropping(), (torch.randn(4, 8),))


def test_transposed_input(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),))(torch.randn(8, 4).t())


def test_sliced_input(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),))(torch.randn(4, 16)[:, ::2])


def test_expanded_input(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),))(torch.randn(1, 8).expand(4, 8))


@pytest.mark.aoti(restride_inputs=True)
def test_restrided_on_request(aoti_compile):
    model = MLP()
    compiled = aoti_compile(model, (torch.randn(4, 8),))
    x = torch.randn(8, 4).t()
    torch.testing.assert_close(compiled(x), model(x))


def test_nan_input(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),))(torch.full((4, 8), float("nan")))


def test_dict_in_another_key_order_is_read_by_key(aoti_compile):
    compiled = aoti_compile(dict_input, *_dict_inputs())
    x, a, b, scale = torch.randn(3, 2), torch.randn(3, 2), torch.randn(3, 2), torch.randn(2)
    out = compiled(x, {"b": b, "a": a}, scale=scale)
    assert out["hidden"] is None  # the package returns the None the function returned
    torch.testing.assert_close(out, dict_input(x, {"a": a, "b": b}, scale=scale))


def test_dict_with_other_keys(aoti_compile):
    compiled = aoti_compile(dict_input, *_dict_inputs())
    compiled(torch.randn(3, 2), {"a": torch.randn(3, 2), "c": torch.randn(3, 2)}, scale=torch.randn(2))


def test_same_leaves_other_nest(aoti_compile):
    compiled = aoti_compile(dict_input, *_dict_inputs())
    compiled(torch.randn(3, 2), (torch.randn(3, 2), torch.randn(3, 2)), scale=torch.randn(2))


def test_class_instead_of_instance(aoti_compile):
    aoti_compile(MLP, (torch.randn(4, 8),))


def test_python_int_output(aoti_check):
    aoti_check(IntOutput(), (torch.randn(3),))


class SizeOutput(torch.nn.Module):
    def forward(self, x):
        return x * 2, x.shape[0]


def test_symbolic_int_output(aoti_check):
    aoti_check(SizeOutput(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=1, max=16)}})


def test_a_marker_option_given_to_the_fixture(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), probe_dims=True)


def test_bad_inductor_config_value(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),), inductor_configs={"max_autotune": "false"})


class AddsInPlace(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


class Sin(torch.nn.Module):
    def forward(self, x):
        return x.sin()


# Every form at the invariant level: tests/unit/test_unbounded_dims.py; here two real compiles.
@pytest.mark.parametrize("form", ["unbounded", "AUTO"])
def test_unbounded_dim(aoti_check, form):
    dim = {"unbounded": Dim("batch"), "AUTO": Dim.AUTO}
    compiled = aoti_check(
        Sin(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: dim[form]}}, more_inputs=[(torch.randn(700, 3),)]
    )
    compiled(torch.randn(3000, 3))


def test_derived_from_unbounded(aoti_check):
    batch = Dim("batch")
    aoti_check(
        RowScale(),
        (torch.randn(4, 3), torch.randn(8, 3)),
        dynamic_shapes={"x": {0: batch}, "y": {0: 2 * batch}},
        more_inputs=[(torch.randn(300, 3), torch.randn(600, 3))],
    )


def test_in_place_model_is_checked_not_blamed(aoti_check):
    aoti_check(AddsInPlace(), (torch.randn(4, 3),), more_inputs=[(torch.randn(4, 3),)])


def test_string_flag_refused(aoti_compile):
    compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
    compiled.call((torch.full((4, 3), float("nan")),), allow_nonfinite="false")


def test_string_flag_refused_at_compile(aoti_compile):
    aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,), restride_inputs="no")


def test_more_inputs_not_a_list(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), more_inputs=5)


def test_bad_tolerance(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), rtol="a", atol=1e-3)


def test_bad_shape_in_more_inputs(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), more_inputs=[(torch.randn(4, 8),), (torch.randn(4, 9),)])


class IntOutput(torch.nn.Module):
    def forward(self, x):
        return x * 2, 3


class Lookup(torch.nn.Module):
    # Token ids into a 10-row table, through a cast: the ids are held to the table's rows before the package runs.
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(10, 2)

    def forward(self, ids):
        return self.table(ids.long()) * 2


def _ids(*values):
    return torch.tensor([values], dtype=torch.int32)


def test_index_outside_the_table(aoti_compile):
    compiled = aoti_compile(Lookup(), (_ids(1, 2, 3),))
    compiled(_ids(1, 2, 3))
    compiled(_ids(1, 12, 3))


@pytest.mark.aoti(allow_out_of_range=True)
def test_index_outside_the_table_let_through(aoti_compile):
    # What the check spares the run: the package's own bounds check. On three ids it fails the run with its own
    # error (inside a parallel kernel it aborts the process; on CUDA it is a device-side assert).
    compiled = aoti_compile(Lookup(), (_ids(1, 2, 3),))
    with pytest.raises(RuntimeError, match="index out of bounds: 0 <= tmp"):
        compiled(_ids(1, 12, 3))
"""


def test_invariants_on_real_compiles(pytester: pytest.Pytester, run_pytest: RunPytest, watched_tmpdir: Path) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = run_pytest("-p", "no:logging", "-rA")
    # Loaded packages are released at the end of each test and extracted under pytest's tmp dirs: nothing in TMPDIR.
    assert left_behind(watched_tmpdir) == []
    result.assert_outcomes(passed=13, failed=28)

    # Unbounded dims of every form, and a dim derived from one, compile, check and run.
    for form in ("unbounded", "AUTO"):
        assert f"PASSED test_user.py::test_unbounded_dim[{form}]" in result.stdout.str()
    # An in-place model: each side ran on its own copy, and what it left in its input matched too.
    assert "PASSED test_user.py::test_in_place_model_is_checked_not_blamed" in result.stdout.str()
    assert "allow_nonfinite: expected True or False, got str 'false'" in failure_section(
        result, "test_string_flag_refused"
    )
    assert "restride_inputs: expected True or False, got str 'no'" in failure_section(
        result, "test_string_flag_refused_at_compile"
    )
    assert "more_inputs: expected a list of input sets" in failure_section(result, "test_more_inputs_not_a_list")
    # An id outside the embedding's table, through a cast: refused before the package, naming the table and line.
    assert (
        "input 0 ('ids'): index invariant violated: expected row indices in [0, 10), got 1 value(s) of 3 outside "
        "(min 1, max 12); first at index (0, 1): 12; it indexes the 10 rows read by aten.embedding of table.weight "
        "at test_user.py:"
    ) in failure_section(result, "test_index_outside_the_table")
    assert "in forward: return self.table(ids.long()) * 2. Eager raises IndexError here" in failure_section(
        result, "test_index_outside_the_table"
    )
    assert "PASSED test_user.py::test_index_outside_the_table_let_through" in result.stdout.str()
    assert "rtol: expected a finite number >= 0, got str 'a'" in failure_section(result, "test_bad_tolerance")
    assert "more_inputs[1]: input 0 ('x'): shape invariant violated" in failure_section(
        result, "test_bad_shape_in_more_inputs"
    )

    wrong_shape = failure_section(result, "test_wrong_shape")
    assert "input 0 ('x'): shape invariant violated: expected (4, 8), got (5, 8)" in wrong_shape
    assert "the compiled package was not run" in wrong_shape

    assert "input 0 ('x'): dtype invariant violated: expected torch.float32, got torch.float64" in failure_section(
        result, "test_wrong_dtype"
    )
    assert "input 0 ('x'): device invariant violated: expected cpu, got meta" in failure_section(
        result, "test_wrong_device"
    )

    dropout = failure_section(result, "test_dropout_in_training_mode")
    assert "The exported graph draws random numbers: aten::dropout (drop)" in dropout
    assert "cannot tell a wrong kernel from different draws" in dropout
    assert "The model is in training mode: call model.eval() before aoti_check" in dropout
    # The warnings summary keeps the model's warning, not the deprecations torch raises inside Inductor's compile
    # (Dropping's key is new in every run: this run compiles it).
    text = result.stdout.str()
    assert "UserWarning: the model's own warning" in text
    assert "script_method" not in text and "LeafSpec" not in text

    nan = failure_section(result, "test_nan_output")
    assert "output 0: nonfinite invariant violated: expected finite values, got 12 NaN value(s) of 12" in nan
    assert "first at index (0, 0)" in nan

    # Dynamic dims named as the user named them, not by torch's symbols.
    assert "dim 0 is batch, batch=17 outside [2, 16]" in failure_section(result, "test_dynamic_above_max")
    derived = failure_section(result, "test_dynamic_derived_mismatch")
    assert "input 1 ('y'): shape invariant violated: expected (2*batch, 3), got (9, 3)" in derived

    for test, strides in (
        ("test_transposed_input", "got (1, 4)"),
        ("test_sliced_input", "got (16, 2)"),
        ("test_expanded_input", "got (0, 1)"),
    ):
        text = failure_section(result, test)
        assert f"input 0 ('x'): stride invariant violated: expected (8, 1), {strides}" in text, text
        assert "pass x.contiguous()" in text and "(the compiled package was not run)" in text
    assert "input 0 ('x'): nonfinite invariant violated: expected finite values, got 32 NaN value(s) of 32" in (
        failure_section(result, "test_nan_input")
    )
    assert (
        "input args[1]: structure invariant violated: expected a dict with keys ['a', 'b'], got keys ['a', 'c'] "
        "(missing ['b'], extra ['c'])" in failure_section(result, "test_dict_with_other_keys")
    )
    assert "input args[1]: structure invariant violated: expected a dict with keys ['a', 'b'], got tuple" in (
        failure_section(result, "test_same_leaves_other_nest")
    )
    assert "model: got the class MLP, not an instance: pass MLP(...)" in failure_section(
        result, "test_class_instead_of_instance"
    )
    assert "output 1 is a Python int (3), not a tensor: an AOTI package returns tensors only" in failure_section(
        result, "test_python_int_output"
    )
    assert "output 1 is a symbolic int (a size of a dynamic dim, such as x.shape[0]), not a tensor" in (
        failure_section(result, "test_symbolic_int_output")
    )
    assert "aoti_check() got unexpected keyword argument(s) 'probe_dims'; it takes " in (
        failure_section(result, "test_a_marker_option_given_to_the_fixture")
    )
    assert "inductor_configs['max_autotune']: got str 'false', which turns the flag on" in failure_section(
        result, "test_bad_inductor_config_value"
    )

    export = failure_section(result, "test_export_failure")
    first_line = next(line for line in export.splitlines()[1:] if line.strip())
    assert first_line.startswith("export failed: "), first_line
    assert "Traceback (most recent call last)" in export

    unknown_key = failure_section(result, "test_bad_inductor_config")
    assert "inductor_configs: unknown Inductor config key 'max_autotuen' (did you mean 'max_autotune'?)" in unknown_key
    assert "model: expected a torch.nn.Module or a callable, got int" in failure_section(result, "test_not_callable")
    assert "args[1]: expected a tensor (or a Python scalar), got builtins.object" in failure_section(
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
