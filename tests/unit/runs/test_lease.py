"""The lease sweeper on a SQLite store: what it abandons, what it resumes, what a waiting client sees."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from fluksio.clock import utcnow
from fluksio.runs.lease import noticed_driverless, sweep_once
from fluksio.schemas import RunRecord, RunStatus
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.models import Run
from fluksio.store.run_rows import claim, get_run, insert_run


def running_run_with_a_dead_driver(db: Database, flow: str = "train") -> str:
    run = Run(id=new_run_id(), flow=flow, params={}, params_digest="sha256:p", status=RunStatus.QUEUED.value,
              created_at=utcnow(), engine="embedded")
    insert_run(db, run)
    claim(db, run.id, None)
    with db.write() as session:
        session.execute(update(Run).where(Run.id == run.id).values(lease_at=utcnow() - timedelta(minutes=2)))
    return run.id


def test_without_auto_resume_a_stale_run_is_abandoned_and_not_handed_over(db):
    run_id = running_run_with_a_dead_driver(db)
    handed: list[tuple[str, str, bool]] = []
    assert sweep_once(db, 60, drivable=["train"], hand_over=lambda *args: handed.append(args)) == [run_id]
    assert get_run(db, run_id).status == RunStatus.ABANDONED.value
    assert handed == []


def test_with_auto_resume_a_stale_run_is_queued_before_it_is_handed_over_never_abandoned(db):
    """A client polling the run must never see ``abandoned``: it would take it for the run's end."""
    run_id = running_run_with_a_dead_driver(db)
    seen: list[tuple[str, str, bool, str]] = []

    def hand_over(handed_id: str, flow: str, resumed: bool) -> None:
        seen.append((handed_id, flow, resumed, get_run(db, handed_id).status))

    assert sweep_once(db, 60, drivable=["train"], hand_over=hand_over, auto_resume=True) == [run_id]
    assert seen == [(run_id, "train", True, RunStatus.QUEUED.value)]
    stored = get_run(db, run_id)
    assert (stored.resumed_from, stored.resume_count) == (RunStatus.ABANDONED.value, 1)


def test_with_auto_resume_a_run_of_a_flow_this_process_cannot_load_is_left_to_another_then_abandoned(db):
    run_id = running_run_with_a_dead_driver(db, flow="elsewhere")  # lease 120 s old
    handed: list[tuple[str, str, bool]] = []
    # A sweeper that cannot load it leaves it one more stale limit to one that can (and would resume it)…
    assert sweep_once(db, 61, drivable=["train"], hand_over=lambda *args: handed.append(args),
                      auto_resume=True) == []
    assert get_run(db, run_id).status == RunStatus.RUNNING.value
    # …and once that is over too, no driver process has its flow: abandoned, saying how long it waited.
    assert sweep_once(db, 59, drivable=["train"], hand_over=lambda *args: handed.append(args),
                      auto_resume=True) == [run_id]
    stored = get_run(db, run_id)
    assert stored.status == RunStatus.ABANDONED.value and "none for over 118 s" in stored.status_reason
    assert handed == []


def test_a_lost_hand_over_of_a_resumed_run_is_sent_again_once_it_is_stale(db):
    run_id = running_run_with_a_dead_driver(db)

    def broker_down(*_args: object) -> None:
        raise ConnectionError("broker unreachable")

    with pytest.raises(ConnectionError):
        sweep_once(db, 60, drivable=["train"], hand_over=broker_down, auto_resume=True)
    assert get_run(db, run_id).status == RunStatus.QUEUED.value  # resumed, not lost nor abandoned
    handed: list[tuple[str, str, bool]] = []
    assert sweep_once(db, 60, drivable=["train"], hand_over=lambda *args: handed.append(args)) == []
    assert handed == []  # its queue time counts from the resume: not stale yet
    with db.write() as session:
        session.execute(update(Run).where(Run.id == run_id).values(lease_at=utcnow() - timedelta(minutes=2)))
    sweep_once(db, 60, drivable=["train"], hand_over=lambda *args: handed.append(args))
    assert handed == [(run_id, "train", False)]


