"""A remote package cache on Redis, behind the local one: what one CI runner compiled, the next one loads.

An entry is a manifest (``pytest-aoti:1:<key>``) and the package's bytes in chunks
(``pytest-aoti:1:<key>:<upload>:<n>``, each at most ``chunk_bytes``: Redis caps one value at 512 MB, and a package
with its weights can pass that). A writer puts its chunks under an upload id of its own, with an expiry, and then, in
one server-side step, sets the manifest (only if none is there) and makes its chunks permanent: a reader never sees
a manifest whose chunks were not all written, two writers of the same key never mix their chunks, and the chunks of
a writer killed mid-upload expire.

A cached package is native code the runner will load. The manifest is signed whole (every field, the package's
SHA-256 among them) with HMAC-SHA256 over the key and the manifest, with the secret the user gives, and names its
signer (a digest of the secret). A reader checks the signature first, then every field's type and range, then each
chunk's length on the server against the manifest (``STRLEN``, before any byte is downloaded), then the bytes'
checksum: an entry that fails a check is refused and the package recompiled, never loaded; the cache never fails a
test.

Every call to the server is bounded by a timeout and never retried; the first error turns the remote cache off for
the rest of the process, with one warning, and the run goes on with the local cache (a full server only stops the
writes). Nothing this module says shows the URL's password or the secret: a URL is shown through :func:`mask_url`,
and a message of redis-py's that still holds either is not shown. Plain Python over the ``redis`` client: no pytest,
no torch.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import secrets
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_aoti.core.errors import AOTIWarning

PREFIX = "pytest-aoti:1:"
DEFAULT_CHUNK_BYTES = 64 << 20
DEFAULT_TIMEOUT = 10.0
# A writer has this long to finish its upload; its chunks then expire unless the manifest made them permanent.
UPLOAD_SECONDS = 3600
# The manifest's format: 2 is signed whole. Format 1 (no "format" field) signed only the key and the bytes, so its
# other fields (compile_seconds) could be changed on the server unnoticed: refused, and replaced.
FORMAT = 2
_SIGNATURE_DOMAIN = b"pytest-aoti package cache manifest v2\0"
# The secret's variable, named in the summary's hint (settings.CACHE_SECRET_ENV: the core does not import the glue).
SECRET_ENV = "PYTEST_AOTI_CACHE_SECRET"
# A manifest names its signer: a digest of the secret that signed it (never the secret). An entry of another signer
# is left alone (a runner whose secret is wrong would otherwise overwrite the fleet's entries, and the fleet its
# entries in turn); one of this runner's signer whose signature does not match was changed or forged: replaced.
OTHER_SECRET = "wrongly signed: signed with another secret; not replaced"
FORGED = "wrongly signed: changed on the server or forged (its signature does not match)"
_SIGNER_DOMAIN = b"pytest-aoti package cache signer\0"

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


class AOTIRemoteCacheWarning(AOTIWarning):
    """The remote package cache cannot be used: the run goes on with the local cache."""


_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# A query parameter that may carry a password (redis-py reads ``?password=``).
_PASSWORD_PARAMETER = re.compile(r"(?i)((?:^|[?&;])[^=&;#?]*pass[^=&;#?]*=)[^&;#]*")
# A URL standing alone in an argument, or as the value of ``--option=`` / ``-o ini_name=``: nothing else is a URL.
_URL_ARGUMENT = re.compile(r"^((?:[-\w.]*=)*)([a-zA-Z][a-zA-Z0-9+.-]*://.*)$", re.DOTALL)
_URL_IN_TEXT = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+")


def _split_url(url: str) -> tuple[str, str, str]:
    """(scheme and ``//``, the user information, the rest). The user information runs to the URL's last ``@``:
    more than redis-py reads as such where the password holds a ``/``, ``?`` or ``#`` (it then cannot parse the
    URL), so none of it is ever shown as the host."""
    scheme = _SCHEME.match(url)
    head = scheme.group() if scheme else ""
    rest = url[len(head) :]
    userinfo, at, after = rest.rpartition("@")
    return (head, userinfo, after) if at else (head, "", rest)


def mask_url(url: str) -> str:
    """``url`` with its user and password, and the value of any password parameter, replaced by ``***``:
    ``redis://***@host:6379/0``, ``unix:///run/redis.sock?password=***``. The rest still says where it points."""
    head, userinfo, rest = _split_url(url)
    return head + ("***@" if userinfo else "") + _PASSWORD_PARAMETER.sub(r"\1***", rest)


