"""End to end on the embedded default: real Celery workers on the memory transport, SQLite, local artifacts."""

from __future__ import annotations

import threading
import time

import pytest

from fluksio import (
    Artifact,
    Client,
    Flow,
    Resources,
    RunRejected,
    RunStatus,
    Settings,
    connect,
)

pytestmark = pytest.mark.integration


def diamond() -> Flow:
    flow = Flow("diamond", inputs={"n": int, "seed": int}, outputs=["total", "report"])

    @flow.node(provides="xs")
    def make(n, seed):
        print(f"making {n} numbers")
        return [seed + i for i in range(n)]

    @flow.node(provides="sum_", streams=["progress"])
    def add(xs, emit):
        for i, _ in enumerate(xs):
            emit("progress", i)
        return sum(xs)

    @flow.node(provides="count")
    def count(xs):
        return len(xs)

    @flow.node(provides=["total", "report"])
    def join(sum_, count):
        return {"total": sum_ + count, "report": Artifact.from_bytes(f"{sum_}/{count}".encode(), name="r.txt")}

    return flow


def test_a_multi_node_flow_runs_and_its_rows_are_right(client: Client) -> None:
    run = client.submit(diamond(), {"n": 4}, seed=10)
    record = run.wait(timeout=30)

    assert record.status is RunStatus.OK, record.status_reason
    assert record.params == {"n": 4, "seed": 10}
    assert record.result["total"] == (10 + 11 + 12 + 13) + 4
    assert record.started_at <= record.finished_at and record.duration_ms is not None
    assert record.code_digest and record.code_digest.startswith("sha256:")
    assert sorted(n.node for n in record.nodes) == ["add", "count", "join", "make"]
    for node in record.nodes:
        assert node.status.value == "ok" and node.machine == "local" and node.attempt == 1
        assert node.started_at <= node.finished_at
    make = next(n for n in record.nodes if n.node == "make")
    assert "making 4 numbers" in make.logs
    assert client.metrics(run.id) == {"progress": [(i, float(i)) for i in range(4)]}

    report = record.result["report"]["$artifact"]
    assert report["name"] == "r.txt" and report["size"] == len(b"46/4")
    rows = client.artifacts(run.id)
    assert [(a.node, a.message, a.digest) for a in rows] == [("join", "report", report["digest"])]
    with client.open_artifact(report["digest"]) as stored:
        assert stored.read() == b"46/4"


def test_independent_branches_overlap_in_time(client: Client) -> None:
    flow = Flow("branches", outputs=["a", "b"])

    @flow.node(provides="a")
    def slow_a():
        time.sleep(0.5)
        return 1

    @flow.node(provides="b")
    def slow_b():
        time.sleep(0.5)
        return 2

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.OK
    a, b = sorted(record.nodes, key=lambda n: n.node)
    # Overlap: each started before the other finished.
    assert a.started_at < b.finished_at and b.started_at < a.finished_at


def test_a_failing_node_drains_the_run(client: Client) -> None:
    flow = Flow("drain", outputs=["c", "d"])

    @flow.node(provides="a")
    def first():
        return 1

    @flow.node(provides="b")
    def broken(a):
        raise ValueError("the data is bad")

    @flow.node(provides="c")
    def downstream(b):
        return b

    @flow.node(provides="d")
    def independent(a):
        time.sleep(0.2)
        return a + 1

    record = client.submit(flow).wait(timeout=30)
    statuses = {n.node: n.status.value for n in record.nodes}
    assert record.status is RunStatus.ERROR
    assert statuses == {"first": "ok", "broken": "error", "downstream": "skipped", "independent": "ok"}
    assert "broken" in record.status_reason and "the data is bad" in record.status_reason
    assert "downstream" in record.status_reason
    broken_row = next(n for n in record.nodes if n.node == "broken")
    assert "ValueError: the data is bad" in broken_row.error
    assert "Traceback" in broken_row.logs
    assert record.result == {"d": 2}


@pytest.mark.parametrize(
    ("returns", "expected"),
    [
        ("object", "message 'x' of node 'bad' is a builtins.object"),
        ("nan", "message 'x' of node 'bad' is nan"),
        ("complex", "message 'x' of node 'bad' is a builtins.complex"),  # a set travels now, as a sorted list
    ],
)
def test_a_node_returning_a_non_json_value_fails_with_the_message_named(client: Client, returns, expected) -> None:
    flow = Flow(f"nonjson_{returns}")
    values = {"object": object(), "nan": float("nan"), "complex": complex(1, 2)}

    @flow.node(provides="x")
    def bad():
        return values[returns]

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.ERROR
    assert expected in record.nodes[0].error


