"""Reads and writes of ``runs`` rows. Status changes are guarded UPDATEs, so two writers cannot both win."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, DateTime, String, Text, func, insert, literal, or_, select, update
from sqlalchemy.engine import CursorResult, Result
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fluksio.clock import utcnow
from fluksio.errors import RunNotFound, RunRejected
from fluksio.schemas import DriveRecord, NodeRecord, NodeStatus, Resources, RunRecord, RunStatus
from fluksio.store.db import Database, retried
from fluksio.store.models import Run, RunDrive, RunNode
from fluksio.store.status import RESUMABLE, allowed_from


def _rowcount(result: Result[Any]) -> int:
    """How many rows an UPDATE changed (its result is a cursor result; the session types it as a plain one)."""
    return cast("CursorResult[Any]", result).rowcount


@retried
def insert_run(db: Database, run: Run) -> tuple[Run, bool]:
    """Journal a new run. With an idempotency key already used, return that run and ``False``."""
    # A Core INSERT of the values the row was made with (the columns it leaves out take their defaults):
    # the ORM's unit of work cost half as much again per submit (556 against 380 µs of CPU on PostgreSQL).
    values = {column.key: run.__dict__[column.key] for column in Run.__table__.columns if column.key in run.__dict__}
    try:
        with db.write_connection() as connection:
            connection.execute(insert(Run), values)
        return run, True
    except IntegrityError:
        if run.idempotency_key is None:
            raise
        with db.read() as session:
            existing = session.scalar(select(Run).where(Run.idempotency_key == run.idempotency_key))
        if existing is None:  # the conflict was something else
            raise
        return existing, False


@retried
def find_by_idempotency_key(db: Database, key: str) -> Run | None:
    with db.read() as session:
        return session.scalar(select(Run).where(Run.idempotency_key == key))


def transition_once(db: Database, run_id: str, target: RunStatus, epoch: int | None = None, **values: Any) -> bool:
    """Move a run to ``target`` if the transition table allows it from its current status.

    Returns whether this call made the change (``False``: someone else got there first). One try: see
    :func:`transition` for the one that waits out an outage.
    """
    with db.write_connection() as connection:
        return _transition(connection, run_id, target, epoch, values)


transition = retried(transition_once)


def _transition(connection: Connection, run_id: str, target: RunStatus, epoch: int | None,
                values: dict[str, Any]) -> bool:
    # In Core: the same UPDATE through an ORM session cost 1.8× as much CPU (measured on PostgreSQL).
    return connection.execute(
        update(Run)
        .where(Run.id == run_id, Run.status.in_(allowed_from(target)), *_mine(epoch))
        .values(status=target.value, **values)
    ).rowcount == 1


@retried
def claim(db: Database, run_id: str, code_digest: str | None, driver: str | None = None) -> int | None:
    """``queued → running``: exactly one of several claimers gets the run's *epoch*, the others ``None``.

    The epoch (how often the run was resumed) guards every later write of this driver: once the run is
    resumed by someone else, a driver that lost it can no longer write to it. ``driver``: the claimer's
    machine. A resumed run keeps its first ``started_at`` (its duration counts from there).
    """
    now = utcnow()
    with db.write_connection() as connection:
        return connection.scalar(
            update(Run)
            .where(Run.id == run_id, Run.status == RunStatus.QUEUED.value, Run.cancel_requested.is_(False))
            .values(status=RunStatus.RUNNING.value, started_at=func.coalesce(Run.started_at, now), lease_at=now,
                    drive_started_at=now, driver=driver,
                    code_digest=func.coalesce(Run.code_digest, code_digest), status_reason=None)
            .returning(Run.resume_count)
        )


@retried
def find_shipped(db: Database, flow: str, code_digest: str) -> tuple[str, str, str | None] | None:
    """What to import from code package ``code_digest`` of ``flow``, its graph's digest and its submitter's
    signature, as the newest run of that flow that shipped it recorded them."""
    with db.read_connection() as connection:
        row = connection.execute(
            select(Run.code_entry, Run.graph_digest, Run.code_signature)
            .where(Run.flow == flow, Run.code_digest == code_digest, Run.code_entry.is_not(None),
                   Run.graph_digest.is_not(None))
            .order_by(Run.id.desc()).limit(1)
        ).first()
    return None if row is None else (str(row[0]), str(row[1]), row[2])


def _mine(epoch: int | None) -> list[Any]:
    """The guard of a driver's writes: the run is still in the epoch it claimed."""
    return [] if epoch is None else [Run.resume_count == epoch]


