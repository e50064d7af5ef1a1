"""Issue 62, item 2, as a user meets it: a FIFO left in the cache dir under the ISA record's name hung the first
compile, and one under a package's sidecar name hung the lookup; a sidecar symlinked to /dev/zero grew the read until
the run was OOM-killed. Now each is refused with one warning, like a corrupt entry, and the run goes on. The unit
tests (tests/unit/test_cache_files.py) cover each kind of file on each reader."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_aoti.core import isa_verdicts
from tests.conftest import RunPytest

TEST_MODEL = """
import torch
from aoti_models import MLP


def test_mlp(aoti_check):
    aoti_check(MLP(), (torch.randn(2, 8),))
"""


@pytest.mark.parametrize("planted", ["fifo", "/dev/zero"])
def test_a_run_refuses_what_is_not_a_regular_file_in_its_cache_dir(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    monkeypatch.delenv(isa_verdicts.ISA_RECORD_ENV, raising=False)  # the inner session names its own cache's
    pytester.makepyfile(test_model=TEST_MODEL)
    cache = tmp_path / "cache"
    run_pytest(cache=cache).assert_outcomes(passed=1)
    (sidecar,) = cache.glob("*/*.json")
    record = isa_verdicts.record_path(cache)
    for path in (sidecar, record):
        path.unlink(missing_ok=True)
        if planted == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(planted)

    result = run_pytest(cache=cache)
    result.assert_outcomes(passed=1)
    found = "is a FIFO, not a regular file" if planted == "fifo" else "is a symlink, not a regular file"
    corrupt = "refused: read as a corrupt entry: the package is compiled again"
    result.stdout.fnmatch_lines([f"*{sidecar} {found}; {corrupt}"])
    result.stdout.fnmatch_lines([f"*{record} {found}; refused: the ISA probes run instead"])
    result.stdout.fnmatch_lines(["aoti cache: 0 hits, 1 misses, *1 corrupt entries recompiled*"])
    assert sidecar.is_file() and not sidecar.is_symlink()  # the entry stored again in its place
