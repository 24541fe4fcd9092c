"""The placer: which machine runs a call, holding its resources, and saying why a call waits.

What any books must show is in placer_scenarios.py, run here on memory books (and on Redis books by
tests/integration/test_redis_books.py); here, what memory books tell that Redis books do not."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from fluksio.placement.memory import MemoryBooks
from fluksio.placement.placer import Placer, Waiting
from fluksio.schemas import Grant, Inventory
from tests.unit.placement import placer_scenarios
from tests.unit.placement.machines import machine
from tests.unit.placement.placer_scenarios import placer_with, req, seen


@pytest.mark.parametrize("behaviour", placer_scenarios.SCENARIOS, ids=lambda behaviour: behaviour.__name__)
def test_the_placer_on_memory_books(behaviour: Callable[[], None]) -> None:
    behaviour()


# -- listeners and detach, on memory books ---------------------------------------------------------
# (On Redis books, listeners hear changes through a pub/sub thread, once more on subscribing, not
# synchronously; a grant Redis hands back on detach has no incarnation.)


def test_release_is_idempotent_and_only_notifies_once():
    placer = placer_with(machine("laptop", cpus=2))
    calls = []
    placer.add_listener(lambda: calls.append("woken"))
    grant = placer.try_claim(req("c1"))
    assert placer.release(grant) is True
    assert placer.release(grant) is False
    assert calls == ["woken"]
    assert seen(placer, "laptop")["free"]["cpus"] == 2


def test_listeners_are_called_on_attach():
    placer = Placer()
    calls = []
    placer.add_listener(lambda: calls.append("attach"))
    placer.attach(machine("laptop"))
    assert calls == ["attach"]


def test_a_listener_may_claim_from_inside_the_notification():
    placer = placer_with(machine("laptop", cpus=1))
    first = placer.try_claim(req("c1"))
    assert isinstance(placer.try_claim(req("c2")), Waiting)
    outcomes = []
    placer.add_listener(lambda: outcomes.append(placer.try_claim(req("c2"))))

    releaser = threading.Thread(target=placer.release, args=(first,), daemon=True)
    releaser.start()
    releaser.join(timeout=5)
    assert not releaser.is_alive(), "release deadlocked calling a listener that claims"
    assert len(outcomes) == 1 and isinstance(outcomes[0], Grant)


def test_release_of_a_grant_on_a_detached_machine_is_a_no_op():
    placer = placer_with(machine("laptop"))
    grant = placer.try_claim(req("c1"))
    assert placer.detach("laptop") == [grant]
    assert placer.release(grant) is False
    assert placer.machines() == []


# -- what a claim costs the books ------------------------------------------------------------------


class CountingBooks(MemoryBooks):
    """Memory books that count the calls a claim makes on them."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def forget_waiting(self, call_id: str) -> None:
        self.counts["forget_waiting"] += 1
        super().forget_waiting(call_id)

    def claim(self, *args, **kwargs):
        self.counts["claim"] += 1
        return super().claim(*args, **kwargs)

    def take_best(self, *args, **kwargs):
        self.counts["take_best"] += 1
        return super().take_best(*args, **kwargs)


def test_a_claim_is_one_call_on_the_books_granted_or_waiting():
    # One call: on Redis books, one round trip (see test_redis_books), whatever the claim's outcome.
    books = CountingBooks()
    placer = Placer(books)
    placer.attach(machine("laptop", cpus=1))
    assert isinstance(placer.try_claim(req("c1")), Grant)
    assert isinstance(placer.try_claim(req("c2")), Waiting)
    assert books.counts == {"claim": 2}


def test_a_call_that_waited_is_taken_off_the_waiting_list_by_its_grant():
    books = CountingBooks()
    placer = Placer(books)
    placer.attach(machine("laptop", cpus=1))
    first = placer.try_claim(req("c1"))
    assert isinstance(placer.try_claim(req("c2")), Waiting)
    assert [w.call_id for w in books.waiting()] == ["c2"]
    placer.release(first)
    assert isinstance(placer.try_claim(req("c2")), Grant)
    assert books.waiting() == []
    assert books.counts["forget_waiting"] == 0  # the claim that granted it took it off, in the same step


class LeavingBooks(MemoryBooks):
    """Memory books where a machine leaves between the placer's plan and its take, once."""

    def __init__(self, leaving: str) -> None:
        super().__init__()
        self.leaving: str | None = leaving
        self.takes = 0

    def claim(self, ask, planned_on, now, stale_after_s=None):
        self.takes += 1
        if self.leaving is not None:
            self.detach(self.leaving)
            self.leaving = None
        return super().claim(ask, planned_on, now, stale_after_s)


def test_a_machine_leaving_between_plan_and_take_makes_the_placer_plan_again():
    books = LeavingBooks("box-a")
    placer = Placer(books)
    placer.attach(machine("box-a", labels=("gpu",)))
    placer.attach(machine("box-b", labels=("gpu",)))
    grant = placer.try_claim(req("c1", device="gpu"))
    assert isinstance(grant, Grant) and grant.machine == "box-b" and grant.queue_label == "gpu"
    assert books.takes == 2


def test_the_last_labelled_machine_leaving_mid_claim_says_no_machine_carries_the_label():
    books = LeavingBooks("box")
    placer = Placer(books)
    placer.attach(machine("laptop"))
    placer.attach(machine("box", labels=("gpu",)))
    outcome = placer.try_claim(req("c1", device="gpu"))
    assert outcome == Waiting("waiting for a worker labelled 'gpu'", no_machine=True)


class StaleBooks(MemoryBooks):
    """Memory books whose cached inventories lag: as caching books do until a take or a re-read."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: tuple[Inventory, ...] = ()

    def inventories(self, cached: bool = False):
        if not cached:
            self.seen = tuple(super().inventories())
        return self.seen


def test_a_plan_finding_no_machine_is_checked_against_the_books_afresh():
    books = StaleBooks()
    placer = Placer(books)
    placer.attach(machine("box", labels=("gpu",)))  # after the cache was "read"
    grant = placer.try_claim(req("c1", device="gpu"))
    assert isinstance(grant, Grant) and grant.machine == "box"