@retried
def refresh_lease(db: Database, run_id: str, epoch: int | None = None) -> tuple[bool, bool]:
    """Extend the lease. Returns (still ours: ``running`` in our epoch; a cancel was requested)."""
    with db.write_connection() as connection:
        held = connection.execute(
            update(Run).where(Run.id == run_id, Run.status == RunStatus.RUNNING.value, *_mine(epoch))
            .values(lease_at=utcnow())
        ).rowcount == 1
        return held, bool(connection.scalar(select(Run.cancel_requested).where(Run.id == run_id)))


def abandon_stale_once(db: Database, stale_after_s: float, spare: Collection[str] = ()) -> list[str]:
    """Mark ``abandoned`` every running run whose lease is older than ``stale_after_s``; returns their ids.

    ``spare`` names runs known to be alive (driven by the caller's own process). Safe to call from
    several sweepers at once: the guarded UPDATE lets each run be taken by one. One try (a sweeper
    must not judge leases after sitting in retries); :func:`abandon_stale` retries.
    """
    now = utcnow()
    with db.write() as session:
        stale = session.scalars(
            update(Run)
            .where(*_stale(now, stale_after_s, spare))
            .values(status=RunStatus.ABANDONED.value, finished_at=now, status_reason=_lease_lost(stale_after_s)
                    + "; `fluksio resume` re-drives it")
            .returning(Run.id)
        ).all()
        return list(stale)


abandon_stale = retried(abandon_stale_once)


def of_flows(flows: Collection[str], shipped: bool = False) -> ColumnElement[bool]:
    """Runs of ``flows`` (a driver's registered flows); with ``shipped``, also every run whose code travelled
    with it (a driver that accepts shipped code drives those from their graph, whatever their flow)."""
    named = Run.flow.in_(list(flows))
    return or_(named, Run.code_entry.is_not(None)) if shipped else named


def requeue_stale_once(db: Database, stale_after_s: float, flows: Collection[str],
                       spare: Collection[str] = (), shipped: bool = False) -> list[tuple[str, str]]:
    """Auto-resume: send every stale running run of ``flows`` straight back to ``queued``.

    One guarded UPDATE, recorded as resumed from ``abandoned``: a client waiting on the run never sees
    it ``abandoned`` in between (it would take that for the end), and a sweeper that fails halfway
    cannot leave it abandoned for good. A run whose cancel was asked for is left to :func:`abandon_stale`.
    Returns ``(run id, flow)`` of each, to hand to a driver. One try, as :func:`abandon_stale_once`.
    """
    now = utcnow()
    where = [*_stale(now, stale_after_s, spare), of_flows(flows, shipped), Run.cancel_requested.is_(False)]
    with db.write() as session:
        _keep_drives(session, where, now, RunStatus.ABANDONED.value, _lease_lost(stale_after_s))
        return [(str(run_id), str(flow)) for run_id, flow in session.execute(
            update(Run)
            .where(*where)
            .values(**_requeued(RunStatus.ABANDONED, f"resumed automatically: {_lease_lost(stale_after_s)}", now))
            .returning(Run.id, Run.flow)
        )]


requeue_stale = retried(requeue_stale_once)


@retried
def requeue_handed_over(db: Database, run_id: str, epoch: int, reason: str) -> bool:
    """Auto-resume of a run whose driver is shutting down: ``running → queued`` in one guarded UPDATE.

    Like :func:`requeue_stale`, recorded as resumed from ``abandoned`` without ever showing that status.
    Returns whether the run was still this driver's to hand over.
    """
    where = [Run.id == run_id, Run.status == RunStatus.RUNNING.value, Run.cancel_requested.is_(False),
             *_mine(epoch)]
    now = utcnow()
    with db.write() as session:
        _keep_drives(session, where, now, RunStatus.ABANDONED.value, reason)
        return _rowcount(session.execute(
            update(Run).where(*where).values(**_requeued(RunStatus.ABANDONED, f"resumed automatically: {reason}", now))
        )) == 1


def _requeued(previous: RunStatus, reason: str, now: datetime | None = None) -> dict[str, Any]:
    """The columns of a run sent back to ``queued`` by a resume (by hand or automatic) from ``previous``."""
    now = now or utcnow()
    # lease_at: the sweepers' lost-hand-over check counts from the resume, not from the old driver's last
    # lease (which would make a freshly resumed run look long lost and send it to a driver twice).
    return dict(status=RunStatus.QUEUED.value, resumed_from=previous.value, resumed_at=now,
                resume_count=Run.resume_count + 1, lease_at=now, cancel_requested=False, finished_at=None,
                result=None, duration_ms=None, status_reason=reason, park_state=None)


