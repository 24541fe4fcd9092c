"""Run ends told in one process: who waits for a run is woken when its end is written, and nobody else."""

from __future__ import annotations

import threading

from fluksio.runs.ends import RunEnds


def test_the_end_of_a_run_wakes_every_watcher_of_that_run_and_no_other() -> None:
    ends = RunEnds()
    with ends.watch("r1") as first, ends.watch("r1") as second, ends.watch("r2") as other:
        ends.tell("r1")
        assert first.is_set() and second.is_set()
        assert not other.is_set()


def test_a_watch_ended_is_forgotten_and_a_later_end_finds_nobody() -> None:
    ends = RunEnds()
    with ends.watch("r1") as ended:
        pass
    ends.tell("r1")
    assert not ended.is_set()
    assert ends._waiting == {}


def test_an_end_told_from_another_thread_ends_a_wait() -> None:
    ends = RunEnds()
    with ends.watch("r1") as ended:
        teller = threading.Thread(target=ends.tell, args=("r1",))
        teller.start()
        assert ended.wait(30)
        teller.join()
