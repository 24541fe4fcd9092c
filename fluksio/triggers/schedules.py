"""Adding, listing, pausing and removing schedules: everything is checked when a schedule is added.

A bad cron expression, time zone, flow or parameter is refused here with the reason, never at the first
tick (which may be hours away, with nobody watching).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from fluksio.clock import utcnow
from fluksio.errors import ScheduleRejected
from fluksio.flows.flow import Flow
from fluksio.flows.registry import FlowRegistry
from fluksio.runs.submit import check_priority, flow_reference, validate_params
from fluksio.schemas import CatchUp, ScheduleRecord
from fluksio.store import schedules as rows
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.models import Schedule
from fluksio.triggers.timing import parse_every, timing, zone

#: A schedule's name goes into run listings and commands: letters, digits, ``_ . -``, starting with a
#: letter or digit.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def tick_key(schedule_id: str, tick: Any) -> str:
    """The idempotency key of a tick's run: the unique index on it lets one of several beats start it."""
    return f"schedule:{schedule_id}:{tick.isoformat()}"


def check_catchup(value: str | CatchUp) -> CatchUp:
    try:
        return CatchUp(value)
    except ValueError:
        raise ScheduleRejected(f"catchup {value!r} is not one of {', '.join(c.value for c in CatchUp)}") from None


def new_schedule(registry: FlowRegistry, name: str, flow: Flow | str, *, cron: str | None = None,
                 tz: str | None = None, every: str | int | timedelta | None = None,
                 params: Mapping[str, Any] | None = None, seed: int | None = None, priority: int = 0,
                 catchup: str | CatchUp = CatchUp.LAST) -> Schedule:
    """A checked, not yet stored, schedule row; :class:`ScheduleRejected` (or the flow's error) if anything is off."""
    if not isinstance(name, str) or not NAME.match(name):
        raise ScheduleRejected(f"schedule name {name!r} is not usable; use letters, digits, '_', '.' and '-' "
                               "(at most 100, starting with a letter or digit)")
    if (cron is None) == (every is None):
        raise ScheduleRejected("give a schedule exactly one of --cron EXPR and --every INTERVAL")
    if tz is not None and cron is None:
        raise ScheduleRejected("--tz applies to --cron only; an --every interval counts in real seconds")
    if tz is not None:
        zone(tz)
    every_s = parse_every(every) if every is not None else None
    if cron is not None:
        cron = " ".join(cron.split())
    timing(cron, tz, every_s)  # the expression parses and fires at least once
    resolved = registry.resolve(flow)
    given = dict(params or {})
    checked = validate_params(resolved, given, seed)  # references (@run:…) are resolved at each tick
    now = utcnow()
    return Schedule(
        id=new_run_id(), name=name, flow=resolved.name, flow_ref=flow_reference(resolved), cron=cron,
        tz=(tz or "UTC") if cron is not None else None, every_s=every_s,
        params={key: checked[key] for key in given}, seed=seed, priority=check_priority(priority),
        catchup=check_catchup(catchup).value, paused=False, created_at=now, updated_at=now, last_tick=None,
    )


def to_record(row: Schedule) -> ScheduleRecord:
    next_tick = None
    if not row.paused:
        next_tick = timing(row.cron, row.tz, row.every_s).ticks.following(utcnow())
    return ScheduleRecord(
        name=row.name, flow=row.flow, cron=row.cron, tz=row.tz, every_s=row.every_s, params=row.params or {},
        seed=row.seed, priority=row.priority or 0, catchup=CatchUp(row.catchup), paused=row.paused,
        created_at=row.created_at, last_tick=row.last_tick, next_tick=next_tick,
    )


class Schedules:
    """The schedules of an installation (``client.schedules``): they live in the run store, so every host and
    every beat sees the same ones."""

    def __init__(self, db: Database, registry: FlowRegistry) -> None:
        self.db = db
        self.registry = registry

    def add(self, name: str, flow: Flow | str, *, cron: str | None = None, tz: str | None = None,
            every: str | int | timedelta | None = None, params: Mapping[str, Any] | None = None,
            seed: int | None = None, priority: int = 0, catchup: str | CatchUp = CatchUp.LAST) -> ScheduleRecord:
        """Store a schedule: ``cron`` (five fields, read in ``tz``, default UTC) or ``every`` (``"10m"``, seconds).

        ``catchup``: what ticks missed while no beat ran get — ``last`` (one run, for the newest), ``none``
        or ``all`` (one run each, up to the ``schedule_catchup_limit`` setting).
        """
        row = new_schedule(self.registry, name, flow, cron=cron, tz=tz, every=every, params=params, seed=seed,
                           priority=priority, catchup=catchup)
        return to_record(rows.insert_schedule(self.db, row))

    def get(self, name: str) -> ScheduleRecord:
        return to_record(rows.get_schedule(self.db, name))

    def list(self) -> list[ScheduleRecord]:
        return [to_record(row) for row in rows.list_schedules(self.db)]

    def __iter__(self) -> Iterator[ScheduleRecord]:
        return iter(self.list())

    def pause(self, name: str) -> ScheduleRecord:
        """No ticks until resumed; ticks in between are missed ones (the schedule's catch-up policy)."""
        rows.set_paused(self.db, name, True)
        return self.get(name)

    def resume(self, name: str) -> ScheduleRecord:
        rows.set_paused(self.db, name, False)
        return self.get(name)

    def remove(self, name: str) -> None:
        """Remove the schedule; the runs it started keep its name (``client.runs(schedule=…)``)."""
        rows.remove_schedule(self.db, name)
