"""The ISA probes' record file (pytest_aoti/core/isa_verdicts.py) without a probe: its name holds the machine's
identity, and clearing the cache removes it. (Real probes in fresh interpreters: tests/test_isa_verdicts.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_aoti.core import isa_verdicts
from pytest_aoti.core.cache import MARKER_FILE, clear_cache_dir


def test_a_record_of_another_machine_is_another_file(tmp_path: Path) -> None:
    """The record's name holds the identity (CPU flags, torch, compiler): another machine's never answers here."""
    foreign = tmp_path / "isa-checks-0123456789abcdef0123456789abcdef.json"
    foreign.write_text(json.dumps({"checks": {"anything": True}}))
    older = tmp_path / "isa-probe-0123456789abcdef0123456789abcdef.json"  # an older version's base verdict
    older.write_text(json.dumps({"every_isa_passed": True}))
    assert isa_verdicts.record_path(tmp_path) != foreign
    assert isa_verdicts.read_record(isa_verdicts.record_path(tmp_path)) == isa_verdicts.IsaRecord()
    assert isa_verdicts.read_record(foreign).passed == {"anything"}
    (tmp_path / MARKER_FILE).write_text("pytest-aoti\n")
    clear_cache_dir(tmp_path)  # --aoti-cache-clear: the records go with the packages
    assert not foreign.exists() and not older.exists()
