"""Events on a Redis channel, seen by every host of the installation; a subscription is a stream of them."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from fluksio.broker.events.base import Callback, Events, Unsubscribe, event_of
from fluksio.constants import EVENTS_CHANNEL
from fluksio.errors import EventsUnavailable
from fluksio.placement.backend import Tell

log = logging.getLogger(__name__)

#: Longest a subscriber thread blocks on Redis before looking whether it was told to stop, in seconds.
POLL_S = 0.25
#: Longest wait for Redis to confirm a subscription, in seconds.
SUBSCRIBE_TIMEOUT_S = 10.0


class RedisEvents(Events):
    """Events on the Redis channel :data:`EVENTS_CHANNEL`, seen by every host of the installation."""

    def __init__(self, client: Any) -> None:
        self.redis = client

    def _send(self, event: dict[str, Any]) -> None:
        self.redis.publish(EVENTS_CHANNEL, json.dumps(event))

    def _send_all(self, events: list[dict[str, Any]]) -> None:
        if len(events) == 1:
            self._send(events[0])
            return
        pipe = self.redis.pipeline(transaction=False)
        for event in events:
            pipe.publish(EVENTS_CHANNEL, json.dumps(event))
        pipe.execute()

    def tell(self, kind: str, **fields: Any) -> Tell:
        return Tell(EVENTS_CHANNEL, json.dumps(event_of(kind, fields)))

    def stream(self) -> EventStream:
        """A subscription that starts now (events published before this call are not seen)."""
        return EventStream(self.redis)

    def subscribe(self, callback: Callback) -> Unsubscribe:
        stream = self.stream()
        stop = threading.Event()

        def pump() -> None:
            try:
                while not stop.is_set():
                    event = stream.next(POLL_S)
                    if event is not None and not stop.is_set():
                        callback(event)
            except Exception as exc:  # a watcher that loses Redis stops watching; the run goes on
                log.warning("stopped following the run's events (%s: %s); the run goes on", type(exc).__name__, exc)
                log.debug("events subscriber stopped", exc_info=True)
            finally:
                stream.close()

        thread = threading.Thread(target=pump, name="fluksio-events", daemon=True)
        thread.start()

        def unsubscribe() -> None:
            stop.set()
            thread.join(POLL_S * 4)

        return unsubscribe


class EventStream:
    """One subscription to :data:`EVENTS_CHANNEL`: ``next(timeout_s)`` until ``close()``.

    Pub/sub keeps no history: a subscriber sees what is published while it is
    subscribed, so subscribe first, then read whatever state it must not miss.
    """

    def __init__(self, client: Any) -> None:
        self._pubsub = client.pubsub()
        self._pubsub.subscribe(EVENTS_CHANNEL)
        try:
            self._await_confirmation()
        except BaseException:
            self._pubsub.close()
            raise

    def _await_confirmation(self) -> None:
        # Return only once Redis has confirmed: a caller that reads a run's row next must not miss
        # an event published between sending SUBSCRIBE and Redis acting on it.
        deadline = time.monotonic() + SUBSCRIBE_TIMEOUT_S
        while time.monotonic() < deadline:
            message = self._pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            if message is not None and message.get("type") == "subscribe":
                return
        where = getattr(getattr(self._pubsub, "connection_pool", None), "connection_kwargs", {})
        raise EventsUnavailable(
            f"the broker at {where.get('host', '?')}:{where.get('port', '?')} did not confirm the subscription to "
            f"{EVENTS_CHANNEL} within {SUBSCRIBE_TIMEOUT_S:g} s: is it overloaded? `redis-cli -u URL ping` should "
            "answer PONG at once")

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        """The next event, or ``None`` when none came within ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            message = self._pubsub.get_message(timeout=max(0.0, left))
            if message is not None and message.get("type") == "message":
                try:
                    event = json.loads(message["data"])
                except ValueError:
                    log.warning("ignoring a message on %s that is not JSON", EVENTS_CHANNEL)
                else:
                    if isinstance(event, dict):
                        return event
            if left <= 0:
                return None

    def close(self) -> None:
        self._pubsub.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
