"""The beat's scheduler on a simulated clock: Celery's own ``Scheduler.tick`` loop, a real SQLite store, and
time that the test moves (no sleeps, no beat process)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import update

from fluksio import Flow, Settings
from fluksio.runtime import Runtime
from fluksio.store import run_rows
from fluksio.store.models import Schedule
from fluksio.store.schedules import get_schedule, set_paused
from fluksio.triggers.beat import TableScheduler
from fluksio.triggers.schedules import Schedules

hourly = Flow("hourly", inputs={"n": int}, outputs=["n"])


@hourly.node(provides="n2")
def double(n: int) -> int:
    return 2 * n


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    runtime = Runtime.standalone(Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}",
                                          artifacts_dir=tmp_path / "artifacts", schedule_refresh_s=1,
                                          schedule_catchup_limit=3))
    runtime.db.upgrade()
    runtime.registry.register(hourly)
    yield runtime
    runtime.close()


def beat(runtime: Runtime, clock: Clock) -> TableScheduler:
    app = Celery("beat-test", set_as_current=False)
    app.conf.broker_url = "memory://"
    app.fluksio_runtime = runtime  # type: ignore[attr-defined]

    class Clocked(TableScheduler):
        pass

    Clocked.clock = staticmethod(clock)  # type: ignore[method-assign]
    return Clocked(app)


def run_for(beats: list[TableScheduler], clock: Clock, seconds: float, step_s: float = 0.25,
            between: Callable[[], None] = lambda: None) -> None:
    """Each beat runs Celery's tick loop as `celery beat` would, while the clock moves in ``step_s`` steps."""
    end = clock.now + timedelta(seconds=seconds)
    while clock.now < end:
        for scheduler in beats:
            for _ in range(20):  # a tick fires at most one entry; due ones come back at once (0 s)
                if scheduler.tick() > 0:
                    break
        between()
        clock.now += timedelta(seconds=step_s)


def add(runtime: Runtime, name: str, **kwargs: object) -> None:
    """A schedule made at START (on the test's clock, not the wall clock)."""
    Schedules(runtime.db, runtime.registry).add(name, hourly, every="2s", params={"n": 1}, **kwargs)  # type: ignore[arg-type]
    with runtime.db.write() as session:
        session.execute(update(Schedule).where(Schedule.name == name).values(created_at=START, updated_at=START))


def ticks_of(runtime: Runtime, name: str) -> Counter[datetime]:
    return Counter(r.schedule_tick for r in run_rows.list_runs(runtime.db, schedule=name, limit=1000))


#: After the schedules are made (ticks before a schedule existed are never due), between two ticks.
#: The test clock's start: after the wall clock for as long as the suite may run (schedules a test adds through
#: the API are stamped with the wall clock, and must come before START whenever the test runs).
START = (datetime.now(timezone.utc) + timedelta(days=1)).replace(microsecond=300_000)


def tick_at(at: datetime) -> datetime:
    """The 2-s tick at or before ``at``."""
    return at.replace(microsecond=0) - timedelta(seconds=at.second % 2)


def test_two_beats_start_one_run_per_tick(runtime: Runtime) -> None:
    clock = Clock(START)
    add(runtime, "pair")
    beats = [beat(runtime, clock), beat(runtime, clock)]
    run_for(beats, clock, 10.0)
    ticks = ticks_of(runtime, "pair")
    assert sorted(ticks) == [tick_at(START) + timedelta(seconds=s) for s in range(2, 12, 2)]
    assert set(ticks.values()) == {1}
    run = run_rows.list_runs(runtime.db, schedule="pair", limit=1)[0]
    assert (run.schedule, run.params, run.status) == ("pair", {"n": 1}, "queued")
    assert run.idempotency_key.startswith("schedule:")


def test_a_beat_restarted_after_an_outage_catches_up_on_the_newest_missed_tick_only(runtime: Runtime) -> None:
    clock = Clock(START)
    add(runtime, "gap")
    run_for([beat(runtime, clock)], clock, 4.0)
    before = set(ticks_of(runtime, "gap"))
    clock.now += timedelta(seconds=9)  # no beat for 9 s: four ticks missed
    run_for([beat(runtime, clock)], clock, 0.5)
    after = set(ticks_of(runtime, "gap")) - before
    assert after == {tick_at(clock.now - timedelta(seconds=0.5))}


def test_catchup_none_skips_the_missed_ticks_and_all_takes_them_up_to_the_limit(runtime: Runtime) -> None:
    clock = Clock(START)
    add(runtime, "skip", catchup="none")
    add(runtime, "every", catchup="all")
    clock.now += timedelta(seconds=10)  # five ticks came while no beat ran
    run_for([beat(runtime, clock)], clock, 2.5)
    assert len(ticks_of(runtime, "skip")) == 1  # just the tick that came while the beat watched
    assert len(ticks_of(runtime, "every")) == 3 + 1  # the limit (3) of the missed ones, and the new one


def test_a_restarted_beat_that_finds_its_ticks_unrecorded_starts_no_second_run(runtime: Runtime) -> None:
    clock = Clock(START)
    add(runtime, "again", catchup="all")
    run_for([beat(runtime, clock)], clock, 6.0)
    assert len(ticks_of(runtime, "again")) == 3
    # As if the beat died after journaling those runs and before recording their ticks.
    with runtime.db.write() as session:
        session.execute(update(Schedule).values(last_tick=None))
    run_for([beat(runtime, clock)], clock, 0.5)
    ticks = ticks_of(runtime, "again")
    assert len(ticks) == 3 and set(ticks.values()) == {1}


def test_a_schedule_added_or_paused_while_the_beat_runs_is_noticed(runtime: Runtime) -> None:
    clock = Clock(START)
    schedules = Schedules(runtime.db, runtime.registry)
    scheduler = beat(runtime, clock)
    added: list[bool] = []

    def add_once() -> None:
        if not added and clock.now >= START + timedelta(seconds=1):
            schedules.add("late", hourly, every="2s", params={"n": 1})
            added.append(True)

    run_for([scheduler], clock, 6.0, between=add_once)
    assert len(ticks_of(runtime, "late")) >= 2
    set_paused(runtime.db, "late", True)
    clock.now += timedelta(seconds=1.5)  # the next refresh sees the pause
    count = len(ticks_of(runtime, "late"))
    run_for([scheduler], clock, 6.0)
    assert len(ticks_of(runtime, "late")) <= count + 1  # at most a tick already due when it was paused
    before = set(ticks_of(runtime, "late"))
    resumed_at = clock.now
    set_paused(runtime.db, "late", False)
    run_for([scheduler], clock, 1.5)
    new = sorted(set(ticks_of(runtime, "late")) - before)
    # catchup last: one run for the newest tick missed in the pause, then the ticks as they come
    assert new[0] == tick_at(resumed_at) and max(before) < tick_at(resumed_at) - timedelta(seconds=4)
    assert all(b - a == timedelta(seconds=2) for a, b in zip(new, new[1:]))
    assert get_schedule(runtime.db, "late").last_tick == max(ticks_of(runtime, "late"))
