"""Why a package missed the cache: the nearest entry of the same test, and which parts of the key differ from it.

Each entry keeps the parts of its key beside its package (``core.cache_key.KeyParts.record``: each part's digest,
the short parts' texts, each weight's digest, Inductor's config and the codegen env as the compile saw them) and the
test that compiled it. On a miss, the entry of the same test with the most parts in common is the nearest (the most
recent among equals); a test with none is compared with another test's entry of the same graph. The line names what
differs, in the key's order::

    tests/test_m.py::test_x missed: the graph is the same, the weights differ (3 tensors), Inductor config
    'max_autotune' False → True

Plain Python over JSON values: no torch, no pytest. A record that is not one (an older version's sidecar, a file
changed by hand) is left out, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_aoti.core.cache_key import DIGEST_CHARS, KEY_PARTS

_HEX = re.compile(rf"[0-9a-f]{{{DIGEST_CHARS}}}")
_NAMES_SHOWN = 3  # changed config keys, env vars and weights named before "and N more"
_VALUE_CHARS = 60  # a value longer than this is cut short in the line
_DETAILS = ("shown", "weights", "config", "env")


@dataclass(frozen=True)
class Entry:
    """A cache entry's parts (a valid record), the test that compiled it, and when it was written."""

    owner: str
    record: dict[str, Any]
    mtime: float


def _text_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def valid_record(record: Any) -> dict[str, Any] | None:
    """``record`` when it holds every part's digest and the details as texts; else None."""
    if not isinstance(record, dict) or not _text_map(record.get("digests")):
        return None
    digests = record["digests"]
    if set(digests) != set(KEY_PARTS) or not all(_HEX.fullmatch(d) for d in digests.values()):
        return None
    if not all(_text_map(record.get(name)) for name in _DETAILS):
        return None
    return record


def nearest(owner: str, record: dict[str, Any], entries: Iterable[Entry]) -> Entry | None:
    """The entry of ``owner`` with the most parts in common with ``record`` (the newest among equals); without one,
    another test's entry of the same graph."""
    candidates = list(entries)
    own = [entry for entry in candidates if entry.owner == owner]
    if not own:
        graph = record["digests"]["graph"]
        own = [entry for entry in candidates if entry.record["digests"]["graph"] == graph]
    if not own:
        return None
    return max(own, key=lambda entry: (_in_common(record, entry.record), entry.mtime))


def _in_common(new: dict[str, Any], old: dict[str, Any]) -> int:
    return sum(new["digests"][name] == old["digests"][name] for name in KEY_PARTS)


def _short(value: str | None) -> str:
    if value is None:
        return "unset"
    return value if len(value) <= _VALUE_CHARS else value[: _VALUE_CHARS - 1] + "…"


def _changed_values(old: dict[str, str], new: dict[str, str]) -> list[tuple[str, str | None, str | None]]:
    return [
        (name, old.get(name), new.get(name))
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    ]


def _some(items: list[str]) -> str:
    more = f" and {len(items) - _NAMES_SHOWN} more" if len(items) > _NAMES_SHOWN else ""
    return ", ".join(items[:_NAMES_SHOWN]) + more


def _weights_phrase(old: dict[str, str], new: dict[str, str]) -> str:
    changed = [name for name, _, _ in _changed_values(old, new)]
    if not changed:
        return "the weights differ"
    count = f"{len(changed)} tensor{'s' if len(changed) != 1 else ''}"
    return (
        f"the weights differ ({count}: {_some(changed)})"
        if len(changed) <= _NAMES_SHOWN
        else f"the weights differ ({count})"
    )


def _values_phrase(what: str, old: dict[str, str], new: dict[str, str]) -> str:
    changed = [f"{name!r} {_short(before)} → {_short(after)}" for name, before, after in _changed_values(old, new)]
    return f"{what} {_some(changed)}" if changed else ""


_LABELS = {"torch": "torch", "device": "device", "compiler": "C++ compiler"}


def _phrase(name: str, new: dict[str, Any], old: dict[str, Any]) -> str:
    """What a part that differs says in the miss line."""
    if name in _LABELS:
        return f"{_LABELS[name]} {_short(old['shown'].get(name))} → {_short(new['shown'].get(name))}"
    if name == "gpus":
        before, after = (record["shown"].get("gpus") or "none" for record in (old, new))
        return f"the GPU indices its graph pins {before} → {after}"
    if name == "weights":
        return _weights_phrase(old["weights"], new["weights"])
    if name in ("inductor_configs", "inductor_config"):
        return _values_phrase("Inductor config", old["config"], new["config"]) or "the inductor_configs differ"
    if name == "codegen_env":
        return _values_phrase("codegen env", old["env"], new["env"]) or "the codegen env differs"
    return {
        "graph": "the graph differs",
        "signature": "the signature differs",
        "dynamic_ranges": "the dynamic ranges differ",
        "triton": "the user Triton kernels' sources differ",
    }[name]


def differences(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """What differs between two valid records, in the key's order, each as a phrase of the miss line (the graph
    first, said to be the same where it is)."""
    graph_first = ["graph", *(name for name in KEY_PARTS if name != "graph")]
    differs = [name for name in graph_first if new["digests"][name] != old["digests"][name]]
    if not differs:
        return ["no part differs (its package was removed meanwhile)"]
    phrases = [] if "graph" in differs else ["the graph is the same"]
    for name in differs:
        phrase = _phrase(name, new, old)
        if phrase not in phrases:  # inductor_configs and Inductor's config say the same
            phrases.append(phrase)
    return phrases


def miss_line(owner: str, record: dict[str, Any], entries: Iterable[Entry]) -> str:
    """``<owner> missed: <what differs from the nearest entry>``, or that the cache holds none to compare with."""
    label = owner or "a compile"
    found = nearest(owner, record, entries)
    if found is None:
        return f"{label} missed: no earlier entry of this test in the cache"
    other = f" (nearest: an entry of {found.owner or 'another compile'})" if found.owner != owner else ""
    return f"{label} missed{other}: {', '.join(differences(record, found.record))}"
