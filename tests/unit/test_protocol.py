"""The boundary's names (stages, failure kinds, outcomes) are their strings wherever they go: compared with, hashed
as, formatted as and serialized as their values, so a kind that crossed xdist as a plain str triages the same."""

from __future__ import annotations

import json

import pytest

from pytest_aoti.core.protocol import FailureKind, Name, Outcome, Stage
from pytest_aoti.debug.options import DebugRequest
from pytest_aoti.debug.triage import triage


@pytest.mark.parametrize("name", [Stage.KERNELS, FailureKind.OUTPUT_NONFINITE, Outcome.TIMED_OUT])
def test_a_name_is_its_string(name: Name) -> None:
    value = name.value
    assert name == value and hash(name) == hash(value) and {value: 1}[name] == 1
    assert str(name) == f"{name}" == value
    assert json.loads(json.dumps({"kind": name})) == {"kind": value}
    assert type(name)(value) is name


@pytest.mark.parametrize("kind", ["compile", FailureKind.COMPILE])
def test_triage_is_the_same_for_a_kind_that_crossed_xdist_as_a_str(kind: str) -> None:
    request = DebugRequest(timeout=60.0, env={}, kernels=(), stages=None)
    assert "failed to compile or load" in str(triage(kind, request).not_rerun)


def test_triage_picks_the_stages_by_kind() -> None:
    request = DebugRequest(timeout=60.0, env={}, kernels=(), stages=None, minify=True)
    mismatch = triage("mismatch", request)
    assert (mismatch.not_rerun, mismatch.stages, mismatch.mismatch) == (None, ("numerics", "minify"), True)
    nan = triage(FailureKind.OUTPUT_NONFINITE, request)
    assert (nan.stages, nan.nonfinite_failure) == (("kernels", "tensors", "minify"), True)
    assert triage(None, request, no_children_reason="--pdb").not_rerun == "--pdb"  # a session without children


def test_a_childs_pytest_exit_crosses_as_an_exit_event() -> None:
    from pytest_aoti.core.protocol import Event, ExitRequest, decode_events, encode_event

    line = encode_event(Event.EXIT, ExitRequest("the suite asked to stop", 7).to_dict())
    ((event, data),) = decode_events([line])
    assert event is Event.EXIT and ExitRequest.from_dict(data) == ExitRequest("the suite asked to stop", 7)
    # pytest.exit's default return code, and one that is not a number, are pytest's default: None.
    assert ExitRequest.from_dict({"reason": "stop"}) == ExitRequest("stop", None)
    assert ExitRequest.from_dict({"reason": "stop", "returncode": "7"}).returncode is None
