"""Dynamic dims without a max (``Dim("batch")``, ``Dim("batch", min=2)``, ``Dim.DYNAMIC``, ``Dim.AUTO``) and dims
derived from them, over real exported programs (no compile): the invariants read their ranges, check calls against
them, name them, key the cache on them; Hypothesis draws them within a cap."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.export import Dim  # noqa: E402

from pytest_aoti.core.cache import PackageCache  # noqa: E402
from pytest_aoti.core.dims import ExportCall, dim_names  # noqa: E402
from pytest_aoti.core.errors import AOTIInvariantError  # noqa: E402
from pytest_aoti.core.invariants import TensorSpec, check_inputs, flatten_inputs, program_spec  # noqa: E402
from pytest_aoti.core.strategies import DEFAULT_UNBOUNDED_SPAN, input_shapes  # noqa: E402

CPU = torch.device("cpu")


class Sin(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin()


class Pair(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x]) + y


UNBOUNDED = {
    "Dim('batch')": lambda: Dim("batch"),
    "Dim('batch', min=2)": lambda: Dim("batch", min=2),
    "Dim.DYNAMIC": lambda: Dim.DYNAMIC,
    "Dim.AUTO": lambda: Dim.AUTO,
}


def _export_sin(dim: Any) -> torch.export.ExportedProgram:
    return torch.export.export(Sin(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: dim}})


def _check(ep: torch.export.ExportedProgram, *args: torch.Tensor) -> None:
    check_inputs(program_spec(ep), flatten_inputs(ep.call_spec.in_spec, args, {}), CPU)


@pytest.mark.parametrize("form", list(UNBOUNDED))
def test_an_unbounded_dim_has_no_max_and_accepts_any_size_from_its_min(form: str) -> None:
    ep = _export_sin(UNBOUNDED[form]())
    spec = program_spec(ep)
    named = program_spec(
        ep, dim_names(ExportCall(Sin(), (torch.randn(4, 3),), {}, {"x": {0: UNBOUNDED[form]()}}), spec)
    )
    (lows_and_highs,) = spec.ranges.values()
    low, high = lows_and_highs
    assert high is None
    for batch in (low or 1, 5, 1000, 100_000):
        _check(ep, torch.zeros(batch, 3))
    with pytest.raises(AOTIInvariantError, match=r"dim 1 is static 3"):
        _check(ep, torch.zeros(5, 4))
    if low >= 2:
        with pytest.raises(AOTIInvariantError, match=rf"outside \[{low}, inf\]") as refused:
            check_inputs(named, flatten_inputs(ep.call_spec.in_spec, (torch.zeros(low - 1, 3),), {}), CPU)
        if form == "Dim('batch', min=2)":  # the user's own minimum: no hint
            assert str(refused.value).endswith("batch=1 outside [2, inf] (the compiled package was not run)")
            return
        # A batch of one refused because export specialized 0 and 1: the message says how to accept it.
        assert str(refused.value).endswith(
            "(export assumes a dynamic dim is never 0 or 1 unless told: to accept 1, export with "
            "Dim('name', min=1) for this dim) (the compiled package was not run)"
        )


def test_a_dim_derived_from_an_unbounded_one() -> None:
    batch = Dim("batch")
    ep = torch.export.export(
        Pair(), (torch.randn(4, 3), torch.randn(8, 3)), dynamic_shapes={"x": {0: batch}, "y": {0: 2 * batch}}
    )
    spec = program_spec(ep)
    assert all(high is None for _, high in spec.ranges.values())
    _check(ep, torch.zeros(300, 3), torch.zeros(600, 3))
    with pytest.raises(AOTIInvariantError, match=r"input 1 \('y'\): shape invariant violated"):
        _check(ep, torch.zeros(300, 3), torch.zeros(601, 3))


def test_the_cache_key_reads_an_unbounded_range(tmp_path: Any) -> None:
    cache = PackageCache.open(tmp_path / "cache", 1 << 20)
    assert cache is not None
    unbounded = cache.key_for(_export_sin(Dim("batch")), {}, CPU)
    bounded = cache.key_for(_export_sin(Dim("batch", max=64)), {}, CPU)
    assert unbounded != bounded
    assert unbounded == cache.key_for(_export_sin(Dim("batch")), {}, CPU)


def test_auto_specialized_by_the_model_has_no_dynamic_dim() -> None:
    """``Dim.AUTO`` that the model makes static (it reads the size as a constant) leaves no range: the package
    accepts the example's size only, and a call with another size is refused before the package runs."""

    class NeedsFour(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * x.shape[0] if x.shape[0] == 4 else x

    ep = torch.export.export(NeedsFour(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim.AUTO}})
    assert program_spec(ep).ranges == {}
    with pytest.raises(AOTIInvariantError, match=r"dim 0 is static 4"):
        _check(ep, torch.zeros(5, 3))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_drawn_unbounded_dims_stay_within_the_default_cap(data: st.DataObject) -> None:
    spec = program_spec(_export_sin(Dim("batch", min=2)))
    (shape,) = data.draw(input_shapes(spec))
    assert shape is not None and 2 <= shape[0] <= 2 + DEFAULT_UNBOUNDED_SPAN and shape[1] == 3


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_huge_max_is_drawn_only_up_to_the_element_cap(data: st.DataObject) -> None:
    spec = program_spec(_export_sin(Dim("batch", max=2**40)))
    (shape,) = data.draw(input_shapes(spec, max_elements=3000))
    assert shape is not None and shape[0] * shape[1] <= 3000


def test_bad_caps_are_refused() -> None:
    spec = program_spec(_export_sin(Dim("batch")))
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match=r"unbounded_span= expected a positive int"):
            input_shapes(spec, unbounded_span=bad)  # type: ignore[arg-type]
    assert isinstance(spec.inputs[0], TensorSpec)


def test_dynamic_inputs_refuses_bad_arguments_when_called() -> None:
    from pytest_aoti.core.strategies import dynamic_inputs

    with pytest.raises(ValueError, match=r"dynamic_inputs: max_elements= expected a positive int, got '1e6'"):
        dynamic_inputs(object(), max_elements="1e6")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dynamic_inputs: unbounded_span= expected a positive int, got True"):
        dynamic_inputs(object(), unbounded_span=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"dynamic_inputs: expected the CompiledModel aoti_compile returned, got str"):
        dynamic_inputs("model")  # type: ignore[arg-type]
