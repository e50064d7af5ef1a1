"""Inductor's CPU ISA probes (pytest_aoti/core/isa_verdicts.py): paid once per machine, only on the way to a compile,
a failure never trusted, the ISA picked in the key. Real probes in fresh interpreters. A probe leaves its build (a
``.cpp`` holding ``_chk_kernel``) in the Inductor cache dir it ran with, so a fresh Inductor cache dir without one
after a process says that process ran no probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_aoti.core import isa_verdicts
from pytest_aoti.core.cache import MARKER_FILE
from tests.conftest import RunPytest

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="Inductor probes ISAs on Linux and Windows x86 only")

PROBE = """
from pytest_aoti.core import isa_verdicts

print("picked", isa_verdicts.ready_for_compile())
"""

# A C++ compiler that builds everything but Inductor's ISA probes (their code holds ``_chk_kernel``): what a probe
# killed mid-build, a full disk or a compiler without the ISA looks like to Inductor.
FAILING_PROBES_CXX = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    *.cpp) if grep -q _chk_kernel "$arg" 2>/dev/null; then echo "no probes here" >&2; exit 1; fi ;;
  esac
done
exec "${REAL_CXX:-g++}" "$@"
"""


def _probe_builds(inductor_cache: Path) -> list[Path]:
    """The ISA probes' builds a process left in its Inductor cache dir."""
    return [path for path in inductor_cache.rglob("*.cpp") if "_chk_kernel" in path.read_text(errors="replace")]


def _cache_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER_FILE).write_text("pytest-aoti\n")
    return path


def _probe(tmp_path: Path, name: str, record: Path, **env: str) -> tuple[str, list[Path]]:
    inductor_cache = tmp_path / f"inductor-{name}"
    full_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), isa_verdicts.ISA_RECORD_ENV: str(record)}
    full_env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)  # the base probe runs too
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env={**full_env, **env}, capture_output=True, text=True, check=True, timeout=600
    )
    return result.stdout, _probe_builds(inductor_cache)


def _advertises_an_isa(built: list[Path]) -> None:
    if not built:
        pytest.skip("this CPU has no ISA Inductor probes")


@linux_only
def test_a_second_process_runs_no_probe_and_picks_the_same_isa(tmp_path: Path) -> None:
    record = isa_verdicts.record_path(_cache_dir(tmp_path / "cache"))
    first_out, first_built = _probe(tmp_path, "first", record)
    _advertises_an_isa(first_built)
    assert isa_verdicts.read_record(record).passed, record.read_text()
    second_out, second_built = _probe(tmp_path, "second", record)
    assert second_built == [] and second_out == first_out, (second_out, second_built)

    # A malformed record is no record: the probes run again (and the record is rewritten whole).
    record.write_text("{not json")
    third_out, third_built = _probe(tmp_path, "third", record)
    assert third_built and third_out == first_out
    assert isa_verdicts.read_record(record).passed


@linux_only
def test_a_recorded_failure_is_never_an_answer(tmp_path: Path) -> None:
    """Issue 62, item 6: with every recorded verdict false (an older version recorded failures as answers), later
    compiles picked a lesser ISA, or none. A false verdict, old or new, answers nothing: the probes run again and
    pick what a full probe picks, and the record then holds passes."""
    record = isa_verdicts.record_path(_cache_dir(tmp_path / "cache"))
    first_out, first_built = _probe(tmp_path, "first", record)
    _advertises_an_isa(first_built)
    passed = sorted(isa_verdicts.read_record(record).passed)
    failures = {key: {"check": "planted", "why": "planted", "when": "2026-01-01T00:00:00Z"} for key in passed}
    record.write_text(json.dumps({"checks": dict.fromkeys(passed, False), "failed": failures}))
    assert isa_verdicts.read_record(record) == isa_verdicts.IsaRecord(frozenset(), failures)
    again_out, again_built = _probe(tmp_path, "again", record)
    assert again_out == first_out and len(again_built) == len(first_built)
    assert sorted(isa_verdicts.read_record(record).passed) == passed and not isa_verdicts.read_record(record).failed


