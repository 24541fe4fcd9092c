"""Inboxes: a driver takes one message, waiting, then every other one already there, without waiting."""

from __future__ import annotations

import time

import pytest
import redis

from fluksio.broker.inbox.memory import MemoryInbox
from fluksio.broker.inbox.redis import RedisInbox
from fluksio.errors import ConfigError
from fluksio.messages import Completion


def done(i: int) -> Completion:
    return Completion(call_id=f"r.n.{i}", node="n", attempt=i, status="ok")


def test_drain_takes_what_waits_in_order_up_to_the_limit_and_does_not_wait():
    inbox = MemoryInbox()
    for i in range(5):
        inbox.push("r", done(i))
    assert inbox.pop("r", timeout=1) == done(0)
    assert inbox.drain("r", 3) == [done(1), done(2), done(3)]
    started = time.monotonic()
    assert inbox.drain("r", 10) == [done(4)]
    assert inbox.drain("r", 10) == []
    assert time.monotonic() - started < 0.5


def test_drain_of_another_run_takes_nothing_of_this_one():
    inbox = MemoryInbox()
    inbox.push("a", done(0))
    assert inbox.drain("b", 10) == []
    assert len(inbox.drain("a", 10)) == 1


class RedisBefore62:
    """What redis-py raises against a server older than 6.2, which has no BLMOVE."""

    def register_script(self, script):
        return None

    def blmove(self, *args):
        raise redis.ResponseError("unknown command 'blmove', with args beginning with: ")

    def info(self, section):
        return {"redis_version": "6.0.16"}


def test_a_redis_too_old_for_blmove_is_named_with_the_version_needed():
    with pytest.raises(ConfigError, match=r"version 6\.0\.16, and fluksio needs 6\.2 or newer"):
        RedisInbox(RedisBefore62()).pop("r", 1)
