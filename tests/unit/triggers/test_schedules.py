"""Schedules are checked when they are added, and stored so that every beat sees them."""

from __future__ import annotations

import pytest

from fluksio import Flow
from fluksio.errors import FlowNotFound, RunRejected, ScheduleNotFound, ScheduleRejected
from fluksio.flows.registry import FlowRegistry
from fluksio.schemas import CatchUp
from fluksio.store.db import Database
from fluksio.store.schedules import advance_tick, get_schedule
from fluksio.triggers.schedules import Schedules, tick_key
from fluksio.triggers.ticks import EPOCH

nightly = Flow("nightly", inputs={"lr": float, "seed": (int, 0)}, outputs=["x"])


@nightly.node(provides="x")
def fit(lr: float, seed: int) -> float:
    return lr * seed


@pytest.fixture
def schedules(db: Database) -> Schedules:
    return Schedules(db, FlowRegistry())


def test_a_schedule_is_stored_with_its_next_tick(schedules: Schedules) -> None:
    record = schedules.add("retrain", nightly, cron="0  3 * * *", tz="Europe/Vienna", params={"lr": 0.1}, seed=4,
                           priority=5, catchup="all")
    assert (record.name, record.flow, record.cron, record.tz, record.every_s) == (
        "retrain", "nightly", "0 3 * * *", "Europe/Vienna", None)
    assert record.params == {"lr": 0.1} and record.seed == 4 and record.priority == 5
    assert record.catchup is CatchUp.ALL and not record.paused and record.next_tick is not None
    assert record.next_tick.astimezone().hour is not None and record.last_tick is None
    assert [r.name for r in schedules.list()] == ["retrain"]


def test_an_interval_schedule_is_stored_in_seconds(schedules: Schedules) -> None:
    record = schedules.add("check", nightly, every="1h30m", params={"lr": 1.0})
    assert record.every_s == 5400 and record.cron is None and record.tz is None
    assert record.next_tick is not None and (record.next_tick - EPOCH).total_seconds() % 5400 == 0


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(cron="0 3 * * * *"), ScheduleRejected, r"has 6 field\(s\)"),
    (dict(cron="0 25 * * *"), ScheduleRejected, "is invalid"),
    (dict(cron="0 3 * * *", tz="Europe/Viena"), ScheduleRejected, "did you mean Europe/Vienna"),
    (dict(every="10m", tz="UTC"), ScheduleRejected, "--tz applies to --cron only"),
    (dict(cron="0 3 * * *", every="10m"), ScheduleRejected, "exactly one of --cron"),
    (dict(), ScheduleRejected, "exactly one of --cron"),
    (dict(every="10m", params={"lr": "fast"}), RunRejected, "input 'lr' of flow 'nightly' must be float"),
    (dict(every="10m", params={"lr": 0.1, "epochs": 3}), RunRejected, "'epochs' is not an input"),
    (dict(every="10m", params={}), RunRejected, "needs input 'lr'"),
    (dict(every="10m", params={"lr": 0.1}, priority=2**40), RunRejected, "priority must be a whole number"),
    (dict(every="10m", params={"lr": 0.1}, catchup="some"), ScheduleRejected, "catchup 'some' is not one of"),
])
def test_bad_input_is_refused_at_add_with_the_reason(schedules: Schedules, kwargs: dict, error: type,
                                                       message: str) -> None:
    with pytest.raises(error, match=message):
        schedules.add("bad", nightly, **kwargs)
    assert schedules.list() == []


def test_an_unknown_flow_is_refused_at_add(schedules: Schedules) -> None:
    with pytest.raises(FlowNotFound, match="no flow named 'nowhere' is registered"):
        schedules.add("bad", "nowhere", every="10m")
    with pytest.raises(FlowNotFound, match="no flow file"):
        schedules.add("bad", "missing/flows.py:flow", every="10m")


def test_a_bad_name_and_a_taken_name_are_refused(schedules: Schedules) -> None:
    with pytest.raises(ScheduleRejected, match="is not usable"):
        schedules.add("no spaces", nightly, every="10m", params={"lr": 1.0})
    schedules.add("once", nightly, every="10m", params={"lr": 1.0})
    with pytest.raises(ScheduleRejected, match="exists already"):
        schedules.add("once", nightly, every="1h", params={"lr": 1.0})


def test_pause_resume_and_remove(schedules: Schedules, db: Database) -> None:
    schedules.add("s", nightly, every="10m", params={"lr": 1.0})
    before = get_schedule(db, "s").updated_at
    assert schedules.pause("s").paused and schedules.get("s").next_tick is None
    assert get_schedule(db, "s").updated_at > before  # beats notice the change by it
    assert not schedules.resume("s").paused
    schedules.remove("s")
    for action in (schedules.pause, schedules.resume, schedules.remove, schedules.get):
        with pytest.raises(ScheduleNotFound, match="no schedule named 's'"):
            action("s")


def test_the_last_tick_only_moves_forward(schedules: Schedules, db: Database) -> None:
    schedules.add("s", nightly, every="10s", params={"lr": 1.0})
    row = get_schedule(db, "s")
    later, earlier = EPOCH.replace(year=2030), EPOCH.replace(year=2029)
    assert advance_tick(db, row.id, later)
    assert not advance_tick(db, row.id, earlier)
    assert schedules.get("s").last_tick == later


def test_a_tick_key_names_the_schedule_row_not_its_name() -> None:
    assert tick_key("01ABC", EPOCH) == "schedule:01ABC:1970-01-01T00:00:00+00:00"
