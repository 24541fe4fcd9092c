"""`fluksio worker --idle-timeout`: the watch that stops a worker after a while without node calls.

(It lives in fluksio/worker/idle.py; its test sits with the provisioners, whose workers use it.)
"""

from __future__ import annotations

import threading

import pytest

from fluksio.worker.idle import IdleExit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_it_stops_the_worker_once_idle_for_the_timeout() -> None:
    clock, stopped, busy = Clock(), [], [False]
    watch = IdleExit(10, busy=[lambda: busy[0]], stop=lambda: stopped.append(clock.now), clock=clock)
    clock.now = 9.9
    assert not watch.check() and not stopped
    clock.now = 10
    assert watch.check() and stopped == [10]
    assert watch.check() and stopped == [10]  # only once


def test_a_call_restarts_the_count() -> None:
    clock, stopped, busy = Clock(), [], [False]
    watch = IdleExit(10, busy=[lambda: busy[0]], stop=lambda: stopped.append(clock.now), clock=clock)
    clock.now, busy[0] = 8, True
    watch.check()
    clock.now, busy[0] = 30, True  # a long call: busy all along
    assert not watch.check()
    busy[0] = False
    clock.now = 39
    assert not watch.check()
    clock.now = 40
    assert watch.check() and stopped == [40]


def test_a_received_task_counts_as_activity() -> None:
    clock, stopped = Clock(), []
    watch = IdleExit(10, busy=[lambda: False], stop=lambda: stopped.append(clock.now), clock=clock)
    clock.now = 9
    watch._touch(sender=None)
    clock.now = 18
    assert not watch.check()
    clock.now = 19
    assert watch.check()


def test_a_check_that_fails_counts_as_busy() -> None:
    clock, stopped = Clock(), []

    def broken() -> bool:
        raise ConnectionError("redis away")

    watch = IdleExit(1, busy=[broken], stop=lambda: stopped.append(1), clock=clock)
    clock.now = 100
    assert not watch.check() and not stopped


def test_the_thread_fires_on_its_own_and_stops_cleanly() -> None:
    fired = threading.Event()
    watch = IdleExit(0.05, busy=[lambda: False], stop=fired.set, check_every_s=0.01).start()
    try:
        assert fired.wait(5)
    finally:
        watch.stop()
    quiet = IdleExit(60, busy=[lambda: False], stop=fired.clear, check_every_s=0.01).start()
    quiet.stop()
    assert not quiet.fired


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        IdleExit(0)


def test_start_when_ready_waits_for_celerys_worker_ready_signal() -> None:
    from celery.signals import worker_ready

    fired = threading.Event()
    watch = IdleExit(0.05, busy=[lambda: False], stop=fired.set, check_every_s=0.01).start_when_ready()
    try:
        assert not fired.wait(0.2)  # not counting yet: the worker is not ready
        worker_ready.send(sender=None)
        assert fired.wait(5)
    finally:
        watch.stop()
