"""A remote package cache on Redis, behind the local one: what one CI runner compiled, the next one loads.

An entry is a manifest (``pytest-aoti:1:<key>``) and the package's bytes in chunks
(``pytest-aoti:1:<key>:<upload>:<n>``, each at most ``chunk_bytes``: Redis caps one value at 512 MB, and a package
with its weights can pass that). A writer puts its chunks under an upload id of its own, with an expiry, and then, in
one server-side step, sets the manifest (only if none is there) and makes its chunks permanent: a reader never sees
a manifest whose chunks were not all written, two writers of the same key never mix their chunks, and the chunks of
a writer killed mid-upload expire.

A cached package is native code the runner will load. Entries are signed with HMAC-SHA256 over the key and the
content, with the secret the user gives; a reader refuses an entry that is unsigned (when it has a secret), wrongly
signed, truncated, missing a chunk or whose bytes do not match: the package is recompiled, never loaded.

Every call to the server is bounded by a timeout and never retried; the first error turns the remote cache off for
the rest of the process, with one warning, and the run goes on with the local cache (a full server only stops the
writes). Passwords in URLs never appear in what this module says (:func:`redact`). Plain Python over the ``redis``
client: no pytest, no torch.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import urllib.parse
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "pytest-aoti:1:"
DEFAULT_CHUNK_BYTES = 64 << 20
DEFAULT_TIMEOUT = 10.0
# A writer has this long to finish its upload; its chunks then expire unless the manifest made them permanent.
UPLOAD_SECONDS = 3600
_SIGNATURE_DOMAIN = b"pytest-aoti package cache v1\0"
_URL_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*)://([^@/\s]*)@")

# Set the manifest only if no complete entry is there (or replace a refused one), then make the chunks permanent:
# atomic on the server, so no reader sees a manifest without its chunks, and a writer that lost keeps nothing.
_PUBLISH = """
if ARGV[2] == '1' then
    redis.call('SET', KEYS[1], ARGV[1])
elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX') then
    return 0
end
for i = 2, #KEYS do
    redis.call('PERSIST', KEYS[i])