def test_a_run_the_sweeper_abandons_is_told_to_its_alerts_and_a_resumed_one_is_not(db):
    abandoned, resumed = running_run_with_a_dead_driver(db), running_run_with_a_dead_driver(db, flow="etl")
    ended: list[tuple[str, RunStatus]] = []
    sweep_once(db, 61, drivable=["etl"], hand_over=lambda *args: None, auto_resume=True,
               ended=lambda run_id, status: ended.append((run_id, status)))
    assert ended == []  # the 'etl' run went back to queued; the other is left a second stale limit
    with db.write() as session:
        session.execute(update(Run).where(Run.id == abandoned).values(lease_at=utcnow() - timedelta(minutes=5)))
    sweep_once(db, 61, drivable=["etl"], hand_over=lambda *args: None, auto_resume=True,
               ended=lambda run_id, status: ended.append((run_id, status)))
    assert ended == [(abandoned, RunStatus.ABANDONED)]
    assert get_run(db, resumed).status == RunStatus.QUEUED.value


def record_of(status: RunStatus, lease_age_s: float | None, parked: bool = False) -> RunRecord:
    now = utcnow()
    return RunRecord(id="r1", flow="train", status=status, status_reason="2 calls running", created_at=now,
                     lease_at=None if lease_age_s is None else now - timedelta(seconds=lease_age_s), parked=parked)


def test_a_running_run_whose_lease_is_past_the_stale_limit_is_said_to_have_no_driver():
    seen = noticed_driverless(record_of(RunStatus.RUNNING, 75), stale_after_s=60)
    assert 74 < seen.driverless_s < 80
    assert seen.status_reason.startswith("no driver has refreshed this run for 7")
    assert seen.status_reason.endswith(" s; start a worker with --drivers (it resumes the run, keeping what "
                                       "finished)")
    assert seen.status is RunStatus.RUNNING  # said, not decided: the sweeper of a driver that comes back decides


@pytest.mark.parametrize(("status", "age", "parked"), [
    (RunStatus.RUNNING, 30, False),    # within the limit: its driver refreshes it
    (RunStatus.RUNNING, 300, True),    # parked: it waits for its child runs, with no driver on purpose
    (RunStatus.RUNNING, None, False),  # never claimed with a lease
    (RunStatus.OK, 300, False),        # ended: a lease means nothing any more
    (RunStatus.QUEUED, 300, False),
])
def test_a_run_with_a_driver_or_without_need_of_one_is_left_as_it_is(status, age, parked):
    record = record_of(status, age, parked)
    assert noticed_driverless(record, stale_after_s=60) is record


def test_the_client_says_a_run_has_no_driver_when_none_is_alive(tmp_path):
    from fluksio import Settings, connect

    # Its own sweeper judges leases only once it has reached the store for a whole stale limit (30 s here).
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'f.db'}", artifacts_dir=tmp_path / "artifacts",
                        stale_after_s=30)
    with connect(settings) as client:
        run_id = running_run_with_a_dead_driver(client._runtime.db)
        with client._runtime.db.write() as session:
            session.execute(update(Run).where(Run.id == run_id).values(lease_at=utcnow() - timedelta(seconds=40)))
        for record in (client.get(run_id), client.get(run_id, nodes=False), client.runs()[0]):
            assert record.status is RunStatus.RUNNING and record.driverless_s is not None
            assert record.driverless_s >= 40
            assert record.status_reason.startswith("no driver has refreshed this run for 4")


@pytest.mark.parametrize("shipped", [True, False])
def test_a_shipped_run_is_resumed_by_a_driver_that_accepts_shipped_code_whatever_its_flow(db, shipped):
    run_id = running_run_with_a_dead_driver(db, flow="not_registered_here")
    with db.write() as session:  # its code travelled with it: a driver that accepts shipped code drives its graph
        session.execute(update(Run).where(Run.id == run_id).values(code_entry="flows.py", code_digest="sha256:c"))
    handed: list[tuple[str, str, bool]] = []
    taken = sweep_once(db, 100, drivable={"train"}, hand_over=lambda *a: handed.append(a), auto_resume=True,
                       shipped=shipped)
    if shipped:
        assert taken == [run_id] and handed == [(run_id, "not_registered_here", True)]
        assert get_run(db, run_id).status == RunStatus.QUEUED.value
    else:  # left a second stale limit for a driver that can drive it
        assert taken == [] and handed == [] and get_run(db, run_id).status == RunStatus.RUNNING.value