def test_a_node_returning_the_wrong_shape_fails(client: Client) -> None:
    flow = Flow("shape")

    @flow.node(provides=["a", "b"])
    def two():
        return {"a": 1, "c": 3}

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.ERROR
    assert "missing 'b'" in record.nodes[0].error and "undeclared 'c'" in record.nodes[0].error


def test_retries_run_the_node_again_and_record_each_attempt(client: Client) -> None:
    attempts = []
    flow = Flow("flaky", outputs=["x"])

    @flow.node(provides="x", retries=2)
    def flaky():
        attempts.append(1)
        if len(attempts) < 2:
            raise RuntimeError("transient")
        return len(attempts)

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.OK
    assert record.result == {"x": 2}
    assert [(n.attempt, n.status.value) for n in record.nodes] == [(1, "error"), (2, "ok")]


def test_timeout_fails_a_node_that_runs_too_long(client: Client) -> None:
    flow = Flow("slow")

    @flow.node(provides="x", timeout_s=0.3)
    def sleepy():
        time.sleep(2)
        return 1

    started = time.monotonic()
    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.ERROR
    assert "timed out after 0.3 s" in record.nodes[0].error
    assert time.monotonic() - started < 1.9  # the run did not wait for the sleeping function


def test_each_element_of_a_mapped_node_has_its_own_timeout(client: Client) -> None:
    flow = Flow("slow_element", inputs={"items": list[int]}, outputs=["xs"])

    @flow.node(provides="xs", map={"item": "items"}, timeout_s=0.3)
    def sleepy(item: int) -> int:
        if item == 1:
            time.sleep(2)
        return item

    record = client.submit(flow, {"items": [0, 1, 2]}).wait(timeout=30)
    assert record.status is RunStatus.ERROR
    rows = {n.index: n for n in record.nodes}
    assert rows[0].status.value == rows[2].status.value == "ok"
    assert rows[1].status.value == "error" and "timed out after 0.3 s" in (rows[1].error or "")


def test_the_worker_survives_a_failing_node(client: Client) -> None:
    flow = Flow("boom")

    @flow.node(provides="x")
    def boom():
        raise SystemExit(3)

    assert client.submit(flow).wait(timeout=30).status is RunStatus.ERROR
    assert client.submit(diamond(), {"n": 2}, seed=0).wait(timeout=30).status is RunStatus.OK


def test_cancel_of_a_running_run_stops_scheduling(client: Client) -> None:
    started = threading.Event()
    flow = Flow("cancel_me", outputs=["y"])

    @flow.node(provides="x")
    def first():
        started.set()
        time.sleep(1.0)
        return 1

    @flow.node(provides="y")
    def second(x):
        return x

    run = client.submit(flow)
    assert started.wait(10)
    assert client.cancel(run.id) is RunStatus.RUNNING  # told to stop; its driver ends it
    record = run.wait(timeout=10)
    assert record.status is RunStatus.CANCELLED
    assert record.status_reason == "cancelled by request"
    statuses = {n.node: n.status.value for n in record.nodes}
    assert statuses == {"first": "cancelled", "second": "cancelled"}
    time.sleep(1.2)  # the first call finishes in its thread; nothing more is scheduled
    assert {n.node: n.status.value for n in client.get(run.id).nodes} == statuses
    assert client.placement()["machines"][0]["free"]["cpus"] == 2


def test_cancel_of_a_queued_run_means_it_never_starts(settings: Settings) -> None:
    gate = threading.Event()
    flow = Flow("queued_cancel", outputs=["x"])

    @flow.node(provides="x")
    def wait_for_gate():
        gate.wait(10)
        return 1

    # One driver slot: the second run stays queued while the first one is driven.
    with connect(settings.model_copy(update={"driver_concurrency": 1})) as client:
        first = client.submit(flow)
        second = client.submit(flow)
        time.sleep(0.3)
        assert second.status is RunStatus.QUEUED
        assert client.cancel(second.id) is RunStatus.CANCELLED
        gate.set()
        assert first.wait(timeout=10).status is RunStatus.OK
        time.sleep(0.3)  # the second run's driver message has now been taken and dropped
        record = client.get(second.id)
        assert record.status is RunStatus.CANCELLED
        assert record.started_at is None and record.nodes == []


