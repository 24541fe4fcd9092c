"""When a driver writes why its run waits: at once when the kinds of wait change, but a wait only once it lasted."""

from __future__ import annotations

from fluksio.driver.waitlists import WaitLists
from fluksio.schemas import DevicePolicy, Resources

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
