"""Tick arithmetic: when a cron expression or an interval fires, and which missed ticks to catch up on.

Pure (no Celery, no store), so it is tested with a clock of the test's choosing. Every time here is
timezone-aware; ticks are returned in UTC.

Two beats must name the same tick by the same time, or the idempotency key that lets exactly one of
them start its run would not match. So a tick is a property of the rule alone, never of when a beat
happened to look: an interval's ticks are the multiples of it since the Unix epoch (``--every 10m``
fires at :00, :10, :20 …), a cron expression's are the wall-clock minutes it names in its time zone.
A wall-clock time that does not exist that day (spring forward) is read as Python's zoneinfo reads it
(``fold=0``: an hour late); one that happens twice (autumn) fires the first time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Protocol

from fluksio.schemas import CatchUp

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Daylight-saving shifts move wall-clock time against real time by less than this (2 h is the most any
#: zone has used): candidates this far either side of a found tick are compared too.
SHIFT_WINDOW = timedelta(hours=3)
#: A cron expression with no tick this many days ahead never fires (29 Feb on a given weekday recurs
#: within 28 years).
HORIZON_DAYS = 366 * 28 + 7
_MICROSECOND = timedelta(microseconds=1)


class Ticks(Protocol):
    """A rule's ticks: both methods take and return aware datetimes."""

    def previous(self, at: datetime) -> datetime | None:
        """The latest tick at or before ``at`` (``None``: none)."""

    def following(self, after: datetime) -> datetime | None:
        """The earliest tick strictly after ``after`` (``None``: none)."""


@dataclass(frozen=True)
class EveryTicks:
    """Every ``seconds`` seconds, counted from the Unix epoch."""

    seconds: int

    def previous(self, at: datetime) -> datetime | None:
        step = timedelta(seconds=self.seconds)
        return EPOCH + ((at - EPOCH) // step) * step

    def following(self, after: datetime) -> datetime | None:
        return EPOCH + ((after - EPOCH) // timedelta(seconds=self.seconds) + 1) * timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class CronFields:
    """The values each field of a cron expression matches (as Celery's ``crontab`` expands them).

    A day matches when its month, its day of the month *and* its weekday (0 = Sunday) all match, which is
    Celery's reading of an expression that restricts both kinds of day.
    """

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]

    def matches(self, day: date) -> bool:
        return (day.month in self.months and day.day in self.days_of_month
                and day.isoweekday() % 7 in self.days_of_week)


@dataclass(frozen=True)
class CronTicks:
    """The wall-clock minutes ``fields`` names, in time zone ``tz``."""

    fields: CronFields
    tz: tzinfo

    def _utc(self, wall: datetime) -> datetime:
        return wall.replace(tzinfo=self.tz).astimezone(timezone.utc)

    def _walls(self, start: datetime, step: int) -> Iterator[datetime]:
        """Matching naive wall-clock times from ``start`` on, going back (``step`` -1) or forward (+1)."""
        hours = sorted(self.fields.hours, reverse=step < 0)
        minutes = sorted(self.fields.minutes, reverse=step < 0)
        for offset in range(HORIZON_DAYS):
            day = start.date() + timedelta(days=offset * step)
            if not self.fields.matches(day):
                continue
            for hour in hours:
                for minute in minutes:
                    wall = datetime(day.year, day.month, day.day, hour, minute)
                    if (wall - start) * step >= timedelta(0):
                        yield wall

    def previous(self, at: datetime) -> datetime | None:
        start = at.astimezone(self.tz).replace(tzinfo=None) + SHIFT_WINDOW
        best: datetime | None = None
        best_wall: datetime | None = None
        for wall in self._walls(start, -1):
            if best_wall is not None and wall < best_wall - SHIFT_WINDOW:
                break
            moment = self._utc(wall)
            if moment <= at and (best is None or moment > best):
                best, best_wall = moment, wall
        return best

    def following(self, after: datetime) -> datetime | None:
        start = after.astimezone(self.tz).replace(tzinfo=None) - SHIFT_WINDOW
        best: datetime | None = None
        best_wall: datetime | None = None
        for wall in self._walls(start, 1):
            if best_wall is not None and wall > best_wall + SHIFT_WINDOW:
                break
            moment = self._utc(wall)
            if moment > after and (best is None or moment < best):
                best, best_wall = moment, wall
        return best


def due_ticks(ticks: Ticks, since: datetime, now: datetime, catchup: CatchUp, limit: int,
              watching_since: datetime) -> tuple[list[datetime], datetime | None]:
    """The ticks to submit runs for now, oldest first, and the newest tick due (to count from next time).

    ``since``: the newest tick already submitted (or when the schedule was made); only later ticks are
    due. ``watching_since``: when this beat began watching the schedule — a tick older than that came due
    while nobody watched it (no beat ran, or the schedule was paused) and was *missed*. The policy says
    what missed ticks get: ``last`` one run for the newest due tick, ``none`` nothing (a tick that came
    due while watched still runs), ``all`` one run each, at most ``limit`` (the newest).
    """
    newest = ticks.previous(now)
    if newest is None or newest <= since:
        return [], None
    if catchup is CatchUp.LAST:
        return [newest], newest
    if catchup is CatchUp.NONE:
        return ([newest] if newest >= watching_since else []), newest
    due = [newest]
    while len(due) < limit:
        earlier = ticks.previous(due[-1] - _MICROSECOND)
        if earlier is None or earlier <= since:
            break
        due.append(earlier)
    return due[::-1], newest


def seconds_until(ticks: Ticks, now: datetime) -> float | None:
    """How long until the next tick, in seconds (``None``: it never comes)."""
    upcoming = ticks.following(now)
    return None if upcoming is None else max((upcoming - now).total_seconds(), 0.0)