def _keep_drives(session: Session, where: Sequence[Any], now: datetime, ended_as: str, reason: Any) -> None:
    """Before the runs ``where`` selects are resumed: keep the drive each of them is leaving as a
    :class:`RunDrive` (its machine, start and last lease are about to be overwritten). ``reason``: words, or
    a column. A drive kept already (a second resumer racing this one) is left as it is."""
    drives = (
        select(Run.id, Run.resume_count, Run.driver, Run.drive_started_at, Run.lease_at,
               literal(now, DateTime(timezone=True)), literal(ended_as, String()),
               literal(reason, Text()) if reason is None or isinstance(reason, str) else reason)
        .where(*where, Run.drive_started_at.is_not(None))
    )
    try:
        with session.begin_nested():
            session.execute(insert(RunDrive).from_select(
                ["run_id", "epoch", "driver", "started_at", "last_lease_at", "resumed_at", "ended_as", "reason"],
                drives))
    except IntegrityError:
        pass


def _stale(now: datetime, stale_after_s: float, spare: Collection[str]) -> list[Any]:
    cutoff = now - timedelta(seconds=stale_after_s)
    # A parked run has no driver on purpose (its children run); a woken one is looked after by stale_woken.
    return [Run.status == RunStatus.RUNNING.value, Run.lease_at < cutoff, Run.id.not_in(list(spare)),
            Run.park_state.is_(None)]


def _lease_lost(stale_after_s: float) -> str:
    return f"its driver stopped refreshing the lease (none for over {stale_after_s:g} s)"


@retried
def touch_queued(db: Database, run_id: str) -> None:
    """A driver is holding this queued run (waiting for a label): it is not lost."""
    with db.write() as session:
        session.execute(update(Run).where(Run.id == run_id, Run.status == RunStatus.QUEUED.value)
                        .values(lease_at=utcnow()))


def stale_queued(db: Database, stale_after_s: float, flows: Collection[str],
                 shipped: bool = False) -> list[tuple[str, str]]:
    """Runs of ``flows`` queued for longer than ``stale_after_s`` that no driver holds: their hand-over was lost.

    Returns ``(run id, flow)`` of each, marking it handled now so that a second sweeper skips it. Only
    ``flows`` the caller can drive: a run left to a process that can load its flow is not marked handled.
    """
    now = utcnow()
    cutoff = now - timedelta(seconds=stale_after_s)
    with db.write() as session:
        return [(str(run_id), str(flow)) for run_id, flow in session.execute(
            update(Run)
            .where(Run.status == RunStatus.QUEUED.value, func.coalesce(Run.lease_at, Run.created_at) < cutoff,
                   of_flows(flows, shipped))
            .values(lease_at=now)
            .returning(Run.id, Run.flow)
        )]


@retried
def resume(db: Database, run_id: str) -> RunStatus:
    """Send a run that did not end ``ok`` back to ``queued``; returns the status it was resumed from."""
    run = get_run(db, run_id)
    previous = RunStatus(run.status)
    if previous not in RESUMABLE:
        hint = "it finished ok; submit it again to rerun" if previous is RunStatus.OK else "it has not ended"
        raise RunRejected(f"run {run.id} is {previous.value}: nothing to resume ({hint})")
    where = [Run.id == run.id, Run.status == previous.value]
    now = utcnow()
    with db.write() as session:
        _keep_drives(session, where, now, previous.value, Run.status_reason)
        moved = _rowcount(session.execute(
            update(Run).where(*where).values(**_requeued(previous, f"resumed from {previous.value}", now))
        ))
    if not moved:
        raise RunRejected(f"run {run.id} changed status while being resumed; look at it again")
    return previous


@retried
def set_reason(db: Database, run_id: str, reason: str | None, epoch: int | None = None) -> None:
    with db.write_connection() as connection:
        connection.execute(update(Run).where(Run.id == run_id, *_mine(epoch)).values(status_reason=reason))


@retried
def finish(db: Database, run_id: str, status: RunStatus, reason: str | None, result: dict[str, Any] | None,
           epoch: int | None = None) -> bool:
    with db.write_connection() as connection:  # one transaction: a read and then a write cost 1.3× as much
        started = connection.scalar(select(Run.started_at).where(Run.id == run_id))
        now = utcnow()
        duration = int((now - started).total_seconds() * 1000) if started else None
        return _transition(connection, run_id, status, epoch, {
            "status_reason": reason, "result": result, "finished_at": now, "duration_ms": duration,
            "park_state": None})


