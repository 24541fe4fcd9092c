"""Parents and child runs in the store: a subflow's children, and a parent that lets go of its driver.

A parent whose only work left is waiting for its children *parks*: its driver writes ``park_state =
'parked'`` and goes, freeing its slot (so parents can never hold the driver slots their children need).
The first child that ends afterwards *wakes* it (``'woken'``, one guarded UPDATE: one waker wins) and
hands it to a driver, which *claims* it back (``None``). Each step is one guarded UPDATE, so two
processes never both drive a parent, and a parent that parks while a child ends is never left asleep
(the parent looks at its children again after parking; see the driver's loop).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import func, or_, select, update
from sqlalchemy.engine import CursorResult

from fluksio.clock import utcnow
from fluksio.schemas import RunStatus
from fluksio.store.db import Database, retried
from fluksio.store.models import Run
from fluksio.store.run_rows import of_flows

PARKED, WOKEN = "parked", "woken"


def child_key(parent_id: str, unit: str) -> str:
    """The idempotency key of the child run a parent's call ``unit`` (``trial[2]``) is: a parent that is
    driven again (woken, resumed after its driver died) finds the children it started instead of
    starting them twice."""
    return f"fluksio:child:{parent_id}:{unit}"


def _changed(result: Any) -> bool:
    return cast("CursorResult[Any]", result).rowcount == 1


@retried
def park(db: Database, run_id: str, epoch: int) -> bool:
    """The run's driver lets go: ``running`` in ``epoch``, not parked already, no cancel asked for (a
    cancel is its driver's to carry out first). Returns whether it parked."""
    with db.write() as session:
        return _changed(session.execute(
            update(Run).where(Run.id == run_id, Run.status == RunStatus.RUNNING.value, Run.resume_count == epoch,
                              Run.park_state.is_(None), Run.cancel_requested.is_(False))
            .values(park_state=PARKED, lease_at=utcnow())))


@retried
def unpark(db: Database, run_id: str) -> bool:
    """The parked run's own driver takes it back (a child ended as it parked). ``False``: a child woke it first."""
    with db.write() as session:
        return _changed(session.execute(
            update(Run).where(Run.id == run_id, Run.park_state == PARKED).values(park_state=None)))


@retried
def wake(db: Database, run_id: str) -> bool:
    """A child ended (or a cancel came): ``parked → woken``. ``True`` for the one caller that must hand the
    run to a driver."""
    with db.write() as session:
        return _changed(session.execute(
            update(Run).where(Run.id == run_id, Run.status == RunStatus.RUNNING.value, Run.park_state == PARKED)
            .values(park_state=WOKEN, lease_at=utcnow())))


@retried
def claim_woken(db: Database, run_id: str) -> int | None:
    """A driver takes a woken run: ``woken → driven``; the run's epoch, or ``None`` when another took it."""
    with db.write() as session:
        return session.scalar(
            update(Run).where(Run.id == run_id, Run.status == RunStatus.RUNNING.value, Run.park_state == WOKEN)
            .values(park_state=None, lease_at=utcnow()).returning(Run.resume_count))


@retried
def stale_woken(db: Database, stale_after_s: float, flows: Collection[str],
                shipped: bool = False) -> list[tuple[str, str]]:
    """Woken runs of ``flows`` that no driver claimed for ``stale_after_s``: their hand-over was lost.

    Returns ``(run id, flow)`` of each, marked handled now so that a second sweeper skips it.
    """
    now = utcnow()
    with db.write() as session:
        return [(str(run_id), str(flow)) for run_id, flow in session.execute(
            update(Run).where(Run.status == RunStatus.RUNNING.value, Run.park_state == WOKEN,
                              Run.lease_at < now - timedelta(seconds=stale_after_s), of_flows(flows, shipped))
            .values(lease_at=now).returning(Run.id, Run.flow))]


@retried
def parked_with_news(db: Database, flows: Collection[str], shipped: bool = False) -> list[tuple[str, str]]:
    """Parked runs of ``flows`` with a child that ended after they parked: a wake-up that went astray (the
    store or broker failed the child as it told its parent). Woken here, in the same UPDATE; returns
    ``(run id, flow)`` of each, to hand to a driver."""
    child = Run.__table__.alias("child")
    news = (select(child.c.id).where(child.c.parent_id == Run.id, child.c.finished_at >= Run.lease_at,
                                     child.c.status.in_([s.value for s in RunStatus if s.is_terminal()]))
            .exists())
    with db.write() as session:
        return [(str(run_id), str(flow)) for run_id, flow in session.execute(
            update(Run).where(Run.status == RunStatus.RUNNING.value, Run.park_state == PARKED,
                              of_flows(flows, shipped), news)
            .values(park_state=WOKEN, lease_at=utcnow()).returning(Run.id, Run.flow))]


@retried
def children_of(db: Database, parent_id: str) -> list[Run]:
    """Every child run of ``parent_id``, oldest first."""
    with db.read() as session:
        return list(session.scalars(select(Run).where(Run.parent_id == parent_id).order_by(Run.id)))


@retried
def cancel_on_the_way(db: Database, run_id: str) -> bool:
    """Whether a cancel of ``run_id`` or of a run above it (its parent, theirs, …) was asked for, in one read
    up the tree.

    A cancel marks the run it names before it tells anyone, then goes down the tree; its driver and its
    children's drivers free their calls' machines as they hear of it, and a parent may even end before the
    cancel has reached its last child. A child that a freed machine is granted to before its own cancel
    reaches it finds the mark above it here. An ancestor whose cancel ended it before ``run_id`` was created
    or last resumed (a child resumed on its own after its parent was cancelled, or one a resumed parent
    started) stops nothing.
    """
    columns = (Run.id, Run.parent_id, Run.cancel_requested, Run.finished_at)
    up = (select(*columns, func.coalesce(Run.resumed_at, Run.created_at).label("since"))
          .where(Run.id == run_id).cte("up", recursive=True))
    up = up.union_all(select(*columns, up.c.since).where(Run.id == up.c.parent_id))
    with db.read() as session:
        return session.scalar(
            select(up.c.id).where(up.c.cancel_requested.is_(True),
                                  or_(up.c.finished_at.is_(None), up.c.finished_at >= up.c.since))
            .limit(1)) is not None


@retried
def child_statuses(db: Database, parent_id: str) -> dict[str, Counter[str]]:
    """Per parent node (``trial``, its elements folded together), how many of its child runs are in each status."""
    with db.read() as session:
        rows = session.execute(
            select(Run.parent_node, Run.status, func.count()).where(Run.parent_id == parent_id)
            .group_by(Run.parent_node, Run.status)).all()
    counts: dict[str, Counter[str]] = {}
    for unit, status, count in rows:
        counts.setdefault(str(unit).partition("[")[0], Counter())[str(status)] += int(count)
    return counts
