"""A cancel above a child run, read up the tree in one statement: what a child's driver checks before it
sends a call granted to it (issue #31, item 7)."""

from __future__ import annotations

from sqlalchemy import update

from fluksio.clock import utcnow
from fluksio.schemas import RunStatus
from fluksio.store import family
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.models import Run
from fluksio.store.run_rows import claim, finish, get_run, insert_run, request_cancel, resume


def running(db: Database, parent: Run | None = None) -> Run:
    run = Run(id=new_run_id(), flow="f", params={}, params_digest="sha256:p", status=RunStatus.QUEUED.value,
              created_at=utcnow(), engine="embedded", parent_id=parent.id if parent else None,
              parent_node="trial[0]" if parent else None)
    insert_run(db, run)
    assert claim(db, run.id, None) is not None
    return get_run(db, run.id)


def test_a_cancel_of_the_run_or_of_any_run_above_it_is_found(db: Database) -> None:
    top = running(db)
    middle = running(db, top)
    leaf, other = running(db, middle), running(db)
    assert not any(family.cancel_on_the_way(db, r.id) for r in (top, middle, leaf, other))
    request_cancel(db, top.id, "stop")  # marked; the cancel has not reached the children yet
    assert all(family.cancel_on_the_way(db, r.id) for r in (top, middle, leaf))
    assert not family.cancel_on_the_way(db, other.id)


def test_a_parent_that_ended_cancelled_before_its_child_heard_still_counts(db: Database) -> None:
    parent = running(db)
    child = running(db, parent)
    request_cancel(db, parent.id, "stop")
    finish(db, parent.id, RunStatus.CANCELLED, "cancelled by request", None)
    assert family.cancel_on_the_way(db, child.id)


def test_a_child_resumed_on_its_own_after_its_parent_was_cancelled_runs(db: Database) -> None:
    parent = running(db)
    child = running(db, parent)
    request_cancel(db, parent.id, "stop")
    request_cancel(db, child.id, "its parent was cancelled")
    finish(db, child.id, RunStatus.CANCELLED, "cancelled by request", None)
    finish(db, parent.id, RunStatus.CANCELLED, "cancelled by request", None)
    with db.write() as session:  # the resume comes later than the parent's end, as it would by hand
        session.execute(update(Run).where(Run.id == parent.id).values(finished_at=utcnow().replace(year=2000)))
    resume(db, child.id)
    assert claim(db, child.id, None) == 1
    assert not family.cancel_on_the_way(db, child.id)
