"""A driver whose run was resumed by another driver leaves that driver's completions (and inbox) alone."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import update

from fluksio import Flow
from fluksio.runs.inbox import DONE
from fluksio.store.models import Run
from fluksio.store.runs import get_run, node_rows
from tests.unit.driver.test_drive_rows import drive_with, hop


def test_a_completion_of_a_newer_drive_is_left_in_the_inbox_and_the_old_driver_stops(make_runtime):
    runtime = make_runtime(cpus=2, lease_interval_s=0.2)
    flow = Flow("resumed_elsewhere", outputs=["x"])
    flow.node(hop, name="x", provides="x", requires=[])
    theirs: dict[str, Any] = {}

    def dispatch(call: dict[str, Any], _queue: str, _display: str) -> None:
        # While this driver's call runs, the run is resumed (it looked dead) and the new driver's call ends
        # first: its completion lands in the inbox both drives share.
        assert call["epoch"] == 0
        with runtime.db.write() as session:
            session.execute(update(Run).where(Run.id == call["run_id"]).values(resume_count=1))
        now = datetime.now(timezone.utc).isoformat()
        theirs.update(kind=DONE, call_id=f"{call['run_id']}.r1.x.1", node="x", attempt=1, epoch=1, status="ok",
                      machine="local", gpus=[], started_at=now, finished_at=now, outputs={"x": 0}, artifacts=[],
                      logs="")
        runtime.inbox.push(call["run_id"], dict(theirs))

    run_id = drive_with(runtime, flow, dispatch)
    assert runtime.inbox.pop(run_id, timeout=0) == theirs  # still there for the driver it belongs to
    assert node_rows(runtime.db, run_id) == []  # and the old driver wrote nothing
    assert get_run(runtime.db, run_id).status == "running"  # nor ended the run that is no longer its
