"""A stand-in for a driver process, for test_redis_books: it claims one call on the shared Redis books.

    python -m tests.integration.support.placer_driver REDIS_URL CALL_ID PRIORITY

It lists its call as waiting (one claim), says so on ``ready``, waits for ``go``, then claims again each
time the books announce a change, as a driver does when woken. Once granted it appends its call id to
``order`` and gives the grant back at once (so the next call's turn comes), then exits.
"""

from __future__ import annotations

import sys
import threading
import time

import redis

from fluksio.placement.placer import Placer, Request, Waiting
from fluksio.placement.redis import RedisBooks
from fluksio.schemas import Grant, Resources

#: The longest the process lives, in seconds: a test that went wrong leaves nothing running.
LIFETIME_S = 60.0


def main(url: str, call_id: str, priority: int) -> None:
    client = redis.Redis.from_url(url)
    placer = Placer(RedisBooks(client, heartbeat_ttl_s=600), stale_after_s=120)
    woken = threading.Event()
    placer.add_listener(woken.set)
    request = Request(call_id, Resources(cpus=1, gpus=1), "gpu", run_id=f"run-{call_id}", node=call_id,
                      priority=priority)
    outcome = placer.try_claim(request)
    assert isinstance(outcome, Waiting), outcome
    client.rpush("ready", call_id)
    client.blpop(["go:" + call_id], timeout=LIFETIME_S)
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        woken.clear()
        outcome = placer.try_claim(request)
        if isinstance(outcome, Grant):
            client.rpush("order", call_id)
            placer.release(outcome)
            placer.books.close()
            return
        woken.wait(1.0)  # a change wakes it at once; the timeout only bounds a lost notification
    sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
