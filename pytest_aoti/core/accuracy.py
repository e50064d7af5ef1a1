"""Whether a package that differs from eager is still as accurate as eager: the float64 judge of ``aoti_check``.

Low-precision arithmetic has no single right answer. Inductor fuses ops and keeps float32 intermediates where eager
rounds to bfloat16 after every op, so a bfloat16 transformer's package and eager differ by a rounding in a few
percent of their elements, and ``torch.testing.assert_close``'s bfloat16 defaults (rtol 1.6e-2, atol 1e-5) call that
a mismatch. Inductor's own accuracy checks (``torch._dynamo.utils.same`` with an fp64 reference, the rule of
torchbench's accuracy runs) settle it with a float64 run of the model: the compiled output passes when its RMSE to the
float64 output is at most 3x eager's for bfloat16/float16 (2x otherwise), plus 1e-5. A wrong kernel is far from the
float64 run; a rounding that differs is not. The float64 run is made twice: a model whose output moves from call to
call (Python state read and updated in forward) has no reference, and is not judged.

``aoti_check`` asks this judge only when the test gave no tolerance (explicit ``rtol``/``atol`` are held strictly)
and only about what ``assert_close`` rejected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

# torch._dynamo.utils.same: ``res_error <= multiplier * ref_error + tol / 10`` with tol 1e-4.
_LOW_PRECISION_MULTIPLIER = 3.0
_MULTIPLIER = 2.0
_FLOOR = 1e-5


@dataclass(frozen=True)
class Judgement:
    accepted: bool
    text: str  # one line per output it looked at, or why it could not judge


def float64_outputs(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The model's outputs with its floating parameters, buffers and inputs in float64 (``functional_call``: the
    model itself is not changed or copied)."""
    state = {
        name: tensor.to(torch.float64) if tensor.is_floating_point() else tensor
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]
    }

    def widen(value: Any) -> Any:
        return value.to(torch.float64) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    with torch.no_grad():
        return torch.func.functional_call(module, state, pytree.tree_map(widen, args), pytree.tree_map(widen, kwargs))


def _rmse(reference: torch.Tensor, value: torch.Tensor) -> float:
    return math.sqrt(torch.mean(torch.square(reference - value.to(torch.float64))).item())


def _close(actual: Any, expected: Any, **tolerances: Any) -> bool:
    """``torch.testing.assert_close`` as a yes or no (its dtype defaults unless ``tolerances`` say otherwise)."""
    try:
        torch.testing.assert_close(actual, expected, **tolerances)
    except AssertionError:
        return False
    return True


# Two float64 runs of one model agree up to the order of a parallel reduction (atomics on CUDA).
_SAME_RUN = {"rtol": 1e-9, "atol": 1e-12, "equal_nan": True}


def _judgeable(got: Any, want: Any) -> bool:
    """Only a rounding can be judged: both sides finite floating tensors below float64, alike but for values."""
    return (
        isinstance(got, torch.Tensor)
        and isinstance(want, torch.Tensor)
        and got.is_floating_point()
        and got.dtype != torch.float64
        and (got.dtype, got.shape, got.device) == (want.dtype, want.shape, want.device)
        and bool(torch.isfinite(got).all())
        and bool(torch.isfinite(want).all())
    )


def _path(keys: Any) -> str:
    return pytree.keystr(keys) or "output"


def judge(actual: Any, expected: Any, reference: Callable[[], Any]) -> Judgement:
    """Accept ``actual`` (the package's outputs) where ``assert_close`` rejected it against ``expected`` (eager's)
    when every output that differs is a floating tensor no farther from ``reference()`` (the float64 run) than the
    rule allows. Integer, boolean and float64 outputs, NaN/Inf and a different structure are never accepted here."""
    flat_actual, spec = pytree.tree_flatten_with_path(actual)
    flat_expected, expected_spec = pytree.tree_flatten(expected)
    if spec != expected_spec:
        return Judgement(False, "float64 reference: not consulted (the outputs' structure differs)")
    differing = [
        (index, keys, got, want)
        for index, ((keys, got), want) in enumerate(zip(flat_actual, flat_expected, strict=True))
        if not _close(got, want)
    ]
    for _, keys, got, want in differing:
        if not _judgeable(got, want):
            why = f"{_path(keys)} is not a finite low-precision tensor of eager's dtype and shape"
            return Judgement(False, f"float64 reference: not consulted ({why})")
    try:
        flat_reference, reference_spec = pytree.tree_flatten(reference())
        # Run twice: a model whose output moves from call to call (a Python counter, a cache read in forward)
        # gives no reference, and its first extra call would already differ from the call eager made.
        again, _ = pytree.tree_flatten(reference())
    except Exception as error:  # the model's own code: any failure means no reference, not a test error
        why = f"{type(error).__name__}: {error}"
        return Judgement(False, f"float64 reference: the model did not run in float64 ({why})")
    if reference_spec != expected_spec:
        return Judgement(False, "float64 reference: the float64 run returned other outputs")
    if not _close(flat_reference, again, **_SAME_RUN):
        return Judgement(
            False,
            "float64 reference: not consulted (two float64 runs of the model differ: its output changes from call to "
            "call, e.g. Python state the model reads and updates in forward)",
        )
    accepted, lines = True, []
    for index, keys, got, want in differing:
        truth = flat_reference[index]
        if not isinstance(truth, torch.Tensor) or truth.shape != got.shape:
            return Judgement(False, f"float64 reference: {_path(keys)} has another shape in the float64 run")
        multiplier = _LOW_PRECISION_MULTIPLIER if got.dtype in (torch.bfloat16, torch.float16) else _MULTIPLIER
        package_error, eager_error = _rmse(truth, got), _rmse(truth, want)
        passes = package_error <= multiplier * eager_error + _FLOOR
        accepted = accepted and passes
        lines.append(
            f"float64 reference, {_path(keys)} ({str(got.dtype).removeprefix('torch.')}): RMSE to a float64 run of "
            f"the model: package {package_error:.3g}, eager {eager_error:.3g}; "
            + (
                "the package is as accurate as eager"
                if passes
                else f"the package is less accurate than eager allows ({multiplier:g}x eager's + {_FLOOR:g}, "
                "the rule of Inductor's accuracy checks)"
            )
        )
    if not accepted and any(got.device.type == "cuda" for _, _, got, _ in differing):
        lines.append(precision_settings())
    return Judgement(accepted, "\n".join(lines))


def precision_settings() -> str:
    """The float32 precision settings eager ran under on CUDA (TF32 in cuDNN convolutions and in matmuls), which
    decide how far eager and a package's extern calls are from float64: an open question of issue 61 (SegFormer,
    InternVL) until measured on a GPU, so the failure states them."""
    return (
        "precision settings of this process (eager ran under them): "
        f"torch.backends.cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}, "
        f"torch.backends.cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
        f"torch.get_float32_matmul_precision()={torch.get_float32_matmul_precision()!r}; a package's Triton "
        "matmuls take TF32 from these settings when it is compiled, its cuDNN/cuBLAS calls when it runs"
    )
