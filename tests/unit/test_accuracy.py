"""The float64 judge of ``aoti_check`` (no compile): a low-precision output that rounds differently from eager is
accepted, a wrong one is not, and what cannot be judged is said."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_aoti.core.accuracy import float64_outputs, judge  # noqa: E402


class _Gated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.up(x)
        h = torch.nn.functional.silu(h) * torch.tanh(h) + h.exp() * 0.1
        return {"out": self.down(h), "argmax": h.argmax(-1)}


def _sides() -> tuple[_Gated, torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Eager in bfloat16 (rounds after every op), and what a fused package computes: float32 inside, rounded once."""
    torch.manual_seed(0)
    model = _Gated().to(torch.bfloat16)
    x = torch.randn(64, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        eager = model(x)
        state = {name: value.float() for name, value in model.named_parameters()}
        fused = torch.func.functional_call(model, state, (x.float(),))
    package = {"out": fused["out"].to(torch.bfloat16), "argmax": eager["argmax"]}
    return model, x, eager, package


def test_a_rounding_that_differs_is_accepted() -> None:
    model, x, eager, package = _sides()
    # assert_close's bfloat16 defaults reject it: this is the case the judge exists for.
    assert not torch.allclose(package["out"], eager["out"], rtol=1.6e-2, atol=1e-5)
    judgement = judge(package, eager, lambda: float64_outputs(model, (x,), {}))
    assert judgement.accepted, judgement.text
    assert "['out'] (bfloat16): RMSE to a float64 run of the model: package" in judgement.text
    assert "the package is as accurate as eager" in judgement.text


def test_a_wrong_output_is_not() -> None:
    model, x, eager, package = _sides()
    wrong = {"out": package["out"].clone(), "argmax": package["argmax"]}
    wrong["out"][:, 3] += 0.5  # one wrong column, as a kernel with a bad index would give
    judgement = judge(wrong, eager, lambda: float64_outputs(model, (x,), {}))
    assert not judgement.accepted
    assert "the package is less accurate than eager allows (3x eager's + 1e-05" in judgement.text


def test_what_cannot_be_judged_is_not_accepted() -> None:
    _, _, eager, package = _sides()
    # An integer output that differs: exact outputs get no float64 leniency (and the model is not run again).
    flipped = {"out": package["out"], "argmax": package["argmax"] + 1}
    runs: list[int] = []
    judgement = judge(flipped, eager, lambda: runs.append(1))
    assert not judgement.accepted and not runs
    assert "['argmax'] is not a finite low-precision tensor of eager's dtype and shape" in judgement.text

    # Another dtype than eager's is a real difference, never a rounding.
    widened = {"out": package["out"].float(), "argmax": package["argmax"]}
    judgement = judge(widened, eager, lambda: runs.append(1))
    assert not judgement.accepted and not runs
    assert "['out'] is not a finite low-precision tensor of eager's dtype and shape" in judgement.text

    def refuses() -> None:
        raise RuntimeError("expected a bfloat16 input")

    judgement = judge(package, eager, refuses)
    assert not judgement.accepted
    assert "the model did not run in float64 (RuntimeError: expected a bfloat16 input)" in judgement.text


def test_the_float64_run_leaves_the_model_as_it_was() -> None:
    model, x, _, _ = _sides()
    reference = float64_outputs(model, (x,), {})
    assert reference["out"].dtype == torch.float64
    assert all(parameter.dtype == torch.bfloat16 for parameter in model.parameters())


class _Counter(torch.nn.Module):
    """Python state read and updated in forward: each call computes something else."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.lin(x) * (-1) ** self.calls  # a sign that flips on every call


def test_a_model_whose_output_moves_between_calls_is_not_judged() -> None:
    """The package computes what the first call traced (calls=1), eager its second call (calls=2): a single float64
    run (calls=3) would side with the package here, so the judge must not run at all."""
    torch.manual_seed(0)
    model, x = _Counter(), torch.randn(4, 8)
    with torch.no_grad():
        package = model(x)
        eager = model(x)
    judgement = judge(package, eager, lambda: float64_outputs(model, (x,), {}))
    assert not judgement.accepted
    assert "two float64 runs of the model differ" in judgement.text
