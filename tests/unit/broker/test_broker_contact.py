"""The broker's patience, on a fake clock: an outage is waited through for outage_s from its first failure
(also across nested retries) and said while it lasts; a worker waits for a broker not up yet."""

from __future__ import annotations

import copy
import logging
import types

import pytest
import redis.retry
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from fluksio.broker import connection as broker
from fluksio.broker.connection import OutageRetry, wait_for_broker
from fluksio.errors import BrokerUnavailable
from fluksio.outage import LOGGER, Notices
from fluksio.settings import Settings


class Clock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(redis.retry, "sleep", fake.sleep)  # redis-py's backoff pause
    monkeypatch.setattr(broker, "time", types.SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    return fake


def refused() -> RedisConnectionError:
    return RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")


def test_an_outage_is_waited_through_for_outage_s_and_said_while_it_lasts(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    retry = OutageRetry(10.0, Notices("broker redis://h:6379/0", clock=clock.monotonic))
    failures: list[Exception] = []

    def never() -> None:
        raise refused()

    start = clock.now
    with pytest.raises(RedisConnectionError):
        retry.call_with_retry(never, failures.append)
    assert 10.0 <= clock.now - start <= 11.0  # about outage_s, from the first failure
    assert len(failures) > 1  # every failure reached redis-py's handler (it drops the connection)
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert said[0] == "broker redis://h:6379/0 unreachable (refused), retrying for 10 s more"
    assert 2 <= len(said) <= 3  # at most one notice every 5 s


def test_a_broker_back_within_the_outage_answers_and_is_said_back(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    retry = OutageRetry(10.0, Notices("broker", clock=clock.monotonic))
    answers = iter([refused(), refused(), "PONG"])

    def flaky() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert retry.call_with_retry(flaky, lambda _error: None) == "PONG"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "broker unreachable (refused), retrying for 10 s more", "broker reachable again"]


def test_a_refused_login_is_never_retried(clock: Clock) -> None:
    retry = OutageRetry(10.0, Notices("broker"))
    calls: list[int] = []

    def login() -> None:
        calls.append(1)
        raise AuthenticationError("WRONGPASS")

    with pytest.raises(AuthenticationError):
        retry.call_with_retry(login, lambda _error: None)
    assert calls == [1] and clock.slept == []


def test_nested_retries_share_one_outage(clock: Clock) -> None:
    """redis-py retries the reconnect inside the command's retry: together they wait outage_s, not more."""
    retry = OutageRetry(10.0, Notices("broker"))
    start = clock.now

    def reconnect() -> None:
        raise refused()

    def command() -> None:
        if clock.now - start < 5.0:
            raise refused()  # the command's own tries fail for 5 s (a dropped connection) ...
        retry.call_with_retry(reconnect, lambda _error: None)  # ... then its reconnect's tries

    with pytest.raises(RedisConnectionError):
        retry.call_with_retry(command, lambda _error: None)
    assert clock.now - start <= 11.0


def test_every_connection_shares_the_policy_redis_py_copies() -> None:
    retry = OutageRetry(10.0, Notices("broker"))
    assert copy.deepcopy(retry) is retry


def test_a_worker_says_at_once_that_its_broker_is_not_up_and_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([BrokerUnavailable("cannot reach the broker redis://h:1/0: connection refused")] * 3 + [None])

    def check(_settings: Settings, _timeout_s: float) -> None:
        answer = next(answers)
        if answer is not None:
            raise answer

    monkeypatch.setattr(broker, "check_broker", check)
    lines: list[str] = []
    slept: list[float] = []
    wait_for_broker(Settings(broker_url="redis://h:1/0"), say=lines.append, sleep=slept.append)
    assert lines[:3] == [f"cannot reach the broker redis://h:1/0: connection refused; trying again in {p:g} s "
                         f"(try {n})" for n, p in ((1, 1), (2, 2), (3, 4))]
    assert lines[3] == "the broker redis://h:1/0 answers now"
    assert slept == [1, 2, 4]


def test_a_worker_stops_at_once_on_what_no_wait_mends(monkeypatch: pytest.MonkeyPatch) -> None:
    def check(_settings: Settings, _timeout_s: float) -> None:
        raise BrokerUnavailable("cannot reach the broker: authentication failed", transient=False)

    monkeypatch.setattr(broker, "check_broker", check)
    slept: list[float] = []
    with pytest.raises(BrokerUnavailable, match="authentication failed"):
        wait_for_broker(Settings(broker_url="redis://h:1/0"), say=lambda _line: None, sleep=slept.append)
    assert slept == []
