"""What export-time checks and mismatch explanations say, on real exported programs (no compile)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.export import Dim  # noqa: E402

from pytest_aoti.core.compiler import _check_tensor_outputs, _random_explanation  # noqa: E402
from pytest_aoti.core.errors import AOTIExportError  # noqa: E402


class SizeOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        return x * 2, x.shape[0]


def test_a_symbolic_size_output_is_refused_at_export_with_the_way_out() -> None:
    program = torch.export.export(SizeOutput(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", max=16)}})
    with pytest.raises(AOTIExportError, match=r"output 1 is a symbolic int .*return torch.tensor\(\.\.\.\) of it"):
        _check_tensor_outputs(program)


@pytest.mark.parametrize(
    ("ops", "training", "advice"),
    [
        (("aten::dropout (drop)",), True, "The model is in training mode: call model.eval() before aoti_check."),
        (("aten::dropout (drop)",), False, None),
        (("aten::randn",), True, "model.eval() does not remove such a draw: pass the noise in as an input"),
        (("aten::randn", "aten::dropout (drop)"), True, "model.eval() does not remove such a draw"),
    ],
    ids=["dropout in training", "dropout in eval", "randn", "randn and dropout"],
)
def test_eval_is_advised_only_where_it_removes_the_draws(
    ops: tuple[str, ...], training: bool, advice: str | None
) -> None:
    module = torch.nn.Identity().train(training)
    text = _random_explanation(ops, module)
    assert text.startswith(f"The exported graph draws random numbers: {', '.join(ops)}.")
    if advice is None:
        assert "eval()" not in text
    else:
        assert text.endswith(advice) or advice in text
        if "does not remove" in advice:
            assert "call model.eval()" not in text
