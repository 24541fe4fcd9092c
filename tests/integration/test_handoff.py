"""A worker's start and end of a call on Redis: one round trip each, in the order the driver relies on; and a
driver's batch of events, one round trip too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fluksio.broker.events.redis import EventStream
from fluksio.constants import EVENTS_CHANNEL
from fluksio.execution import handoff
from fluksio.messages import Completion
from fluksio.placement.backend import Tell
from fluksio.placement.placer import Request
from fluksio.runtime import Runtime
from fluksio.schemas import Grant, Inventory, Resources
from fluksio.settings import Settings
from tests.integration.support.servers import RedisServer

pytestmark = pytest.mark.integration

STARTED = {"run_id": "r", "node": "n", "machine": "box", "gpus": [], "attempt": 1}


@pytest.fixture
def runtime(redis_server: RedisServer, tmp_path: Path) -> Iterator[Runtime]:
    redis.Redis.from_url(redis_server.url).flushall()
    made = Runtime.distributed(Settings(broker_url=redis_server.url, database_url=f"sqlite:///{tmp_path / 'db'}",
                                        artifacts_dir=tmp_path / "artifacts"), machine="box")
    made.placer.attach(Inventory(name="box", cpus=1, ram_mb=1000))
    # Redis learns each script the first time it is sent (NOSCRIPT, then SCRIPT LOAD): not what is counted.
    warm = made.placer.try_claim(Request("warm.n.1", Resources(cpus=1)))
    assert isinstance(warm, Grant)
    handoff.start(made, warm, "warm", None)
    handoff.give_back(made, warm, "warm", completion())
    yield made
    made.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the commands every Redis client sends from now on: one send is one round trip."""
    names: list[str] = []
    original = redis.Connection.send_packed_command

    def counting(self, command, check_health=True):  # type: ignore[no-untyped-def]
        parts = command if isinstance(command, list) else [command]
        names.append(bytes(parts[0]).split(b"\r\n")[2].decode())
        original(self, command, check_health)

    monkeypatch.setattr(redis.Connection, "send_packed_command", counting)
    return names


def completion(status: str = "ok") -> Completion:
    return Completion(call_id="r.n.1", node="n", attempt=1, status=status, machine="box")  # type: ignore[arg-type]


def free_cpus(runtime: Runtime) -> int:
    return runtime.placer.snapshot()["machines"][0]["free"]["cpus"]


def test_a_start_says_node_started_in_its_own_round_trip_and_only_for_the_copy_that_may_run(
        runtime: Runtime, sent: list[str]) -> None:
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    assert isinstance(grant, Grant)
    assert runtime.redis is not None
    with EventStream(runtime.redis) as events:
        runtime.redis.ping()  # the subscription took the client's connection: make the next one first
        sent.clear()
        assert handoff.start(runtime, grant, "first", STARTED) is True
        assert sent == ["EVALSHA"]
        event = events.next(5)
        assert event is not None and event["event"] == "node_started"
        assert {key: event[key] for key in STARTED} == STARTED
        # The same delivery asking again (its answer lost) may run it, but is not announced twice; another
        # copy may not run it at all.
        assert handoff.start(runtime, grant, "first", STARTED) is True
        assert handoff.start(runtime, grant, "second", STARTED) is False
        runtime.redis.publish(EVENTS_CHANNEL, '{"event": "marker"}')
        assert events.next(5) == {"event": "marker"}  # nothing came before it


def test_a_call_refused_here_starts_without_an_event(runtime: Runtime) -> None:
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    assert isinstance(grant, Grant) and runtime.redis is not None
    with EventStream(runtime.redis) as events:
        assert handoff.start(runtime, grant, "first", None) is True
        runtime.redis.publish(EVENTS_CHANNEL, '{"event": "marker"}')
        assert events.next(5) == {"event": "marker"}


def test_a_give_back_and_its_completion_are_one_round_trip_and_the_resources_come_back_first(
        runtime: Runtime, sent: list[str]) -> None:
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    assert isinstance(grant, Grant) and free_cpus(runtime) == 0
    sent.clear()
    handoff.give_back(runtime, grant, "r", completion())
    assert sent == ["EVALSHA"]
    assert free_cpus(runtime) == 1
    assert runtime.inbox.pop("r", timeout=5) == completion()
    # A grant given back already (a second give-back) gives nothing, and its completion still reaches the driver.
    handoff.give_back(runtime, grant, "r", completion("error"))
    assert free_cpus(runtime) == 1
    assert runtime.inbox.pop("r", timeout=5) == completion("error")


def test_a_completion_reaches_the_driver_when_the_give_back_in_one_step_fails(
        runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    assert isinstance(grant, Grant)
    books = runtime.placer.books
    give = books.give

    def give_failing_with_a_tell(grant: Grant, tell: Tell | None = None) -> bool:
        if tell is not None:
            raise redis.ResponseError("a script that fails")
        return give(grant)

    monkeypatch.setattr(books, "give", give_failing_with_a_tell)
    handoff.give_back(runtime, grant, "r", completion())  # each alone, then
    assert free_cpus(runtime) == 1
    assert runtime.inbox.pop("r", timeout=5) == completion()
    assert runtime.inbox.drain("r", 10) == []  # once


def test_a_completion_reaches_the_driver_even_when_the_give_back_fails_alone_too(
        runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    assert isinstance(grant, Grant)

    def broken(*_args: object) -> bool:
        raise redis.ResponseError("a script that fails")

    monkeypatch.setattr(runtime.placer.books, "give", broken)
    with pytest.raises(redis.ResponseError):
        handoff.give_back(runtime, grant, "r", completion())
    assert runtime.inbox.pop("r", timeout=5) == completion()


def test_a_push_without_a_ttl_keeps_the_list_and_its_expiry(runtime: Runtime) -> None:
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    assert isinstance(grant, Grant) and runtime.redis is not None
    runtime.redis.rpush("some-list", "first")
    runtime.placer.release(grant, Tell("some-list", "second"))
    assert runtime.redis.lrange("some-list", 0, -1) == [b"first", b"second"]
    assert runtime.redis.ttl("some-list") == -1  # no expiry set, none taken away


def test_a_batch_of_node_finished_events_goes_out_in_one_round_trip_in_order(
        runtime: Runtime, sent: list[str]) -> None:
    assert runtime.redis is not None
    with EventStream(runtime.redis) as events:
        runtime.redis.ping()  # the subscription took the client's connection: make the next one first
        sent.clear()
        runtime.events.publish_all("node_finished", [{"run_id": "r", "node": f"n{i}"} for i in range(5)])
        assert sent == ["PUBLISH"]  # the pipeline's five go in one send
        heard = [events.next(5) for _ in range(5)]
    said = [(event["event"], event["node"]) for event in heard if event]
    assert said == [("node_finished", f"n{i}") for i in range(5)]
