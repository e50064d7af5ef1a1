"""The remote cache's pure parts, with no server: a manifest signed whole and checked field by field, URLs masked
where they are shown (and nothing else rewritten), and the summary line's remote state and hints."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.cache.stats import cache_summary
from pytest_aoti.core.remote_cache import (
    FORGED,
    OTHER_SECRET,
    Manifest,
    Refused,
    RemoteSettings,
    mask_url,
    mask_url_argument,
    read_manifest,
    signature,
    signer_id,
)

SECRET = b"s3cret-for-tests"
KEY = "ab" * 32


def _fields(secret: bytes | None = SECRET, **changed: Any) -> dict[str, Any]:
    """A manifest as an upload writes it (signed with ``secret``), then with ``changed`` fields."""
    fields: dict[str, Any] = {
        "format": 2,
        "size": 10_000,
        "chunks": 3,
        "chunk_bytes": 4096,
        "upload": "0123456789abcdef",
        "sha256": "5" * 64,
        "compile_seconds": 7.5,
        "parts": {"graph": "0123456789abcdef", "weights": "fedcba9876543210"},
        "signer": signer_id(secret) if secret else None,
        "signature": None,
    }
    if secret:
        fields["signature"] = signature(secret, KEY, fields)
    return {**fields, **changed}


def test_a_manifest_as_written_is_read_back() -> None:
    manifest = read_manifest(json.dumps(_fields()), KEY, SECRET)
    assert manifest == Manifest(10_000, 3, 4096, "0123456789abcdef", "5" * 64, 7.5)
    assert manifest.chunk_lengths() == [4096, 4096, 1808]
    assert read_manifest(json.dumps(_fields(secret=None)), KEY, None) == manifest  # --aoti-cache-unsigned


@pytest.mark.parametrize(
    "changed",
    [{"compile_seconds": "x"}, {"compile_seconds": None}, {"compile_seconds": -1e308}, {"note": "added"}],
    ids=["a string", "null", "-1e308", "a field added"],
)
def test_every_field_is_signed(changed: dict[str, Any]) -> None:
    """Issue 50, item 1: compile_seconds set to "x", null or -1e308 on the server, the bytes and the rest intact.
    The signature covers the whole manifest, so the entry is refused (and replaced: it is this runner's signer)."""
    refused = read_manifest(json.dumps(_fields(**changed)), KEY, SECRET)
    assert refused == Refused(FORGED) and refused.replaceable
    assert read_manifest(json.dumps(_fields()), "cd" * 32, SECRET) == Refused(FORGED)  # moved to another key


@pytest.mark.parametrize(
    ("changed", "problem"),
    [
        ({"compile_seconds": "x"}, 'compile_seconds is "x", expected seconds from 0 to a week'),
        ({"compile_seconds": None}, "compile_seconds is null, expected seconds from 0 to a week"),
        ({"compile_seconds": -1e308}, "compile_seconds is -1e+308, expected seconds from 0 to a week"),
        ({"compile_seconds": math.nan}, "compile_seconds is NaN, expected seconds from 0 to a week"),
        ({"compile_seconds": 1e300}, "compile_seconds is 1e+300, expected seconds from 0 to a week"),
        ({"compile_seconds": True}, "compile_seconds is true, expected seconds from 0 to a week"),
        ({"size": "10000"}, 'size is "10000", expected a number of bytes'),
        ({"chunks": 4}, "4 chunks do not hold 10000 bytes in chunks of 4096"),
        ({"chunk_bytes": 0}, "chunk_bytes is 0, expected a number of bytes up to 512 MiB"),
        ({"upload": "0123456789abcdef\n"}, 'upload is "0123456789abcdef\\n", expected 16 hex digits'),
        ({"upload": [[["deep"]]]}, "upload is list, expected 16 hex digits"),
        ({"sha256": "5" * 63}, "sha256 is " + json.dumps("5" * 63)[:40] + ", expected 64 hex digits"),
        ({"note": "added"}, "an unexpected field 'note'"),
        ({"parts": {"graph": "0123"}}, "parts is dict, expected up to 32 key parts, each with 16 hex digits"),
        (
            {"parts": {"Graph\n": "0123456789abcdef"}},
            "parts is dict, expected up to 32 key parts, each with 16 hex digits",
        ),
        ({"parts": ["graph"]}, "parts is list, expected up to 32 key parts, each with 16 hex digits"),
    ],
)
def test_every_field_is_checked_after_the_signature(changed: dict[str, Any], problem: str) -> None:
    """Unsigned entries (--aoti-cache-unsigned) are checked field by field too; so are signed ones, after their
    signature (a writer of this runner's secret that wrote a wrong value)."""
    unsigned = read_manifest(json.dumps(_fields(secret=None, **changed)), KEY, None)
    assert unsigned == Refused(f"invalid manifest ({problem})")
    fields = _fields(secret=None, **changed)
    fields["signer"] = signer_id(SECRET)
    fields["signature"] = signature(SECRET, KEY, fields)
    assert read_manifest(json.dumps(fields), KEY, SECRET) == Refused(f"invalid manifest ({problem})")


def test_what_is_not_a_manifest_of_this_version_or_signer() -> None:
    assert read_manifest(b"\xff\xfe", KEY, SECRET) == Refused("unreadable manifest")
    assert read_manifest("[" * 100_000, KEY, SECRET) == Refused("unreadable manifest")  # nested past JSON's limit
    assert read_manifest("[1, 2]", KEY, SECRET) == Refused("unreadable manifest")
    older = {k: v for k, v in _fields().items() if k not in ("format", "signer", "chunk_bytes")}
    refused = read_manifest(json.dumps(older), KEY, SECRET)
    assert refused == Refused("written by an older pytest-aoti, whose manifest is not signed whole")
    assert refused.replaceable
    newer = read_manifest(json.dumps(_fields(format=3)), KEY, SECRET)
    assert newer == Refused("written in another format (3) by another pytest-aoti version; not replaced", False)
    other = read_manifest(json.dumps(_fields(secret=b"another secret")), KEY, SECRET)
    assert other == Refused(OTHER_SECRET, replaceable=False)
    assert read_manifest(json.dumps(_fields(secret=None)), KEY, SECRET) == Refused("unsigned")
    assert read_manifest(json.dumps(_fields(signature="é" * 64)), KEY, SECRET) == Refused(FORGED)  # not a TypeError


# Issue 50, item 2: the password "test" inside node ids and paths. Only the URL is masked.
NOT_URLS = [
    "test_r.py::test_03_fails",
    "tests/test_model.py::test_cpu[tmp-main]",
    "/home/test/model/test_x.py",
    "-k",
    "test and not slow",
    "--aoti-device=cpu",
]


@pytest.mark.parametrize("argument", NOT_URLS)
def test_only_urls_are_masked(argument: str) -> None:
    assert mask_url_argument(argument) == argument


@pytest.mark.parametrize(
    ("argument", "shown"),
    [
        ("--aoti-cache-url=redis://:test@cache.ci:6379/0", "--aoti-cache-url=redis://***@cache.ci:6379/0"),
        ("redis://:test@cache.ci:6379/0", "redis://***@cache.ci:6379/0"),
        ("aoti_cache_url=redis://u:test@cache.ci/1", "aoti_cache_url=redis://***@cache.ci/1"),
        ("--override-ini=aoti_cache_url=rediss://:t@st@h:1/0", "--override-ini=aoti_cache_url=rediss://***@h:1/0"),
        ("unix:///run/redis.sock?db=1&password=test", "unix:///run/redis.sock?db=1&password=***"),
        ("redis://:pw/x@host:6379/0", "redis://***@host:6379/0"),  # a '/' in the password: all of it hidden
        ("redis://cache.ci:6379/0", "redis://cache.ci:6379/0"),
    ],
)
def test_a_url_is_masked_where_it_is_shown(argument: str, shown: str) -> None:
    assert mask_url_argument(argument) == shown


def test_an_error_that_quotes_the_password_or_the_secret_is_not_shown() -> None:
    remote = RemoteSettings("redis://:p%40ss@cache.ci:6379/0", b"the-secret")
    quoting = ConnectionError("Error connecting to redis://:p%40ss@cache.ci:6379/0 (password p@ss)")
    assert remote.shown_error(quoting) == (
        "ConnectionError: its message is not shown: it may quote the password or the secret"
    )
    plain = ConnectionError("Error 111 connecting to cache.ci:6379. Connection refused.")
    assert remote.shown_error(plain) == "ConnectionError: Error 111 connecting to cache.ci:6379. Connection refused."
    url_only = ConnectionError("bad redis://user:other@cache.ci:6379/0")
    assert remote.shown_error(url_only) == "ConnectionError: bad redis://***@cache.ci:6379/0"
    assert "the-secret" not in remote.shown_error(ValueError("the-secret"))
    assert mask_url(remote.url) == "redis://***@cache.ci:6379/0"


def _stats(**values: Any) -> dict[str, Any]:
    return {"hits": 0, "misses": 1, "compile_seconds": 2.0, "saved_seconds": 0.0, **values}


def test_the_summary_names_the_remote_caches_state() -> None:
    """Issue 50, item 4: under -q the header is not shown, so the summary line says why the remote cache is not
    used, or that it is unsigned or read-only."""
    off = "redis://***@cache.ci:6379/0 not used: $PYTEST_AOTI_CACHE_SECRET is not set (set it ...)"
    assert cache_summary([_stats(remote_state=off), _stats(remote_state=off)]) == (
        "aoti cache: 0 hits, 2 misses, 4.0 s compiling, 0.0 s saved; remote cache " + off
    )
    assert cache_summary([_stats(remote_in_use=True, remote_state="read-only")]).endswith("; remote cache read-only")
    usual = cache_summary([_stats(remote_in_use=True)])  # signed, read-write: nothing more to say
    assert usual == "aoti cache: 0 hits (0 remote), 1 misses, 2.0 s compiling, 0.0 s saved"


def test_many_entries_of_another_secret_point_at_the_runners_own() -> None:
    keys = [f"{n:012x}" for n in range(5)]
    refused = [f"{key}: {OTHER_SECRET}" for key in keys] + ["abcdefabcdef: tampered (its bytes do not match)"]
    line = cache_summary([_stats(remote_in_use=True, refused=refused)])
    assert (
        f"6 remote entries refused and recompiled ({keys[0]}, {keys[1]}, {keys[2]} and 2 more: {OTHER_SECRET}; "
        "abcdefabcdef: tampered (its bytes do not match)); 5 signed with another secret and 0 verified: check "
        "PYTEST_AOTI_CACHE_SECRET" in line
    )
    one = cache_summary([_stats(remote_in_use=True, remote_hits=9, refused=refused[:2])])
    assert "check PYTEST_AOTI_CACHE_SECRET" not in one  # a stray writer's entries among many verified ones


def test_a_local_entry_with_an_impossible_compile_time_is_corrupt(tmp_path: Path) -> None:
    """An older version copied a remote manifest's -1e308 into the local sidecar: the entry is recompiled."""
    from pytest_aoti.core.cache import PackageCache

    cache = PackageCache.open(tmp_path / "cache", 1 << 30)
    assert cache is not None
    built = tmp_path / "built.pt2"
    built.write_bytes(b"package")
    stored = cache.store("ef" * 32, built, compile_seconds=3.0)
    assert cache.lookup("ef" * 32) == stored and cache.stats.saved_seconds == 3.0
    sidecar = stored.with_suffix(".json")
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "compile_seconds": -1e308}))
    assert cache.lookup("ef" * 32) is None and cache.stats.corrupt == 1 and cache.stats.saved_seconds == 3.0
