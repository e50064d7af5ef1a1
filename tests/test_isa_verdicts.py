"""Inductor's CPU ISA probes, paid once per machine (pytest_aoti/core/isa_verdicts.py): real probes in fresh
interpreters. A probe leaves its build in the Inductor cache dir it ran with, so an empty cache dir after a process
says that process answered from the record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_aoti.core import isa_verdicts
from tests.conftest import RunPytest

PROBE = """
import sys
from pathlib import Path
from pytest_aoti.core import isa_verdicts
import torch._inductor.cpu_vec_isa as cpu_vec_isa

isa_verdicts.use_recorded()
for isa in cpu_vec_isa.valid_vec_isa_list():
    bool(isa)  # the ISA's own probes (avx512-bf16, vnni, AMX) run on first use
print("picked", cpu_vec_isa.pick_vec_isa())
isa_verdicts.record(Path(sys.argv[1]))
"""


def _probe(tmp_path: Path, name: str, record_dir: Path) -> tuple[str, list[Path]]:
    inductor_cache = tmp_path / f"inductor-{name}"
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache),
        isa_verdicts.ISA_RECORD_ENV: str(isa_verdicts.record_path(record_dir)),
    }
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)  # the base probe runs too
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(record_dir)], env=env, capture_output=True, text=True, check=True
    )
    built = [path for path in inductor_cache.rglob("*") if path.suffix in (".so", ".cpp")]
    return result.stdout, built


# On every torch release .ci/run tests: the ISA probe verdicts recorded once per machine (VecISA.check_build).
@pytest.mark.torch_matrix
@pytest.mark.skipif(sys.platform != "linux", reason="Inductor probes ISAs on Linux and Windows x86 only")
def test_a_second_process_runs_no_probe_and_picks_the_same_isa(tmp_path: Path) -> None:
    first_out, first_built = _probe(tmp_path, "first", tmp_path)
    if not first_built:
        pytest.skip("this CPU has no ISA Inductor probes")
    record = isa_verdicts.record_path(tmp_path)
    assert isa_verdicts.read_record(record), record.read_text()
    second_out, second_built = _probe(tmp_path, "second", tmp_path)
    assert second_built == [] and second_out == first_out, (second_out, second_built)

    # A malformed record is no record: the probes run again (and the record is rewritten whole).
    record.write_text("{not json")
    third_out, third_built = _probe(tmp_path, "third", tmp_path)
    assert third_built and third_out == first_out
    assert isa_verdicts.read_record(record)


def test_a_record_of_another_machine_is_another_file(tmp_path: Path) -> None:
    """The record's name holds the identity (CPU flags, torch, compiler): another machine's never answers here."""
    foreign = tmp_path / "isa-checks-0123456789abcdef0123456789abcdef.json"
    foreign.write_text(json.dumps({"checks": {"anything": False}}))
    assert isa_verdicts.record_path(tmp_path) != foreign
    assert isa_verdicts.read_record(isa_verdicts.record_path(tmp_path)) == {}
    assert isa_verdicts.read_record(foreign) == {"anything": False}
    isa_verdicts.forget(tmp_path)
    assert not foreign.exists()


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


@pytest.mark.skipif(sys.platform != "linux", reason="Inductor probes ISAs on Linux and Windows x86 only")
@pytest.mark.parametrize("mode", [(), ("-n", "1")], ids=["plain", "xdist worker"])
def test_a_process_records_its_probes_before_its_session_ends(
    pytester: pytest.Pytester,
    run_pytest: RunPytest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: tuple[str, ...],
) -> None:
    """The record is written once a process has probed (a compile, a worker's warm-up), not at its session's end:
    a worker that replaces a crashed one (which never reaches its end) or a fresh child reads it instead of probing
    again (22.5 s of probe children on the H200 machine). Fresh interpreters: the suite's fork server has probed
    already."""
    monkeypatch.delenv(isa_verdicts.ISA_RECORD_ENV, raising=False)  # the inner session names its own cache's
    monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)  # the base probe runs too
    pytester.makepyfile(test_record=RECORDED_BEFORE_THE_END)
    run_pytest(*mode, "-p", "no:logging", cache=tmp_path / "cache", fresh=True).assert_outcomes(passed=2)


PROBE_IMPORTS = """
import json
import sys

import torch
from pytest_aoti.core import isa_verdicts, torch_private

torch_private.import_what_probes_import()
before = set(sys.modules)
isa_verdicts.probe()
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_probing_imports_nothing_the_warm_up_has_not_imported_first(tmp_path: Path) -> None:
    """A worker's warm-up imports what the probes import in its own thread, then probes in another
    (core/warm_up.py): that thread must import nothing, or two threads could import one module graph at once and
    one of them be handed a partially initialized module. Real probes, in a fresh interpreter with nothing recorded."""
    record = tmp_path / "isa-checks-test.json"
    env = {**os.environ, isa_verdicts.ISA_RECORD_ENV: str(record)}
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE_IMPORTS], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert json.loads(record.read_text()), "the probes ran and recorded their verdicts"
