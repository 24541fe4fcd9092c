"""Everything a Redis server is told while a test runs, as MONITOR shows it (one line per command)."""

from __future__ import annotations

import threading
from types import TracebackType

import redis


class Monitored:
    """``with Monitored(url) as seen:`` collects, in ``seen.lines``, every command the server runs meanwhile
    (each as MONITOR writes it: time, client, then the command and its arguments, quoted)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.lines: list[bytes] = []
        self._monitor = self.client.monitor()
        self._thread = threading.Thread(target=self._read, name="redis-monitor", daemon=True)

    def __enter__(self) -> Monitored:
        self._monitor.__enter__()
        self._thread.start()
        return self

    def _read(self) -> None:
        connection = self._monitor.connection
        while True:
            try:
                line = connection.read_response()
            except (redis.RedisError, OSError, ValueError, AttributeError):  # disconnected by __exit__
                return
            if isinstance(line, bytes):
                self.lines.append(line)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._monitor.connection.disconnect()
        self._thread.join(5)
        self.client.close()

    def text(self) -> bytes:
        return b"\n".join(self.lines)
