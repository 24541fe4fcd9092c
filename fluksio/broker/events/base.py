"""The events interface: publishing an event, and subscribing to those published from now on."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from fluksio.placement.backend import Tell

log = logging.getLogger(__name__)

#: The kinds of event published; each carries ``run_id``, the node events also ``node``.
KINDS = ("run_queued", "run_started", "node_queued", "node_started", "node_finished", "run_finished")

Callback = Callable[[dict[str, Any]], None]
Unsubscribe = Callable[[], None]


def event_of(kind: str, fields: dict[str, Any], at: float | None = None) -> dict[str, Any]:
    """An event as it is published: its kind, when (now, unless ``at``), and its fields."""
    return {"event": kind, "at": time.time() if at is None else at, **fields}


class Events(ABC):
    def publish(self, kind: str, **fields: Any) -> None:
        self.publish_all(kind, [fields])

    def publish_all(self, kind: str, each: list[dict[str, Any]]) -> None:
        """Publish one ``kind`` event with each of the field sets ``each``, in order (one round trip on Redis)."""
        now = time.time()
        events = [event_of(kind, fields, now) for fields in each]
        try:
            self._send_all(events)
        except Exception:  # an event is never worth failing a run for
            log.warning("could not publish %d %s event(s)", len(events), kind, exc_info=True)

    def _send_all(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self._send(event)

    def tell(self, kind: str, **fields: Any) -> Tell | None:
        """The event as books in the same Redis publish it after a start (``Books.tells``); ``None`` for
        events they cannot reach."""
        return None

    @abstractmethod
    def _send(self, event: dict[str, Any]) -> None: ...

    def subscribe(self, callback: Callback) -> Unsubscribe:
        """Call ``callback(event)`` for every event published from now on, until the returned function is called.

        The callback may run on another thread; it must be quick and must not raise.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot be subscribed to")
