"""A real ``redis-server`` (Debian's package) on a free loopback port, for the remote-cache tests and benchmark: no
persistence (``--save ''``), its own dir, stopped with the test. Never a mock: the faults are the server's own."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

REDIS_SERVER = shutil.which("redis-server")
# How long a server may take to answer its first PING: generous, and ended early by the answer itself.
_START_SECONDS = 120.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """``redis-server`` on 127.0.0.1 with ``config`` (e.g. ``maxmemory``, ``requirepass``) as its command-line
    settings. ``stop`` kills it (SIGKILL: what a crashed server looks like), ``start`` starts it again, empty."""

    def __init__(self, workdir: Path, **config: str) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed")
        self.workdir = workdir
        self.port = free_port()
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    def url(self, password: str | None = None, db: int = 0) -> str:
        auth = f":{password}@" if password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        assert REDIS_SERVER is not None
        settings = [part for name, value in self.config.items() for part in (f"--{name.replace('_', '-')}", value)]
        command = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [*command, "--dir", str(self.workdir), *settings],
            stdout=(self.workdir / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + _START_SECONDS
        while True:
            try:
                self.admin().ping()
                return self
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"redis-server did not start: {(self.workdir / 'redis.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.05)

    def admin(self) -> Any:
        """A client that bypasses pytest-aoti: to look at entries and to damage them."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.config.get("requirepass"))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None
