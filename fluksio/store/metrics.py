"""Metric series: batched upserts keyed on (run_id, name, step), on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fluksio.store.db import Database, retried
from fluksio.store.models import RunMetric

#: Rows per INSERT statement; SQLite allows 32,766 bound parameters and each row binds 4.
ROWS_PER_STATEMENT = 2_000


@retried
def upsert_metrics(db: Database, rows: Sequence[tuple[str, str, int, float]]) -> int:
    """Write ``(run_id, name, step, value)`` rows; a repeated key keeps the newest value.

    Returns the number of statements issued.
    """
    if not rows:
        return 0
    insert = sqlite_insert if db.is_sqlite else pg_insert
    statements = 0
    with db.write() as session:
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start:start + ROWS_PER_STATEMENT]
            # The same key twice in one statement is an error on PostgreSQL: keep the last.
            latest = {(r, n, s): v for r, n, s, v in chunk}
            statement = insert(RunMetric).values(
                [{"run_id": r, "name": n, "step": s, "value": v} for (r, n, s), v in latest.items()]
            )
            statement = statement.on_conflict_do_update(
                index_elements=["run_id", "name", "step"], set_={"value": statement.excluded.value}
            )
            session.execute(statement)
            statements += 1
    return statements


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