def test_submit_rejects_bad_input_and_journals_nothing(client: Client) -> None:
    flow = diamond()
    with pytest.raises(RunRejected, match=r"'lr' is not an input of flow 'diamond' \(it declares: n, seed\)"):
        client.submit(flow, {"lr": 0.1, "n": 1}, seed=1)
    with pytest.raises(RunRejected, match=r"input 'n' of flow 'diamond' must be int, got 'three'"):
        client.submit(flow, {"n": "three"}, seed=1)
    with pytest.raises(RunRejected, match=r"needs input 'seed'"):
        client.submit(flow, {"n": 1})
    assert client.runs() == []


def test_a_required_label_the_embedded_machine_lacks_is_rejected_with_a_fix(client: Client) -> None:
    flow = Flow("needs_gpu")

    @flow.node(provides="x", device="gpu")
    def train():
        return 1

    with pytest.raises(RunRejected, match="requires a worker labelled 'gpu'.*device_policy='prefer'"):
        client.submit(flow)

    preferring = Flow("prefers_gpu", outputs=["x"])

    @preferring.node(provides="x", device="gpu", device_policy="prefer", resources=Resources(cpus=1))
    def train_anywhere():
        return 1

    record = client.submit(preferring).wait(timeout=30)
    assert record.status is RunStatus.OK and record.nodes[0].machine == "local"


def test_an_oversized_request_is_clamped_and_runs(client: Client) -> None:
    flow = Flow("huge", outputs=["x"])

    @flow.node(provides="x", resources=Resources(cpus=64, ram_mb=10))
    def big():
        return 1

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.OK
    assert "clamped: requested 64 cpu(s)" in record.nodes[0].logs


def test_an_idempotency_key_returns_the_first_run(client: Client) -> None:
    flow = diamond()
    first = client.submit(flow, {"n": 1}, seed=1, idempotency_key="job-42")
    again = client.submit(flow, {"n": 2}, seed=2, idempotency_key="job-42")
    assert again.id == first.id and not again.created
    first.wait(timeout=30)
    assert len(client.runs(flow="diamond")) == 1


def test_a_run_driven_here_tells_its_waiters_once_its_end_is_written(client: Client) -> None:
    # client.wait() and `fluksio run` sleep between two reads of the row; an embedded run ends the sleep.
    gate = threading.Event()
    flow = Flow("gated", outputs=["x"])

    @flow.node(provides="x")
    def held() -> int:
        gate.wait(30)
        return 1

    handle = client.submit(flow)
    with client.watch_end(handle.id) as ended:
        gate.set()
        assert ended.wait(30), "the run's end was not told to this process"
        assert handle.status is RunStatus.OK  # told after the row was written, never before
    assert client._runtime.ends._waiting == {}


def test_a_call_acknowledged_while_its_worker_sleeps_lets_the_next_call_in(settings: Settings, monkeypatch) -> None:
    # One slot, so one call's message in the prefetch window at a time: the next call is taken only once the
    # one before is acknowledged, which Celery's loop does between two drains. The next call's message can
    # come before the acknowledgement is asked for; the ask must wake the drain. Every drain here is an idle
    # one, as long as Celery lets it be (2 s): each wake-up missed holds the chain that long.
    import fluksio.execution.task as call_task
    import fluksio.worker.embedded as embedded

    monkeypatch.setattr(embedded, "IDLE_AFTER_S", 0.0)
    monkeypatch.setattr(embedded, "IDLE_DRAIN_S", 60.0)
    execute_call = call_task.execute_call

    def slow_to_return(*args, **kwargs) -> None:
        execute_call(*args, **kwargs)  # its completion is pushed: the driver sends the next call …
        time.sleep(0.05)  # … before this call's task returns and asks for its acknowledgement

    monkeypatch.setattr(call_task, "execute_call", slow_to_return)
    def step(previous: int = 0) -> int:
        return previous + 1

    flow = Flow("handoffs", outputs=["n11"])
    for i in range(12):
        flow.node(step, name=f"n{i}", provides=f"n{i}", requires=[f"n{i - 1}"] if i else [])
    with connect(settings.model_copy(update={"cpus": 1})) as one_slot:
        record = one_slot.submit(flow).wait(timeout=20)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"n11": 12}