def mask_url_argument(argument: str) -> str:
    """A command-line argument with the URL it is (``redis://…``) or gives (``--aoti-cache-url=…``,
    ``aoti_cache_url=…`` after ``-o``) masked by :func:`mask_url`; any other argument (a node id, a path) as it is."""
    match = _URL_ARGUMENT.match(argument)
    return match.group(1) + mask_url(match.group(2)) if match else argument


def mask_urls(text: str) -> str:
    """``text`` with every URL in it masked by :func:`mask_url`."""
    return _URL_IN_TEXT.sub(lambda url: mask_url(url.group()), text)


# A variable named as a holder of a secret: ``*_TOKEN``, ``*PASSWORD*``, ``*_SECRET``, ``*_API_KEY``, ``*_AUTH*``.
_SECRET_NAME = re.compile(
    r"(?i)(?:^|_)(?:pass(?:word|wd)?|token|secret|credentials?|auth(?:entication|orization)?|api_?key|private_?key)"
    r"(?:_|$)"
)


def may_hold_secret(name: str, value: str) -> bool:
    """Whether an environment variable may hold a credential: its name says so, or its value holds a URL (which may
    carry a user and password: ``TORCHINDUCTOR_REDIS_URL=redis://:password@host``)."""
    return bool(_SECRET_NAME.search(name) or _URL_IN_TEXT.search(value))


def _url_passwords(url: str) -> set[str]:
    """The password of ``url`` in each form a message may quote it: as written, decoded and encoded."""
    _, userinfo, rest = _split_url(url)
    found = {userinfo.partition(":")[2]} | {
        value for name, value in urllib.parse.parse_qsl(rest.partition("?")[2]) if "pass" in name.lower()
    }
    forms = set()
    for password in filter(None, found):
        decoded = urllib.parse.unquote(password)
        forms |= {password, decoded, urllib.parse.quote(decoded, safe=""), urllib.parse.quote_plus(decoded)}
    return forms


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
        return mask_url(self.url)

    @property
    def trust(self) -> str:
        """How entries are trusted: ``signed`` or ``UNSIGNED (…)``, and ``read-only`` when it is."""
        signed = "signed" if self.secret is not None else "UNSIGNED (--aoti-cache-unsigned: entries are not verified)"
        return f"{signed}, read-only" if self.readonly else signed

    def shown_error(self, error: BaseException) -> str:
        """``Type: message`` of an error of redis-py's, with any URL in it masked; the message is left out when the
        password or the secret is still in it (whatever it quotes them from)."""
        text = mask_urls(str(error))
        hidden = _url_passwords(self.url) | ({self.secret.decode(errors="replace")} if self.secret else set())
        if any(secret in text for secret in hidden):
            text = "its message is not shown: it may quote the password or the secret"
        return f"{type(error).__name__}: {text}"

    def __repr__(self) -> str:
        return f"RemoteSettings(url={self.shown_url!r}, signed={self.secret is not None}, readonly={self.readonly})"


def remote_cache_header(remote: RemoteSettings | None, off_reason: str | None) -> str:
    """What the report header adds to the cache's description: the remote cache (its URL without password), how it
    is trusted, or why the one named is not used."""
    if remote is None:
        return f", remote cache {off_reason}" if off_reason else ""
    return f", remote cache {remote.shown_url} ({remote.trust})"


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


def _file_chunks(path: Path, size: int) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while chunk := stream.read(size):
            yield chunk


def manifest_key(key: str) -> str:
    return f"{PREFIX}{key}"


def chunk_key(key: str, upload: str, number: int) -> str:
    return f"{PREFIX}{key}:{upload}:{number}"


