"""A signed node call is good for one run of its node: the run store, which the broker cannot write, says
whether its run is running in the drive that sent it and whether its attempt has ended."""

from __future__ import annotations

from fluksio.schemas import RunStatus
from fluksio.store.db import Database
from fluksio.store.nodes import record_nodes
from fluksio.store.rows import NodeRow
from fluksio.store.run_rows import call_refusal, cancel_requested, claim, finish, request_cancel
from tests.unit.store.runs import new_run


def test_a_call_of_a_running_run_in_its_drive_may_start_once(db: Database) -> None:
    run = new_run(db)
    assert call_refusal(db, run.id, 0, "fit", -1, 1) == f"run {run.id} is queued, not running"
    assert claim(db, run.id, None) == 0
    assert call_refusal(db, run.id, 0, "fit", -1, 1) is None
    assert call_refusal(db, run.id, 0, "fit", 3, 1) is None  # an element is a call of its own
    record_nodes(db, [NodeRow(run_id=run.id, node="fit", status="ok", attempt=1)])
    assert call_refusal(db, run.id, 0, "fit", -1, 1) == f"attempt 1 of node 'fit' of run {run.id} has ended already"
    assert call_refusal(db, run.id, 0, "fit", -1, 2) is None  # the retry is another call
    assert call_refusal(db, run.id, 1, "fit", -1, 2) == (f"the call was sent by drive 1 of run {run.id}, and the run "
                                                          "is in drive 0")
    finish(db, run.id, RunStatus.OK, None, {}, 0)
    assert call_refusal(db, run.id, 0, "fit", -1, 2) == f"run {run.id} is ok, not running"
    assert call_refusal(db, "NOSUCHRUN", 0, "fit", -1, 1) == "run NOSUCHRUN does not exist"


def test_a_cancel_is_requested_only_when_the_row_says_so(db: Database) -> None:
    run = new_run(db)
    claim(db, run.id, None)
    assert cancel_requested(db, run.id) is False
    request_cancel(db, run.id, "asked")
    assert cancel_requested(db, run.id) is True
