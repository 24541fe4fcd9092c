"""Tick arithmetic and catch-up, on clocks the tests choose (no sleeps, no beat)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from fluksio.errors import ScheduleRejected
from fluksio.schemas import CatchUp
from fluksio.triggers.ticks import CronTicks, EveryTicks, due_ticks
from fluksio.triggers.timing import CronSchedule, EverySchedule, parse_every, timing

UTC = timezone.utc
VIENNA = ZoneInfo("Europe/Vienna")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def cron(expression: str, tz: str = "UTC") -> CronTicks:
    return CronSchedule(expression, tz, nowfun=lambda: utc(2026, 1, 1)).ticks


def brute_force(expression: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """Every wall-clock minute in [start, end) the expression names, read as zoneinfo reads it (fold=0)."""
    schedule = CronSchedule(expression, tz, nowfun=lambda: start)
    zone = ZoneInfo(tz)
    walls = set()
    moment = start.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0) - timedelta(hours=3)
    while moment < end.astimezone(zone).replace(tzinfo=None) + timedelta(hours=3):
        if (moment.minute in schedule.minute and moment.hour in schedule.hour and moment.day in schedule.day_of_month
                and moment.month in schedule.month_of_year and moment.isoweekday() % 7 in schedule.day_of_week):
            walls.add(moment.replace(tzinfo=zone).astimezone(UTC))
        moment += timedelta(minutes=1)
    return sorted(t for t in walls if start <= t < end)


def test_an_interval_ticks_on_its_multiples_since_the_epoch() -> None:
    ticks = EveryTicks(600)
    assert ticks.previous(utc(2026, 5, 4, 10, 17, 3)) == utc(2026, 5, 4, 10, 10)
    assert ticks.previous(utc(2026, 5, 4, 10, 10)) == utc(2026, 5, 4, 10, 10)  # a tick is its own previous
    assert ticks.following(utc(2026, 5, 4, 10, 10)) == utc(2026, 5, 4, 10, 20)
    assert EveryTicks(2).following(utc(2026, 5, 4, 10, 0, 1, 999_999)) == utc(2026, 5, 4, 10, 0, 2)


def test_two_beats_looking_at_different_moments_name_the_same_tick() -> None:
    ticks = EveryTicks(2)
    first, second = utc(2026, 5, 4, 10, 0, 4, 1000), utc(2026, 5, 4, 10, 0, 5, 990_000)
    assert ticks.previous(first) == ticks.previous(second) == utc(2026, 5, 4, 10, 0, 4)


@pytest.mark.parametrize(("expression", "tz", "start"), [
    ("*/15 * * * *", "UTC", utc(2026, 3, 1)),
    ("30 2 * * *", "Europe/Vienna", utc(2026, 3, 27)),        # spring forward: 02:30 does not exist on 29 March
    ("30 2 * * *", "Europe/Vienna", utc(2026, 10, 23)),       # autumn: 02:30 happens twice on 25 October
    ("0,45 1-3 * * *", "Europe/Vienna", utc(2026, 10, 24, 12)),
    ("0 9 * * mon-fri", "America/New_York", utc(2026, 3, 6)),
    ("5 0 1,15 * *", "Asia/Kolkata", utc(2026, 1, 30)),
])
def test_cron_ticks_are_the_wall_clock_minutes_it_names(expression: str, tz: str, start: datetime) -> None:
    end = start + timedelta(days=4)
    expected = brute_force(expression, tz, start, end)
    ticks = cron(expression, tz)
    walked, moment = [], start - timedelta(microseconds=1)
    while (moment := ticks.following(moment)) is not None and moment < end:
        walked.append(moment)
    assert walked == expected
    rng = random.Random(7)
    for _ in range(40):  # previous(at) is the latest expected tick at or before `at`
        at = expected[0] + timedelta(seconds=rng.randrange(int((end - expected[0]).total_seconds())))
        assert ticks.previous(at) == max(t for t in expected if t <= at)


def test_a_cron_tick_in_the_spring_gap_fires_an_hour_late_and_an_autumn_one_the_first_time() -> None:
    ticks = cron("30 2 * * *", "Europe/Vienna")
    assert ticks.following(utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1, 30)   # 03:30 CEST
    assert ticks.following(utc(2026, 10, 24, 12)) == utc(2026, 10, 25, 0, 30)  # 02:30 CEST, not CET


def test_a_cron_expression_in_a_time_zone_fires_at_that_zones_wall_clock() -> None:
    assert cron("0 3 * * *", "Europe/Vienna").following(utc(2026, 7, 1)) == utc(2026, 7, 1, 1)   # CEST: UTC+2
    assert cron("0 3 * * *", "Europe/Vienna").following(utc(2026, 1, 1)) == utc(2026, 1, 1, 2)   # CET: UTC+1
    assert cron("0 3 * * *").following(utc(2026, 1, 1)) == utc(2026, 1, 1, 3)


def test_catchup_last_fires_once_for_the_newest_missed_tick() -> None:
    ticks = EveryTicks(60)
    since, now = utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 10, 5, 30)
    assert due_ticks(ticks, since, now, CatchUp.LAST, 100, watching_since=now) == (
        [utc(2026, 1, 1, 10, 5)], utc(2026, 1, 1, 10, 5))


def test_catchup_none_skips_missed_ticks_but_fires_one_that_came_while_watched() -> None:
    ticks = EveryTicks(60)
    since, now = utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 10, 5, 30)
    missed = due_ticks(ticks, since, now, CatchUp.NONE, 100, watching_since=now)
    assert missed == ([], utc(2026, 1, 1, 10, 5))
    watched = due_ticks(ticks, utc(2026, 1, 1, 10, 4), now, CatchUp.NONE, 100,
                        watching_since=utc(2026, 1, 1, 10, 4, 50))
    assert watched == ([utc(2026, 1, 1, 10, 5)], utc(2026, 1, 1, 10, 5))


def test_catchup_all_fires_each_missed_tick_oldest_first_up_to_the_limit() -> None:
    ticks = EveryTicks(60)
    since, now = utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 10, 5, 30)
    assert due_ticks(ticks, since, now, CatchUp.ALL, 100, watching_since=now)[0] == [
        utc(2026, 1, 1, 10, m) for m in range(1, 6)]
    assert due_ticks(ticks, since, now, CatchUp.ALL, 2, watching_since=now)[0] == [
        utc(2026, 1, 1, 10, 4), utc(2026, 1, 1, 10, 5)]  # the newest ones


def test_nothing_is_due_before_the_next_tick() -> None:
    ticks = cron("0 3 * * *", "Europe/Vienna")
    since = utc(2026, 1, 1, 2)  # 03:00 in Vienna, submitted
    for policy in CatchUp:
        assert due_ticks(ticks, since, utc(2026, 1, 2, 1, 59), policy, 100, since) == ([], None)
    assert due_ticks(ticks, since, utc(2026, 1, 2, 2), CatchUp.LAST, 100, since)[0] == [utc(2026, 1, 2, 2)]


def test_the_celery_schedules_say_due_when_a_tick_came_since_the_last_one_submitted() -> None:
    clock = [utc(2026, 1, 1, 10, 0, 1)]
    every = EverySchedule(2, nowfun=lambda: clock[0])
    assert every.is_due(utc(2026, 1, 1, 10, 0, 0)) == (False, pytest.approx(1.0))
    clock[0] = utc(2026, 1, 1, 10, 0, 2, 500_000)
    due, next_check = every.is_due(utc(2026, 1, 1, 10, 0, 0))
    assert due and next_check == pytest.approx(1.5)
    assert every == EverySchedule(2) and every != EverySchedule(3)
    assert CronSchedule("0 3 * * *", "UTC") != CronSchedule("0 3 * * *", "Europe/Vienna")


@pytest.mark.parametrize(("value", "seconds"), [("2s", 2), ("10m", 600), ("1h30m", 5400), ("1d", 86400), (90, 90),
                                                (timedelta(minutes=5), 300)])
def test_intervals_parse(value: object, seconds: int) -> None:
    assert parse_every(value) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(("cron_expr", "tz", "every", "message"), [
    ("0 3 * *", None, None, "has 4 field(s); it needs 5"),
    ("61 * * * *", None, None, "is invalid"),
    ("0 0 30 2 *", None, None, "never fires"),
    ("0 3 * * *", "Mars/Olympus", None, "unknown time zone 'Mars/Olympus'"),
    (None, None, "0s", "at least 1"),
    (None, None, "ten minutes", "is not an interval"),
    (None, None, None, "needs --cron EXPR or --every"),
])
def test_bad_timing_is_refused_with_the_reason(cron_expr: str | None, tz: str | None, every: str | None,
                                               message: str) -> None:
    with pytest.raises(ScheduleRejected, match=message.replace("(", r"\(").replace(")", r"\)")):
        timing(cron_expr, tz, parse_every(every) if every is not None else None)
