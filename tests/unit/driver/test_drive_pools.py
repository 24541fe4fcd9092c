"""A driver's calls in pools and priorities: waiting for a pool is said like waiting for a machine, events carry
the run's priority and the node's pool, and a pool this driver does not know fails the node saying so."""

from __future__ import annotations

import threading
from typing import Any

from fluksio import Flow
from fluksio.driver.drive import drive
from fluksio.messages import NodeCall
from fluksio.runs.submit import submit_run
from fluksio.store.run_rows import get_run, load_record
from tests.unit.driver.drives import answer_call, drive_with


def two_licensed() -> Flow:
    flow = Flow("licensed", outputs=["x", "y"])
    flow.node(lambda: 1, name="a", provides="x", requires=[], pool="licenses")
    flow.node(lambda: 1, name="b", provides="y", requires=[], pool="licenses")
    return flow


def test_a_call_waiting_for_a_pool_says_so_and_its_event_carries_priority_and_pool(make_runtime):
    runtime = make_runtime(cpus=4, pools={"licenses": 1})
    flow = two_licensed()
    queued: list[dict[str, Any]] = []
    held: list[NodeCall] = []

    def seen(event: dict[str, Any]) -> None:
        if event["event"] == "node_queued":
            queued.append(event)
            # The other call waits for the slot: now end the one holding it (on another thread, as a worker).
            threading.Thread(target=answer_call, args=(runtime, held[0])).start()

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        if held:
            answer_call(runtime, call)
        else:
            held.append(call)

    unsubscribe = runtime.events.subscribe(seen)
    try:
        run, _ = submit_run(runtime.db, runtime.registry, runtime.artifacts, flow, engine="embedded", params={},
                            priority=7, embedded_machines=runtime.placer.machines(), pools={"licenses": 1})
        drive(runtime, run.id, dispatch, lambda _call_id: None)
    finally:
        unsubscribe()
    assert get_run(runtime.db, run.id).status == "ok"
    [event] = queued
    assert (event["priority"], event["pool"]) == (7, "licenses")
    assert event["reason"] == "waiting for pool 'licenses' (1/1 in use)"
    assert all(n.granted is not None and n.granted.cpus == 1 for n in load_record(runtime.db, run.id).nodes)


def test_a_pool_the_driver_does_not_know_fails_the_node_naming_the_pools_there_are(make_runtime):
    runtime = make_runtime(cpus=2, pools={"db": 1})
    run_id = drive_with(runtime, two_licensed(), lambda call, _queue, _display: answer_call(runtime, call))
    record = load_record(runtime.db, run_id)
    assert record.status.value == "error"
    assert "pool 'licenses' is not one of this installation's pools (db)" in (record.status_reason or "")
    assert {n.status.value for n in record.nodes} == {"error"}
