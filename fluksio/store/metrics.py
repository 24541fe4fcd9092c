"""Metric series: batched upserts keyed on (run_id, name, step), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fluksio.store.db import Database, retried
from fluksio.store.models import RunMetric


@retried
def upsert_metrics(db: Database, rows: Sequence[tuple[str, str, int, float]]) -> int:
    """Write ``(run_id, name, step, value)`` rows; a repeated key keeps the newest value.

    One statement, executed for many rows at once: SQLAlchemy compiles it once and caches it (a
    fresh multi-VALUES statement per batch spent most of the time compiling). Returns the number of
    statements issued.
    """
    if not rows:
        return 0
    # The same key twice in one batch is an error on PostgreSQL's ON CONFLICT: keep the last.
    latest = {(r, n, s): v for r, n, s, v in rows}
    with db.write_connection() as connection:
        connection.execute(_upsert_statement(db.is_sqlite),
                        [{"run_id": r, "name": n, "step": s, "value": v} for (r, n, s), v in latest.items()])
    return 1


@functools.cache
def _upsert_statement(sqlite: bool) -> Any:
    statement = (sqlite_insert if sqlite else pg_insert)(RunMetric)
    return statement.on_conflict_do_update(index_elements=["run_id", "name", "step"],
                                           set_={"value": statement.excluded.value})


@retried
def delete_metrics(db: Database, run_id: str, names: Sequence[str]) -> None:
    """Forget the run's series of these names (before a node that streams them runs again)."""
    with db.write() as session:
        session.execute(delete(RunMetric).where(RunMetric.run_id == run_id, RunMetric.name.in_(list(names))))


@retried
def read_metrics(db: Database, run_id: str) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    with db.read() as session:
        for name, step, value in session.execute(
            select(RunMetric.name, RunMetric.step, RunMetric.value)
            .where(RunMetric.run_id == run_id)
            .order_by(RunMetric.name, RunMetric.step)
        ):
            series.setdefault(name, []).append((step, value))
    return series


@retried
def latest_metrics(db: Database, run_id: str) -> dict[str, tuple[int, float]]:
    """Each series' newest point, ``{name: (step, value)}``: what a progress display shows."""
    newest = (
        select(RunMetric.name, func.max(RunMetric.step).label("step"))
        .where(RunMetric.run_id == run_id)
        .group_by(RunMetric.name)
        .subquery()
    )
    query = select(RunMetric.name, RunMetric.step, RunMetric.value).join(
        newest, (RunMetric.name == newest.c.name) & (RunMetric.step == newest.c.step)
    ).where(RunMetric.run_id == run_id)
    with db.read() as session:
        return {name: (step, value) for name, step, value in session.execute(query)}
