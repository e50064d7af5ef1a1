"""The remote package cache against a real ``redis-server``: chunks, signatures, refused entries, and the faults a
shared server has (killed mid-upload, restarted empty, a wrong password, full, slow, two writers at once). Most tests
work on the store with the bytes of one real compiled package; tests/test_remote_cache_runs.py shows the user's side."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.redis_server import REDIS_SERVER, RedisServer

pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None, reason="redis-server is not installed (apt-get install redis-server)"
)
redis = pytest.importorskip("redis", reason="the redis client is not installed (pip install 'pytest-aoti[test]')")
torch = pytest.importorskip("torch")

from pytest_aoti.core.cache import PackageCache  # noqa: E402
from pytest_aoti.core.remote_cache import (  # noqa: E402
    FORGED,
    OTHER_SECRET,
    AOTIRemoteCacheWarning,
    Fetched,
    Refused,
    RemoteSettings,
    RemoteStore,
    manifest_key,
)

SECRET = b"s3cret-for-tests"
CHUNK = 4096  # small, so that a small package is stored in many chunks
KEY = "ab" * 32


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """One real compiled package (a small MLP), from the suite's shared local cache when a test compiled it before."""
    from pytest_aoti.core.compiler import compile_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cache = PackageCache.open(shared_cache, max_bytes=1 << 30)
    compiled = compile_model(model, (torch.randn(2, 8),), package_dir=tmp_path_factory.mktemp("pkg"), cache=cache)
    assert compiled.package_path.stat().st_size > 8 * CHUNK
    return compiled.package_path


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the tests that do not stop or reconfigure it; each of them uses keys of its own."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def new_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """A server of this test's own, with the given settings, killed at its end."""
    started: list[RedisServer] = []

    def start(**config: str) -> RedisServer:
        started.append(RedisServer(tmp_path / f"redis{len(started)}", **config).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


def store(url: str, secret: bytes | None = SECRET, **options: object) -> RemoteStore:
    return RemoteStore(RemoteSettings(url, secret, chunk_bytes=CHUNK, **options))  # type: ignore[arg-type]


def chunk_names(server: RedisServer, key: str) -> list[bytes]:
    return sorted(name for name in server.admin().keys(f"{manifest_key(key)}:*"))


def manifest(server: RedisServer, key: str) -> dict[str, object]:
    raw = server.admin().get(manifest_key(key))
    assert raw is not None
    loaded: dict[str, object] = json.loads(raw)
    return loaded


def test_round_trip_in_chunks_and_signed(shared_server: RedisServer, package: Path, tmp_path: Path) -> None:
    key = "01" * 32
    assert store(shared_server.url()).upload(key, package, compile_seconds=7.5)
    size = package.stat().st_size
    assert len(chunk_names(shared_server, key)) == -(-size // CHUNK) > 8
    entry = manifest(shared_server, key)
    assert entry["size"] == size and isinstance(entry["signature"], str) and len(entry["signature"]) == 64
    fetched = store(shared_server.url()).fetch(key, tmp_path / "fetched.pt2")
    assert fetched == Fetched(size=size, sha256=entry["sha256"], compile_seconds=7.5)
    assert (tmp_path / "fetched.pt2").read_bytes() == package.read_bytes()
    assert store(shared_server.url()).fetch("02" * 32, tmp_path / "none.pt2") is None  # no entry: a miss


def _flip_one_byte(server: RedisServer, key: str, chunk: int = 1) -> None:
    entry = manifest(server, key)
    name = f"{manifest_key(key)}:{entry['upload']}:{chunk}"
    data = bytearray(server.admin().get(name))
    data[100] ^= 0x01
    server.admin().set(name, bytes(data))


def test_tampered_truncated_and_wrongly_signed_entries_are_refused(
    shared_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    admin = shared_server.admin()
    target = tmp_path / "fetched.pt2"
    tampered, forged, truncated, unsigned = ("11" * 32, "12" * 32, "13" * 32, "14" * 32)
    for key in (tampered, forged, truncated):
        assert store(shared_server.url()).upload(key, package, compile_seconds=1.0)
    _flip_one_byte(shared_server, tampered)
    assert store(shared_server.url()).fetch(tampered, target) == Refused(
        "tampered (its bytes do not match its manifest)"
    )
    assert target.read_bytes() == b""  # nothing of it is kept
    # A forger who also rewrites the checksum cannot sign: the signature is over the key and the whole manifest.
    _flip_one_byte(shared_server, forged)
    entry = manifest(shared_server, forged)
    chunks = [admin.get(f"{manifest_key(forged)}:{entry['upload']}:{n}") for n in range(int(str(entry["chunks"])))]
    import hashlib

    entry["sha256"] = hashlib.sha256(b"".join(chunks)).hexdigest()
    admin.set(manifest_key(forged), json.dumps(entry))
    assert store(shared_server.url()).fetch(forged, target) == Refused(FORGED)
    other_secret = Refused(OTHER_SECRET, replaceable=False)
    assert store(shared_server.url(), secret=b"another secret").fetch(truncated, target) == other_secret
    first = f"{manifest_key(truncated)}:{manifest(shared_server, truncated)['upload']}:0"
    admin.set(first, admin.get(first)[:100])
    count = manifest(shared_server, truncated)["chunks"]
    assert store(shared_server.url()).fetch(truncated, target) == Refused(
        f"truncated (chunk 1 of {count} is 100 bytes, its manifest says {CHUNK})"
    )
    # Written without a secret (--aoti-cache-unsigned): a reader with one refuses it; one without reads it.
    assert store(shared_server.url(), secret=None).upload(unsigned, package, compile_seconds=1.0)
    assert store(shared_server.url()).fetch(unsigned, target) == Refused("unsigned")
    assert isinstance(store(shared_server.url(), secret=None).fetch(unsigned, target), Fetched)


def test_a_missing_chunk_and_an_oversized_entry_are_refused(
    shared_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    key = "21" * 32
    assert store(shared_server.url()).upload(key, package, compile_seconds=1.0)
    size = package.stat().st_size
    assert store(shared_server.url()).fetch(key, tmp_path / "f.pt2", max_bytes=size - 1) == Refused(
        f"larger than the local cache's cap ({size} bytes)"
    )
    entry = manifest(shared_server, key)
    second = f"{manifest_key(key)}:{entry['upload']}:1"
    good = shared_server.admin().get(second)
    shared_server.admin().set(second, good + b"!")  # one byte more than the manifest says
    assert store(shared_server.url()).fetch(key, tmp_path / "f.pt2") == Refused(
        f"larger than its manifest says (chunk 2 of {entry['chunks']} is {CHUNK + 1} bytes, not {CHUNK})"
    )
    shared_server.admin().set(second, good)
    shared_server.admin().delete(f"{manifest_key(key)}:{entry['upload']}:3")
    assert store(shared_server.url()).fetch(key, tmp_path / "f.pt2") == Refused(f"missing chunk 4 of {entry['chunks']}")


@pytest.mark.parametrize("value", ["x", None, -1e308], ids=["a string", "null", "-1e308"])
@pytest.mark.parametrize("secret", [SECRET, None], ids=["signed", "unsigned"])
def test_a_manifest_field_changed_on_the_server_is_refused_recompiled_and_replaced(
    shared_server: RedisServer, package: Path, tmp_path: Path, value: object, secret: bytes | None
) -> None:
    """Issue 50, item 1: compile_seconds set to "x", null or -1e308 in Redis, the bytes and the signature intact.
    Every test using the package failed (ValueError, TypeError), or the summary said "-inf s saved". Now the runner
    refuses the entry (signed: the signature covers every field; unsigned: each field is checked), recompiles and
    replaces it, and the next runner loads the replacement and saves the real compile time."""
    import hashlib

    settings = RemoteSettings(shared_server.url(), secret, chunk_bytes=CHUNK)
    key = hashlib.sha256(f"{value!r} {secret!r}".encode()).hexdigest()
    runner_a = PackageCache.open(tmp_path / "a", 1 << 30, settings)
    assert runner_a is not None
    runner_a.store(key, package, compile_seconds=3.0)
    shared_server.admin().set(manifest_key(key), json.dumps({**manifest(shared_server, key), "compile_seconds": value}))
    runner_b = PackageCache.open(tmp_path / "b", 1 << 30, settings)
    assert runner_b is not None and runner_b.lookup(key) is None
    shown = json.dumps(value)
    reason = FORGED if secret else f"invalid manifest (compile_seconds is {shown}, expected seconds from 0 to a week)"
    assert runner_b.stats.refused == [f"{key[:12]}: {reason}"]
    assert not list((tmp_path / "b").glob("*/*.pt2"))
    runner_b.store(key, package, compile_seconds=3.0)
    assert runner_b.stats.uploaded == 1 and manifest(shared_server, key)["compile_seconds"] == 3.0
    runner_c = PackageCache.open(tmp_path / "c", 1 << 30, settings)
    assert runner_c is not None and runner_c.lookup(key) is not None
    assert (runner_c.stats.remote_hits, runner_c.stats.saved_seconds) == (1, 3.0)
    sidecar = json.loads(next((tmp_path / "c").glob("*/*.json")).read_text())
    assert sidecar["compile_seconds"] == 3.0


def _bytes_sent(server: RedisServer) -> int:
    sent: int = server.admin().info("stats")["total_net_output_bytes"]
    return sent


def test_a_forged_oversized_chunk_or_manifest_is_refused_before_it_is_downloaded(
    shared_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    """Issue 50, item 3: a chunk replaced by 32 MiB (400 MB in the report, 1.57 GB of memory per xdist worker) is
    refused from its length on the server (STRLEN) against the signed manifest; a manifest padded to 32 MiB is read
    no further than a manifest can be long. The server's own count of bytes sent shows that neither was downloaded."""
    key = "22" * 32
    assert store(shared_server.url()).upload(key, package, compile_seconds=1.0)
    entry = manifest(shared_server, key)
    forged = 32 << 20
    shared_server.admin().set(f"{manifest_key(key)}:{entry['upload']}:1", b"\0" * forged)
    before = _bytes_sent(shared_server)
    assert store(shared_server.url()).fetch(key, tmp_path / "f.pt2") == Refused(
        f"larger than its manifest says (chunk 2 of {entry['chunks']} is {forged} bytes, not {CHUNK})"
    )
    assert _bytes_sent(shared_server) - before < 64 << 10
    padded = json.dumps(entry).encode() + b" " * forged  # valid JSON, 32 MiB long
    shared_server.admin().set(manifest_key(key), padded)
    before = _bytes_sent(shared_server)
    assert store(shared_server.url()).fetch(key, tmp_path / "f.pt2") == Refused(
        "unreadable manifest (over 65536 bytes)"
    )
    assert _bytes_sent(shared_server) - before < 128 << 10


def test_a_value_of_another_type_under_an_entrys_name_is_refused(
    shared_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    """A list where a manifest or a chunk should be (WRONGTYPE from the server): that entry is refused, and the
    remote cache goes on for the others."""
    admin, remote = shared_server.admin(), store(shared_server.url())
    not_ours = Refused("not a cache entry (a Redis value of another type under its name)")
    admin.rpush(manifest_key("23" * 32), "x")
    assert remote.fetch("23" * 32, tmp_path / "f.pt2") == not_ours
    assert remote.upload("24" * 32, package, compile_seconds=1.0)
    chunk = f"{manifest_key('24' * 32)}:{manifest(shared_server, '24' * 32)['upload']}:2"
    admin.delete(chunk)
    admin.rpush(chunk, "x")
    assert remote.fetch("24" * 32, tmp_path / "f.pt2") == not_ours
    assert remote.problem is None and remote.upload("25" * 32, package, compile_seconds=1.0)
    assert isinstance(remote.fetch("25" * 32, tmp_path / "f.pt2"), Fetched)
    # Through the local cache: refused, recompiled, and replaced by an entry the next runner loads.
    settings = RemoteSettings(shared_server.url(), SECRET, chunk_bytes=CHUNK)
    admin.delete(manifest_key("26" * 32))
    admin.rpush(manifest_key("26" * 32), "x")
    runner = PackageCache.open(tmp_path / "runner", 1 << 30, settings)
    assert runner is not None and runner.lookup("26" * 32) is None
    runner.store("26" * 32, package, compile_seconds=1.0)
    assert runner.stats.uploaded == 1 and runner.remote is not None and runner.remote.write_problem is None
    assert isinstance(remote.fetch("26" * 32, tmp_path / "f.pt2"), Fetched)


def test_a_refused_entry_is_recompiled_and_replaced_and_readonly_writes_nothing(
    shared_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    """Through the local cache: runner A uploads, the entry is tampered with, runner B refuses it (named in its
    summary), recompiles and replaces it; runner C then loads B's. A read-only runner writes nothing."""
    settings = RemoteSettings(shared_server.url(), SECRET, chunk_bytes=CHUNK)
    key = "31" * 32
    runner_a = PackageCache.open(tmp_path / "a", 1 << 30, settings)
    assert runner_a is not None
    runner_a.store(key, package, compile_seconds=3.0)
    _flip_one_byte(shared_server, key)
    runner_b = PackageCache.open(tmp_path / "b", 1 << 30, settings)
    assert runner_b is not None and runner_b.lookup(key) is None
    assert runner_b.stats.refused == [f"{key[:12]}: tampered (its bytes do not match its manifest)"]
    assert not list((tmp_path / "b").glob("*/*.pt2"))  # never kept, never loaded
    tampered_chunks = set(chunk_names(shared_server, key))
    runner_b.store(key, package, compile_seconds=3.0)  # what the compile that follows does
    assert runner_b.stats.uploaded == 1
    # The replaced entry's chunks are deleted with it (they had been made permanent: nothing else would).
    replacement = f"{manifest_key(key)}:{manifest(shared_server, key)['upload']}:".encode()
    assert all(name.startswith(replacement) for name in chunk_names(shared_server, key))
    assert not tampered_chunks & set(chunk_names(shared_server, key))
    runner_c = PackageCache.open(tmp_path / "c", 1 << 30, settings)
    assert runner_c is not None
    cached = runner_c.lookup(key)
    assert cached is not None and cached.read_bytes() == package.read_bytes()
    assert (runner_c.stats.hits, runner_c.stats.remote_hits, runner_c.stats.saved_seconds) == (1, 1, 3.0)
    from pytest_aoti.cache.stats import cache_summary

    assert cache_summary([runner_c.stats.as_dict()]).startswith("aoti cache: 1 hits (1 remote), 0 misses")
    assert runner_c.lookup(key) == cached and runner_c.stats.remote_hits == 1  # the second lookup is local
    readonly = PackageCache.open(tmp_path / "d", 1 << 30, RemoteSettings(shared_server.url(), SECRET, readonly=True))
    assert readonly is not None
    readonly.store("32" * 32, package, compile_seconds=1.0)
    assert shared_server.admin().get(manifest_key("32" * 32)) is None and readonly.stats.uploaded == 0
    assert readonly.lookup(key) is not None


def test_an_entry_signed_with_another_secret_is_refused_but_not_replaced(
    shared_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    """A runner whose secret is wrong (or was rotated) refuses the fleet's entries and compiles, but does not
    overwrite them: the fleet would refuse its entries in turn, and the two would take turns forever."""
    key = "33" * 32
    fleet_settings = RemoteSettings(shared_server.url(), SECRET, chunk_bytes=CHUNK)
    fleet = PackageCache.open(tmp_path / "fleet", 1 << 30, fleet_settings)
    assert fleet is not None
    fleet.store(key, package, compile_seconds=3.0)
    good = manifest(shared_server, key)
    stray_settings = RemoteSettings(shared_server.url(), b"a rotated secret", chunk_bytes=CHUNK)
    stray = PackageCache.open(tmp_path / "stray", 1 << 30, stray_settings)
    assert stray is not None and stray.lookup(key) is None
    assert stray.stats.refused == [f"{key[:12]}: {OTHER_SECRET}"]
    stray.store(key, package, compile_seconds=3.0)
    assert stray.stats.uploaded == 0 and manifest(shared_server, key) == good
    again = PackageCache.open(tmp_path / "fleet-again", 1 << 30, fleet_settings)
    assert again is not None and again.lookup(key) is not None and again.stats.remote_hits == 1


def _one_warning(record: list[warnings.WarningMessage]) -> str:
    ours = [str(w.message) for w in record if issubclass(w.category, AOTIRemoteCacheWarning)]
    assert len(ours) == 1, ours
    return ours[0]


def test_a_wrong_password_degrades_with_one_warning_that_hides_it(
    new_server: Callable[..., RedisServer], package: Path, tmp_path: Path
) -> None:
    server = new_server(requirepass="right-password")
    remote = store(server.url(password="wrong-password"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert remote.fetch(KEY, tmp_path / "f.pt2") is None
        assert not remote.upload(KEY, package, compile_seconds=1.0)
        assert remote.fetch(KEY, tmp_path / "f.pt2") is None
    message = _one_warning(record)
    assert "wrong-password" not in message and "redis://***@127.0.0.1" in message and "cannot be used" in message
    assert "AuthenticationError" in message or "WRONGPASS" in message
    assert store(server.url(password="right-password")).fetch(KEY, tmp_path / "f.pt2") is None  # no entry, no error


def test_an_unreachable_or_paused_server_degrades_within_the_timeout(
    new_server: Callable[..., RedisServer], package: Path, tmp_path: Path
) -> None:
    """A closed port, and a server that never answers (paused for ten minutes): each call is bounded by the timeout,
    one warning, then the store stays off without waiting again."""
    server = new_server()
    closed = RedisServer(tmp_path / "never-started")  # a free port nothing listens on
    for remote, reason in ((store(closed.url()), "ConnectionError"), (store(server.url(), timeout=1.0), "Timeout")):
        if reason == "Timeout":
            server.admin().execute_command("CLIENT", "PAUSE", "600000", "ALL")
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert remote.fetch(KEY, tmp_path / "f.pt2") is None
            assert not remote.upload(KEY, package, compile_seconds=1.0)
        assert reason in _one_warning(record)


def test_a_full_server_stops_the_uploads_keeps_the_reads_and_leaves_no_chunks(
    new_server: Callable[..., RedisServer], package: Path, tmp_path: Path
) -> None:
    server = new_server(maxmemory="3mb", maxmemory_policy="noeviction")
    remote = store(server.url())
    small = tmp_path / "small.pt2"
    small.write_bytes(package.read_bytes()[: 2 * CHUNK])
    assert remote.upload(KEY, small, compile_seconds=1.0)
    big = tmp_path / "big.pt2"
    big.write_bytes(package.read_bytes() * (4 * 2**20 // package.stat().st_size + 1))  # past maxmemory
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert not remote.upload("cd" * 32, big, compile_seconds=1.0)
        assert not remote.upload("ce" * 32, small, compile_seconds=1.0)  # writing stays off
    assert "cannot store packages (OutOfMemoryError" in _one_warning(record)
    assert chunk_names(server, "cd" * 32) == []  # what the failed upload wrote was deleted
    assert isinstance(remote.fetch(KEY, tmp_path / "f.pt2"), Fetched)  # reading goes on


class HoldingProxy:
    """A TCP relay between the client and a real server that forwards the client's first ``hold_after`` bytes, then
    calls ``then()`` (kill the server, or cut the client off) and closes both sides: an upload cut at a fixed point,
    whatever the machine's speed."""

    def __init__(self, server_port: int, hold_after: int, then: Callable[[], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.server_port, self.hold_after, self.then = server_port, hold_after, then
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.server_port))
        threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
        forwarded = 0
        while forwarded < self.hold_after and (data := client.recv(min(65536, self.hold_after - forwarded))):
            upstream.sendall(data)
            forwarded += len(data)
        self.then()
        for side in (client, upstream):
            side.close()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass


@pytest.mark.parametrize("cut", ["server killed", "uploader gone"])
def test_an_upload_cut_midway_is_never_served(
    new_server: Callable[..., RedisServer], package: Path, tmp_path: Path, cut: str
) -> None:
    """Three chunks reach the server, then the server is killed (and restarted empty), or the uploader is cut off (a
    runner killed mid-upload): the upload fails with one warning, and no reader ever gets a half-written entry. The
    chunks left behind expire."""
    server = new_server()
    key = "41" * 32
    proxy = HoldingProxy(server.port, 3 * CHUNK + 200, server.stop if cut == "server killed" else lambda: None)
    remote = RemoteStore(RemoteSettings(f"redis://127.0.0.1:{proxy.port}/0", SECRET, chunk_bytes=CHUNK))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert not remote.upload(key, package, compile_seconds=1.0)
    assert "cannot" in _one_warning(record)
    if cut == "server killed":
        server.start()  # restarted, empty: a miss, and the next upload works
    else:
        left = chunk_names(server, key)
        assert left and all(0 < server.admin().ttl(name) <= 3600 for name in left)
    assert store(server.url()).fetch(key, tmp_path / "f.pt2") is None
    assert store(server.url()).upload(key, package, compile_seconds=1.0)
    assert isinstance(store(server.url()).fetch(key, tmp_path / "f.pt2"), Fetched)


UPLOADER = """
import sys, time
from pathlib import Path
from pytest_aoti.core.remote_cache import RemoteSettings, RemoteStore
url, key, package, go = sys.argv[1:5]
remote = RemoteStore(RemoteSettings(url, b"s3cret-for-tests", chunk_bytes=64))
while not Path(go).exists():
    time.sleep(0.01)
print("PUBLISHED", remote.upload(key, Path(package), compile_seconds=1.0))
"""


def test_two_processes_uploading_the_same_key_leave_one_whole_entry(
    shared_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    """Two runners built the same key (their bytes differ, as two compiles' do): both uploads run at once, in tiny
    chunks; exactly one publishes, the other deletes its chunks, and the entry is the winner's, whole."""
    key = "51" * 32
    builds = []
    for number in range(2):
        build = tmp_path / f"build{number}.pt2"
        build.write_bytes(package.read_bytes() + bytes([number]) * 10)
        builds.append(build)
    go = tmp_path / "go"
    script = tmp_path / "uploader.py"
    script.write_text(UPLOADER)
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), shared_server.url(), key, str(build), str(go)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        for build in builds
    ]
    go.touch()
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    assert sorted(line for out in outputs for line in out.splitlines()) == ["PUBLISHED False", "PUBLISHED True"]
    winner = builds[["PUBLISHED True" in out for out in outputs].index(True)]
    fetched = store(shared_server.url()).fetch(key, tmp_path / "f.pt2")
    assert isinstance(fetched, Fetched) and (tmp_path / "f.pt2").read_bytes() == winner.read_bytes()
    assert len(chunk_names(shared_server, key)) == -(-winner.stat().st_size // 64)  # the loser's are gone