end
return 1
"""


class AOTIRemoteCacheWarning(UserWarning):
    """The remote package cache cannot be used: the run goes on with the local cache."""


# The passwords of the remote cache URLs this process was given (register_password): replaced wherever they occur,
# whatever form the URL takes (``?password=``, a ``@`` or ``/`` in the password, percent-encoded or not).
_PASSWORDS: set[str] = set()
# Shorter passwords are left to the URL pattern: replacing every occurrence of two letters would garble every line.
_SHORTEST_REGISTERED = 3


def register_password(password: str) -> None:
    """Redact ``password`` (as given, and percent-encoded) from every text :func:`redact` sees in this process."""
    if len(password) >= _SHORTEST_REGISTERED:
        _PASSWORDS.update({password, urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password)})


def redact(text: str) -> str:
    """``text`` with every registered password, and the user and password of every URL in it, replaced by ``***``."""
    for password in sorted(_PASSWORDS, key=len, reverse=True):
        text = text.replace(password, "***")
    return _URL_PASSWORD.sub(r"\1://***@", text)


@dataclass(frozen=True)
class RemoteSettings:
    """Where the remote cache is and how it is trusted. ``secret`` (and the URL's password) never show in a repr."""

    url: str = field(repr=False)
    secret: bytes | None = field(default=None, repr=False)
    readonly: bool = False  # read entries, never write one (untrusted pull-request builds)
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    timeout: float = DEFAULT_TIMEOUT  # seconds any one call to the server may take

    @property
    def shown_url(self) -> str:
        return redact(self.url)

    def __repr__(self) -> str:
        return f"RemoteSettings(url={self.shown_url!r}, signed={self.secret is not None}, readonly={self.readonly})"


def remote_cache_header(remote: RemoteSettings | None, off_reason: str | None) -> str:
    """What the report header adds to the cache's description: the remote cache (its URL without password), how it
    is trusted, or why the one named is not used."""
    if remote is None:
        return f", remote cache {off_reason}" if off_reason else ""
    trust = "signed" if remote.secret is not None else "UNSIGNED (--aoti-cache-unsigned: entries are not verified)"
    return f", remote cache {remote.shown_url} ({trust}{', read-only' if remote.readonly else ''})"


@dataclass(frozen=True)
class Fetched:
    """A remote entry that passed every check, now at the path it was fetched to."""

    size: int
    sha256: str
    compile_seconds: float


@dataclass(frozen=True)
class Refused:
    """A remote entry that failed a check: never loaded. ``reason`` says which check. ``replaceable``: whether an
    upload of this runner may overwrite it. Not one signed with another secret: a runner whose secret is wrong would
    otherwise overwrite the whole fleet's good entries, and the fleet would overwrite its entries in turn."""

    reason: str
    replaceable: bool = True


def signer(secret: bytes, key: str) -> hmac.HMAC:
    """HMAC-SHA256 over the key and then, as they are fed to it, the package's bytes."""
    return hmac.new(secret, _SIGNATURE_DOMAIN + key.encode() + b"\0", hashlib.sha256)


def _file_chunks(path: Path, size: int) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while chunk := stream.read(size):
            yield chunk


def manifest_key(key: str) -> str:
    return f"{PREFIX}{key}"


def chunk_key(key: str, upload: str, number: int) -> str:
    return f"{PREFIX}{key}:{upload}:{number}"


# An upload id is secrets.token_hex(8); a replaced manifest names at most this many chunks to delete (a forged one
# could claim billions).
_UPLOAD_ID = re.compile(r"^[0-9a-f]{16}$")
_MOST_CHUNKS = 100_000


def _chunk_names_of(key: str, raw_manifest: Any) -> list[str]:
    """The chunk keys a stored manifest of ``key`` names; none when it is unreadable or names an unlikely upload."""
    try:
        manifest = json.loads(raw_manifest)
        upload, count = str(manifest["upload"]), int(manifest["chunks"])
    except (ValueError, KeyError, TypeError):
        return []
    if not _UPLOAD_ID.match(upload) or not 0 < count <= _MOST_CHUNKS:
        return []
    return [chunk_key(key, upload, number) for number in range(count)]


class RemoteStore:
    """The Redis side of :class:`~pytest_aoti.core.cache.PackageCache`. ``problem`` says why it stopped (None while
    it works); ``write_problem`` why it stopped writing (a full server), reads going on."""

    def __init__(self, settings: RemoteSettings) -> None:
        """No connection yet: the first call connects (bounded by ``settings.timeout``)."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.settings = settings
        self.problem: str | None = None
        self.write_problem: str | None = None
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._client = redis.Redis.from_url(
            settings.url,
            socket_connect_timeout=settings.timeout,
            socket_timeout=settings.timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
        )

    def _give_up(self, error: BaseException, *, writing: bool = False) -> None:
        import redis

        reason = redact(f"{type(error).__name__}: {error}")
        full = isinstance(error, redis.ResponseError) and not isinstance(error, redis.AuthenticationError)
        if writing and full:  # out of memory, read-only replica: entries can still be read
            self.write_problem = f"at {self.settings.shown_url} cannot store packages ({reason})"
        else:
            self.problem = f"at {self.settings.shown_url} cannot be used ({reason})"
        warnings.warn(
            AOTIRemoteCacheWarning(
                f"pytest-aoti: the remote package cache {self.problem or self.write_problem}; going on with the "
                "local cache"
            ),
            stacklevel=4,
        )

    def fetch(self, key: str, target: Path, max_bytes: int | None = None) -> Fetched | Refused | None:
        """The entry for ``key`` written to ``target`` when it passes every check; :class:`Refused` (and ``target``
        emptied) when it fails one, or is larger than ``max_bytes`` (the local cache's cap: a manifest is checked only
        with its bytes, so a forged one must not fill the disk first); None when there is none or the server cannot
        be used."""
        if self.problem is not None:
            return None
        try:
            raw = self._client.get(manifest_key(key))
            if raw is None:
                return None
            result = self._fetch_chunks(key, raw, target, max_bytes)
        except self._errors as error:
            self._give_up(error)
            target.write_bytes(b"")
            return None
        if isinstance(result, Refused):
            target.write_bytes(b"")
        return result

    def _fetch_chunks(self, key: str, raw: Any, target: Path, max_bytes: int | None) -> Fetched | Refused:
        try:
            manifest = json.loads(raw)
            size, count, upload = int(manifest["size"]), int(manifest["chunks"]), str(manifest["upload"])
            expected_sha, signed = str(manifest["sha256"]), manifest.get("signature")
        except (ValueError, KeyError, TypeError):
            return Refused("unreadable manifest")
        if self.settings.secret is not None and not signed:
            return Refused("unsigned")
        if max_bytes is not None and size > max_bytes:
            return Refused(f"larger than the local cache's cap ({size} bytes)")
        digest = hashlib.sha256()
        mac = signer(self.settings.secret or b"", key)
        written = 0
        with target.open("wb") as stream:
            for number in range(count):
                chunk = self._client.get(chunk_key(key, upload, number))
                if chunk is None:
                    return Refused(f"missing chunk {number + 1} of {count}")
                assert isinstance(chunk, bytes)
                digest.update(chunk)
                mac.update(chunk)
                stream.write(chunk)
                written += len(chunk)
                if written > size:
                    return Refused(f"larger than its manifest says ({size} bytes)")
        if written != size:
            return Refused(f"truncated ({written} of {size} bytes)")
        if digest.hexdigest() != expected_sha:
            return Refused("tampered (its bytes do not match its manifest)")
        if self.settings.secret is not None and not hmac.compare_digest(mac.hexdigest(), str(signed)):
            return Refused("wrongly signed: signed with another secret, or forged; not replaced", replaceable=False)
        return Fetched(size=size, sha256=expected_sha, compile_seconds=float(manifest.get("compile_seconds", 0.0)))

    def upload(self, key: str, package: Path, compile_seconds: float, *, replace: bool = False) -> bool:
        """Store ``package`` under ``key`` unless a complete entry is there (``replace``: one this process refused);
        True when this upload made the entry. Never raises for the server's sake: an error turns writing off."""
        if self.problem is not None or self.write_problem is not None or self.settings.readonly:
            return False
        upload = secrets.token_hex(8)
        chunk_names: list[str] = []
        try:
            digest, mac, size = hashlib.sha256(), signer(self.settings.secret or b"", key), 0
            for number, chunk in enumerate(_file_chunks(package, self.settings.chunk_bytes)):
                chunk_names.append(chunk_key(key, upload, number))
                self._client.set(chunk_names[-1], chunk, ex=UPLOAD_SECONDS)
                digest.update(chunk)
                mac.update(chunk)
                size += len(chunk)
            manifest = {
                "size": size,
                "chunks": len(chunk_names),
                "upload": upload,
                "sha256": digest.hexdigest(),
                "compile_seconds": compile_seconds,
                "signature": mac.hexdigest() if self.settings.secret else None,
            }
            keys = [manifest_key(key), *chunk_names]
            replaced = self._client.get(manifest_key(key)) if replace else None
            published = self._client.eval(_PUBLISH, len(keys), *keys, json.dumps(manifest), "1" if replace else "0")
            if not published:
                self._client.delete(*chunk_names)  # another writer finished first: its entry is as good
            elif replaced is not None:  # the refused entry's chunks were made permanent: nothing else removes them
                old_chunks = _chunk_names_of(key, replaced)
                if old_chunks:
                    self._client.delete(*old_chunks)
            return bool(published)
        except self._errors as error:
            self._give_up(error, writing=True)
            self._forget(chunk_names)
            return False

    def _forget(self, chunk_names: list[str]) -> None:
        """Delete what a failed upload wrote, where the server still answers (else the chunks expire)."""
        if self.problem is None and chunk_names:
            try:
                self._client.delete(*chunk_names)
            except self._errors:
                pass
