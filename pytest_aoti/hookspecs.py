"""Hooks pytest-aoti calls, for conftests and other plugins (as pytest-xdist publishes its own in ``newhooks.py``).

def pytest_aoti_verdict(config, nodeid, verdict):
    if verdict.suspect_kernel:
        print(f"{nodeid}: {verdict.suspect_kernel}")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_aoti.debug.stages import Verdict


@pytest.hookspec
def pytest_aoti_verdict(config: pytest.Config, nodeid: str, verdict: Verdict) -> None:
    """A failed test's debug verdict, once per failure, before it goes on the test's report: what each rerun stage
    did (``verdict.stages``), the suspect kernel (``verdict.suspect_kernel``), the first NaN/Inf, the numerics
    finding, the repro bundle, or why there was no rerun (``verdict.not_rerun``). Called in the process that made
    the verdict: the session, the xdist worker that ran the test, or the xdist controller when the test crashed its
    worker."""
