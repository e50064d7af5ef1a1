"""When the fork server starts ahead of need: only with cores to spare (forkserver/client.py)."""

from __future__ import annotations

import os

import pytest

from pytest_aoti.forkserver import client


@pytest.mark.parametrize(("cores", "early"), [(1, False), (2, False), (3, False), (4, True), (64, True)])
def test_the_server_starts_ahead_of_need_only_with_cores_to_spare(
    monkeypatch: pytest.MonkeyPatch, cores: int, early: bool
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert client.cores_to_spare() is early


def test_without_an_affinity_call_the_cpu_count_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert client.cores_to_spare() is True
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert client.cores_to_spare() is False
