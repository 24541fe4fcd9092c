"""A driver whose run was resumed by another driver leaves that driver's messages (and inbox) alone."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from sqlalchemy import update

from fluksio import Flow
from fluksio.driver.drive import drive
from fluksio.messages import Cancel, Completion, InboxMessage, NodeCall
from fluksio.runs.submit import submit_run
from fluksio.store.models import Run
from fluksio.store.run_rows import get_run, node_rows
from tests.unit.driver.drives import hop


def completion(call_id: str, node: str, epoch: int) -> Completion:
    now = datetime.now(timezone.utc).isoformat()
    return Completion(call_id=call_id, node=node, attempt=1, epoch=epoch, status="ok", machine="local",
                      started_at=now, finished_at=now, outputs={node: 0}, logs="")


def test_an_old_driver_hands_back_the_new_drivers_messages_stops_its_calls_and_writes_nothing(make_runtime):
    runtime = make_runtime(cpus=2, lease_interval_s=0.2)
    flow = Flow("resumed_elsewhere", outputs=["a", "b"])
    flow.node(hop, name="a", provides="a", requires=[])
    flow.node(hop, name="b", provides="b", requires=[])
    sent: list[str] = []
    revoked: list[str] = []
    theirs: list[InboxMessage] = [completion("RUN.r1.a.1", "a", epoch=1), Cancel()]

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        assert call.epoch == 0
        sent.append(call.call_id)
        if len(sent) < 2:
            return
        # While this driver's calls run, the run is resumed (it looked dead); the new driver's call ends and
        # the run's cancel is asked for, and then one of this driver's own calls ends: all in the inbox both
        # drives share, taken by this driver in one go.
        run_id = call.run_id
        with runtime.db.write() as session:
            session.execute(update(Run).where(Run.id == run_id).values(resume_count=1))
        theirs[0] = dataclasses.replace(theirs[0], call_id=f"{run_id}.r1.a.1")
        for message in theirs:
            runtime.inbox.push(run_id, message)
        runtime.inbox.push(run_id, completion(sent[0], "a", epoch=0))

    run, _ = submit_run(runtime.db, runtime.registry, runtime.artifacts, flow, engine="embedded", params={},
                        no_cache=True, embedded_machines=runtime.placer.machines())
    drive(runtime, run.id, dispatch, revoked.append)
    # The new driver's completion and the cancel are back, in order; this driver's own completion is dropped.
    assert [runtime.inbox.pop(run.id, timeout=0) for _ in range(3)] == [*theirs, None]
    assert sorted(revoked) == sorted(sent)  # its calls in flight are stopped: their results are no one's
    assert node_rows(runtime.db, run.id) == []  # it wrote no row
    assert get_run(runtime.db, run.id).status == "running"  # nor ended the run that is no longer its
