"""What the integration tests share: servers started once per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.support.servers import RedisServer


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server on a free 127.0.0.1 port for the module's tests; stopped after them."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()
