"""Inductor's CPU ISA probes: their answers, in one record per machine, and the one call before a compile.

Inductor probes each vector ISA the CPU advertises before its first CPU compile in a process (``cpu_vec_isa.py``: the
base probe, then avx512-bf16, avx512-vnni, AMX and AMX-fp16), each a build and a fresh Python that loads it: seconds on
a CPU runner, tens of seconds on a GPU machine (docs/benchmarks.md#inductors-isa-probes). Their verdicts depend only on
the CPU, torch and the C++ compiler, so they are recorded in the package cache dir, in one file per machine
(``isa-checks-<identity>.json``: a record of another CPU, compiler or torch is another file, never read), which the
session names in ``PYTEST_AOTI_ISA_RECORD`` for its xdist workers and children.

- **Only a pass answers a probe.** A failed probe (a build killed mid-way, a full disk, a compiler that lacks the ISA)
  is recorded with why it failed, for whoever reads the record, and probed again by the next process that compiles:
  a failure trusted once would pick slower code for good.
- **The ISA picked is in the key.** A process where a probe failed picks a lesser ISA; its packages are keyed with
  that ISA (``KeyParts.for_isa``), so a slower package never sits under the key a full probe gives, and the run
  says so once.
- **Probes only on the way to a compile.** :func:`ready_for_compile` is the one call before a compile; a process
  whose packages all come from a cache never probes, and never imports Inductor's compile path.
- **Overlapped.** The probes run in a thread of their own (:func:`start_in_background`) while the compiling thread
  imports the rest of Inductor. What the probes import is imported first, in the caller's thread, so no two threads
  ever import one module graph at once (Python hands one of two threads in a concurrent circular import a partially
  initialized module).
- **Recorded at once.** A process adds what it probed to the record as soon as it has probed (one atomic write:
  a partial file renamed into place), so a process started before its session ends (the worker that replaces a
  crashed one, a fresh child) reads it instead of probing again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_aoti.core.cache_files import (
    MARKER_FILE,
    RECORD_LIMIT,
    AOTICacheWarning,
    RefusedCacheFile,
    read_cache_file,
    warn_once,
)
from pytest_aoti.core.machine import MachineIdentity, machine_identity

if TYPE_CHECKING:
    from pytest_aoti.core.torch_private import IsaCheckMemo

ISA_RECORD_ENV = "PYTEST_AOTI_ISA_RECORD"
_RECORD = "isa-checks-{}.json"
# What an older pytest-aoti recorded of the base probe alone: removed with the cache, never read.
_OLD_BASE_RECORD = "isa-probe-{}.json"


@dataclass(frozen=True)
class IsaRecord:
    """A record's content: the checks that passed (answers), and why each one that failed last failed (not)."""

    passed: frozenset[str] = frozenset()
    failed: dict[str, dict[str, str]] = field(default_factory=dict)  # check -> {"check": label, "why": ..., "when"}

    def as_json(self) -> str:
        return json.dumps({"checks": dict.fromkeys(sorted(self.passed), True), "failed": self.failed}, sort_keys=True)


@dataclass(frozen=True)
class IsaPick:
    """What Inductor's probes left this process with: the ISA it picks, and the probes that failed here."""

    isa: str  # "avx2 [-mavx2 -mfma -mf16c]", "none"
    failures: tuple[str, ...] = ()  # "<check>: <why>"

    @property
    def degraded(self) -> bool:
        """A probe failed: the ISA picked is less than the CPU advertises, and packages are keyed with it."""
        return bool(self.failures)


_memo: IsaCheckMemo | None = None
_pick: IsaPick | None = None
_thread: threading.Thread | None = None
_started = False
_said = False
_lock = threading.Lock()


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


def read_record(path: Path) -> IsaRecord:
    """The record at ``path``: an unreadable or malformed one is none (the probes then run), and a file that is not
    a regular one of a record's size is refused with one line, never read or waited on. A check recorded as failed,
    or as ``false`` by an older version, answers nothing."""
    try:
        data = json.loads(read_cache_file(path, RECORD_LIMIT))
    except RefusedCacheFile as refused:
        warn_once(refused, "the ISA probes run instead")
        return IsaRecord()
    except (OSError, ValueError, RecursionError):
        return IsaRecord()
    if not isinstance(data, dict):
        return IsaRecord()
    checks, failed = data.get("checks"), data.get("failed")
    passed = frozenset(str(key) for key, value in checks.items() if value is True) if isinstance(checks, dict) else ()
    failures = {
        str(key): {name: str(text) for name, text in value.items() if isinstance(text, str)}
        for key, value in (failed.items() if isinstance(failed, dict) else ())
        if isinstance(value, dict) and key not in passed
    }
    return IsaRecord(frozenset(passed), failures)


def _named_record() -> Path | None:
    named = os.environ.get(ISA_RECORD_ENV, "")
    return Path(named) if named else None


