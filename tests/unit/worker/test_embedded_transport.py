"""How the embedded default's consumers wait: woken by messages, acknowledgements and a stop; asleep when idle."""

from __future__ import annotations

import threading

from fluksio.worker.embedded import IDLE_AFTER_S, IDLE_DRAIN_S, Arrivals, drain_timeout

#: A wait that nothing wakes lasts this long: a test that passes sooner was woken.
NEVER_S = 30.0


class Transport:
    """Stands for one consumer's transport: only its identity matters to Arrivals."""


def waiting(arrivals: Arrivals, queues: list[str], transport: object = None) -> threading.Thread:
    seen = arrivals.seen(queues)
    thread = threading.Thread(target=arrivals.wait, args=(queues, seen, NEVER_S, transport), daemon=True)
    thread.start()
    return thread


def test_a_message_for_one_of_its_queues_wakes_a_consumer_and_no_other() -> None:
    arrivals = Arrivals()
    nodes, drivers = waiting(arrivals, ["nodes@local"]), waiting(arrivals, ["drivers"])
    arrivals.mark("nodes@local")
    nodes.join(NEVER_S / 3)
    assert not nodes.is_alive()
    assert drivers.is_alive()
    arrivals.close()
    drivers.join(NEVER_S / 3)
    assert not drivers.is_alive()


def test_an_operation_left_for_a_consumer_wakes_it_and_only_it() -> None:
    arrivals = Arrivals()
    mine, theirs = Transport(), Transport()
    my_operations: list[object] = []
    arrivals.operations_for(mine, my_operations)
    arrivals.operations_for(theirs, [])
    me, them = waiting(arrivals, ["nodes@local"], mine), waiting(arrivals, ["drivers"], theirs)

    my_operations.append(lambda: None)  # what Celery's call_soon does, from a pool thread …
    arrivals.poke()  # … and what fluksio's consumer adds to it
    me.join(NEVER_S / 3)

    assert not me.is_alive()
    assert them.is_alive()  # nothing was left for it: it sleeps on
    assert arrivals.pending(mine) and not arrivals.pending(theirs)
    arrivals.close()
    them.join(NEVER_S / 3)
    assert not them.is_alive()


def test_an_operation_left_before_the_wait_began_ends_it_at_once() -> None:
    arrivals = Arrivals()
    transport = Transport()
    arrivals.operations_for(transport, [lambda: None])
    thread = waiting(arrivals, ["nodes@local"], transport)
    thread.join(NEVER_S / 3)
    assert not thread.is_alive()


def test_closing_wakes_every_consumer_and_no_later_wait_sleeps() -> None:
    arrivals = Arrivals()
    first = waiting(arrivals, ["drivers"])
    arrivals.close()
    first.join(NEVER_S / 3)
    later = waiting(arrivals, ["nodes@local"])
    later.join(NEVER_S / 3)
    assert not first.is_alive() and not later.is_alive()


def test_a_busy_consumer_looks_often_and_an_idle_one_sleeps_long() -> None:
    assert drain_timeout(2.0, 0.001, since_took_s=0.0) == 0.001
    assert drain_timeout(2.0, 0.001, since_took_s=IDLE_AFTER_S / 2) == 0.001
    assert drain_timeout(2.0, 0.001, since_took_s=IDLE_AFTER_S) == IDLE_DRAIN_S
    assert drain_timeout(0.2, 0.001, since_took_s=IDLE_AFTER_S * 10) == 0.2  # never past what Celery asked
    assert drain_timeout(None, 0.001, since_took_s=IDLE_AFTER_S * 10) == IDLE_DRAIN_S
