"""What a monitoring system counts in the run store (``client.tallies``): runs by status, and node calls as they
finish, read in pages by a cursor (the node rows' ids).

Node rows are only ever inserted, once, when a call has ended (``store/nodes.record_nodes``), so the rows
after a cursor are exactly the calls that finished since it was taken — as far as their writers have
committed: on PostgreSQL a row with a lower id can be committed after one with a higher id, which a reader
of pages must allow for (``ui/durations.py`` does).

None of these reads waits through an outage (they are not :func:`~fluksio.store.db.retried`): whoever counts
asks again at its next scrape, and a scrape must answer within its timeout, not 30 s later.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select

from fluksio.schemas import NodeStatus
from fluksio.store.db import Database
from fluksio.store.models import Run, RunNode

#: Node rows whose call ran: the others were restored from the cache or skipped, and took no time of a machine.
RAN = frozenset({NodeStatus.OK.value, NodeStatus.ERROR.value, NodeStatus.CANCELLED.value})


@dataclass(frozen=True)
class FinishedCall:
    """One node row, as a count of call durations needs it."""

    #: The row's id: the cursor of :meth:`Tallies.calls_after`.
    row: int
    flow: str
    #: The node's name (a mapped node's elements all carry it).
    node: str
    #: How long the call ran, in seconds; ``None`` when no call ran (cached, skipped, or failed unplaced).
    seconds: float | None


class Tallies:
    """A client's counts of the run store. ``check`` is called before each read (a closed client refuses)."""

    def __init__(self, db: Database, check: Callable[[], None] = lambda: None) -> None:
        self._db = db
        self._check = check

    def runs_by_status(self) -> dict[str, int]:
        """How many runs the store holds in each status it holds any in, ``{"ok": 12, "running": 2}``."""
        self._check()
        with self._db.read() as session:
            return {status: int(count) for status, count in
                    session.execute(select(Run.status, func.count()).group_by(Run.status))}

    def newest_call(self) -> int:
        """The cursor of the newest node row (0 when there is none): :meth:`calls_after` it lists later calls."""
        self._check()
        with self._db.read() as session:
            return int(session.scalar(select(func.max(RunNode.id))) or 0)

    def calls_after(self, row: int, limit: int) -> list[FinishedCall]:
        """The first ``limit`` node rows after cursor ``row``, in the order they were numbered."""
        self._check()
        return self._read(RunNode.id > row, limit)

    def calls_among(self, rows: Collection[int]) -> list[FinishedCall]:
        """The node rows of those ids that the store holds (now), in id order."""
        self._check()
        return self._read(RunNode.id.in_(sorted(rows)), len(rows)) if rows else []

    def _read(self, which: ColumnElement[bool], limit: int) -> list[FinishedCall]:
        query = (select(RunNode.id, Run.flow, RunNode.node, RunNode.status, RunNode.duration_ms)
                 .join(Run, Run.id == RunNode.run_id).where(which).order_by(RunNode.id).limit(limit))
        with self._db.read() as session:
            return [FinishedCall(row, flow, node, duration_ms / 1000 if status in RAN and duration_ms is not None
                                 else None)
                    for row, flow, node, status, duration_ms in session.execute(query)]
