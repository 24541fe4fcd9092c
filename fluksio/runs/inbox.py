"""A driver's inbox: node completions, wake-ups and cancel requests for one run.

Workers push a completion here when a call ends, so the driver never polls a
result backend. An inbox keeps messages until they are taken: a completion
pushed while its driver is busy is not lost.
"""

from __future__ import annotations

import json
import queue
import threading
from abc import ABC, abstractmethod
from typing import Any

from fluksio.constants import INBOX_KEY
from fluksio.errors import ConfigError

#: Message kinds.
DONE, WAKE, CANCEL = "done", "wake", "cancel"


class Inbox(ABC):
    @abstractmethod
    def push(self, run_id: str, message: dict[str, Any]) -> None: ...

    @abstractmethod
    def pop(self, run_id: str, timeout: float) -> dict[str, Any] | None:
        """The next message for the run, waiting up to ``timeout`` seconds; ``None`` when none came."""

    @abstractmethod
    def drain(self, run_id: str, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` messages already waiting for the run, oldest first, without waiting for more.

        A driver that took one completion takes the others that came meanwhile, and handles them in one go.
        """

    @abstractmethod
    def close(self, run_id: str) -> None:
        """Drop the run's inbox once its driver is done with it."""

    def wake(self, run_id: str) -> None:
        self.push(run_id, {"kind": WAKE})


class MemoryInbox(Inbox):
    """Inboxes as in-process queues (the embedded default)."""

    def __init__(self) -> None:
        self._queues: dict[str, queue.SimpleQueue[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def _queue(self, run_id: str) -> queue.SimpleQueue[dict[str, Any]]:
        with self._lock:
            found = self._queues.get(run_id)
            if found is None:
                found = self._queues[run_id] = queue.SimpleQueue()
            return found

    def push(self, run_id: str, message: dict[str, Any]) -> None:
        self._queue(run_id).put(message)

    def pop(self, run_id: str, timeout: float) -> dict[str, Any] | None:
        try:
            return self._queue(run_id).get(timeout=timeout)
        except queue.Empty:
            return None

    def drain(self, run_id: str, limit: int) -> list[dict[str, Any]]:
        found = self._queue(run_id)
        taken: list[dict[str, Any]] = []
        while len(taken) < limit:
            try:
                taken.append(found.get_nowait())
            except queue.Empty:
                break
        return taken

    def close(self, run_id: str) -> None:
        with self._lock:
            self._queues.pop(run_id, None)


class RedisInbox(Inbox):
    """Inboxes as Redis lists: a completion pushed by a worker on any host waits there for its driver."""

    #: An inbox nobody drains (its driver died and the run was never resumed) expires, in seconds.
    TTL_S = 7 * 24 * 3600

    def __init__(self, client: Any) -> None:
        self.redis = client

    def push(self, run_id: str, message: dict[str, Any]) -> None:
        key = INBOX_KEY + run_id
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(key, json.dumps(message))
        pipe.expire(key, self.TTL_S)
        pipe.execute()

    def pop(self, run_id: str, timeout: float) -> dict[str, Any] | None:
        key = INBOX_KEY + run_id
        if timeout <= 0:
            raw = self.redis.lpop(key)
        else:
            # BLPOP's timeout is in seconds; Redis ≥ 6 takes fractions. 0 would mean "forever".
            reply = self.redis.blpop([key], timeout=max(timeout, 0.001))
            raw = reply[1] if reply else None
        return json.loads(raw) if raw is not None else None

    def drain(self, run_id: str, limit: int) -> list[dict[str, Any]]:
        # LPOP with a count (Redis ≥ 6.2): every waiting message in one round trip.
        from redis import ResponseError  # here: the embedded default never loads redis-py

        try:
            raw = self.redis.lpop(INBOX_KEY + run_id, limit)
        except ResponseError as exc:
            version = self.redis.info("server").get("redis_version", "unknown")
            raise ConfigError(f"the broker's Redis is version {version}, and fluksio needs 6.2 or newer "
                              f"(LPOP with a count): {exc}") from None
        return [json.loads(item) for item in raw or ()]

    def close(self, run_id: str) -> None:
        self.redis.delete(INBOX_KEY + run_id)
