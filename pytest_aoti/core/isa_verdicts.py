"""Every one of Inductor's CPU ISA probes, paid once per machine.

``TORCHINDUCTOR_VEC_ISA_OK=1`` (core.cache's recorded verdict) skips only Inductor's base probe. Its other probes
(``cpu_vec_isa.py``: avx512-bf16, avx512-vnni, AMX, AMX-fp16) run in every fresh process whatever that setting says,
each a build and a fresh Python that loads it: 22.5 s of a 34.8 s first compile on the H200 machine even with the
base verdict recorded (docs/benchmarks.md). Their verdicts depend only on the CPU, torch and the C++ compiler, like
the base one, so they are recorded beside it in the package cache (``isa-checks-<identity>.json``, the identity of
``isa_probe_identity``: a record of another CPU, compiler or torch is another file, never read) and every
process pytest-aoti compiles in consults them before probing (``torch_private.memoize_isa_checks``).

The session names the record in ``PYTEST_AOTI_ISA_RECORD``, so its xdist workers and children find it. A process
adds what it probed as soon as it has probed (:func:`record_now`), so a process started before its session ends
(the worker that replaces a crashed one) does not probe again. Imports torch only when a compile is about to run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pytest_aoti.core.machine import MachineIdentity, machine_identity

ISA_RECORD_ENV = "PYTEST_AOTI_ISA_RECORD"
_RECORD = "isa-checks-{}.json"
_memo: dict[str, bool] | None = None
_loaded: dict[str, bool] = {}


def isa_probe_identity(machine: MachineIdentity | None = None) -> str:
    """What the probes' verdicts depend on, as a digest: the machine's one identity (this one's by default), its
    CPU and flags, torch and its CUDA, and the C++ compiler the probes build with."""
    machine = machine or machine_identity()
    parts = (
        machine.arch,
        machine.cpu_model,
        " ".join(machine.cpu_flags),
        machine.torch,
        machine.cuda or "",
        machine.cxx.identity,
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def record_path(root: Path) -> Path:
    return root / _RECORD.format(isa_probe_identity()[:32])


def read_record(path: Path) -> dict[str, bool]:
    """The recorded verdicts; an unreadable or malformed record gives none (the probes then run)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(checks, dict):
        return {}
    return {str(key): value for key, value in checks.items() if isinstance(value, bool)}


def use_recorded() -> None:
    """Before a compile: have Inductor's ISA probes answer from the record named by ``PYTEST_AOTI_ISA_RECORD`` where
    it has an answer, and remember what they find. Once per process; a torch without the hook probes as before."""
    global _memo, _loaded
    if _memo is not None:
        return
    from pytest_aoti.core import torch_private

    named = os.environ.get(ISA_RECORD_ENV, "")
    _loaded = read_record(Path(named)) if named else {}
    memo = torch_private.memoize_isa_checks(dict(_loaded))
    _memo = memo if memo is not None else {}  # the dict the probes fill: empty at first, never replaced


def probe() -> None:
    """Inductor's ISA probes as every process pytest-aoti compiles in runs them (a worker's warm-up, the fork
    server's, a compile): answered from the record where it has an answer, the rest run (side by side), and what
    was probed recorded at once (:func:`record_now`)."""
    from pytest_aoti.core import torch_private

    use_recorded()
    torch_private.run_vector_isa_probes()
    record_now()


def record(root: Path) -> bool:
    """At the end of a session: add what this process's probes found to the record in ``root``. True when
    something new was written."""
    return _write(record_path(root))


def record_now() -> bool:
    """As soon as this process has probed (its warm-up, the fork server's, a compile): add what it found to the record
    named by ``PYTEST_AOTI_ISA_RECORD``, so a process started before this one's session ends (the worker that
    replaces a crashed one, a fresh child) reads it instead of probing again. Only into a cache dir that exists."""
    named = os.environ.get(ISA_RECORD_ENV, "")
    return bool(named) and Path(named).parent.is_dir() and _write(Path(named))


def _write(target: Path) -> bool:
    """Add this process's verdicts to the record at ``target``; True when something new was written."""
    if not _memo or _memo.items() <= _loaded.items():
        return False
    existing = read_record(target)
    if _memo.items() <= existing.items():
        return False
    merged = {**existing, **_memo}
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        partial.write_text(json.dumps({"checks": merged}, sort_keys=True))
        partial.replace(target)
    except OSError:
        partial.unlink(missing_ok=True)
        return False  # a read-only or full cache dir: the next process probes again
    return True


def forget(root: Path) -> None:
    """``--aoti-cache-clear``: the records go with the packages."""
    for path in root.glob(_RECORD.format("*")):
        path.unlink(missing_ok=True)