@retried
def request_cancel(db: Database, run_id: str, reason: str) -> RunStatus:
    """Cancel a queued run outright, or flag a running one for its driver. Returns the status after."""
    return _cancel(db, run_id, reason)[0]


@retried
def cancel_run(db: Database, run_id: str, reason: str) -> tuple[RunStatus, bool]:
    """:func:`request_cancel`, also saying whether this call ended the run (a queued run it cancelled):
    whoever ends a run tells its alerts, and only once."""
    return _cancel(db, run_id, reason)


def _cancel(db: Database, run_id: str, reason: str) -> tuple[RunStatus, bool]:
    run = get_run(db, run_id)
    with db.write() as session:
        cancelled_queued = _rowcount(session.execute(
            update(Run)
            .where(Run.id == run.id, Run.status == RunStatus.QUEUED.value)
            .values(status=RunStatus.CANCELLED.value, status_reason=reason, finished_at=utcnow(),
                    cancel_requested=True)
        ))
        if not cancelled_queued:
            session.execute(
                update(Run)
                .where(Run.id == run.id, Run.status == RunStatus.RUNNING.value)
                .values(cancel_requested=True, status_reason=f"cancelling: {reason}")
            )
    return RunStatus(get_run(db, run.id).status), bool(cancelled_queued)


@retried
def get_run(db: Database, run_id: str) -> Run:
    """A run by id or by a unique prefix of its id."""
    with db.read() as session:
        return _find(session, run_id)


