"""Events of one process (the embedded default): its subscribers are called as each event is published."""

from __future__ import annotations

import threading
from typing import Any

from fluksio.broker.events.base import Callback, Events, Unsubscribe


class MemoryEvents(Events):
    """Events of one process (the embedded default): seen only by subscribers in that process."""

    def __init__(self) -> None:
        self._subscribers: list[Callback] = []
        self._lock = threading.Lock()

    def subscribe(self, callback: Callback) -> Unsubscribe:
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def _send(self, event: dict[str, Any]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            callback(event)
