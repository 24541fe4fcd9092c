"""fluksio's kombu Redis transport against a real redis-server: one client per channel for its commands, made
again when kombu replaces the channel's pool, and messages that go, come and are acknowledged as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection
from kombu.transport import get_transport_cls

from fluksio.broker.transport import Transport
from fluksio.runtime import Runtime
from fluksio.settings import Settings
from fluksio.worker.app import create_app, new_app, send_drive
from tests.integration.support.servers import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every redis.Redis made from now on."""
    clients: list[Any] = []
    original = redis.Redis.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        clients.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting)
    return clients


def test_a_channel_keeps_one_client_for_its_commands_until_its_pool_is_replaced(redis_server: RedisServer) -> None:
    with Connection(redis_server.url, transport=Transport) as connection:
        channel = connection.channel()
        first = channel._create_client()
        assert channel._create_client() is first
        assert first.connection_pool is channel.pool
        assert channel._create_client(asynchronous=True) is not first  # the consumer's, as kombu makes it
        channel._disconnect_pools()  # what kombu does after a fork and on close
        again = channel._create_client()
        assert again is not first and again.connection_pool is channel.pool
        channel.close()


def test_messages_sent_taken_and_acknowledged_make_no_client_each(redis_server: RedisServer, made: list[Any]) -> None:
    queue_name = "transport-test"
    with Connection(redis_server.url, transport=Transport) as connection:
        queue = connection.SimpleQueue(queue_name)
        queue.put({"n": 0})  # the channel's clients are made with its first commands
        queue.get(timeout=5).ack()
        before = len(made)
        for n in range(1, 21):
            queue.put({"n": n})
        taken = []
        for _ in range(20):
            message = queue.get(timeout=5)
            taken.append(message.payload["n"])
            message.ack()
        queue.close()
        assert taken == list(range(1, 21))
        assert len(made) - before <= 2  # kombu's own channel made 80 here: four per message
    probe = redis.Redis.from_url(redis_server.url)
    assert probe.hlen("unacked") == 0 and probe.llen(queue_name) == 0  # every message acknowledged
    probe.close()


@pytest.fixture
def app(redis_server: RedisServer, tmp_path: Path) -> Iterator[Celery]:
    """The Celery app of an installation on the test's Redis, as its processes make it."""
    settings = Settings(broker_url=redis_server.url, database_url=f"sqlite:///{tmp_path / 'db'}",
                        artifacts_dir=tmp_path / "artifacts")
    runtime = Runtime.distributed(settings, machine="box")
    try:
        yield create_app(settings, runtime)
    finally:
        runtime.close()


def test_an_installation_on_redis_uses_it_and_still_shows_its_url_as_redis(app: Celery) -> None:
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, Transport)
        # Celery's banner and Flower's broker page read the URL back from kombu: it names its scheme.
        assert connection.as_uri().startswith("redis://") and "fluksio" not in connection.as_uri()


def test_celerys_pooled_connections_send_on_it_too(app: Celery, redis_server: RedisServer, made: list[Any]) -> None:
    # kombu's connection pool makes connections of its own class: a client's submits (Celery's send_task,
    # through its producer pool) made a Redis client per message there.
    with app.producer_or_acquire() as producer:
        assert isinstance(producer.connection.transport, Transport)
    send_drive(app, "01POOLED0000000000000000000", "pooled")  # the channel's clients are made here
    before = len(made)
    for n in range(20):
        send_drive(app, f"01POOLED{n:018d}", "pooled")
    assert len(made) - before <= 1  # kombu's own channel made 20
    probe = redis.Redis.from_url(redis_server.url)
    assert probe.llen("drivers") == 21
    probe.close()


def test_other_transports_are_kombus_own() -> None:
    app = new_app()
    app.conf.broker_url = "memory://localhost/"
    with app.connection_for_write() as connection:
        assert connection.get_transport_cls() is get_transport_cls("memory")
