"""Leases and resume on the embedded default: a run whose driver died is abandoned (or resumed), and a
failed, cancelled or abandoned run can be re-driven under its id, keeping the nodes that succeeded."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import update

from fluksio import Client, Flow, RunStatus, Settings, connect
from fluksio.clock import utcnow
from fluksio.store.models import Run
from fluksio.store.run_rows import claim

pytestmark = pytest.mark.integration


def two_step(executed: list[str], broken: dict[str, bool]) -> Flow:
    flow = Flow("two_step", inputs={"x": int}, outputs=["z"])

    @flow.node(provides="y", cache=False)
    def first(x):
        executed.append("first")
        return x + 1

    @flow.node(provides="z", cache=False)
    def second(y):
        executed.append("second")
        if broken["second"]:
            raise RuntimeError("not yet")
        return y * 10

    return flow


def test_resume_of_a_failed_run_keeps_what_succeeded_and_reruns_the_rest(client: Client) -> None:
    executed: list[str] = []
    broken = {"second": True}
    flow = two_step(executed, broken)
    failed = client.submit(flow, {"x": 1}).wait(timeout=30)
    assert failed.status is RunStatus.ERROR
    broken["second"] = False
    record = client.resume(failed.id).wait(timeout=30)
    assert record.id == failed.id and record.status is RunStatus.OK and record.result == {"z": 20}
    assert (record.resumed_from, record.resume_count) == (RunStatus.ERROR, 1)
    assert executed == ["first", "second", "second"]  # first was restored from its row
    assert [(n.node, n.attempt, n.status.value) for n in record.nodes] == [
        ("first", 1, "ok"), ("second", 1, "error"), ("second", 2, "ok")]


def test_resume_of_a_cancelled_run(client: Client) -> None:
    gate = threading.Event()
    flow = Flow("gated", outputs=["v"])

    @flow.node(provides="v")
    def wait_for_gate():
        if not gate.is_set():
            time.sleep(60)
        return 1

    run = client.submit(flow)
    deadline = time.monotonic() + 10
    while run.status is not RunStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    client.cancel(run.id)
    assert run.wait(timeout=10).status is RunStatus.CANCELLED
    gate.set()
    record = client.resume(run.id).wait(timeout=30)
    assert record.status is RunStatus.OK and record.resumed_from is RunStatus.CANCELLED


def orphan(client: Client, flow: Flow) -> str:
    """A run left `running` by a driver that died (its lease two minutes old)."""
    run = client._runtime.db
    from fluksio.runs.submit import submit_run

    row, _ = submit_run(run, client._runtime.registry, client._runtime.artifacts, flow, engine="embedded",
                        params={"x": 2})
    claim(run, row.id, None)
    with run.write() as session:
        session.execute(update(Run).where(Run.id == row.id).values(lease_at=utcnow() - timedelta(minutes=2)))
    return row.id


def test_a_run_whose_driver_died_is_abandoned_within_the_stale_limit(settings: Settings) -> None:
    with connect(settings.model_copy(update={"stale_after_s": 1.0})) as client:
        run_id = orphan(client, two_step([], {"second": False}))
        record = client.handle(run_id).wait(timeout=10)
        assert record.status is RunStatus.ABANDONED
        assert "stopped refreshing the lease" in record.status_reason


def test_with_auto_resume_a_run_whose_driver_died_is_resumed_and_finishes(settings: Settings) -> None:
    with connect(settings.model_copy(update={"stale_after_s": 1.0, "auto_resume": True})) as client:
        executed: list[str] = []
        run_id = orphan(client, two_step(executed, {"second": False}))
        # wait() returns at the first status that ends a run: it must never see the run abandoned in between.
        record = client.handle(run_id).wait(timeout=15)
        assert record.status is RunStatus.OK and record.result == {"z": 30}
        assert record.resumed_from is RunStatus.ABANDONED and executed == ["first", "second"]
