"""Why a package missed the cache: the nearest entry of the same test, and which parts of the key differ from it.

Each entry keeps the parts of its key beside its package (``core.cache_key.KeyParts.record``: each part's digest,
the short parts' texts, each weight's digest, Inductor's config and the codegen env as the compile saw them, the
user inputs' dtypes and shapes, and the facets that tell a graph's ops from its shapes and a signature from its
names) and the test that compiled it. On a miss, the entry of the same test with the fewest differences is the
nearest (the most recent among equals); a test with none is compared with another test's entry of the same graph.
The line names what differs, in the key's order::

    tests/test_m.py::test_x missed: the graph is the same, the weights differ (3 tensors), Inductor config
    'max_autotune' False → True
    tests/test_m.py::test_y missed: input 'x' shape (4, 8) → (2, 8)

A miss with no entry to compare with has nothing to say: it is counted, not named (:func:`miss_line` is None).

Plain Python over JSON values: no torch, no pytest. A record that is not one (an older version's sidecar, a file
changed by hand) is left out, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_aoti.core.cache_key import CODEGEN_ENV_NAMES, DIGEST_CHARS, KEY_PARTS
from pytest_aoti.core.remote_cache import mask_urls

_HEX = re.compile(rf"[0-9a-f]{{{DIGEST_CHARS}}}")
_NAMES_SHOWN = 3  # changed config keys, env vars and weights named before "and N more"
_VALUE_CHARS = 60  # a value longer than this is cut short in the line
_DETAILS = ("shown", "weights", "config", "env")
_OPTIONAL_DETAILS = ("inputs", "facets")  # an entry of pytest-aoti 0.2.0's first releases keeps neither


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
    return {**record, **{name: record.get(name) if _text_map(record.get(name)) else {} for name in _OPTIONAL_DETAILS}}


def nearest(owner: str, record: dict[str, Any], entries: Iterable[Entry]) -> Entry | None:
    """The entry of ``owner`` with the fewest differences from ``record`` (the newest among equals); without one,
    another test's entry of the same graph."""
    candidates = list(entries)
    own = [entry for entry in candidates if entry.owner == owner]
    if not own:
        graph = record["digests"]["graph"]
        own = [entry for entry in candidates if entry.record["digests"]["graph"] == graph]
    if not own:
        return None
    return min(own, key=lambda entry: (distance(record, entry.record), -entry.mtime))


def distance(new: dict[str, Any], old: dict[str, Any]) -> int:
    """How many differences a miss line would name: one per part that differs, except Inductor's config and the
    codegen env, which count each value that differs (both config parts share the values)."""
    differs = {name for name in KEY_PARTS if new["digests"][name] != old["digests"][name]}
    count = len(differs - {"inductor_configs", "inductor_config", "codegen_env"})
    if differs & {"inductor_configs", "inductor_config"}:
        count += max(1, len(_changed_values(old["config"], new["config"])))
    if "codegen_env" in differs:
        count += max(1, len(_changed_values(_codegen_env(old), _codegen_env(new))))
    return count


def _codegen_env(record: dict[str, Any]) -> dict[str, str]:
    """The entry's codegen env, of the variables keyed today: an older entry's may hold others (Inductor's Redis URL
    among them), which are never shown."""
    env: dict[str, str] = record["env"]
    return {name: value for name, value in env.items() if name in CODEGEN_ENV_NAMES}


def _short(value: str | None) -> str:
    if value is None:
        return "unset"
    value = mask_urls(value)
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
        return _values_phrase("codegen env", _codegen_env(old), _codegen_env(new)) or "the codegen env differs"
    if name == "signature":
        return _signature_phrase(new, old)
    return {
        "dynamic_ranges": "the dynamic ranges differ",
        "triton": "the user Triton kernels' sources differ",
    }[name]


def _same_facet(name: str, new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether both entries keep the facet ``name`` (``core.cache_key.FACETS``) and it is the same."""
    before, after = old["facets"].get(name), new["facets"].get(name)
    return before is not None and before == after


def _input_phrases(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """``input 'x' shape (4, 8) → (2, 8)``, ``input 'x' dtype torch.float32 → torch.float16``: each input of both
    entries whose dtype or shape differs."""
    phrases = []
    for name in sorted(old["inputs"].keys() & new["inputs"].keys()):
        (dtype_before, _, shape_before), (dtype_after, _, shape_after) = (
            record["inputs"][name].partition(" ") for record in (old, new)
        )
        if dtype_before != dtype_after:
            phrases.append(f"input {name!r} dtype {_short(dtype_before)} → {_short(dtype_after)}")
        if shape_before != shape_after:
            phrases.append(f"input {name!r} shape {_short(shape_before)} → {_short(shape_after)}")
    return phrases


def _graph_phrases(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """A graph that differs: which inputs' dtypes or shapes differ, and whether its ops differ too (not said where
    only shapes, strides and dtypes differ and an input's change says why)."""
    inputs = _input_phrases(new, old)
    if not _same_facet("graph_ops", new, old):
        return ["the graph differs", *inputs]
    return inputs or ["the graph's shapes, strides or dtypes differ"]


def _signature_phrase(new: dict[str, Any], old: dict[str, Any]) -> str:
    """A signature that differs only in the names of its nodes (said by the graph) says nothing; else what."""
    if _same_facet("interface", new, old):
        return ""
    before, after = (", ".join(record["inputs"]) for record in (old, new))
    if old["inputs"] and new["inputs"] and before != after:
        return f"the signature differs (inputs {_short(before)} → {_short(after)})"
    return "the signature differs"


def differences(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """What differs between two valid records, in the key's order, each as a phrase of the miss line (the graph
    first, said to be the same where it is)."""
    graph_first = ["graph", *(name for name in KEY_PARTS if name != "graph")]
    differs = [name for name in graph_first if new["digests"][name] != old["digests"][name]]
    if not differs:
        return ["no part differs (its package was removed meanwhile)"]
    phrases = [] if "graph" in differs else ["the graph is the same"]
    for name in differs:
        for phrase in _graph_phrases(new, old) if name == "graph" else [_phrase(name, new, old)]:
            if phrase and phrase not in phrases:  # inductor_configs and Inductor's config say the same
                phrases.append(phrase)
    return phrases if phrases != ["the graph is the same"] else [*phrases, "the signature differs"]


def miss_line(owner: str, record: dict[str, Any], entries: Iterable[Entry]) -> str | None:
    """``<owner> missed: <what differs from the nearest entry>``; None where the cache holds no entry to compare
    with (a first compile: nothing to say)."""
    found = nearest(owner, record, entries)
    if found is None:
        return None
    other = f" (nearest: an entry of {found.owner or 'another compile'})" if found.owner != owner else ""
    return f"{owner or 'a compile'} missed{other}: {', '.join(differences(record, found.record))}"
