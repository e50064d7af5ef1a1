"""The eager replay that names the op making a NaN/Inf (``pytest_aoti.debug.origin``), on real torch programs: an
infinity by design (an additive mask's ``-inf``) is never the origin, a NaN is traced to the op that made it, not to
the ReLU that passed it on, and an overflow to Inf with no NaN is traced to the overflow."""

from __future__ import annotations

import torch

from pytest_aoti.debug.minify import flat_program
from pytest_aoti.debug.origin import replay


def _replay(model: torch.nn.Module, *args: torch.Tensor):  # type: ignore[no-untyped-def]
    program = torch.export.export(model.eval(), args, strict=False)
    return replay(*flat_program(program, args, {}))


class MaskedThenLog(torch.nn.Module):
    """An additive causal mask (``-inf`` above the diagonal, as transformers builds it), a softmax over it, and then
    a user's ``log`` of a negative: the mask's infinities come first and are by design."""

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        n = scores.shape[-1]
        mask = torch.full((n, n), float("-inf")).triu(1)
        weights = torch.softmax(scores + mask, dim=-1)
        return torch.log(weights - 100.0)


def test_a_nan_after_an_additive_mask_is_traced_to_the_op_that_made_it() -> None:
    origin = _replay(MaskedThenLog(), torch.randn(4, 4))
    assert (origin.outputs, origin.kind, origin.op) == ("nan", "NaN", "aten.log.default"), origin
    assert origin.fills == ["full"], origin  # the mask's -inf: a constant fill, named as such
    assert origin.inputs and "min" in origin.inputs[0] and "NaN" not in origin.inputs[0], origin


class NegativeVarianceThenRelu(torch.nn.Module):
    """An eval BatchNorm whose running variances are negative (a checkpoint converted with the wrong sign), then a
    ReLU: the NaN is the BatchNorm's; the ReLU only passes it on."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        with torch.no_grad():
            self.bn.running_var[:4] = -1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def test_a_nan_made_inside_what_inductor_fuses_names_the_batch_norm_not_the_relu() -> None:
    origin = _replay(NegativeVarianceThenRelu(), torch.randn(1, 3, 8, 8))
    assert origin.kind == "NaN" and origin.op is not None and "batch_norm" in origin.op, origin
    assert origin.output is not None and origin.output.endswith("values NaN"), origin


class MaskedOverflow(torch.nn.Module):
    """``masked_fill(-inf)`` (by design), then an ``exp`` that overflows: the output holds Inf and no NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        masked = x.masked_fill(x < 0, float("-inf"))
        return torch.exp(masked * 1000.0)


def test_an_inf_with_no_nan_is_traced_to_the_overflow_not_the_fill() -> None:
    x = torch.tensor([[-1.0, 0.5, 2.0]])
    origin = _replay(MaskedOverflow(), x)
    assert (origin.outputs, origin.kind, origin.op) == ("inf", "Inf", "aten.exp.default"), origin
    assert origin.fills == ["masked_fill"], origin


class Finite(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2


def test_a_finite_replay_says_so_and_names_no_origin() -> None:
    origin = _replay(Finite(), torch.randn(3))
    assert (origin.outputs, origin.kind, origin.node) == ("finite", None, None), origin


class SafeLogThenUserLog(torch.nn.Module):
    """A "safe" log that real models write (``where(x > 0, log(x), 0)``): its log makes NaN at the negatives, which
    the ``where`` drops. The NaN in the outputs is the user's ``log`` after it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        safe = torch.where(x > 0, torch.log(x), torch.zeros_like(x))
        return torch.log(safe - 100.0)


def test_a_nan_made_and_dropped_before_is_not_the_origin_of_the_outputs_nan() -> None:
    origin = _replay(SafeLogThenUserLog(), torch.tensor([-1.0, 0.5, 2.0]))
    assert (origin.outputs, origin.kind, origin.node) == ("nan", "NaN", "log_1"), origin
    assert origin.output == "3 of 3 values NaN", origin


def test_an_index_after_a_mask_is_held_to_the_dim_it_reads() -> None:
    # x[mask, idx]: the 2-d mask spans dims 0 and 1, so idx reads dim 2 (size 5) and 4 is in range; eager runs it.
    from torch.fx.experimental.proxy_tensor import make_fx

    x, idx = torch.randn(2, 3, 5), torch.tensor([4, 0, 1, 2])
    mask = torch.tensor([[True, False, True], [False, True, True]])
    graph = make_fx(lambda x, mask, idx: x[mask, idx])(x, mask, idx)
    assert replay(graph, [x, mask, idx]).outputs == "finite"
    assert (
        replay(graph, [x, mask, torch.tensor([5, 0, 1, 2])]).output
        == "index 5 outside [-5, 5) (dim 2 of a 2x3x5 table)"
    )
