"""Books in this process's memory: the embedded default and unit tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from fluksio.placement.backend import Books, MachinesChanged, MachineView, WaitingCall
from fluksio.placement.books import MachineBooks
from fluksio.schemas import Grant, Inventory, Resources

#: The sort key of ``MachineBooks`` by ``backend.preference``.
_RANK = attrgetter("rank")


class MemoryBooks(Books):
    """Every machine's books in one process's memory, behind one lock.

    ``clock`` (seconds since the epoch) stamps who waits since when; tests pass one they can move.
    Invariants: a grant id is held on at most one machine (``_held`` says which); a machine that
    attaches again starts afresh, its old grants void.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._books: dict[str, MachineBooks] = {}
        #: Every machine's inventory, sorted by name; rebuilt on attach and detach, not per claim.
        self._inventories: tuple[Inventory, ...] = ()
        #: Grant id → the machine holding it, so that a retried claim finds its grant without a search.
        self._held: dict[str, str] = {}
        self._waiting: dict[str, WaitingCall] = {}
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def attach(self, inventory: Inventory) -> None:
        with self._lock:
            gone = self._books.get(inventory.name)
            for grant_id in gone.grants if gone else ():  # attaching again starts afresh: its grants are void
                self._held.pop(grant_id, None)
            self._books[inventory.name] = MachineBooks(inventory)
            self._index()
        self._changed()

    def detach(self, name: str) -> list[Grant]:
        with self._lock:
            books = self._books.pop(name, None)
            self._index()
            held = list(books.grants.values()) if books else []
            for grant in held:
                self._held.pop(grant.id, None)
        return held

    def _index(self) -> None:
        self._inventories = tuple(self._books[name].inventory for name in sorted(self._books))

    def machines(self) -> list[MachineView]:
        # The live books, not copies: callers only read them.
        with self._lock:
            return list(self._books.values())  # type: ignore[arg-type]

    def held(self) -> dict[str, list[Grant]]:
        with self._lock:
            return {name: list(books.grants.values()) for name, books in self._books.items()}

    def inventories(self, cached: bool = False) -> Sequence[Inventory]:
        return self._inventories  # an immutable tuple, replaced whole: no lock needed to read it

    def take_best(self, candidates: Sequence[str] | None, resources: Resources, grant_id: str,
                  clamped_from: Resources | None = None,
                  planned_on: Sequence[Inventory] | None = None) -> Grant | None:
        # Live books: a candidate that left is noticed below, under the lock; ``planned_on`` adds nothing.
        cpus, gpus, ram_mb = resources.cpus, resources.gpus, resources.ram_mb
        with self._lock:
            held = self._held.get(grant_id)
            if held is not None:
                return self._books[held].grants[grant_id]  # a retried claim
            pool: Iterable[MachineBooks]
            if candidates is None:
                pool = self._books.values()
            else:
                try:
                    pool = [self._books[name] for name in candidates]
                except KeyError as gone:
                    raise MachinesChanged(f"machine {gone} left after the placement was planned") from None
            # Tight: it runs over every candidate on every claim.
            fitting = [books for books in pool if books.free_cpus >= cpus and books.free_ram_mb >= ram_mb
                       and (not gpus or len(books.free_gpus) >= gpus)]
            if not fitting:
                return None
            best = min(fitting, key=_RANK)
            grant = best.take(resources, grant_id, clamped_from)
            self._held[grant_id] = best.inventory.name
            return grant

    def start(self, grant: Grant, token: str) -> bool:
        with self._lock:
            books = self._books.get(grant.machine)
            return books.start(grant.id, token) if books else False

    def given_back(self, grants: Sequence[Grant]) -> set[str]:
        with self._lock:
            return {g.id for g in grants
                    if g.machine not in self._books or g.id not in self._books[g.machine].grants}

    def give(self, grant: Grant) -> bool:
        with self._lock:
            books = self._books.get(grant.machine)
            returned = books.give(grant.id) if books else False
            if returned:
                self._held.pop(grant.id, None)
        if returned:
            self._changed()
        return returned

    def lost(self, grant: Grant) -> bool:
        with self._lock:
            books = self._books.get(grant.machine)
            return books is None or (grant.incarnation is not None and grant.incarnation != books.incarnation)

    def note_waiting(self, waiting: WaitingCall) -> None:
        with self._lock:
            known = self._waiting.get(waiting.call_id)
            if known is not None:
                waiting.since = known.since
            waiting.seen_at = max(waiting.seen_at, self._clock())  # noted now: its driver is alive now
            self._waiting[waiting.call_id] = waiting

    def keep_waiting(self, call_ids: Sequence[str], now: float) -> None:
        with self._lock:
            for call_id in call_ids:
                if call_id in self._waiting:
                    self._waiting[call_id].seen_at = now

    def forget_waiting(self, call_id: str) -> None:
        with self._lock:
            self._waiting.pop(call_id, None)

    def waiting(self, stale_after_s: float | None = None) -> list[WaitingCall]:
        with self._lock:
            if stale_after_s is not None:
                oldest = self._clock() - stale_after_s
                for call_id in [c for c, w in self._waiting.items() if w.seen_at < oldest]:
                    del self._waiting[call_id]
            return list(self._waiting.values())

    def on_change(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def _changed(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:  # outside the lock: a callback may come straight back in
            callback()
