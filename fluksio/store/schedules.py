"""Reads and writes of ``schedules`` rows: what every beat of an installation fires."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from fluksio.clock import utcnow
from fluksio.errors import ScheduleNotFound, ScheduleRejected
from fluksio.store.db import Database, retried
from fluksio.store.models import Schedule


@retried
def insert_schedule(db: Database, schedule: Schedule) -> Schedule:
    """Store a new schedule; a name already taken is refused (the unique index decides)."""
    try:
        with db.write() as session:
            session.add(schedule)
        return schedule
    except IntegrityError:
        raise ScheduleRejected(f"a schedule named {schedule.name!r} exists already; `fluksio schedule remove "
                               f"{schedule.name}` first, or pick another name") from None


@retried
def get_schedule(db: Database, name: str) -> Schedule:
    with db.read() as session:
        schedule = session.scalar(select(Schedule).where(Schedule.name == name))
    if schedule is None:
        raise ScheduleNotFound(f"no schedule named {name!r}; `fluksio schedule list` shows them")
    return schedule


@retried
def list_schedules(db: Database, include_paused: bool = True) -> list[Schedule]:
    query = select(Schedule).order_by(Schedule.name)
    if not include_paused:
        query = query.where(Schedule.paused.is_(False))
    with db.read() as session:
        return list(session.scalars(query))


@retried
def set_paused(db: Database, name: str, paused: bool) -> bool:
    """Pause or resume; returns whether anything changed. ``updated_at`` moves, so beats notice."""
    get_schedule(db, name)  # raises, naming the command that lists them
    with db.write() as session:
        result = cast(CursorResult[Any], session.execute(
            update(Schedule).where(Schedule.name == name, Schedule.paused.is_(not paused))
            .values(paused=paused, updated_at=utcnow())
        ))
        return result.rowcount == 1


@retried
def remove_schedule(db: Database, name: str) -> None:
    """Remove a schedule (the runs it started stay, with its name on them)."""
    with db.write() as session:
        removed = cast(CursorResult[Any], session.execute(delete(Schedule).where(Schedule.name == name))).rowcount
    if not removed:
        raise ScheduleNotFound(f"no schedule named {name!r}; `fluksio schedule list` shows them")


@retried
def advance_tick(db: Database, schedule_id: str, tick: datetime) -> bool:
    """Record that ``tick`` was submitted. Only moves forward, so two beats can write it in any order."""
    with db.write() as session:
        result = cast(CursorResult[Any], session.execute(
            update(Schedule).where(Schedule.id == schedule_id,
                                   or_(Schedule.last_tick.is_(None), Schedule.last_tick < tick))
            .values(last_tick=tick)
        ))
        return result.rowcount == 1
