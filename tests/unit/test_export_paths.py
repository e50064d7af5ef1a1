"""Where an exported program parts from eager (issue 61 item 3): the first graph node on a line eager never ran."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pytest_aoti.core.export_paths import first_node_off_eagers_path, lines_run


class TakesAnotherPathUnderExport(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.out = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lin(x))
        if torch.compiler.is_exporting():
            h = h * 2
        return self.out(h).sin()


class FrozenAtExport(torch.nn.Module):
    """The same lines run under export and eager; only a Python value differs: no node is on another path."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale += 1.0
        return x * self.scale


def test_the_first_node_on_a_line_eager_did_not_run_is_named() -> None:
    x = torch.randn(4, 4)
    model = TakesAnotherPathUnderExport()
    program = torch.export.export(model, (x,))
    found = first_node_off_eagers_path(program, model, (x,), {})
    assert found is not None
    assert found.target == "aten.mul.Tensor"
    assert found.line.file == __file__ and found.line.text == "h = h * 2", found
    assert found.line.describe(Path(__file__).parent).startswith("test_export_paths.py:")


def test_a_value_frozen_at_export_names_no_node() -> None:
    x = torch.randn(2)
    program = torch.export.export(FrozenAtExport(), (x,))
    assert first_node_off_eagers_path(program, FrozenAtExport(), (x,), {}) is None


def test_a_model_that_raises_in_eager_names_no_node() -> None:
    x = torch.randn(4, 4)
    program = torch.export.export(TakesAnotherPathUnderExport(), (x,))
    assert first_node_off_eagers_path(program, TakesAnotherPathUnderExport(), (torch.randn(3, 5),), {}) is None


def test_the_tracer_in_place_before_is_put_back() -> None:
    def previous(frame: object, event: str, arg: object) -> None:
        return None

    before = sys.gettrace()
    sys.settrace(previous)
    try:
        ran = lines_run(lambda: TakesAnotherPathUnderExport()(torch.randn(1, 4)), frozenset({__file__}))
        assert sys.gettrace() is previous
    finally:
        sys.settrace(before)
    forward = TakesAnotherPathUnderExport.forward.__code__
    assert (__file__, forward.co_firstlineno + 1) in ran  # h = torch.relu(self.lin(x))
    assert (__file__, forward.co_firstlineno + 3) not in ran  # h = h * 2


class ReturnsAnotherValueUnderExport(torch.nn.Module):
    """transformers' shape: the whole return differs, so no line of the graph is one eager ran."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            return torch.sin(x) * 2
        return torch.cos(x)


def test_a_graph_made_only_of_lines_eager_did_not_run_names_its_first_node() -> None:
    x = torch.randn(3)
    program = torch.export.export(ReturnsAnotherValueUnderExport(), (x,))
    found = first_node_off_eagers_path(program, ReturnsAnotherValueUnderExport(), (x,), {})
    assert found is not None and found.target == "aten.sin.default" and found.line.text == "return torch.sin(x) * 2"


def test_a_function_the_tracer_never_saw_names_no_node() -> None:
    """Nothing is said of a line in a function eager did not enter under the tracer (run in another thread)."""
    import threading

    x = torch.randn(3)
    program = torch.export.export(ReturnsAnotherValueUnderExport(), (x,))

    class InAThread(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> None:
            worker = threading.Thread(target=ReturnsAnotherValueUnderExport(), args=(x,))
            worker.start()
            worker.join()

    assert first_node_off_eagers_path(program, InAThread(), (x,), {}) is None