@linux_only
def test_a_probe_that_failed_once_is_recorded_with_why_and_probed_again(tmp_path: Path) -> None:
    """A probe whose build failed (a killed build, a full disk: Inductor's check_build returns False for any of
    them) leaves a lesser ISA in that process only: the process says so once, its record holds the failure and why,
    and the next process probes again and picks what a full probe picks."""
    record = isa_verdicts.record_path(_cache_dir(tmp_path / "cache"))
    compiler = tmp_path / "cxx-without-probes"
    compiler.write_text(FAILING_PROBES_CXX)
    compiler.chmod(0o755)
    failed_out, failed_built = _probe(tmp_path, "failing", record, CXX=str(compiler))
    _advertises_an_isa(failed_built)  # the probe wrote its program, and its build failed
    assert "picked IsaPick(isa='none'" in failed_out and "did not build" in failed_out, failed_out
    written = isa_verdicts.read_record(record)
    assert not written.passed and written.failed
    assert all("did not build" in failure["why"] and failure["check"] for failure in written.failed.values())

    healthy_out, healthy_built = _probe(tmp_path, "healthy", record)
    assert healthy_built and "failures=()" in healthy_out and "isa='none'" not in healthy_out, healthy_out
    assert isa_verdicts.read_record(record).passed and not isa_verdicts.read_record(record).failed


RECORDED_BEFORE_THE_END = """
import json
import os
from pathlib import Path

import torch


def test_compiles(aoti_compile):
    aoti_compile(torch.nn.Linear(4, 4), (torch.randn(2, 4),))


def test_the_record_is_there_already():
    record = Path(os.environ["PYTEST_AOTI_ISA_RECORD"])
    assert json.loads(record.read_text())["checks"]
"""


@linux_only
@pytest.mark.parametrize("mode", [(), ("-n", "1")], ids=["plain", "xdist worker"])
def test_a_process_records_its_probes_before_its_session_ends(
    pytester: pytest.Pytester,
    run_pytest: RunPytest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: tuple[str, ...],
) -> None:
    """The record is written once a process has probed (before its first compile), not at its session's end: a
    worker that replaces a crashed one (which never reaches its end) or a fresh child reads it instead of probing
    again (22.5 s of probe children on the H200 machine). Fresh interpreters: the suite's fork server has probed
    already."""
    monkeypatch.delenv(isa_verdicts.ISA_RECORD_ENV, raising=False)  # the inner session names its own cache's
    monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)  # the base probe runs too
    pytester.makepyfile(test_record=RECORDED_BEFORE_THE_END)
    run_pytest(*mode, "-p", "no:logging", cache=tmp_path / "cache", fresh=True).assert_outcomes(passed=2)


CACHED_SUITE = """
import torch
from aoti_models import MLP


def test_mlp(aoti_check):
    aoti_check(MLP(), (torch.randn(2, 8),))


def test_linear(aoti_compile):
    aoti_compile(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
"""

# Each process says, at its end, whether it imported Inductor's compile path or its probes ran in it.
WHAT_EACH_PROCESS_IMPORTED = """
import json
import os
import sys
from pathlib import Path


def pytest_sessionfinish(session):
    name = getattr(session.config, "workerinput", {}).get("workerid", "main")
    seen = {
        "compile path": "torch._inductor.compile_fx" in sys.modules,
        "probed": getattr(sys.modules.get("pytest_aoti.core.isa_verdicts"), "_pick", None) is not None,
    }
    Path(os.environ["SEEN_DIR"], name + ".json").write_text(json.dumps(seen))
"""

NEW_MODEL = """
import torch


def test_conv(aoti_compile):
    aoti_compile(torch.nn.Conv1d(2, 3, 3), (torch.randn(1, 2, 8),))
"""


def _seen(seen_dir: Path) -> dict[str, dict[str, bool]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(seen_dir.glob("*.json"))}


