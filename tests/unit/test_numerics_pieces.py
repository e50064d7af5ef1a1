"""Accuracy triage's pieces on real torch without a compile: eager values beside the exported program's, the
comparison, random ops, the verdict's text (the scenario that compiles is tests/test_numerics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu_(self.lin(x)) * self.scale


def test_eager_values_follow_eager_not_the_exported_program() -> None:
    from pytest_aoti.debug.numerics import Capture, node_values

    model = _Scaled()
    x = torch.randn(2, 4)
    program = torch.export.export(model, (x,))
    model.scale = 3.0  # eager now computes something else at node mul
    capture = Capture(Path("unused"), 0)
    with torch.no_grad(), capture.eager():
        model(x)
    values = node_values(capture.recorder.ops, program, [x])
    # relu_ in eager aligns with relu in the exported program.
    torch.testing.assert_close(values.eager["relu_"], values.exported["relu_"])
    torch.testing.assert_close(values.eager["mul"], values.exported["mul"] * 3)
    torch.testing.assert_close(values.reference["mul"], values.exported["mul"].double())


def test_compare_reports_the_worst_element_and_both_tolerances() -> None:
    from pytest_aoti.debug.numerics import compare

    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 0.5
    difference = compare(actual, expected, None)
    assert difference is not None
    assert difference.index == (1, 2) and difference.max_abs == 0.5 and difference.diverged
    tiny = compare(expected + 1e-7, expected, (0.0, 0.0))
    assert tiny is not None and tiny.beyond_test and not tiny.beyond_noise and not tiny.diverged
    both_nan = compare(torch.tensor([float("nan")]), torch.tensor([float("nan")]), None)
    assert both_nan is not None and not both_nan.diverged
    assert compare(torch.zeros(3), torch.zeros(4), None) is None


class _Dropping(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.lin(x)) + torch.nn.functional.dropout(x, 0.0, training=True)


def test_random_ops_are_the_ones_that_draw() -> None:
    from pytest_aoti.core.compiler import _random_ops
    from pytest_aoti.core.errors import AOTIMismatchError, failure_kind

    x = torch.randn(2, 4)
    # In training mode the module's dropout draws; p=0 does not.
    assert _random_ops(torch.export.export(_Dropping(), (x,))) == ("aten::dropout (drop)",)
    # In eval mode export keeps aten.dropout(train=False) in the graph, tagged random: it returns its input.
    assert _random_ops(torch.export.export(_Dropping().eval(), (x,))) == ()
    assert failure_kind(AOTIMismatchError("m", random_ops=("aten::dropout (drop)",))) == "random_mismatch"
    assert failure_kind(AOTIMismatchError("m")) == "mismatch"


class _Attending(torch.nn.Module):
    """Attention as Hugging Face models call it: ``dropout_p`` is 0 in eval mode, not 0 in training mode."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = dropout

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=p)


def test_attention_draws_only_with_dropout() -> None:
    """scaled_dot_product_attention is tagged random whatever its ``dropout_p``: an eval-mode transformer's mismatch
    must not be blamed on random draws (it would also skip the numerics rerun)."""
    from pytest_aoti.core.compiler import _random_ops

    q = torch.randn(1, 2, 4, 8)
    assert _random_ops(torch.export.export(_Attending(0.1).eval(), (q,))) == ()
    assert _random_ops(torch.export.export(_Attending(0.0), (q,))) == ()
    assert _random_ops(torch.export.export(_Attending(0.1), (q,))) == ("aten::scaled_dot_product_attention",)
    # The decomposed form: native_dropout's train=None means training.
    decomposed = torch.export.export(_Dropping(), (torch.randn(2, 4),)).run_decompositions()
    assert _random_ops(decomposed) != ()


def test_outputs_as_exported_tells_export_from_inductor() -> None:
    """Python state baked in at export: the exported program (what the package computes) differs from eager even
    where no kernel of the package holds the differing node."""
    from pytest_aoti.core.compiler import ComparedCall
    from pytest_aoti.debug.numerics import _outputs_as_exported

    model = _Scaled()
    # Outputs the relu keeps (random ones were all zeroed about once in 256 runs, and then no scale differs).
    torch.nn.init.ones_(model.lin.weight)
    torch.nn.init.zeros_(model.lin.bias)
    x = torch.rand(2, 4) + 0.1
    program = torch.export.export(model, (x,))
    as_exported = program.module()(x)
    model.scale = 3.0
    eager = model(x)
    package = Path("unused.pt2")
    assert _outputs_as_exported(ComparedCall(package, program, [x], None, as_exported, eager))
    # The package is the odd one out, or nothing differs.
    assert not _outputs_as_exported(ComparedCall(package, program, [x], None, eager, as_exported))
    assert not _outputs_as_exported(ComparedCall(package, program, [x], None, as_exported, as_exported))


def test_divergence_text_blames_export_when_the_outputs_say_so() -> None:
    from pytest_aoti.core.protocol import Finding
    from pytest_aoti.debug.reporting import divergence

    finding = Finding(compared=2, noise="rtol=1.3e-06, atol=1e-05", outputs_as_exported=True)
    assert "the package's outputs are the exported program's and eager's are not" in divergence(finding)
    assert "the difference comes from export, not Inductor" in divergence(finding)
    finding.outputs_as_exported = False
    assert "the mismatch is in the comparison itself" in divergence(finding)
    # The record crosses the process boundary as JSON and comes back whole.
    assert Finding.from_dict(finding.to_dict()) == finding


