"""A subscription Redis never confirms is a FluksioError naming the server, and leaves nothing open."""

from __future__ import annotations

from typing import Any

import pytest

from fluksio.broker.events import redis as redis_events
from fluksio.broker.events.redis import EventStream
from fluksio.errors import BrokerUnavailable, EventsUnavailable


class SilentPubSub:
    """A pub/sub that takes the SUBSCRIBE and never confirms it."""

    def __init__(self) -> None:
        self.closed = False
        self.connection_pool = type("Pool", (), {"connection_kwargs": {"host": "broker.example", "port": 6390}})()

    def subscribe(self, _channel: str) -> None:
        pass

    def get_message(self, timeout: float) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        self.closed = True


class Client:
    def __init__(self) -> None:
        self.pubsub_made = SilentPubSub()

    def pubsub(self) -> SilentPubSub:
        return self.pubsub_made


def test_an_unconfirmed_subscription_raises_events_unavailable_and_closes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_events, "SUBSCRIBE_TIMEOUT_S", 0.01)
    client = Client()
    with pytest.raises(EventsUnavailable, match=r"the broker at broker.example:6390 did not confirm the "
                                                r"subscription to \S+ within 0.01 s") as info:
        EventStream(client)
    assert isinstance(info.value, BrokerUnavailable)
    assert client.pubsub_made.closed
