"""A pytest session on a torch outside the tested range, as a user's would start: the installed torch's version is
faked by a ``torch-X.dist-info`` first on PYTHONPATH, which is what ``importlib.metadata`` finds first (the real
torch still imports). Older than pytest-aoti needs: one line at start-up, before any test. Newer than tested: the
header says so once, and the tests run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_aoti.core.torch_versions import NEWEST_TESTED
from tests.conftest import plugin_args

# On every torch release .ci/run tests: the start-up check and the header's "untested torch".
pytestmark = pytest.mark.torch_matrix

USER_TESTS = """
import torch


def test_model(aoti_check):
    aoti_check(torch.nn.Linear(4, 2).eval(), (torch.randn(3, 4),))
"""


def _fake_torch_version(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    dist_info = pytester.path / "fake-metadata" / f"torch-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    monkeypatch.setenv("PYTHONPATH", str(dist_info.parent))


def test_an_older_torch_stops_the_session_with_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_torch_version(pytester, monkeypatch, "2.10.0")
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", timeout=600)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.strip()] == [
        "ERROR: pytest-aoti needs torch>=2.11; torch 2.10.0 is installed (pip install 'torch>=2.11')"
    ], result.errlines
    assert "Traceback" not in result.stdout.str() and "test_model" not in result.stdout.str()


def test_a_newer_torch_than_tested_is_named_once_and_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_cache: Path
) -> None:
    _fake_torch_version(pytester, monkeypatch, "2.99.0")
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess(
        *plugin_args(), "-p", "no:cacheprovider", f"--aoti-cache-dir={shared_cache}", timeout=600
    )
    result.assert_outcomes(passed=1)
    note = f"untested torch 2.99.0 (newest tested: {NEWEST_TESTED})"
    assert result.stdout.str().count(note) == 1, result.stdout.str()
    result.stdout.re_match_lines([rf"^aoti: device=.*, {re.escape(note)}$"])
