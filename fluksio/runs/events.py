"""Run and node events (``node_queued`` with its reason, …) on one channel, for watchers and dashboards.

Events are for people watching; the run store stays the truth. A lost event
loses nothing but a line on someone's screen.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from fluksio.constants import EVENTS_CHANNEL

log = logging.getLogger(__name__)


class Events(ABC):
    def publish(self, kind: str, **fields: Any) -> None:
        event = {"event": kind, "at": time.time(), **fields}
        try:
            self._send(event)
        except Exception:  # an event is never worth failing a run for
            log.warning("could not publish %s event", kind, exc_info=True)

    @abstractmethod
    def _send(self, event: dict[str, Any]) -> None: ...


class MemoryEvents(Events):
    def __init__(self) -> None:
        self._subscribers: list[Callable[[dict[str, Any]], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, callback: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            self._subscribers.append(callback)

    def _send(self, event: dict[str, Any]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            callback(event)


class RedisEvents(Events):
    def __init__(self, client: Any) -> None:
        self.redis = client

    def _send(self, event: dict[str, Any]) -> None:
        self.redis.publish(EVENTS_CHANNEL, json.dumps(event))
