"""Who plans the fork server (pytest_aoti/debug/warm_starts.py): the process pytest was started as, when it may have
children and tests will run; never an xdist worker (its controller's is handed down) or a child. Its launch at the
first test that compiles, and its stop: tests/test_options.py (a real session and its real server)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from pytest_aoti import roles
from pytest_aoti.debug.options import DebugSettings
from pytest_aoti.debug.warm_starts import WarmStarts

DEBUG = DebugSettings(
    debug=True, isolate=False, rerun_timeout=60.0, sanitizer=False, minify=False, minify_budget=1.0, flaky_reruns=0
)


def _config(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> pytest.Config:
    """A config of the process pytest was started as (its arguments are sys.argv's)."""
    config = pytester.parseconfig("-p", "no:xdist", *args)
    monkeypatch.setattr(sys, "argv", ["pytest", *config.invocation_params.args])
    return config


def test_the_session_pytest_was_started_as_plans_it_under_debug_or_isolate(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(pytester, monkeypatch)
    assert WarmStarts(DEBUG)._planned_ahead(config)
    assert WarmStarts(replace(DEBUG, debug=False, isolate=True))._planned_ahead(config)
    assert not WarmStarts(replace(DEBUG, debug=False))._planned_ahead(config)  # no children to fork
    assert not WarmStarts(replace(DEBUG, no_children_reason="--pdb"))._planned_ahead(config)
    monkeypatch.setattr(sys, "argv", ["python", "-c", "pytest.main()"])  # a pytest run inside a script or a test
    assert not WarmStarts(DEBUG)._planned_ahead(config)


def test_no_test_runs_nothing_is_planned(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not WarmStarts(DEBUG)._planned_ahead(_config(pytester, monkeypatch, "--collect-only"))


@pytest.mark.parametrize("child", ["isolate", "kernels"])
def test_a_child_plans_none(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, child: str) -> None:
    monkeypatch.setenv("PYTEST_AOTI_CHILD", child)
    assert not WarmStarts(DEBUG)._planned_ahead(_config(pytester, monkeypatch))


def test_an_xdist_worker_plans_none(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(pytester, monkeypatch)
    config.workerinput = {"workerid": "gw0"}  # type: ignore[attr-defined]  # what xdist gives a worker's config
    assert roles.settle(config) is roles.Role.WORKER
    assert not WarmStarts(DEBUG)._planned_ahead(config)
