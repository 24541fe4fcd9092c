"""The Redis inbox against a real redis-server: what a driver takes can be read back until it is handled."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from fluksio.broker.inbox.base import WAKE_UP
from fluksio.broker.inbox.redis import RedisInbox
from fluksio.messages import Completion, MadeArtifact
from tests.integration.support.servers import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def inbox(redis_server: RedisServer) -> Iterator[RedisInbox]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield RedisInbox(client)
    client.close()


def done(i: int) -> Completion:
    return Completion(call_id=f"r.n{i}.1", node=f"n{i}", attempt=1, status="ok", gpus=(i,), outputs={"x": i},
                      artifacts=(MadeArtifact("x", "sha256:" + "a" * 64, i),))


def test_pop_and_drain_take_in_order_and_keep_a_copy_of_what_they_took(inbox: RedisInbox) -> None:
    for i in range(5):
        inbox.push("r", done(i))
    assert inbox.pop("r", timeout=1) == done(0)
    assert inbox.pop("r", timeout=0) == done(1)
    assert inbox.drain("r", 2) == [done(2), done(3)]
    assert inbox.drain("r", 10) == [done(4)]
    assert inbox.drain("r", 10) == [] and inbox.pop("r", timeout=0.01) is None
    assert inbox.recover("r") == [done(i) for i in range(5)]
    assert inbox.redis.ttl("fluksio:inbox:r:taken") > 0  # a taken list nobody clears expires


def test_the_taken_list_expires_from_the_first_message_taken(inbox: RedisInbox) -> None:
    inbox.push("r", done(0))
    inbox.pop("r", timeout=1)  # a driver that died right after this leaves a list nobody else removes
    assert inbox.redis.ttl("fluksio:inbox:r:taken") > 0
    inbox.forget_taken("r")
    inbox.forget_taken("r")  # trimmed empty: the list is gone
    assert not inbox.redis.exists("fluksio:inbox:r:taken")
    inbox.push("r", done(1))
    inbox.pop("r", timeout=1)  # made anew by the next take: it expires too
    assert inbox.redis.ttl("fluksio:inbox:r:taken") > 0


def test_a_message_whose_reply_was_lost_is_recovered(inbox: RedisInbox) -> None:
    """The connection drops after Redis moved the message: the reply never arrives, the message is not gone."""
    inbox.push("r", done(7))
    key, taken = inbox._keys("r")
    inbox.redis.lmove(key, taken, "LEFT", "RIGHT")  # what BLMOVE did before its reply was lost
    assert inbox.pop("r", timeout=0.01) is None  # the resent command finds nothing left
    assert inbox.recover("r") == [done(7)]


def test_forget_taken_keeps_what_was_taken_since_the_check_before_last(inbox: RedisInbox) -> None:
    inbox.push("r", done(0))
    inbox.pop("r", timeout=1)
    inbox.forget_taken("r")  # check 1: message 0 was there
    inbox.push("r", done(1))
    inbox.pop("r", timeout=1)
    assert inbox.recover("r") == [done(0), done(1)]
    inbox.forget_taken("r")  # check 2: message 0 is forgotten, message 1 stays until the next check
    assert inbox.recover("r") == [done(1)]
    inbox.forget_taken("r")
    assert inbox.recover("r") == []


def test_close_drops_the_inbox_and_its_taken_list(inbox: RedisInbox) -> None:
    inbox.push("r", done(0))
    inbox.push("r", done(1))
    inbox.pop("r", timeout=1)
    inbox.close("r")
    assert inbox.pop("r", timeout=0) is None and inbox.recover("r") == []


def test_inboxes_of_two_runs_are_apart(inbox: RedisInbox) -> None:
    inbox.push("a", done(0))
    assert inbox.drain("b", 10) == [] and inbox.recover("b") == []
    assert inbox.drain("a", 10) == [done(0)] and inbox.recover("a") == [done(0)]


def test_a_message_fluksio_did_not_send_is_dropped_as_it_is_taken_never_handed_out(inbox: RedisInbox) -> None:
    key, _taken = inbox._keys("r")
    inbox.redis.rpush(key, b"not json", b'{"kind": "done", "call_id": "r.x.1"}', b'{"kind": "shell", "cmd": "rm"}',
                      b'{"kind": "done", "call_id": "r.x.1", "node": "x", "attempt": 1, "status": "ok", "extra": 1}')
    inbox.push("r", done(1))
    assert inbox.pop("r", timeout=1) is None  # not JSON
    assert inbox.drain("r", 10) == [done(1)]  # the three malformed ones are dropped, the real one kept
    assert inbox.recover("r") == [done(1)]


def test_a_wake_up_still_on_the_inbox_is_not_pushed_again(inbox: RedisInbox) -> None:
    inbox.push("r", done(0))
    for _ in range(3):
        inbox.wake("r")  # three changes before the driver looks: one wake-up says it
    assert inbox.redis.llen("fluksio:inbox:r") == 2
    assert inbox.pop("r", timeout=1) == done(0)
    inbox.wake("r")  # the wake-up is still there, behind the completion
    assert inbox.redis.llen("fluksio:inbox:r") == 1
    assert inbox.pop("r", timeout=1) == WAKE_UP
    inbox.wake("r")  # taken: a change after it wakes the driver again
    assert inbox.drain("r", 10) == [WAKE_UP]
    inbox.wake("r")
    assert inbox.redis.llen("fluksio:inbox:r") == 1
    inbox.close("r")
    inbox.wake("r")  # the run's next driver here hears its first change
    assert inbox.redis.llen("fluksio:inbox:r") == 1


def test_a_wake_up_is_taken_for_still_waiting_only_for_a_moment(inbox: RedisInbox) -> None:
    # One taken where this process cannot see it (another process, a reply lost) must not silence the run.
    inbox.WAKE_PENDING_S = 0.0
    inbox.wake("r")
    inbox.redis.delete("fluksio:inbox:r")  # taken elsewhere
    inbox.wake("r")
    assert inbox.redis.llen("fluksio:inbox:r") == 1