class _Cond(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.cond(h.sum() > 0, lambda t: t.relu() * 2, lambda t: t - 1, (h,))[0] + 1


class _While(torch.nn.Module):
    def forward(self, count: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.while_loop import while_loop

        return while_loop(lambda c, h: c < 3, lambda c, h: (c + 1, torch.tanh(h) * 2), (count, x))[1] + 1


class _Map(torch.nn.Module):
    def forward(self, xs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.map import map as map_over

        return map_over(lambda x, y: torch.sin(x) + y, xs, y) * 2


class _BufferStep(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        return torch.relu(self.lin(x)) * self.steps


@pytest.mark.parametrize(
    ("model", "inputs", "higher_order"),
    [
        (_Cond, lambda: (torch.randn(2, 4),), "cond"),
        (_While, lambda: (torch.tensor(0), torch.randn(2, 4)), "while_loop"),
        (_Map, lambda: (torch.randn(3, 4), torch.randn(4)), "map_impl"),
        (_BufferStep, lambda: (torch.randn(2, 4),), None),
    ],
    ids=["cond", "while_loop", "map", "buffer mutation"],
)
def test_eager_values_through_higher_order_ops_and_mutated_buffers(
    model: type[torch.nn.Module], inputs: Any, higher_order: str | None
) -> None:
    """Eager runs under the recorder without error (the test's own eager call is recorded in the numerics child),
    and every node after the higher-order op has eager's value: its outputs are compared, with a note that the
    kernels inside it are not."""
    from pytest_aoti.debug.numerics import Capture, node_values

    args = inputs()
    program = torch.export.export(model(), args)
    eager_model = model()
    eager_model.load_state_dict(program.state_dict, strict=False)
    capture = Capture(Path("unused"), 0)
    with torch.no_grad(), capture.eager():
        eager_model(*args)
    values = node_values(capture.recorder.ops, program, list(args))
    output = program.graph_signature.user_outputs[0]
    assert output in values.eager, (sorted(values.eager), output)
    for name, value in values.eager.items():
        torch.testing.assert_close(value, values.exported[name], msg=name)
    notes = [note for note in values.notes if note.startswith("higher-order ops")]
    if higher_order is None:
        assert notes == []
    else:
        assert notes == [
            f"higher-order ops ({higher_order}): their outputs are compared, the kernels of their subgraphs are not"
        ]
    # The test may export again after its recorded eager call (an eager cond under the recorder once broke that).
    torch.export.export(model(), inputs())


def test_a_bool_is_not_compared_with_a_number() -> None:
    from pytest_aoti.debug.numerics import compare

    assert compare(torch.tensor(0.5), torch.tensor(True), None) is None
    assert compare(torch.tensor(1, dtype=torch.int64), torch.tensor(1.0), None) is None
    assert compare(torch.tensor(1.0, dtype=torch.bfloat16), torch.tensor(1.0), None) is not None


class _Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("scale", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.scale + self.calls


def test_a_mismatch_names_the_buffers_the_model_updates() -> None:
    """A model that updates a buffer in forward holds other state than the package after its first call: the
    mismatch names the buffer and the line that writes it, in export's default IR and in a decomposed program; a
    buffer only read is not named."""
    from pytest_aoti.core.compiler import _mismatch_error, _updated_buffers

    program = torch.export.export(_Counting(), (torch.randn(3),))
    (line,) = _updated_buffers(program).values()
    assert list(_updated_buffers(program)) == ["calls"]
    assert line.endswith("in forward: self.calls += 1") and "test_numerics_pieces.py:" in line
    assert list(_updated_buffers(program.run_decompositions())) == ["calls"]
    message = str(_mismatch_error(AssertionError("Tensor-likes are not close!"), program, _Counting()))
    assert message.startswith("Tensor-likes are not close!\n\nThe model updates buffer(s) in forward: calls (")
    assert "Eager carries each update into its next call; the package does not hold the same state" in message
    assert _updated_buffers(torch.export.export(_Scaled(), (torch.randn(2, 4),))) == {}


def test_outputs_off_by_rounding_only_say_the_tolerance_is_too_tight() -> None:
    """A torch.cond model compared exactly: the kernels inside its branches are not compared one by one, so no
    kernel is past the tolerance; the outputs are, by rounding noise only. The verdict says the tolerance is tighter
    than the arithmetic allows, not that the mismatch is in the comparison."""
    from pytest_aoti.core.compiler import ComparedCall
    from pytest_aoti.core.protocol import Finding
    from pytest_aoti.debug.numerics import _outputs_within_noise
    from pytest_aoti.debug.reporting import divergence

    # The check reads the two sides' outputs only. (torch.cond run eagerly here, after the dispatch-mode tests of
    # this module, fails inside torch's own cond tracing: the outputs stand for the model's.)
    x = torch.randn(2, 4)
    eager = torch.nn.functional.linear(x, torch.randn(4, 4)).relu() * 2 + 1
    program = torch.export.export(torch.nn.Identity(), (x,))
    one_ulp_off = torch.nextafter(eager, torch.full_like(eager, float("inf")))
    package = Path("unused.pt2")
    exact = ComparedCall(package, program, [x], (0.0, 0.0), one_ulp_off, eager)
    assert _outputs_within_noise(exact)
    # Past rounding noise, or within the test's tolerance: not the tolerance's fault.
    assert not _outputs_within_noise(ComparedCall(package, program, [x], (0.0, 0.0), eager + 0.5, eager))
    assert not _outputs_within_noise(ComparedCall(package, program, [x], (1e-5, 1e-5), one_ulp_off, eager))

    finding = Finding(compared=1, noise="rtol=1.3e-06, atol=1e-05", test_tolerance="rtol=0, atol=0")
    finding.outputs_within_noise = True
    text = divergence(finding)
    assert text.endswith(
        "the outputs differ from eager's by rounding noise only: the test's tolerance (rtol=0, atol=0) is tighter "
        "than the arithmetic allows"
    )
    assert Finding.from_dict(finding.to_dict()) == finding
