"""What a driver writes when: why its run waits (once the wait lasted), and nothing it need not read to end."""

from __future__ import annotations

from fluksio.driver.waitlists import WaitLists
from fluksio.schemas import DevicePolicy, Resources, RunStatus

GPU = (Resources(cpus=1, gpus=1), "gpu", DevicePolicy.REQUIRE)
WHY = "Train: waiting for a worker labelled 'gpu' with 1 gpu(s) free"


def waiting_for_a_gpu(quiet_s: float) -> WaitLists:
    lists = WaitLists(quiet_s=quiet_s)
    lists.add("train", GPU)
    lists.blocked(GPU, "waiting for a worker labelled 'gpu' with 1 gpu(s) free")
    return lists


def test_a_wait_that_ends_within_the_quiet_time_is_never_written() -> None:
    lists = waiting_for_a_gpu(quiet_s=0.5)
    assert lists.status_reason(10.0, every_s=5) == (False, WHY)
    assert lists.said_due_at() == 10.5
    lists.placed(GPU)
    assert lists.status_reason(10.3, every_s=5) == (False, None)  # nothing was said: nothing to take back
    assert lists.said_due_at() is None


def test_a_wait_that_lasts_is_written_then_and_its_end_at_once() -> None:
    lists = waiting_for_a_gpu(quiet_s=0.5)
    assert lists.status_reason(10.0, every_s=5)[0] is False
    assert lists.status_reason(10.49, every_s=5)[0] is False
    due, reason = lists.status_reason(10.5, every_s=5)
    assert due and reason == WHY
    assert lists.said_due_at() is None
    lists.placed(GPU)
    assert lists.status_reason(10.6, every_s=5) == (True, None)


def test_without_a_quiet_time_a_wait_is_written_at_once() -> None:
    lists = waiting_for_a_gpu(quiet_s=0.0)
    assert lists.status_reason(10.0, every_s=5)[0] is True


def test_a_run_without_a_parent_ends_without_reading_its_row_again(make_runtime, monkeypatch) -> None:
    from fluksio.runs import family
    from fluksio.store.run_rows import get_run
    from tests.unit.driver.drives import chain, drive_instantly

    runtime = make_runtime(cpus=1)
    told: list[str] = []
    monkeypatch.setattr(family, "tell_parent", lambda _runtime, run: told.append(run.id))
    run_id = drive_instantly(runtime, chain(2))
    assert get_run(runtime.db, run_id).status == "ok"
    assert told == []  # it has no parent: nobody to tell, and no read to find that out
    runtime.run_ended(run_id, RunStatus.OK)  # a caller that does not know still asks
    assert told == [run_id]


def test_a_turn_moving_up_is_neither_announced_nor_written_at_once() -> None:
    lists = WaitLists(quiet_s=0.0)
    lists.add("train", GPU)
    assert lists.blocked(GPU, "waiting for its turn: … (the first: a of run r1, priority 0)", "behind") == ["train"]
    assert lists.status_reason(10.0, every_s=5)[0] is True
    # Another call is first now: the same kind of wait, in other words. Said again within every_s, not at once.
    assert lists.blocked(GPU, "waiting for its turn: … (the first: b of run r2, priority 0)", "behind") == []
    assert lists.status_reason(11.0, every_s=5) == (False, "Train: waiting for its turn: … (the first: b of run r2, "
                                                           "priority 0)")
    assert lists.status_reason(15.0, every_s=5)[0] is True
    # Another kind of wait is news at once.
    assert lists.blocked(GPU, "waiting for a worker labelled 'gpu' with 1 gpu(s) free") == ["train"]
    assert lists.status_reason(15.1, every_s=5)[0] is True
