"""A driver's inbox: node completions, wake-ups and cancel requests for one run.

Workers push a completion here when a call ends, so the driver never polls a
result backend. An inbox keeps messages until they are taken: a completion
pushed while its driver is busy is not lost.
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from typing import Any

#: Message kinds.
DONE, WAKE, CANCEL = "done", "wake", "cancel"


class Inbox(ABC):
    @abstractmethod
    def push(self, run_id: str, message: dict[str, Any]) -> None: ...

    @abstractmethod
    def pop(self, run_id: str, timeout: float) -> dict[str, Any] | None:
        """The next message for the run, waiting up to ``timeout`` seconds; ``None`` when none came."""

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

    def close(self, run_id: str) -> None:
        with self._lock:
            self._queues.pop(run_id, None)