def _answer_from_record() -> IsaCheckMemo | None:
    """Have Inductor's ISA probe builds answer from the record's passes, once per process; None where this torch
    has no such hook (it then probes as before)."""
    global _memo
    if _memo is None:
        from pytest_aoti.core import torch_private

        named = _named_record()
        passed = set(read_record(named).passed) if named is not None else set()
        _memo = torch_private.memoize_isa_checks(passed)
    return _memo


def _probe() -> IsaPick:
    """Every probe the CPU calls for, answered from the record where it passed, the rest run side by side; what
    they found recorded at once (:func:`record_now`)."""
    global _pick
    from pytest_aoti.core import torch_private

    memo = _answer_from_record()
    torch_private.run_vector_isa_probes()
    record_now()
    found = sorted(memo.failures.items()) if memo is not None else []
    failures = tuple(f"{memo.labels.get(key, key)}: {why}" for key, why in found if memo is not None)
    _pick = IsaPick(torch_private.picked_vec_isa(), failures)
    return _pick


def _probe_in_background() -> None:
    try:
        _probe()
    except Exception:  # the compile itself meets and reports whatever went wrong here
        pass


def start_in_background() -> None:
    """Start the probes once per process: what they import here, the probes (subprocesses) in a thread."""
    global _thread, _started
    with _lock:
        if _started:
            return
        _started = True
        try:
            from pytest_aoti.core import torch_private

            with torch_private.torch_internal_deprecations_silenced():
                torch_private.import_what_probes_import()
        except Exception:  # the compile itself meets and reports whatever went wrong here
            return
        _thread = threading.Thread(target=_probe_in_background, name="pytest-aoti-isa-probes", daemon=True)
        _thread.start()


def ready_for_compile() -> IsaPick:
    """The one call before a compile: the probes started (beside this thread's import of Inductor's compile path)
    and waited for, and the ISA Inductor will pick. Cheap once a process has probed (a fork of the fork server has)."""
    from pytest_aoti.core import torch_private

    if _pick is not None:
        return _pick
    start_in_background()
    with torch_private.torch_internal_deprecations_silenced():
        torch_private.import_what_compiles_import()
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()
    pick = _pick if _pick is not None else _probe()  # the background start failed: probe here, and meet the error
    _say_once(pick)
    return pick


def _say_once(pick: IsaPick) -> None:
    """One line per process where a probe failed: what the packages compiled here are built for, and why."""
    global _said
    if pick.degraded and not _said:
        _said = True
        warnings.warn(
            AOTICacheWarning(
                f"pytest-aoti: Inductor's ISA probe failed here ({'; '.join(pick.failures)}): CPU packages compiled "
                f"in this process use {pick.isa} and are cached under a key of their own; the next process that "
                "compiles probes again"
            ),
            stacklevel=3,
        )


def probed() -> bool:
    """Whether this process has run (or answered) Inductor's ISA probes."""
    return _pick is not None


def record_now() -> bool:
    """Add what this process's probes found to the record named by ``PYTEST_AOTI_ISA_RECORD``; only into a dir that
    pytest-aoti marked as its cache. True when something changed."""
    named = _named_record()
    return named is not None and (named.parent / MARKER_FILE).is_file() and _write(named)


def _write(target: Path) -> bool:
    """Merge this process's verdicts into the record at ``target``, atomically; True when something changed. A
    check that passed anywhere stays passed; one that failed here is written with why, unless it passed."""
    memo = _memo
    if memo is None:
        return False
    existing = read_record(target)
    passed = existing.passed | {key for key, verdict in memo.answers.items() if verdict is True}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    failed = {key: value for key, value in existing.failed.items() if key not in passed}
    for key, why in memo.failures.items():
        if key not in passed:
            failed[key] = {"check": memo.labels.get(key, key), "why": why, "when": now}
    merged = IsaRecord(passed, failed)
    if merged.passed == existing.passed and merged.failed.keys() == existing.failed.keys() and not memo.failures:
        return False
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        partial.write_text(merged.as_json())
        partial.replace(target)
    except OSError:
        partial.unlink(missing_ok=True)
        return False  # a read-only or full cache dir: the next process probes again
    return True


def env_for_child(directory: Path) -> dict[str, str]:
    """What a child started fresh needs to answer its probes from this process's: the record, named. Where no
    cache names one (the cache is off) and this process has probed, its verdicts written to a record in
    ``directory`` (the child's own)."""
    if _named_record() is not None or _memo is None or not probed():
        return {}
    target = directory / _RECORD.format(isa_probe_identity()[:32])
    return {ISA_RECORD_ENV: str(target)} if _write(target) or target.exists() else {}


def forget(root: Path) -> None:
    """``--aoti-cache-clear``: the records go with the packages (an older version's base record too)."""
    for pattern in (_RECORD, _OLD_BASE_RECORD):
        for path in root.glob(pattern.format("*")):
            path.unlink(missing_ok=True)  # a symlink goes, never what it points to