# An upload id is secrets.token_hex(8); a manifest names at most this many chunks (a forged one could claim
# billions). Redis caps one value at 512 MB.
_UPLOAD_ID = re.compile(r"[0-9a-f]{16}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MOST_CHUNKS = 100_000
_LARGEST_CHUNK = 512 << 20
# A compile's seconds, as recorded: a week is far past any real one (the value only feeds "s saved").
MOST_COMPILE_SECONDS = 7 * 24 * 3600.0
# The parts of the entry's key (core.cache_key.KEY_PARTS), each by its digest's first 16 hex digits: what another
# runner's miss of a near key can be compared with. Named as the key's parts are named, a few dozen at most.
_PART_NAME = re.compile(r"[a-z][a-z_]{0,31}")
_MOST_PARTS = 32


@dataclass(frozen=True)
class Manifest:
    """A manifest's fields, each of the type and in the range a writer gives it."""

    size: int
    chunks: int
    chunk_bytes: int
    upload: str
    sha256: str
    compile_seconds: float

    def chunk_lengths(self) -> list[int]:
        """Each chunk's length in bytes: every one ``chunk_bytes`` long but the last."""
        return [min(self.chunk_bytes, self.size - number * self.chunk_bytes) for number in range(self.chunks)]


def signer_id(secret: bytes) -> str:
    """Which secret signed a manifest, as 16 hex digits: tells a runner whose secret differs from a forger."""
    return hmac.new(secret, _SIGNER_DOMAIN, hashlib.sha256).hexdigest()[:16]


def signature(secret: bytes, key: str, fields: dict[str, Any]) -> str:
    """HMAC-SHA256 over the key and every field of the manifest but the signature, as canonical JSON."""
    body = json.dumps({k: v for k, v in fields.items() if k != "signature"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(secret, _SIGNATURE_DOMAIN + key.encode() + b"\0" + body.encode(), hashlib.sha256).hexdigest()


def _recorded_seconds(seconds: float) -> float:
    """A compile's seconds as a manifest records them: from 0 to a week (a clock that jumped gives 0)."""
    seconds = float(seconds)
    return min(seconds, MOST_COMPILE_SECONDS) if math.isfinite(seconds) and seconds >= 0 else 0.0


def _is_int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def plausible_seconds(value: Any) -> bool:
    """Whether ``value`` can be a compile's seconds: a finite number from 0 to a week (not a bool, not a string)."""
    return type(value) in (int, float) and math.isfinite(value) and 0 <= value <= MOST_COMPILE_SECONDS


def _valid_parts(value: Any) -> bool:
    """A manifest's ``parts``: at most 32 part names, each with a digest of 16 hex digits."""
    return (
        isinstance(value, dict)
        and len(value) <= _MOST_PARTS
        and all(
            _PART_NAME.fullmatch(name) and isinstance(digest, str) and _UPLOAD_ID.fullmatch(digest)
            for name, digest in value.items()
        )
    )


def _shown_value(value: Any) -> str:
    """A field's value as JSON, short; a list or an object by its kind (it may be nested past what JSON writes)."""
    return type(value).__name__ if isinstance(value, list | dict) else json.dumps(value)[:40]


def _field_problem(fields: dict[str, Any]) -> str | None:
    """The first field of a manifest (parsed, its signature checked) whose type or range is wrong, or None."""
    expected: dict[str, tuple[Callable[[Any], bool], str]] = {
        "format": (lambda v: v == FORMAT and type(v) is int, f"{FORMAT}"),
        "size": (lambda v: _is_int(v, 1, _MOST_CHUNKS * _LARGEST_CHUNK), "a number of bytes"),
        "chunk_bytes": (lambda v: _is_int(v, 1, _LARGEST_CHUNK), "a number of bytes up to 512 MiB"),
        "chunks": (lambda v: _is_int(v, 1, _MOST_CHUNKS), f"a number of chunks up to {_MOST_CHUNKS}"),
        "upload": (lambda v: isinstance(v, str) and _UPLOAD_ID.fullmatch(v) is not None, "16 hex digits"),
        "sha256": (lambda v: isinstance(v, str) and _SHA256.fullmatch(v) is not None, "64 hex digits"),
        "compile_seconds": (plausible_seconds, "seconds from 0 to a week"),
        "parts": (_valid_parts, f"up to {_MOST_PARTS} key parts, each with 16 hex digits"),
        "signer": (lambda v: v is None or (isinstance(v, str) and _UPLOAD_ID.fullmatch(v) is not None), "16 hex"),
        "signature": (lambda v: v is None or (isinstance(v, str) and _SHA256.fullmatch(v) is not None), "64 hex"),
    }
    for name in fields:
        if name not in expected:
            return f"an unexpected field {name[:40]!r}"
    for name, (valid, what) in expected.items():
        if name not in fields:
            return f"no {name!r}"
        if not valid(fields[name]):
            return f"{name} is {_shown_value(fields[name])}, expected {what}"
    if (fields["signer"] is None) != (fields["signature"] is None):
        return "a signer without a signature, or a signature without a signer"
    if fields["chunks"] != -(-fields["size"] // fields["chunk_bytes"]):
        return f"{fields['chunks']} chunks do not hold {fields['size']} bytes in chunks of {fields['chunk_bytes']}"
    return None


def _signature_problem(fields: dict[str, Any], key: str, secret: bytes) -> Refused | None:
    """Why a manifest is not one this runner's ``secret`` signed, or None."""
    signed = fields.get("signature")
    if signed is None:
        return Refused("unsigned")
    if fields.get("signer") != signer_id(secret):
        return Refused(OTHER_SECRET, replaceable=False)
    if not (isinstance(signed, str) and signed.isascii()):
        return Refused(FORGED)
    try:
        expected = signature(secret, key, fields)
    except (ValueError, RecursionError):  # a field JSON cannot write back (nested too deep): not ours
        return Refused(FORGED)
    return None if hmac.compare_digest(expected, signed) else Refused(FORGED)


def read_manifest(raw: Any, key: str, secret: bytes | None) -> Manifest | Refused:
    """A stored manifest of ``key``, checked: its format, its signature over every field (with ``secret``), then
    each field's type and range. :class:`Refused` names the first check it fails."""
    try:
        fields = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return Refused("unreadable manifest")
    if not isinstance(fields, dict):
        return Refused("unreadable manifest")
    if "format" not in fields:  # format 1: replaced by this version's
        return Refused("written by an older pytest-aoti, whose manifest is not signed whole")
    if fields["format"] != FORMAT:  # a newer version's: replacing it would make its runners replace ours in turn
        shown = _shown_value(fields["format"])
        return Refused(f"written in another format ({shown}) by another pytest-aoti version; not replaced", False)
    if secret is not None:
        refused = _signature_problem(fields, key, secret)
        if refused is not None:
            return refused
    problem = _field_problem(fields)
    if problem is not None:
        return Refused(f"invalid manifest ({problem})")
    return Manifest(
        size=fields["size"],
        chunks=fields["chunks"],
        chunk_bytes=fields["chunk_bytes"],
        upload=fields["upload"],
        sha256=fields["sha256"],
        compile_seconds=float(fields["compile_seconds"]),
    )


def _length_problem(number: int, count: int, length: int, expected: int) -> str | None:
    """Why chunk ``number`` (from 0) of ``count``, ``length`` bytes on the server, is refused, or None."""
    if length == 0:
        return f"missing chunk {number + 1} of {count}"
    if length < expected:
        return f"truncated (chunk {number + 1} of {count} is {length} bytes, its manifest says {expected})"
    if length > expected:
        return f"larger than its manifest says (chunk {number + 1} of {count} is {length} bytes, not {expected})"
    return None


def _chunk_names_of(key: str, raw_manifest: Any) -> list[str]:
    """The chunk keys a stored manifest of ``key`` names; none when it is unreadable or names an unlikely upload."""
    try:
        manifest = json.loads(raw_manifest)
        upload, count = str(manifest["upload"]), int(manifest["chunks"])
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return []
    if not _UPLOAD_ID.fullmatch(upload) or not 0 < count <= _MOST_CHUNKS:
        return []
    return [chunk_key(key, upload, number) for number in range(count)]


# A manifest is a few hundred bytes: a reader takes at most this much of one (a forged one could be 512 MB).
_MOST_MANIFEST_BYTES = 64 << 10


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

        reason = self.settings.shown_error(error)
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
        emptied) when it fails one, or is larger than ``max_bytes`` (the local cache's cap); None when there is none
        or the server cannot be used."""
        import redis

        if self.problem is not None:
            return None
        try:
            result = self._fetch(key, target, max_bytes)
        except redis.ResponseError as error:
            if "WRONGTYPE" not in str(error):
                self._give_up(error)
                result = None
            else:  # a list or a hash under the entry's name: not an entry of ours
                result = Refused("not a cache entry (a Redis value of another type under its name)")
        except self._errors as error:
            self._give_up(error)
            result = None
        if not isinstance(result, Fetched):
            target.write_bytes(b"")
        return result

    def _fetch(self, key: str, target: Path, max_bytes: int | None) -> Fetched | Refused | None:
        pipeline = self._client.pipeline(transaction=False)
        pipeline.exists(manifest_key(key))
        pipeline.getrange(manifest_key(key), 0, _MOST_MANIFEST_BYTES)  # one byte past the most a manifest may be
        exists, raw = pipeline.execute()
        if not exists:
            return None
        if len(raw) > _MOST_MANIFEST_BYTES:
            return Refused(f"unreadable manifest (over {_MOST_MANIFEST_BYTES} bytes)")
        manifest = read_manifest(raw, key, self.settings.secret)
        if isinstance(manifest, Refused):
            return manifest
        if max_bytes is not None and manifest.size > max_bytes:
            return Refused(f"larger than the local cache's cap ({manifest.size} bytes)")
        refused = self._download(key, manifest, target)
        if refused is not None:
            return refused
        return Fetched(size=manifest.size, sha256=manifest.sha256, compile_seconds=manifest.compile_seconds)

    def _download(self, key: str, manifest: Manifest, target: Path) -> Refused | None:
        """Write the entry's chunks to ``target``: each one's length is checked on the server first (a forged chunk
        is never downloaded), and each is read no longer than its manifest says (one swapped in meanwhile neither)."""
        names = [chunk_key(key, manifest.upload, number) for number in range(manifest.chunks)]
        lengths = manifest.chunk_lengths()
        pipeline = self._client.pipeline(transaction=False)
        for name in names:
            pipeline.strlen(name)
        for number, (length, expected) in enumerate(zip(pipeline.execute(), lengths, strict=True)):
            problem = _length_problem(number, manifest.chunks, int(length), expected)
            if problem is not None:
                return Refused(problem)
        digest = hashlib.sha256()
        with target.open("wb") as stream:
            for number, (name, expected) in enumerate(zip(names, lengths, strict=True)):
                chunk = self._client.getrange(name, 0, expected - 1)
                assert isinstance(chunk, bytes)
                if len(chunk) != expected:  # changed on the server since its length was read
                    return Refused(_length_problem(number, manifest.chunks, len(chunk), expected) or "changed")
                digest.update(chunk)
                stream.write(chunk)
        if digest.hexdigest() != manifest.sha256:
            return Refused("tampered (its bytes do not match its manifest)")
        return None

    def upload(
        self,
        key: str,
        package: Path,
        compile_seconds: float,
        *,
        replace: bool = False,
        parts: dict[str, str] | None = None,
    ) -> bool:
        """Store ``package`` under ``key`` unless a complete entry is there (``replace``: one this process refused),
        with the digests of the key's ``parts``; True when this upload made the entry. Never raises for the server's
        sake: an error turns writing off."""
        if self.problem is not None or self.write_problem is not None or self.settings.readonly:
            return False
        upload = secrets.token_hex(8)
        chunk_names: list[str] = []
        try:
            digest, size = hashlib.sha256(), 0
            for number, chunk in enumerate(_file_chunks(package, self.settings.chunk_bytes)):
                chunk_names.append(chunk_key(key, upload, number))
                self._client.set(chunk_names[-1], chunk, ex=UPLOAD_SECONDS)
                digest.update(chunk)
                size += len(chunk)
            manifest = self._manifest(
                key, size, len(chunk_names), upload, digest.hexdigest(), compile_seconds, dict(parts or {})
            )
            keys = [manifest_key(key), *chunk_names]
            replaced = self._replaced_manifest(key) if replace else None
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

    def _replaced_manifest(self, key: str) -> Any:
        """The manifest an upload replaces (its chunks are deleted after), read no longer than a manifest may be;
        None for a value of another type (nothing of ours to delete)."""
        import redis

        try:
            return self._client.getrange(manifest_key(key), 0, _MOST_MANIFEST_BYTES)
        except redis.ResponseError as error:
            if "WRONGTYPE" not in str(error):
                raise
            return None

    def _manifest(
        self,
        key: str,
        size: int,
        chunks: int,
        upload: str,
        sha256: str,
        compile_seconds: float,
        parts: dict[str, str],
    ) -> dict[str, Any]:
        """The manifest of an upload, signed whole when there is a secret."""
        fields: dict[str, Any] = {
            "format": FORMAT,
            "size": size,
            "chunks": chunks,
            "chunk_bytes": self.settings.chunk_bytes,
            "upload": upload,
            "sha256": sha256,
            "compile_seconds": _recorded_seconds(compile_seconds),
            "parts": parts,
            "signer": signer_id(self.settings.secret) if self.settings.secret else None,
            "signature": None,
        }
        if self.settings.secret:
            fields["signature"] = signature(self.settings.secret, key, fields)
        return fields

    def _forget(self, chunk_names: list[str]) -> None:
        """Delete what a failed upload wrote, where the server still answers (else the chunks expire)."""
        if self.problem is None and chunk_names:
            try:
                self._client.delete(*chunk_names)
            except self._errors:
                pass
