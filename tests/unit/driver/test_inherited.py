"""A resumed run keeps the calls that ended while it had no driver: their completions wait in its inbox, and
its new driver journals them instead of running them again."""

from __future__ import annotations

from datetime import datetime, timezone

from fluksio.driver.drive import drive
from fluksio.driver.rows import completion_rows
from fluksio.messages import Completion, NodeCall
from fluksio.runs.submit import submit_run
from fluksio.schemas import RunStatus
from fluksio.store import run_rows
from fluksio.store.nodes import record_nodes
from tests.unit.driver.drives import answer, chain


def ended_without_a_driver(run_id: str, node: str, value: int) -> Completion:
    """The completion a worker pushed for the first drive's call of ``node`` after that driver died."""
    now = datetime.now(timezone.utc).isoformat()
    return Completion(call_id=f"{run_id}.{node}.1", node=node, attempt=1, status="ok", machine="box-gone",
                      started_at=now, finished_at=now, outputs={f"m{node[1:]}": value}, logs="ran unwatched",
                      epoch=0)


def resumed_after_its_driver_died(runtime, flow) -> str:
    """A run its first driver claimed (epoch 0) and died driving, then resumed (epoch 1): queued again."""
    run, _ = submit_run(runtime.db, runtime.registry, runtime.artifacts, flow, engine="embedded", params={},
                        no_cache=True, embedded_machines=runtime.placer.machines())
    assert run_rows.claim(runtime.db, run.id, None) == 0
    assert run_rows.transition(runtime.db, run.id, RunStatus.ABANDONED, status_reason="its driver died")
    run_rows.resume(runtime.db, run.id)
    return run.id


def drive_recording(runtime, flow, run_id: str) -> list[str]:
    sent: list[NodeCall] = []

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        sent.append(call)
        answer(runtime, flow, call)

    drive(runtime, run_id, dispatch, lambda _call_id: None)
    return [call.node for call in sent]


def test_a_call_that_ended_while_the_run_had_no_driver_is_journaled_not_run_again(make_runtime):
    runtime = make_runtime(cpus=2)
    flow = chain(3)
    run_id = resumed_after_its_driver_died(runtime, flow)
    runtime.inbox.push(run_id, ended_without_a_driver(run_id, "n0", 7))
    assert drive_recording(runtime, flow, run_id) == ["n1", "n2"]  # n0 ended before: not sent again
    assert run_rows.get_run(runtime.db, run_id).status == RunStatus.OK.value
    [n0] = [row for row in run_rows.node_rows(runtime.db, run_id) if row.node == "n0"]
    assert (n0.status, n0.attempt, n0.machine, n0.outputs, n0.logs) == ("ok", 1, "box-gone", {"m0": 7},
                                                                       "ran unwatched")


def test_a_completion_its_dead_driver_had_journaled_already_is_not_written_twice(make_runtime):
    runtime = make_runtime(cpus=2)
    flow = chain(2)
    run_id = resumed_after_its_driver_died(runtime, flow)
    done = ended_without_a_driver(run_id, "n0", 3)
    row, artifacts = completion_rows(run_id, done, None)
    record_nodes(runtime.db, [row], artifacts)  # written, then the driver died before the message was dropped
    runtime.inbox.push(run_id, done)
    assert drive_recording(runtime, flow, run_id) == ["n1"]
    assert [r.node for r in run_rows.node_rows(runtime.db, run_id)] == ["n0", "n1"]
    assert run_rows.get_run(runtime.db, run_id).status == RunStatus.OK.value


def test_a_failed_call_of_the_earlier_drive_is_kept_as_its_attempt_and_runs_again(make_runtime):
    runtime = make_runtime(cpus=2)
    flow = chain(2)
    run_id = resumed_after_its_driver_died(runtime, flow)
    failed = ended_without_a_driver(run_id, "n0", 0)
    runtime.inbox.push(run_id, Completion(call_id=failed.call_id, node="n0", attempt=1, status="error",
                                          machine="box-gone", started_at=failed.started_at,
                                          finished_at=failed.finished_at, error="ValueError: no", epoch=0))
    assert drive_recording(runtime, flow, run_id) == ["n0", "n1"]
    rows = [(r.node, r.attempt, r.status) for r in run_rows.node_rows(runtime.db, run_id)]
    assert rows == [("n0", 1, "error"), ("n0", 2, "ok"), ("n1", 1, "ok")]
