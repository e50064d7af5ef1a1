"""The example conftests users copy: they must keep working as written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_aoti.core.cache import default_cache_dir
from tests.conftest import RunPytest

EXAMPLES = Path(__file__).parent.parent / "conftest_examples"
# The cache the README's first command (``pytest conftest_examples``) filled, read before pytester points HOME at
# its tmp dir: the examples run here as they run for a user, from that user's cache.
USER_CACHE = default_cache_dir()


def test_example_suites_pass(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    shutil.copytree(EXAMPLES, pytester.path, dirs_exist_ok=True)
    result = run_pytest("-p", "no:logging", "-rs", cache=USER_CACHE, hypothesis=True)
    import torch

    if torch.cuda.is_available():
        result.assert_outcomes(passed=12)
    else:
        result.assert_outcomes(passed=9, skipped=3)
        assert result.stdout.str().count(": no CUDA device on this machine") == 3
    assert "aoti: device=auto (cpu), debug=on, isolate=off, rerun timeout=600s" in result.stdout.str()