def _find(session: Session, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is not None:
        return run
    if len(run_id) >= 4:
        matches = session.scalars(select(Run).where(Run.id.startswith(run_id.upper(), autoescape=True)).limit(2)).all()
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise RunNotFound(f"run id prefix {run_id!r} is ambiguous; give more characters")
    raise _no_run(run_id)


def _no_run(run_id: str) -> RunNotFound:
    return RunNotFound(f"no run {run_id!r}; `fluksio runs` lists them")


@retried
def list_runs(
    db: Database, flow: str | None = None, status: str | None = None, group: str | None = None, limit: int = 50,
    schedule: str | None = None, parent: str | None = None, offset: int = 0,
) -> list[Run]:
    """Runs newest first (ids sort by submission), filtered; ``parent``: the child runs of that run's subflows,
    ``schedule``: the runs that schedule's ticks started."""
    query = (_filtered(select(Run), flow, status, group, parent, schedule).order_by(Run.id.desc()).limit(limit)
             .offset(offset))
    with db.read() as session:
        return list(session.scalars(query))


@retried
def count_runs(db: Database, flow: str | None = None, status: str | None = None, group: str | None = None,
               parent: str | None = None, schedule: str | None = None) -> int:
    """How many runs :func:`list_runs` would page through with these filters."""
    query = _filtered(select(func.count()).select_from(Run), flow, status, group, parent, schedule)
    with db.read() as session:
        return int(session.scalar(query) or 0)


def _filtered(query: Any, flow: str | None, status: str | None, group: str | None, parent: str | None,
              schedule: str | None = None) -> Any:
    if schedule:
        query = query.where(Run.schedule == schedule)
    if flow:
        query = query.where(Run.flow == flow)
    if status:
        query = query.where(Run.status == status)
    if group:
        query = query.where(Run.group_id == group)
    if parent:
        query = query.where(Run.parent_id == parent)
    return query


@retried
def flow_names(db: Database) -> list[str]:
    """Every flow that has a run, sorted (what a filter offers to choose from)."""
    with db.read() as session:
        return list(session.scalars(select(Run.flow).distinct().order_by(Run.flow)))


@retried
def cancel_requested(db: Database, run_id: str) -> bool:
    """Whether a cancel of the run was asked for (``cancel`` sets it before it tells the run's driver)."""
    with db.read() as session:
        return bool(session.scalar(select(Run.cancel_requested).where(Run.id == run_id)))


@retried
def call_refusal(db: Database, run_id: str, epoch: int, node: str, element: int, attempt: int) -> str | None:
    """Why a node call may not start now, or ``None`` when it may: its run is ``running`` in the epoch
    that sent it, and no row of that attempt is journaled yet.

    With signed messages, this is what makes a signed call good for one run of its node: a copy sent
    again later (a replay, with a grant forged in the placer's books to match) finds its run ended, or
    resumed, or its attempt journaled. ``element`` is -1 for a node that is not mapped.
    """
    with db.read() as session:
        run = session.get(Run, run_id)
        if run is None:
            return f"run {run_id} does not exist"
        if run.status != RunStatus.RUNNING.value:
            return f"run {run_id} is {run.status}, not running"
        if run.resume_count != epoch:
            return f"the call was sent by drive {epoch} of run {run_id}, and the run is in drive {run.resume_count}"
        journaled = session.scalar(select(RunNode.id).where(
            RunNode.run_id == run_id, RunNode.node == node, RunNode.element == element,
            RunNode.attempt == attempt).limit(1))
    if journaled is not None:
        return f"attempt {attempt} of node {node!r} of run {run_id} has ended already"
    return None


@retried
def node_rows(db: Database, run_id: str) -> list[RunNode]:
    with db.read() as session:
        return list(session.scalars(select(RunNode).where(RunNode.run_id == run_id).order_by(RunNode.id)))


#: The columns of a node row that its :class:`NodeRecord` shows: not its outputs (up to 256 kB of JSON a row,
#: which a record leaves out) nor its cache key.
RECORD_COLUMNS = (RunNode.node, RunNode.status, RunNode.machine, RunNode.gpus, RunNode.started_at,
                  RunNode.finished_at, RunNode.duration_ms, RunNode.error, RunNode.logs, RunNode.cached_from,
                  RunNode.attempt, RunNode.element, RunNode.child_run, RunNode.granted, RunNode.node_code,
                  RunNode.cache_miss)


def node_record(n: Any) -> NodeRecord:
    """The record of a node row (a ``RunNode``, or a row of :data:`RECORD_COLUMNS`)."""
    return NodeRecord(
        node=n.node, status=NodeStatus(n.status), machine=n.machine, gpus=list(n.gpus or []),
        started_at=n.started_at, finished_at=n.finished_at, duration_ms=n.duration_ms, error=n.error,
        logs=n.logs, cached_from=n.cached_from, attempt=n.attempt,
        index=None if n.element is None or n.element < 0 else n.element, child_run=n.child_run,
        granted=Resources(**n.granted) if n.granted else None, node_code=n.node_code, cache_miss=n.cache_miss,
    )


def to_record(run: Run, nodes: Sequence[Any]) -> RunRecord:
    """The record of a run and its node rows (``RunNode`` objects, or rows of :data:`RECORD_COLUMNS`)."""
    return RunRecord(
        id=run.id, flow=run.flow, status=RunStatus(run.status), status_reason=run.status_reason,
        params=run.params or {}, seed=run.seed, group_id=run.group_id, result=run.result,
        code_digest=run.code_digest, code_entry=run.code_entry, created_at=run.created_at, started_at=run.started_at,
        finished_at=run.finished_at, duration_ms=run.duration_ms, resume_count=run.resume_count or 0,
        resumed_from=RunStatus(run.resumed_from) if run.resumed_from else None,
        priority=run.priority or 0, parent_id=run.parent_id, parent_node=run.parent_node,
        schedule=run.schedule, schedule_tick=run.schedule_tick, lease_at=run.lease_at,
        parked=run.park_state is not None, driver=run.driver, drive_started_at=run.drive_started_at,
        nodes=[node_record(n) for n in nodes],
    )


def drive_records(session: Session, run_id: str) -> list[DriveRecord]:
    """The earlier drives of a resumed run, oldest first."""
    return [DriveRecord(epoch=d.epoch, driver=d.driver, started_at=d.started_at, last_lease_at=d.last_lease_at,
                        resumed_at=d.resumed_at, ended_as=d.ended_as, reason=d.reason)
            for d in session.scalars(select(RunDrive).where(RunDrive.run_id == run_id).order_by(RunDrive.epoch))]


@retried
def run_status(db: Database, run_id: str) -> RunStatus:
    """The status of the run with this exact id: one column, the cheapest look a waiting client can take."""
    with db.read_connection() as connection:
        status = connection.execute(select(Run.status).where(Run.id == run_id)).scalar()
    if status is None:
        raise _no_run(run_id)
    return RunStatus(status)


@retried
def load_record(db: Database, run_id: str) -> RunRecord:
    """The run (by id or a unique prefix) with its node rows, read on one connection."""
    with db.read() as session:
        run = _find(session, run_id)
        nodes = session.execute(select(*RECORD_COLUMNS).where(RunNode.run_id == run.id).order_by(RunNode.id)).all()
        drives = drive_records(session, run.id) if run.resume_count else []
    return to_record(run, nodes).model_copy(update={"drives": drives}) if drives else to_record(run, nodes)
