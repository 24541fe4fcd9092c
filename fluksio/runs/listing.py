"""Listing runs: what ``client.runs()`` and ``fluksio runs`` show, read from the run store alone.

A listing needs nothing but the store: ``fluksio runs`` reads it without building a client (no Celery app,
no embedded workers), which is what lets the command start in a fraction of a second.
"""

from __future__ import annotations

from fluksio.errors import RunRejected
from fluksio.runs.lease import noticed_driverless
from fluksio.schemas import RunRecord, RunStatus
from fluksio.store import run_rows
from fluksio.store.db import Database


def run_filters(db: Database, status: str | None, parent: str | None) -> str | None:
    """Refuse a status that is none; the full id of ``parent`` (a prefix works, a wrong id says so)."""
    if status is not None and status not in {s.value for s in RunStatus}:
        raise RunRejected(f"status {status!r} is not one of {', '.join(s.value for s in RunStatus)}")
    return None if parent is None else run_rows.get_run(db, parent).id


def list_records(db: Database, stale_after_s: float, flow: str | None = None, status: str | None = None,
                 group: str | None = None, limit: int = 50, schedule: str | None = None, parent: str | None = None,
                 offset: int = 0) -> list[RunRecord]:
    """Runs, newest first, without their nodes; a running one whose lease is older than ``stale_after_s``
    seconds says it has no driver (:func:`~fluksio.runs.lease.noticed_driverless`).

    ``schedule``: only runs that schedule's ticks started; ``parent``: only the child runs of that run (an id
    or a unique prefix); ``offset``: skip that many (paging).
    """
    for name, value, least in (("limit", limit, 1), ("offset", offset, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise RunRejected(f"{name} must be a whole number ≥ {least}, got {value!r}")
    parent = run_filters(db, status, parent)
    return [noticed_driverless(run_rows.to_record(r, []), stale_after_s)
            for r in run_rows.list_runs(db, flow, status, group, limit, schedule=schedule, parent=parent,
                                        offset=offset)]
