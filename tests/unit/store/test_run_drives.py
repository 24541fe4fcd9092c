"""A resumed run keeps its earlier drives (which machine drove it, until when, how it ended) and its first
start: its duration counts from there (issue #38)."""

from __future__ import annotations

from datetime import timedelta

from fluksio.schemas import RunStatus
from fluksio.store import run_rows
from fluksio.store.db import Database
from tests.unit.store.runs import new_run


def test_a_run_handed_over_and_claimed_again_keeps_its_first_start_and_its_earlier_drive(db: Database) -> None:
    run = new_run(db)
    assert run_rows.claim(db, run.id, "sha256:c", driver="box-a") == 0
    first = run_rows.get_run(db, run.id)
    assert run_rows.requeue_handed_over(db, run.id, 0, "its driver stopped")
    assert run_rows.claim(db, run.id, "sha256:c", driver="box-b") == 1
    record = run_rows.load_record(db, run.id)
    assert record.started_at == first.started_at and record.driver == "box-b"
    [drive] = record.drives
    assert (drive.epoch, drive.driver, drive.ended_as, drive.reason) == (0, "box-a", "abandoned",
                                                                          "its driver stopped")
    assert drive.started_at == first.drive_started_at and drive.last_lease_at == first.lease_at
    assert drive.resumed_at >= drive.last_lease_at
    run_rows.finish(db, run.id, RunStatus.OK, None, {}, 1)
    ended = run_rows.load_record(db, run.id)
    assert ended.duration_ms is not None and ended.finished_at is not None
    assert timedelta(milliseconds=ended.duration_ms) >= ended.finished_at - first.drive_started_at - timedelta(
        milliseconds=1)  # from the first start, not from the second drive's


def test_a_run_resumed_by_hand_keeps_the_drive_that_failed_with_its_reason(db: Database) -> None:
    run = new_run(db)
    run_rows.claim(db, run.id, None, driver="box-a")
    run_rows.finish(db, run.id, RunStatus.ERROR, "node 'fit' failed: boom", None, 0)
    assert run_rows.resume(db, run.id) is RunStatus.ERROR
    run_rows.claim(db, run.id, None, driver="box-a")
    run_rows.requeue_handed_over(db, run.id, 1, "its driver is shutting down")
    run_rows.claim(db, run.id, None, driver="box-c")
    drives = run_rows.load_record(db, run.id).drives
    assert [(d.epoch, d.driver, d.ended_as, d.reason) for d in drives] == [
        (0, "box-a", "error", "node 'fit' failed: boom"), (1, "box-a", "abandoned", "its driver is shutting down")]


def test_a_run_never_resumed_reads_no_drives_and_a_queued_one_resumed_keeps_none(db: Database) -> None:
    run = new_run(db)
    run_rows.request_cancel(db, run.id, "not wanted")  # cancelled while queued: never driven
    run_rows.resume(db, run.id)
    assert run_rows.load_record(db, run.id).drives == []
    other = new_run(db)
    run_rows.claim(db, other.id, None, driver="box-a")
    assert run_rows.load_record(db, other.id).drives == []
