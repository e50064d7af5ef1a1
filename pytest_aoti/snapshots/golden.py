"""Golden outputs: a test's package outputs recorded in a safetensors file and compared on later runs.

Eager and the package move together after a torch upgrade, a driver change, another GPU or a retrained checkpoint, so
comparing them with each other stays green while the outputs users get drift. A golden file catches that drift.

One file per test, ``__aoti_snapshots__/<test file stem>/<test id>.safetensors`` beside the test file. It holds one
golden per device class (``cpu``, ``cuda``): each tensor is stored as ``<device class>/<snapshot name><pytree path>``,
and the metadata records, per device class, the environment it was recorded in. A CPU run never compares with a CUDA
golden: different kernels, different rounding, and a tolerance loose enough for both would hide real drift on either.
A missing golden for this device class is recorded (or fails, in CI) like any other missing golden.

Plain Python over torch and safetensors: the pytest glue is in :mod:`pytest_aoti.snapshots.plugin`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.utils._pytree as pytree

from pytest_aoti.shared.environment import PACKAGE_KEY, environment, environment_diff
from pytest_aoti.shared.figure_builders import golden_errors
from pytest_aoti.shared.figure_data import GoldenErrors
from pytest_aoti.shared.output_diff import OutputDiff, compare, default_tolerance
from pytest_aoti.snapshots.errors import AOTISnapshotError
from pytest_aoti.snapshots.golden_file import GoldenFile, safetensors_stores

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# Leaves other than tensors are stored by repr: only those whose repr is the value itself (no memory address).
_PLAIN_LEAVES = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size)


def device_class(value: Any) -> str:
    """``cpu`` or ``cuda`` (any other device type by its name): the first tensor's device in ``value``."""
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            return leaf.device.type
    return "cpu"


def _unstorable(leaf: Any) -> str | None:
    """Why ``leaf`` cannot be part of a golden, or None."""
    if isinstance(leaf, torch.Tensor):
        if leaf.layout != torch.strided:
            return f"a tensor of layout {leaf.layout} (store leaf.to_dense())"
        if leaf.is_quantized or leaf.device.type == "meta" or not safetensors_stores(leaf.dtype):
            kind = "meta" if leaf.device.type == "meta" else str(leaf.dtype)
            return f"a {kind} tensor, which a safetensors golden file cannot hold"
        return None
    if isinstance(leaf, _PLAIN_LEAVES):
        return None
    hint = " (a generator or iterator: pass list(...) of it)" if isinstance(leaf, Iterator) else ""
    return (
        f"a value of type {type(leaf).__qualname__}{hint}; a snapshot holds tensors and plain values (numbers, "
        "strings, None, dtypes, devices) in tuples, lists, dicts and other pytree containers"
    )


