"""A broker URL that reaches something other than a plain Redis: real servers that close a ``redis://``
connection at once, told apart by whether they speak TLS, so that only a Redis behind TLS is told to use
rediss:// and a PostgreSQL port is said to be no Redis at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Settings, connect
from fluksio.broker.connection import speaks_tls
from fluksio.errors import BrokerUnavailable
from tests.integration.support.servers import PostgresServer, RedisServer, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("tls-redis"), tls=True).start()
    try:
        yield server
    finally:
        server.stop()


def refusal(tmp_path: Path, port: int) -> str:
    """What ``connect()`` says of a broker URL ``redis://127.0.0.1:PORT/0``."""
    settings = Settings(broker_url=f"redis://127.0.0.1:{port}/0", database_url=f"sqlite:///{tmp_path / 'r.db'}",
                        artifacts_dir=tmp_path / "artifacts")
    with pytest.raises(BrokerUnavailable) as refused:
        connect(settings)
    return str(refused.value)


def test_a_redis_that_speaks_only_tls_given_as_redis_is_told_to_use_rediss(tmp_path: Path,
                                                                          tls_redis: RedisServer) -> None:
    said = refusal(tmp_path, tls_redis.port)
    assert f"127.0.0.1:{tls_redis.port} closed the connection" in said
    assert said.endswith("and speaks TLS: a server that speaks only TLS needs rediss://")


def test_a_postgresql_port_given_as_the_broker_is_said_to_be_no_redis(tmp_path: Path,
                                                                     postgres: PostgresServer) -> None:
    said = refusal(tmp_path, postgres.port)
    assert f"127.0.0.1:{postgres.port} closed the connection" in said
    assert "speaks no TLS either: it is not a Redis server" in said and "check the host and the port" in said
    assert "rediss" not in said


def test_the_tls_probe_tells_the_three_apart(tls_redis: RedisServer, postgres: PostgresServer) -> None:
    assert speaks_tls(f"redis://127.0.0.1:{tls_redis.port}/0", 3.0) is True
    assert speaks_tls(f"redis://127.0.0.1:{postgres.port}/0", 3.0) is False
    assert speaks_tls(f"redis://127.0.0.1:{free_port()}/0", 3.0) is None  # nothing listens: nothing to tell
