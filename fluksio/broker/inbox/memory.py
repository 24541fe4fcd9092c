"""Inboxes as in-process queues: the embedded default, where drivers and workers share one process."""

from __future__ import annotations

import queue
import threading

from fluksio.broker.inbox.base import Inbox
from fluksio.messages import InboxMessage


class MemoryInbox(Inbox):
    """Inboxes as in-process queues (the embedded default): the message objects travel as they are."""

    def __init__(self) -> None:
        self._queues: dict[str, queue.SimpleQueue[InboxMessage]] = {}
        self._lock = threading.Lock()

    def _queue(self, run_id: str) -> queue.SimpleQueue[InboxMessage]:
        with self._lock:
            found = self._queues.get(run_id)
            if found is None:
                found = self._queues[run_id] = queue.SimpleQueue()
            return found

    def push(self, run_id: str, message: InboxMessage) -> None:
        self._queue(run_id).put(message)

    def pop(self, run_id: str, timeout: float) -> InboxMessage | None:
        try:
            return self._queue(run_id).get(timeout=timeout)
        except queue.Empty:
            return None

    def drain(self, run_id: str, limit: int) -> list[InboxMessage]:
        found = self._queue(run_id)
        taken: list[InboxMessage] = []
        while len(taken) < limit:
            try:
                taken.append(found.get_nowait())
            except queue.Empty:
                break
        return taken

    def close(self, run_id: str) -> None:
        with self._lock:
            self._queues.pop(run_id, None)
