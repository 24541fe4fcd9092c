"""Parents and their child runs in the store: parking, waking (one waker wins), claiming, and lost wake-ups."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from fluksio.clock import utcnow
from fluksio.schemas import RunStatus
from fluksio.store import family
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.models import Run
from fluksio.store.run_rows import claim, finish, get_run, insert_run, request_cancel


def running_parent(db: Database) -> Run:
    run = Run(id=new_run_id(), flow="search", params={}, params_digest="sha256:p", status=RunStatus.QUEUED.value,
              created_at=utcnow(), engine="embedded")
    insert_run(db, run)
    assert claim(db, run.id, None) == 0
    return get_run(db, run.id)


def child_of(db: Database, parent: Run, unit: str) -> Run:
    run = Run(id=new_run_id(), flow="train", params={}, params_digest="sha256:p", status=RunStatus.QUEUED.value,
              created_at=utcnow(), engine="embedded", parent_id=parent.id, parent_node=unit,
              idempotency_key=family.child_key(parent.id, unit))
    insert_run(db, run)
    assert claim(db, run.id, None) == 0
    return get_run(db, run.id)


def test_a_parked_run_is_woken_once_and_claimed_by_one_driver(db: Database) -> None:
    parent = running_parent(db)
    assert family.park(db, parent.id, epoch=0)
    assert not family.park(db, parent.id, epoch=0)  # parked already
    assert [family.wake(db, parent.id) for _ in range(3)] == [True, False, False]  # one waker hands it over
    assert family.claim_woken(db, parent.id) == 0
    assert family.claim_woken(db, parent.id) is None  # the second drive message finds it taken
    assert get_run(db, parent.id).park_state is None


def test_a_run_takes_itself_back_unless_a_child_woke_it_first(db: Database) -> None:
    parent = running_parent(db)
    family.park(db, parent.id, 0)
    assert family.unpark(db, parent.id)
    family.park(db, parent.id, 0)
    family.wake(db, parent.id)
    assert not family.unpark(db, parent.id)  # the driver the child asked for will take it


def test_a_run_whose_cancel_was_asked_for_does_not_park(db: Database) -> None:
    parent = running_parent(db)
    request_cancel(db, parent.id, "stop")
    assert not family.park(db, parent.id, 0)


def test_a_run_of_another_epoch_does_not_park(db: Database) -> None:
    parent = running_parent(db)
    assert not family.park(db, parent.id, epoch=1)


def test_the_sweepers_wake_a_parked_run_whose_child_ended_without_waking_it(db: Database) -> None:
    parent = running_parent(db)
    done_before, done_after, running = (child_of(db, parent, f"trial[{i}]") for i in range(3))
    finish(db, done_before.id, RunStatus.OK, None, {})
    with db.write() as session:  # it ended before the parent parked: the parent saw it itself
        session.execute(update(Run).where(Run.id == done_before.id)
                        .values(finished_at=utcnow() - timedelta(seconds=5)))
    family.park(db, parent.id, 0)
    assert family.parked_with_news(db, ["search"]) == []
    finish(db, done_after.id, RunStatus.ERROR, "boom", None)  # … and its wake-up went astray
    assert family.parked_with_news(db, ["other"]) == []  # only flows the sweeper can drive
    assert family.parked_with_news(db, ["search"]) == [(parent.id, "search")]
    assert get_run(db, parent.id).park_state == family.WOKEN
    assert family.parked_with_news(db, ["search"]) == []  # woken once
    assert get_run(db, running.id).status == RunStatus.RUNNING.value


def test_a_woken_run_nobody_claimed_is_handed_over_again_after_the_stale_limit(db: Database) -> None:
    parent = running_parent(db)
    family.park(db, parent.id, 0)
    family.wake(db, parent.id)
    assert family.stale_woken(db, 60, ["search"]) == []
    with db.write() as session:
        session.execute(update(Run).where(Run.id == parent.id).values(lease_at=utcnow() - timedelta(seconds=90)))
    assert family.stale_woken(db, 60, ["search"]) == [(parent.id, "search")]
    assert family.stale_woken(db, 60, ["search"]) == []  # marked handled


def test_children_are_counted_per_parent_node(db: Database) -> None:
    parent = running_parent(db)
    for index in range(3):
        child_of(db, parent, f"trial[{index}]")
    finish(db, family.children_of(db, parent.id)[0].id, RunStatus.OK, None, {})
    counts = family.child_statuses(db, parent.id)
    assert dict(counts["trial"]) == {"ok": 1, "running": 2}