@linux_only
def test_a_run_whose_packages_are_all_cached_runs_no_probe_and_keeps_its_keys(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 63, item 1: each xdist worker started the ISA probes as it collected its first pytest-aoti test, though
    every package of the run was a cache hit. Now a process probes only on the way to a compile: a second run of the
    same suite (same models, same keys: 0 misses, no new entry) runs no probe and imports nothing of Inductor's
    compile path, in any worker. A later compile probes, answered from the record: no probe is built again. Fresh
    interpreters, each with an Inductor cache dir of its own."""
    monkeypatch.delenv(isa_verdicts.ISA_RECORD_ENV, raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)
    pytester.makepyfile(test_cached=CACHED_SUITE)
    pytester.makeconftest(WHAT_EACH_PROCESS_IMPORTED)
    cache = tmp_path / "cache"

    def run(name: str, *args: str) -> tuple[pytest.RunResult, Path, Path]:
        seen, inductor = tmp_path / f"seen-{name}", tmp_path / f"inductor-{name}"
        seen.mkdir()
        monkeypatch.setenv("SEEN_DIR", str(seen))
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
        return run_pytest("-n", "2", *args, cache=cache, fresh=True), seen, inductor

    first, _, first_inductor = run("first")
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["aoti cache: 0 hits, 2 misses*"])
    if not _probe_builds(first_inductor):
        pytest.skip("this CPU has no ISA Inductor probes")
    entries = sorted(path.name for path in cache.glob("*/*.pt2"))

    second, seen, second_inductor = run("second")
    second.assert_outcomes(passed=2)
    second.stdout.fnmatch_lines(["aoti cache: 2 hits, 0 misses*"])
    assert sorted(path.name for path in cache.glob("*/*.pt2")) == entries  # the same keys: nothing new stored
    nothing = {"compile path": False, "probed": False}
    assert _seen(seen) == {"gw0": nothing, "gw1": nothing, "main": nothing}
    assert _probe_builds(second_inductor) == []

    pytester.makepyfile(test_new=NEW_MODEL)
    third, seen, third_inductor = run("third")
    third.assert_outcomes(passed=3)
    third.stdout.fnmatch_lines(["aoti cache: 2 hits, 1 misses*"])
    assert sorted(info["probed"] for info in _seen(seen).values()) == [False, False, True]  # the compiling worker
    assert _probe_builds(third_inductor) == []  # answered from the record


@linux_only
def test_a_fresh_runner_served_from_a_remote_cache_runs_no_probe(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 63, item 1, on a CI fleet: a fresh runner (an empty local cache dir, no ISA record, an empty Inductor
    cache) whose every package comes from a real redis-server runs no probe and imports nothing of Inductor's
    compile path, in any xdist worker."""
    from tests.redis_server import REDIS_SERVER, RedisServer

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'pytest-aoti[test]')")
    server = RedisServer(tmp_path / "redis").start()
    try:
        monkeypatch.setenv("PYTEST_AOTI_CACHE_URL", server.url())
        monkeypatch.setenv("PYTEST_AOTI_CACHE_SECRET", "a-secret-that-signs-entries")
        monkeypatch.delenv(isa_verdicts.ISA_RECORD_ENV, raising=False)
        monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)
        pytester.makepyfile(test_cached=CACHED_SUITE)
        pytester.makeconftest(WHAT_EACH_PROCESS_IMPORTED)
        for runner in ("a", "b"):
            seen, inductor = tmp_path / f"seen-{runner}", tmp_path / f"inductor-{runner}"
            seen.mkdir()
            monkeypatch.setenv("SEEN_DIR", str(seen))
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
            result = run_pytest("-n", "2", cache=tmp_path / f"local-{runner}", fresh=True)
            result.assert_outcomes(passed=2)
    finally:
        server.stop()
    result.stdout.fnmatch_lines(["aoti cache: 2 hits (2 remote), 0 misses*"])
    nothing = {"compile path": False, "probed": False}
    assert _seen(seen) == {"gw0": nothing, "gw1": nothing, "main": nothing}
    assert _probe_builds(inductor) == [] and not list((tmp_path / "local-b").glob("isa-checks-*.json"))


PROBE_IMPORTS = """
import json
import sys

import torch
from pytest_aoti.core import isa_verdicts, torch_private

torch_private.import_what_probes_import()
before = set(sys.modules)
isa_verdicts._probe()  # what the probing thread runs
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_probing_imports_nothing_the_caller_has_not_imported_first(tmp_path: Path) -> None:
    """``ready_for_compile`` imports what the probes import in its own thread, then probes in another while it imports
    Inductor's compile path: the probing thread must import nothing, or two threads could import one module graph at
    once and one of them be handed a partially initialized module. Real probes, in a fresh interpreter with nothing
    recorded."""
    record = isa_verdicts.record_path(_cache_dir(tmp_path / "cache"))
    env = {**os.environ, isa_verdicts.ISA_RECORD_ENV: str(record), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")}
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE_IMPORTS], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
    if _probe_builds(tmp_path / "ind"):
        assert isa_verdicts.read_record(record).passed, "the probes ran and recorded their verdicts"
