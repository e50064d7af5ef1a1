from __future__ import annotations

import pytest

from pytest_aoti import roles


@pytest.fixture(autouse=True)
def _no_child_role_claim_outlives_its_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test that settles a config as a child (``roles.settle`` with ``PYTEST_AOTI_CHILD`` set) claims the
    role for this process until that config's session ends; a config a test parsed never ends it. Each test starts
    and ends without a claim."""
    monkeypatch.setattr(roles, "_child_config", None)
    monkeypatch.setenv(roles.CHILD_OWNER_ENV, "")
    monkeypatch.delenv(roles.CHILD_OWNER_ENV)
