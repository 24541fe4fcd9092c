"""The Celery beat scheduler of an installation: its entries are the rows of the schedules table.

``fluksio beat`` runs Celery's own beat service with :class:`TableScheduler`. The scheduler re-reads the
table every ``schedule_refresh_s`` seconds, so schedules added, paused, resumed or removed anywhere are
noticed without a restart. When an entry is due, the beat journals the tick's run itself, with the
idempotency key (schedule, tick): of two beats firing the same tick the run store's unique index lets one
insert it, and the other gets that run back — one run per tick however many beats run, and a beat
restarted mid-tick finds the run it made before dying. Then the run is handed to a driver like any
submit (a hand-over lost with a dying beat is found by the lease sweeper, as for any queued run).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery import Celery
from celery.beat import ScheduleEntry, Scheduler

from fluksio.clock import utcnow
from fluksio.constants import DRIVE_TASK
from fluksio.errors import FluksioError, StoreUnavailable
from fluksio.runs.submit import submit_run
from fluksio.runtime import Runtime
from fluksio.schemas import CatchUp
from fluksio.store import schedules as rows
from fluksio.store.models import Schedule
from fluksio.triggers.schedules import tick_key
from fluksio.triggers.ticks import due_ticks
from fluksio.triggers.timing import timing

log = logging.getLogger(__name__)

#: The task name beat shows for a schedule's entry. No worker consumes it: the beat submits the run itself.
TICK_TASK = "fluksio.schedule-tick"


@dataclass(frozen=True)
class Spec:
    """What a tick submits, as the row said when the beat read it."""

    id: str
    name: str
    flow: str
    flow_ref: str | None
    params: dict[str, Any]
    seed: int | None
    priority: int
    catchup: CatchUp

    @classmethod
    def of(cls, row: Schedule) -> Spec:
        return cls(row.id, row.name, row.flow, row.flow_ref, dict(row.params or {}), row.seed, row.priority or 0,
                   CatchUp(row.catchup))


class TickEntry(ScheduleEntry):
    """A beat entry whose ``last_run_at`` is the newest tick submitted (not when a beat ran it)."""

    def __init__(self, *, spec: Spec | None = None, watching_since: datetime | None = None,
                 due: tuple[datetime, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        #: When this beat began watching this version of the schedule: older ticks were missed.
        self.watching_since = watching_since or self.schedule.now()
        #: The ticks :meth:`TableScheduler.reserve` found due, for ``apply_async`` to submit.
        self.due = due

    def _next_instance(self, last_run_at: datetime | None = None) -> TickEntry:
        return self.__class__(**dict(self, last_run_at=last_run_at or self.last_run_at,
                                     total_run_count=self.total_run_count + 1, due=()))

    __next__ = next = _next_instance


class TableScheduler(Scheduler):
    """Celery beat's scheduler over the ``schedules`` table (the app must carry ``fluksio_runtime``)."""

    Entry = TickEntry
    #: The clock the entries read (tests give a clock of their own).
    clock = staticmethod(utcnow)

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        self.runtime: Runtime = app.fluksio_runtime  # type: ignore[attr-defined]
        settings = self.runtime.settings
        self.refresh_s = settings.schedule_refresh_s
        self.catchup_limit = settings.schedule_catchup_limit
        self._refreshed_at: datetime | None = None
        # Never sleep past a refresh: a schedule added meanwhile would wait for the beat's long sleep.
        kwargs["max_interval"] = min(kwargs.get("max_interval") or self.refresh_s, self.refresh_s)
        super().__init__(app, *args, **kwargs)

    # -- the table ------------------------------------------------------------------------------

    def setup_schedule(self) -> None:
        self.data: dict[str, TickEntry] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the table: new and changed schedules get fresh entries, the others keep theirs."""
        self._refreshed_at = self.clock()
        try:
            table = rows.list_schedules(self.runtime.db, include_paused=False)
        except Exception:  # the store is down: keep firing what was read last
            log.warning("beat: cannot read the schedules table; keeping the %d schedule(s) read before",
                        len(self.data), exc_info=True)
            return
        entries: dict[str, TickEntry] = {}
        for row in table:
            current = self.data.get(row.name)
            if current is not None and current.kwargs.get("version") == _version(row):
                if row.last_tick is not None and row.last_tick > current.last_run_at:
                    current.last_run_at = row.last_tick  # another beat submitted it already
                entries[row.name] = current
                continue
            try:
                entries[row.name] = self._entry(row)
            except FluksioError as exc:
                log.error("beat: schedule %s cannot fire: %s", row.name, exc)
        for name in set(self.data) - set(entries):
            log.info("beat: schedule %s removed or paused", name)
        for name in set(entries) - set(self.data):
            log.info("beat: watching schedule %s (%r)", name, entries[name].schedule)
        self.data = entries

    def _entry(self, row: Schedule) -> TickEntry:
        return TickEntry(
            name=row.name, task=TICK_TASK, app=self.app,
            schedule=timing(row.cron, row.tz, row.every_s, nowfun=self.clock),
            last_run_at=row.last_tick or row.created_at, kwargs={"schedule": row.name, "version": _version(row)},
            spec=Spec.of(row), watching_since=self.clock(),
        )

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self._refreshed_at is None or (self.clock() - self._refreshed_at).total_seconds() >= self.refresh_s:
            self.refresh()
        return super().tick(*args, **kwargs)

    # -- firing ---------------------------------------------------------------------------------

    def reserve(self, entry: TickEntry) -> TickEntry:
        """Work out which ticks are due once, at one instant, and count from the newest of them next time."""
        due, newest = due_ticks(entry.schedule.ticks, entry.last_run_at, entry.schedule.now(),
                                entry.spec.catchup if entry.spec else CatchUp.LAST, self.catchup_limit,
                                entry.watching_since)
        entry.due = tuple(due)
        missed = [tick for tick in due if tick < entry.watching_since]
        if missed:
            log.info("beat: schedule %s catches up (catchup=%s) on %d tick(s) missed while no beat watched it: %s",
                     entry.name, entry.spec.catchup.value if entry.spec else "last", len(missed),
                     ", ".join(tick.isoformat() for tick in missed[-3:]))
        elif newest is not None and not due:
            log.info("beat: schedule %s skips the tick of %s, missed while no beat watched (catchup none)",
                     entry.name, newest.isoformat())
        new_entry = self.schedule[entry.name] = entry._next_instance(last_run_at=newest)
        return new_entry

    def apply_async(self, entry: TickEntry, producer: Any = None, advance: bool = True, **kwargs: Any) -> None:
        assert entry.spec is not None
        for tick in entry.due:
            try:
                self._fire(entry.spec, tick, producer)
            except Exception as exc:
                # Not this tick's fault (the store is away: _fire settles every other kind): count from
                # before it, so the schedule's catch-up policy takes it up at the next look.
                following = self.schedule.get(entry.name)
                if following is not None:
                    following.last_run_at = entry.last_run_at
                log.warning("beat: schedule %s could not submit its tick of %s (%s: %s); trying again",
                            entry.name, tick.isoformat(), type(exc).__name__, exc)
                return

    def _fire(self, spec: Spec, tick: datetime, producer: Any) -> None:
        db = self.runtime.db
        registry = self.runtime.registry
        # A flow this process registered (FLUKSIO_FLOWS) by its name; else the reference `schedule add` saw.
        flow = spec.flow if spec.flow in registry.names() or not spec.flow_ref else spec.flow_ref
        try:
            run, created = submit_run(
                db, registry, self.runtime.artifacts, flow,
                engine=self.runtime.settings.engine, params=spec.params, seed=spec.seed,
                idempotency_key=tick_key(spec.id, tick), priority=spec.priority, schedule=spec.name,
                schedule_tick=tick, pools=self.runtime.settings.pools,
                code_max_mb=self.runtime.settings.code_max_mb, signer=self.runtime.signer,
            )
        except StoreUnavailable:
            raise
        except FluksioError as exc:
            # The flow or its inputs changed since the schedule was added: no run can be made of this tick.
            log.error("beat: schedule %s: the tick of %s submitted no run: %s", spec.name, tick.isoformat(), exc)
            rows.advance_tick(db, spec.id, tick)
            return
        if created:
            try:
                self.app.send_task(DRIVE_TASK, args=[run.id], shadow=f"drive {run.flow}", producer=producer)
            except Exception as exc:  # the run is journaled; the lease sweeper hands a stranded queued run over
                log.warning("beat: run %s of schedule %s is queued but its hand-over failed (%s: %s); a driver's "
                            "sweeper sends it again", run.id, spec.name, type(exc).__name__, exc)
            log.info("beat: schedule %s: tick %s started run %s", spec.name, tick.isoformat(), run.id)
        else:
            log.info("beat: schedule %s: tick %s has its run already (%s)", spec.name, tick.isoformat(), run.id)
        rows.advance_tick(db, spec.id, tick)

    @property
    def info(self) -> str:
        return f"    . schedules -> the run store's table, re-read every {self.refresh_s:g} s"


def _version(row: Schedule) -> str:
    """Changes with every edit of the row (a pause, a resume, a remove and add under the same name)."""
    return f"{row.id}@{row.updated_at.isoformat()}"
