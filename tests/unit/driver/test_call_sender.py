"""The driver's CallSender on Celery's in-process memory:// transport: the message Celery workers expect,
each queue declared once per channel (and again when the first try to send failed), and the senders kept
between drives."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from celery import Celery
from kombu import Connection
from kombu.messaging import Producer

from fluksio.constants import CALL_TASK
from fluksio.driver.task import CallSender, CallSenders
from fluksio.messages import NodeCall
from fluksio.schemas import Grant


@pytest.fixture
def app() -> Celery:
    app = Celery("sender-test", broker="memory://", set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"], task_create_missing_queues=True)
    return app


@pytest.fixture
def declared(monkeypatch) -> list[str]:
    names: list[str] = []
    original = Producer.maybe_declare

    def spy(self: Producer, entity: Any, retry: bool = False, **retry_policy: Any) -> bool:
        names.append(entity.name)
        return original(self, entity, retry, **retry_policy)

    monkeypatch.setattr(Producer, "maybe_declare", spy)
    return names


def call(n: int) -> NodeCall:
    return NodeCall(call_id=f"r.n{n}.1", run_id="r", flow="flow", node=f"n{n}", attempt=1, inputs={},
                    grant=Grant(id=f"r.n{n}.1", machine="m", cpus=1))


def test_calls_go_out_as_celery_task_messages_and_each_queue_is_declared_once(app, declared) -> None:
    machine = f"sender-{uuid.uuid4().hex[:8]}"  # memory:// queues live as long as the test process
    sender = CallSender(app, drive_id="drive-1")
    for n in range(3):
        sender.send(call(n), f"default@{machine}", f"flow.n{n}")
    sender.send(call(3), f"gpu@{machine}", "flow.n3")
    assert declared == [f"default@{machine}", f"gpu@{machine}"]
    with Connection("memory://") as connection:
        queue = connection.SimpleQueue(f"default@{machine}")
        messages = [queue.get(timeout=1) for _ in range(3)]
        queue.close()
    first = messages[0]
    assert first.headers["task"] == CALL_TASK and first.headers["id"] == "r.n0.1"
    assert first.headers["root_id"] == first.headers["parent_id"] == "drive-1"
    assert first.headers["shadow"] == "flow.n0" and first.headers["origin"].startswith("gen")
    assert first.content_type == "application/json"
    args, kwargs, _embed = json.loads(first.body)
    assert args == [] and kwargs == {"call": call(0).to_wire()}
    assert [m.headers["id"] for m in messages] == ["r.n0.1", "r.n1.1", "r.n2.1"]
    sender.close()


def test_a_queue_whose_first_send_failed_is_declared_again_with_the_next(app, declared, monkeypatch) -> None:
    sender = CallSender(app)
    queue = f"default@sender-{uuid.uuid4().hex[:8]}"
    real = app.amqp.send_task_message
    failures = iter([ConnectionError("broker went away"), ConnectionError("still away")])  # both tries

    def flaky(*args: Any, **kwargs: Any) -> Any:
        for failure in failures:
            raise failure
        return real(*args, **kwargs)

    monkeypatch.setattr(app.amqp, "send_task_message", flaky)
    with pytest.raises(ConnectionError):
        sender.send(call(0), queue, "flow.n0")
    sender.send(call(1), queue, "flow.n1")
    sender.send(call(2), queue, "flow.n2")
    assert declared == [queue]  # declared with the first message that went out, then not again
    sender.close()


def test_a_send_that_fails_halfway_through_a_reconnection_goes_out_on_a_new_connection(app, monkeypatch) -> None:
    # kombu's Redis transport, caught mid-reconnection while Redis restarts (the fault soak saw it).
    sender = CallSender(app)
    first_connection = sender._connection
    queue = f"default@sender-{uuid.uuid4().hex[:8]}"
    real = app.amqp.send_task_message
    failures = iter([AttributeError("'NoneType' object has no attribute 'client'")])

    def flaky(*args: Any, **kwargs: Any) -> Any:
        for failure in failures:
            raise failure
        return real(*args, **kwargs)

    monkeypatch.setattr(app.amqp, "send_task_message", flaky)
    sender.send(call(0), queue, "flow.n0")
    assert sender._connection is not first_connection
    with Connection("memory://") as connection:
        simple = connection.SimpleQueue(queue)
        assert simple.get(timeout=1).headers["id"] == "r.n0.1"
        simple.close()
    sender.close()


def test_a_sender_is_kept_for_the_next_drive_and_sends_with_that_drives_id(app) -> None:
    senders = CallSenders(app, keep=2)
    queue = f"default@sender-{uuid.uuid4().hex[:8]}"
    with senders.lend("drive-1") as first:
        first.send(call(0), queue, "flow.n0")
    with senders.lend("drive-2") as second:
        second.send(call(1), queue, "flow.n1")
    assert second is first  # the same connection and channel: the queue is not declared again
    with Connection("memory://") as connection:
        simple = connection.SimpleQueue(queue)
        parents = [simple.get(timeout=1).headers["parent_id"] for _ in range(2)]
        simple.close()
    assert parents == ["drive-1", "drive-2"]
    senders.close()


def test_drives_at_once_each_get_their_own_sender_and_at_most_keep_stay_open(app, monkeypatch) -> None:
    closed: list[CallSender] = []
    monkeypatch.setattr(CallSender, "close", lambda self: closed.append(self))
    senders = CallSenders(app, keep=1)
    with senders.lend("a") as a, senders.lend("b") as b:
        assert a is not b
    assert closed == [a]  # b went back first and is kept; a found no room
    with senders.lend("c") as c:
        assert c is b
    senders.close()
    assert closed == [a, b]


def test_a_sender_whose_drive_raised_is_closed_not_kept(app, monkeypatch) -> None:
    closed: list[CallSender] = []
    monkeypatch.setattr(CallSender, "close", lambda self: closed.append(self))
    senders = CallSenders(app, keep=4)
    with pytest.raises(ConnectionError), senders.lend("a") as broken:
        raise ConnectionError("broker went away")
    assert closed == [broken]
    with senders.lend("b") as fresh:
        assert fresh is not broken


def test_a_sender_given_back_after_close_is_closed(app, monkeypatch) -> None:
    closed: list[CallSender] = []
    monkeypatch.setattr(CallSender, "close", lambda self: closed.append(self))
    senders = CallSenders(app, keep=4)
    with senders.lend("a") as lent:
        senders.close()  # the worker stops while a drive still sends
    assert closed == [lent]
