"""Dynamic-shape testing with Hypothesis: strategies over a package's Dim ranges, shrinking to the failing shape,
the debug rerun replaying that shape, and no spurious shrinking after the device is poisoned."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest

pytest.importorskip("torch")
pytest.importorskip("hypothesis")

USER_TESTS = """
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.export import Dim

from aoti_models import PLANTED, PlantedBug
from pytest_aoti import dynamic_inputs
def _batch_dynamic(aoti_compile_shared, model, features):
    batch = Dim("batch", min=1, max=64)
    return aoti_compile_shared(model, (torch.randn(4, features),), dynamic_shapes={"x": {0: batch}})


@pytest.fixture(scope="module")
def planted(aoti_compile_shared):
    return _batch_dynamic(aoti_compile_shared, PlantedBug(), 4)


@pytest.fixture(scope="module")
def sticky(aoti_compile_shared):
    # The same model (a cache hit): its op poisons the stand-in device in mode "sticky".
    return _batch_dynamic(aoti_compile_shared, PlantedBug(), 4)


@pytest.mark.aoti_ima(stages=("kernels",))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_planted_bug(planted, data):
    inputs = data.draw(dynamic_inputs(planted))
    torch.testing.assert_close(planted(*inputs), inputs[0] * 2)


def _sticky_property(sticky, data):
    inputs = data.draw(dynamic_inputs(sticky))
    torch.testing.assert_close(sticky(*inputs), inputs[0] * 2)


@settings(max_examples=200, deadline=None, database=None)
@given(data=st.data())
def test_sticky_with_health_check(sticky, data):
    _sticky_property(sticky, data)


@pytest.fixture(autouse=True)
def fresh_stand_in_device(request):
    PLANTED.update(mode="sticky" if "sticky" in request.fixturenames else "planted", poisoned=False)
    if "sticky" in request.fixturenames:
        sticky = request.getfixturevalue("sticky")
        sticky.poisoned = None
        watched = "with_health_check" in request.node.name
        sticky.health_check = (lambda: "stand-in device poisoned" if PLANTED["poisoned"] else None) if watched else None


@settings(max_examples=200, deadline=None, database=None)
@given(data=st.data())
def test_sticky_without_health_check(sticky, data):
    _sticky_property(sticky, data)
"""


def _falsifying_batch(text: str, test: str) -> int:
    """The batch size of the falsifying example Hypothesis printed for ``test``."""
    start = text.index(f"_ {test} _")
    # Hypothesis prints the draw on one line or over several (each prefixed "E" inside a failure report).
    match = re.search(r"Draw 1: inputs_with_shapes\(\s*(?:E\s+)?\(\((\d+), 4\),\)", text[start:])
    assert match is not None, text[start : start + 3000]
    return int(match.group(1))


def test_dynamic_shapes_with_hypothesis(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = run_pytest("-p", "no:logging", hypothesis=True)
    result.assert_outcomes(failed=3)
    text = result.stdout.str()

    # Found, shrunk to the threshold, reported with that shape.
    assert _falsifying_batch(text, "test_planted_bug") == 13
    # The debug rerun replayed the failing example from the database instead of searching again.
    section = text[text.index("_ test_planted_bug _") :]
    kernels_log = section[section.index("--- log of stage kernels") :]
    assert re.search(r"inputs_with_shapes\(\s*\(\(13, 4\),\)", kernels_log), kernels_log[:3000]

    # A poisoned device: with the health check the original failing example (batch > 12) is reported, not a
    # spurious shrink; without it Hypothesis shrinks to the smallest batch, which only failed because of the poison.
    assert _falsifying_batch(text, "test_sticky_with_health_check") > 12
    assert _falsifying_batch(text, "test_sticky_without_health_check") == 1
