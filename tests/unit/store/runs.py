"""Run rows as the store's tests add them: straight into the database, with no flow behind them."""

from __future__ import annotations

from fluksio.clock import utcnow
from fluksio.schemas import RunStatus
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.models import Run
from fluksio.store.run_rows import insert_run


def new_run(db: Database, run_id: str | None = None, key: str | None = None, status: RunStatus = RunStatus.QUEUED,
            flow: str = "train") -> Run:
    run = Run(id=run_id or new_run_id(), flow=flow, params={"lr": 0.1}, params_digest="sha256:p",
              status=status.value, created_at=utcnow(), engine="embedded", idempotency_key=key)
    stored, created = insert_run(db, run)
    assert created
    return stored


def add_run(db: Database, flow: str = "train", status: str = "ok", group: str | None = None,
            parent: str | None = None) -> str:
    run = Run(id=new_run_id(), flow=flow, params={}, params_digest="sha256:p", status=status, created_at=utcnow(),
              engine="embedded", group_id=group, parent_id=parent, parent_node="trial[0]" if parent else None)
    insert_run(db, run)
    return run.id
