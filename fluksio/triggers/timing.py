"""A schedule's timing as Celery beat schedules: ``crontab`` and ``schedule`` with ticks that every beat agrees on.

Celery parses and validates the cron expression (its ``crontab`` expands the five fields), and its beat
loop asks these objects :meth:`is_due` as it asks any schedule. What they answer comes from
:mod:`fluksio.triggers.ticks`: Celery's own interval counts from the moment a beat last ran it, and its
crontab from the last run time, so two beats started apart would name different ticks, and a beat
back from an outage could not tell which ticks it missed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from celery.schedules import ParseException, crontab, schedstate, schedule

from fluksio.clock import utcnow
from fluksio.errors import ScheduleRejected
from fluksio.triggers.ticks import CronFields, CronTicks, EveryTicks, Ticks, seconds_until

#: ``--every`` values: one or more number-and-unit pairs (``90s``, ``10m``, ``1h30m``, ``1d``).
EVERY = re.compile(r"^(?:\d+[smhd])+$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: How often a rule whose next tick is far away is looked at anyway, in seconds (the beat's own loop
#: interval is shorter still).
_LONGEST_CHECK_S = 300.0


def parse_every(value: str | int | timedelta) -> int:
    """An interval in whole seconds (≥ 1): ``"10m"``, ``"1h30m"``, ``90`` or a ``timedelta``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and EVERY.match(value.strip().lower()):
        seconds = sum(int(n) * _UNIT_S[u] for n, u in re.findall(r"(\d+)([smhd])", value.strip().lower()))
    else:
        raise ScheduleRejected(f"--every {value!r} is not an interval; write it as a number and a unit: "
                               "90s, 10m, 1h30m or 1d")
    if seconds < 1 or seconds != int(seconds):
        raise ScheduleRejected(f"--every {value!r}: an interval is a whole number of seconds, at least 1")
    return int(seconds)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or :class:`ScheduleRejected` saying what the near names are."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        import difflib

        near = difflib.get_close_matches(name, sorted(available_timezones()), n=3)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise ScheduleRejected(f"unknown time zone {name!r}; {hint}use an IANA name such as Europe/Vienna, "
                               "America/New_York or UTC") from None


def cron_fields(expression: str) -> crontab:
    """Celery's ``crontab`` of a five-field expression (minute hour day-of-month month day-of-week)."""
    fields = expression.split()
    if len(fields) != 5:
        raise ScheduleRejected(f"cron expression {expression!r} has {len(fields)} field(s); it needs 5: minute "
                               "hour day-of-month month day-of-week (e.g. '0 3 * * *': 03:00 every day)")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    try:
        return crontab(minute=minute, hour=hour, day_of_week=day_of_week, day_of_month=day_of_month,
                       month_of_year=month_of_year)
    except (ValueError, ParseException, TypeError) as exc:
        raise ScheduleRejected(f"cron expression {expression!r} is invalid: {exc}") from None


class _Ticked:
    """What the two schedules share: ``is_due`` from the tick arithmetic, and the clock they read."""

    ticks: Ticks
    nowfun: Callable[[], datetime] | None

    def now(self) -> datetime:
        return (self.nowfun or utcnow)()

    def is_due(self, last_run_at: datetime) -> schedstate:
        """Due when a tick has come since ``last_run_at`` (the newest tick submitted, not when a beat ran)."""
        now = self.now()
        newest = self.ticks.previous(now)
        wait = seconds_until(self.ticks, now)
        next_check = _LONGEST_CHECK_S if wait is None else min(wait, _LONGEST_CHECK_S)
        if newest is not None and newest > last_run_at:
            return schedstate(True, next_check)
        return schedstate(False, next_check)

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        upcoming = self.ticks.following(max(last_run_at, self.now()))
        return timedelta(seconds=_LONGEST_CHECK_S) if upcoming is None else upcoming - self.now()


class CronSchedule(_Ticked, crontab):
    """A cron expression read in time zone ``tz``."""

    def __init__(self, expression: str, tz: str = "UTC", nowfun: Callable[[], datetime] | None = None,
                 app: Any = None) -> None:
        parsed = cron_fields(expression)
        crontab.__init__(self, minute=parsed._orig_minute, hour=parsed._orig_hour,
                         day_of_week=parsed._orig_day_of_week, day_of_month=parsed._orig_day_of_month,
                         month_of_year=parsed._orig_month_of_year, nowfun=nowfun, app=app)
        self.expression = " ".join(expression.split())
        self.tz_name = tz
        self.ticks = CronTicks(CronFields(frozenset(self.minute), frozenset(self.hour), frozenset(self.day_of_month),
                                          frozenset(self.month_of_year), frozenset(self.day_of_week)), zone(tz))
        if self.ticks.following(self.now()) is None:
            raise ScheduleRejected(f"cron expression {expression!r} never fires (no such day in the next 28 years)")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CronSchedule):
            return (self.expression, self.tz_name) == (other.expression, other.tz_name)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return self.__class__, (self.expression, self.tz_name, self.nowfun)

    def __repr__(self) -> str:
        return f"<cron {self.expression!r} in {self.tz_name}>"


class EverySchedule(_Ticked, schedule):
    """Every ``seconds`` seconds, on the multiples of it since the epoch."""

    def __init__(self, seconds: int, nowfun: Callable[[], datetime] | None = None, app: Any = None) -> None:
        schedule.__init__(self, timedelta(seconds=seconds), nowfun=nowfun, app=app)
        self.seconds_each = seconds
        self.ticks = EveryTicks(seconds)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EverySchedule):
            return self.ticks == other.ticks
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return self.__class__, (self.seconds_each, self.nowfun)


def timing(cron: str | None, tz: str | None, every_s: int | None,
           nowfun: Callable[[], datetime] | None = None) -> CronSchedule | EverySchedule:
    """The Celery schedule of a stored schedule's timing."""
    if cron is not None:
        return CronSchedule(cron, tz or "UTC", nowfun=nowfun)
    if every_s is None:
        raise ScheduleRejected("a schedule needs --cron EXPR or --every INTERVAL")
    return EverySchedule(every_s, nowfun=nowfun)
