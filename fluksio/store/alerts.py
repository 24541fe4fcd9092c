"""The alert log: one row per alert, written when it was sent or when fluksio gave up on it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from fluksio.schemas import AlertRecord
from fluksio.store.db import Database, retried
from fluksio.store.models import AlertLog

#: Outcomes of an alert.
SENT, FAILED = "sent", "failed"


@retried
def record_alert(db: Database, *, rule: str, run_id: str | None, status: str, target: str, outcome: str,
                 attempts: int, error: str | None, created_at: datetime, finished_at: datetime) -> int:
    row = AlertLog(rule=rule, run_id=run_id, status=status, target=target[:1000], outcome=outcome,
                   attempts=attempts, error=error, created_at=created_at, finished_at=finished_at)
    with db.write() as session:
        session.add(row)
        session.flush()
        return row.id


@retried
def list_alerts(db: Database, rule: str | None = None, run_id: str | None = None, outcome: str | None = None,
                limit: int = 50) -> list[AlertRecord]:
    """Alerts, newest first."""
    query = select(AlertLog).order_by(AlertLog.id.desc()).limit(limit)
    if rule:
        query = query.where(AlertLog.rule == rule)
    if run_id:
        query = query.where(AlertLog.run_id == run_id)
    if outcome:
        query = query.where(AlertLog.outcome == outcome)
    with db.read() as session:
        return [AlertRecord(id=r.id, rule=r.rule, run_id=r.run_id, status=r.status, target=r.target,
                            outcome=r.outcome, attempts=r.attempts, error=r.error, created_at=r.created_at,
                            finished_at=r.finished_at)
                for r in session.scalars(query)]