def flatten(name: str, value: Any) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every leaf of ``value`` by ``<name><pytree path>``: tensors, and the others as their ``repr``. A leaf that
    cannot be stored and read back as itself is a TypeError naming it."""
    tensors: dict[str, torch.Tensor] = {}
    others: dict[str, str] = {}
    for path, leaf in pytree.tree_flatten_with_path(value)[0]:
        key = name + pytree.keystr(path)
        problem = _unstorable(leaf)
        if problem is not None:
            raise TypeError(f"snapshot {key.split('/', 1)[-1]!r}: {problem}")
        if isinstance(leaf, torch.Tensor):
            tensors[key] = leaf
        else:
            others[key] = repr(leaf)
    return tensors, others


Outcome = Literal["matched", "written", "updated", "missing"]


@dataclass
class GoldenOutputs:
    """One test's golden outputs, compared (and recorded) snapshot by snapshot.

    ``missing``: what a snapshot without a golden for this device class does: ``write`` it, ``fail``, or ``skip``
    (a debug rerun: it must not write into the user's tree). ``update``: rewrite this device class's goldens with
    what this run produces (the first snapshot of the test drops the class's old entries, so a renamed snapshot
    leaves nothing stale behind).
    """

    path: Path
    missing: Literal["write", "fail", "skip"]
    update: bool = False
    update_hint: str = ""
    outcomes: list[tuple[str, Outcome | Literal["mismatched"]]] = field(default_factory=list)
    _file: GoldenFile | None = None
    _cleared: set[str] = field(default_factory=set)
    _before_update: GoldenFile | None = None  # the file as read, once an update cleared a device class of it
    _names: dict[str, int] = field(default_factory=dict)
    _taken: set[str] = field(default_factory=set)
    figures: list[GoldenErrors] = field(default_factory=list)  # each mismatched output's errors (pictures)

    def next_name(self, kind: str) -> str:
        """``snapshot0``, ``snapshot1``, …: the default name of each call of one kind in a test (one the test gave
        a snapshot of its own is passed over)."""
        while True:
            number = self._names.get(kind, 0)
            self._names[kind] = number + 1
            if f"{kind}{number}" not in self._taken:
                return f"{kind}{number}"

    def _take(self, name: Any, user_name: bool) -> None:
        """Refuse a name that is not one, or that this test used already (the second would compare with, or
        overwrite, the first's golden)."""
        __tracebackhide__ = True
        if user_name and not isinstance(name, str):
            raise TypeError(f"snapshot name: expected a string, got {type(name).__name__} {name!r}")
        if user_name and not _NAME.match(name):
            raise ValueError(f"snapshot name {name!r}: use letters, digits, '_', '.' and '-'")
        if name in self._taken:
            raise ValueError(f"snapshot name {name!r} is used twice in this test: give each snapshot its own name")
        self._taken.add(name)

    def check(
        self,
        name: str,
        value: Any,
        *,
        rtol: float | None = None,
        atol: float | None = None,
        package_key: str | None = None,
        user_name: bool = False,
    ) -> Outcome:
        __tracebackhide__ = True
        if (rtol is None) != (atol is None):
            raise ValueError("snapshot rtol and atol: give both or neither")
        self._take(name, user_name)
        cls = device_class(value)
        full = f"{cls}/{name}"
        tensors, others = flatten(full, value)
        # What the file held before this test's update cleared it: a later snapshot compares with its old golden.
        recorded = self._before_update or self._read()
        old_tensors, old_others = recorded.entries(full)
        if not recorded.has(full):
            outcome = self._record(name, cls, full, tensors, others, package_key, had_golden=False)
        else:
            found = self._differences(tensors, others, old_tensors, old_others, rtol, atol)
            if found and not self.update:
                self.figures += [
                    golden_errors(d.name, tensors[d.name], old_tensors[d.name], r, a)
                    for d, r, a in found
                    if d.problem is None
                ]
                self.outcomes.append((name, "mismatched"))  # JUnit names the golden file that failed too
                raise AOTISnapshotError(self._report(name, cls, found, rtol, atol, package_key))
            if self.update:  # rewritten even when equal: the first snapshot of the test drops stale entries
                self._record(name, cls, full, tensors, others, package_key, had_golden=True)
            outcome = "updated" if found else "matched"
        self.outcomes.append((name, outcome))
        return outcome

    def _read(self) -> GoldenFile:
        if self._file is None:
            self._file = GoldenFile.read(self.path, empty_holds_none=self.update)
        return self._file

    def _record(
        self,
        name: str,
        cls: str,
        full: str,
        tensors: dict[str, torch.Tensor],
        others: dict[str, str],
        package_key: str | None,
        *,
        had_golden: bool,
    ) -> Outcome:
        __tracebackhide__ = True
        golden = self._read()
        if self.missing == "skip" and not had_golden:
            return "missing"
        if self.missing == "fail" and not had_golden and not self.update:
            raise AOTISnapshotError(
                f"no golden outputs for snapshot {name!r} on {cls} in {self.path}; this run may not record them "
                "(CI is set, or --aoti-snapshot=fail): record them where CI is not set (or with --aoti-snapshot=write) "
                "and commit the file"
            )
        if self.update and cls not in self._cleared:
            if self._before_update is None:
                self._before_update = dataclasses.replace(
                    golden, tensors=dict(golden.tensors), others=dict(golden.others), snapshots=dict(golden.snapshots)
                )
            golden.clear(cls)
            self._cleared.add(cls)
        golden.replace(full, tensors, others)
        golden.environments[cls] = environment(cls, package_key)
        golden.write()
        return "updated" if had_golden else "written"

    @staticmethod
    def _differences(
        tensors: dict[str, torch.Tensor],
        others: dict[str, str],
        old_tensors: dict[str, torch.Tensor],
        old_others: dict[str, str],
        rtol: float | None,
        atol: float | None,
    ) -> list[tuple[OutputDiff, float, float]]:
        found: list[tuple[OutputDiff, float, float]] = []
        for key in sorted({*old_tensors, *old_others} - {*tensors, *others}):
            found.append((OutputDiff(key, problem="in the golden, not in this run's outputs"), 0.0, 0.0))
        for key in sorted({*tensors, *others} - {*old_tensors, *old_others}):
            found.append((OutputDiff(key, problem="in this run's outputs, not in the golden"), 0.0, 0.0))
        for key in sorted(set(others) & set(old_others)):
            if others[key] != old_others[key]:
                found.append((OutputDiff(key, problem=f"{old_others[key]} (golden) → {others[key]}"), 0.0, 0.0))
        for key in sorted(set(tensors) & set(old_tensors)):
            key_rtol, key_atol = (
                (rtol, atol) if rtol is not None and atol is not None else default_tolerance(old_tensors[key].dtype)
            )
            diff = compare(key, tensors[key], old_tensors[key], key_rtol, key_atol)
            if diff is not None:
                found.append((diff, key_rtol, key_atol))
        return found

    def _report(
        self,
        name: str,
        cls: str,
        found: list[tuple[OutputDiff, float, float]],
        rtol: float | None,
        atol: float | None,
        package_key: str | None,
    ) -> str:
        assert self._file is not None
        recorded = self._file.environments.get(cls, {})
        now = environment(cls, package_key)
        tolerance = f"rtol={rtol:g}, atol={atol:g}" if rtol is not None and atol is not None else "dtype defaults"
        lines = [
            f"snapshot {name!r} differs from its golden outputs ({cls}, {tolerance}): {len(found)} output(s), "
            f"golden {self.path}"
        ]
        for diff, diff_rtol, diff_atol in found:
            lines.extend("  " + line for line in diff.lines(diff_rtol, diff_atol))
        changed = environment_diff(recorded, now)
        lines.append("environment diff (recorded → now): " + ("; ".join(changed) if changed else "none"))
        old_key, new_key = recorded.get(PACKAGE_KEY), now.get(PACKAGE_KEY)
        if old_key and new_key and old_key != new_key:
            lines.append(
                f"the package is not the one the golden was recorded with ({old_key[:12]}… → {new_key[:12]}…): the "
                "model, its weights, its inputs' specs or the compile options changed"
            )
        if self.update_hint:
            lines.append(f"if the new outputs are right: {self.update_hint}")
        return "\n".join(lines)
