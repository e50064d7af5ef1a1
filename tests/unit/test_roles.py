"""Which process this is (pytest_aoti/roles.py), decided from what pytest and xdist set up."""

from __future__ import annotations

import types

import pytest

from pytest_aoti import roles
from pytest_aoti.roles import Role


def test_the_session_the_user_started(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig("-p", "no:xdist")
    assert roles.decide(config) is Role.SESSION and roles.writes_user_reports(config)


def test_an_xdist_controller_and_its_worker(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig("-n", "2", "--dist", "load")
    assert roles.decide(config) is Role.CONTROLLER and roles.writes_user_reports(config)
    worker = types.SimpleNamespace(workerinput={"workerid": "gw0"}, option=config.option, stash=pytest.Stash())
    assert roles.decide(worker) is Role.WORKER  # type: ignore[arg-type]
    assert not roles.writes_user_reports(worker)  # type: ignore[arg-type]


def test_a_child_whatever_else_it_is(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_AOTI_CHILD", "kernels")
    config = pytester.parseconfig("-p", "no:xdist")
    assert roles.decide(config) is Role.CHILD and not roles.writes_user_reports(config)


def test_the_role_is_decided_once(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig("-p", "no:xdist")
    config.stash[roles.role_key] = Role.CONTROLLER
    assert roles.role(config) is Role.CONTROLLER
