"""A message sent while the broker restarts waits for it, as every other Redis command of a connected process
does (``FLUKSIO_BROKER_OUTAGE_S``). Found by the fault soak: a driver sending a call during a Redis restart of
a second or two lost the call's attempt ("could not send the call to the broker"), and a node without retries
would have failed its run."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import redis

from fluksio import Settings
from fluksio.worker.app import celery_config, new_app
from tests.integration.support.servers import RedisServer

pytestmark = pytest.mark.integration


def test_a_message_sent_while_redis_restarts_goes_out_once_it_is_back(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        app = new_app()
        app.conf.update(celery_config(Settings(broker_url=server.url, broker_outage_s=30)))
        app.send_task("fluksio.test.before", queue="outage")  # connected before the outage, as a driver is
        server.stop()
        back = threading.Timer(2.0, server.start)  # a restart of two seconds: Celery's own policy gives up in one
        back.start()
        try:
            app.send_task("fluksio.test.during", queue="outage")
        finally:
            back.join()
        # The server came back empty (it keeps no data): what is queued now went out after it was back.
        queue = redis.Redis.from_url(server.url).lrange("outage", 0, -1)
        assert [json.loads(message)["headers"]["task"] for message in queue] == ["fluksio.test.during"]
    finally:
        server.stop()
