"""The suite's harness: a user run forked from ``tests/forkserver.py`` starts as a fresh ``python -m pytest`` does."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import ForkServer, RunPytest

RECORDS = """
import json
import os
import sys
import tempfile


def test_record():
    seen = {
        "cwd": os.getcwd(),
        "first on sys.path": sys.path[0],
        "tmp": tempfile.gettempdir(),
        "flag": os.environ.get("AOTI_TESTS_FLAG"),
        "program": os.path.basename(sys.argv[0]),
        "stdin": sys.stdin.read() if not sys.stdin.closed else "",
    }
    with open(os.environ["AOTI_TESTS_RECORD"], "w") as record:
        json.dump(seen, record)
"""


def test_a_forked_run_sees_what_a_fresh_one_sees(
    pytester: pytest.Pytester,
    run_pytest: RunPytest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    fork_server: ForkServer,
) -> None:
    fork_server.usable()  # started before this test's environment: the run must not see the server's
    pytester.makepyfile(test_user=RECORDS)
    monkeypatch.setenv("AOTI_TESTS_FLAG", "set for this run")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    seen, output = {}, {}
    for fresh in (True, False):
        record = pytester.path / f"record-{fresh}.json"
        monkeypatch.setenv("AOTI_TESTS_RECORD", str(record))
        result = run_pytest("-s", "-W", "error::pytest.PytestAssertRewriteWarning", fresh=fresh)
        result.assert_outcomes(passed=1)
        seen[fresh] = json.loads(record.read_text())
        output[fresh] = result.stdout.str() + result.stderr.str()
    assert seen[False] == seen[True]
    # What the server imported ahead (Hypothesis too) is no warning of the run's: pytest's summary is the same.
    for run_output in output.values():
        assert "warning" not in run_output.lower(), run_output
    assert seen[True]["tmp"] == str(tmp_path) and seen[True]["flag"] == "set for this run"

    # A run that dies ends with the same status either way (a signal: negative, as subprocess reports it).
    pytester.makepyfile(test_user="import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert run_pytest(fresh=True).ret == run_pytest().ret == -signal.SIGSEGV
