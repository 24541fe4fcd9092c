"""Books in this process's memory: the embedded default and unit tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from operator import attrgetter

from fluksio.placement.backend import ANY_CHANGE, TURN, Books, Change, MachinesChanged, MachineView, Tell, WaitingCall
from fluksio.placement.books import MachineBooks
from fluksio.placement.turns import (
    Ask,
    Kind,
    Paper,
    Play,
    Refusal,
    WaitQueue,
    Why,
    behind_reason,
    call_of,
    order_key,
    pool_reason,
)
from fluksio.schemas import Grant, Inventory, Resources

#: The sort key of ``MachineBooks`` by ``backend.preference``.
_RANK = attrgetter("rank")


def _refuse(tell: Tell | None) -> None:
    if tell is not None:
        raise ValueError("books in this process cannot tell anyone in their own step (Books.tells is False): "
                         "send the message after the start or give-back")


class MemoryBooks(Books):
    """Every machine's books in one process's memory, behind one lock.

    ``clock`` (seconds since the epoch) stamps who waits since when; tests pass one they can move.
    Invariants: a grant id is held on at most one machine (``_held`` says which); a machine that
    attaches again starts afresh, its old grants void (and their pool slots free); a listed call is in
    ``_queue`` under its kind exactly while it is in ``_waiting``.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._books: dict[str, MachineBooks] = {}
        #: Every machine's inventory, sorted by name; rebuilt on attach and detach, not per claim.
        self._inventories: tuple[Inventory, ...] = ()
        #: Grant id → the machine holding it, so that a retried claim finds its grant without a search.
        self._held: dict[str, str] = {}
        self._waiting: dict[str, WaitingCall] = {}
        #: The kind each listed call was listed under, and every listed call's order key, by kind.
        self._kinds: dict[str, Kind] = {}
        self._queue = WaitQueue()
        #: Pool → grant id → the machine holding it: who holds the pool's slots.
        self._pools: dict[str, dict[str, str]] = {}
        #: Some claim was refused for calls ahead of it (``Why.BEHIND``): the next of those granted tells.
        self._held_back = False
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Change], None]] = []

    def attach(self, inventory: Inventory) -> None:
        with self._lock:
            gone = self._books.get(inventory.name)
            for grant in gone.grants.values() if gone else ():  # attaching again starts afresh: its grants are void
                self._drop_grant(grant)
            self._books[inventory.name] = MachineBooks(inventory)
            self._index()
        self._changed()

    def detach(self, name: str) -> list[Grant]:
        with self._lock:
            books = self._books.pop(name, None)
            self._index()
            held = list(books.grants.values()) if books else []
            for grant in held:
                self._drop_grant(grant)
        if any(grant.pool for grant in held):
            self._changed()  # pool slots came back: calls waiting for them may go
        return held

    def _drop_grant(self, grant: Grant) -> None:
        """Forget a grant that is given back or void: its index entry and its pool slot."""
        self._held.pop(grant.id, None)
        if grant.pool is not None:
            self._pools.get(grant.pool, {}).pop(grant.id, None)

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

    def claim(self, ask: Ask, planned_on: Sequence[Inventory] | None, now: float,
              stale_after_s: float | None = None) -> tuple[Grant, int] | Refusal:
        kind = ask.kind
        with self._lock:
            held = self._held.get(ask.call_id)
            if held is not None:  # a retried claim
                return self._books[held].grants[ask.call_id], self._group_of(kind, held)
            groups = [self._pool_of(names) for names in kind.groups]
            listed = self._waiting.get(ask.call_id)
            paper = Paper(self._pool_used)
            first: list[str] = []  # the first call played through: what a refused call waits behind
            mine = ""  # worked out only when someone waits, or the call must (the usual claim needs neither)
            if self._queue:
                mine = listed.order if listed is not None else order_key(ask.priority, now, ask.call_id)
                self._queue.play_ahead(mine, self._player(paper, first, None if stale_after_s is None
                                                          else now - stale_after_s))
            found = paper.pick(groups, kind.resources) if paper.pool_free(kind) else None
            if found is None:
                refusal = self._refusal(ask, groups, first)
                self._list(ask, listed, mine or order_key(ask.priority, now, ask.call_id), now, refusal)
                return refusal
            books, index = found
            grant = books.take(kind.resources, ask.call_id, ask.clamped_from, kind.pool)
            assert grant is not None  # what is free on paper is free
            self._held[ask.call_id] = books.name
            if kind.pool is not None:
                self._pools.setdefault(kind.pool, {})[ask.call_id] = books.name
            tell = listed is not None and self._unlist(ask.call_id) and self._held_back
            if tell:
                self._held_back = False
        if tell:
            self._changed(TURN)  # those refused for this call may go now
        return grant, index

    def _player(self, paper: Paper, first: list[str], oldest: float | None) -> Play:
        """How the calls ahead of a claim are played through on ``paper`` (see ``WaitQueue.play_ahead``); the
        first that takes its share is put in ``first``. Under the lock."""

        def play(ahead: Kind, order: str) -> bool | None:
            call_id = call_of(order)
            entry = self._waiting.get(call_id)
            if entry is None or (oldest is not None and entry.seen_at < oldest):
                self._waiting.pop(call_id, None)
                self._kinds.pop(call_id, None)
                return None  # its driver died: nobody will claim it
            # Machines its plan named that left since are passed over (its own claim will plan again).
            live = [self._books.values() if names is None else
                    [self._books[name] for name in names if name in self._books] for names in ahead.groups]
            found = paper.pick(live, ahead.resources) if paper.pool_free(ahead) else None
            if found is None:
                return False
            paper.take(found[0], ahead)
            if not first:
                first.append(call_id)
            return True

        return play

    def _refusal(self, ask: Ask, groups: list[Collection[MachineBooks]], first: list[str]) -> Refusal:
        kind = ask.kind
        if kind.pool is not None and self._pool_used(kind.pool) >= kind.pool_limit:
            return Refusal(Why.POOL, pool_reason(kind.pool, self._pool_used(kind.pool), kind.pool_limit))
        # No call ahead took anything (``first`` empty): the claim's own pick found nothing, so this one would not.
        if first and Paper(self._pool_used).pick(groups, kind.resources) is not None:
            self._held_back = True
            ahead = self._waiting[first[0]]
            return Refusal(Why.BEHIND, behind_reason(ahead.node, ahead.run_id, ahead.priority))
        return Refusal(Why.MACHINES, ask.reason)

    def _list(self, ask: Ask, listed: WaitingCall | None, order: str, now: float, refusal: Refusal) -> None:
        """List (or keep listed, in its place) a refused call, under its kind now."""
        kind = self._kinds.get(ask.call_id)
        if kind != ask.kind:
            if kind is not None:
                self._queue.remove(kind, order)
            self._queue.add(ask.kind, order)
            self._kinds[ask.call_id] = ask.kind
        since = listed.since if listed is not None else now
        self._waiting[ask.call_id] = WaitingCall(
            ask.call_id, ask.run_id, ask.node, ask.listed(refusal.reason), since, seen_at=now,
            priority=ask.priority, pool=ask.kind.pool, order=order, label=ask.label)

    def _unlist(self, call_id: str) -> bool:
        """Take a call off the list; whether it was on it."""
        entry = self._waiting.pop(call_id, None)
        kind = self._kinds.pop(call_id, None)
        if kind is not None and entry is not None:
            self._queue.remove(kind, entry.order)
        return entry is not None

    def _pool_of(self, names: Sequence[str] | None) -> Collection[MachineBooks]:
        """The live books of a group of machines (``None``: every machine); raises if one of them left."""
        if names is None:
            return self._books.values()
        try:
            return [self._books[name] for name in names]
        except KeyError as gone:
            raise MachinesChanged(f"machine {gone} left after the placement was planned") from None

    def _group_of(self, kind: Kind, machine: str) -> int:
        return next((i for i, names in enumerate(kind.groups) if names is None or machine in names), 0)

    def _pool_used(self, pool: str) -> int:
        return len(self._pools.get(pool, ()))

    def pool_holders(self, pools: Sequence[str]) -> dict[str, list[str]]:
        with self._lock:
            return {pool: sorted(self._pools.get(pool, ())) for pool in pools}

    def start(self, grant: Grant, token: str, tell: Tell | None = None) -> bool:
        _refuse(tell)
        with self._lock:
            books = self._books.get(grant.machine)
            return books.start(grant.id, token) if books else False

    def given_back(self, grants: Sequence[Grant]) -> set[str]:
        with self._lock:
            return {g.id for g in grants
                    if g.machine not in self._books or g.id not in self._books[g.machine].grants}

    def give(self, grant: Grant, tell: Tell | None = None) -> bool:
        _refuse(tell)
        with self._lock:
            books = self._books.get(grant.machine)
            held = books.grants.get(grant.id) if books else None
            returned = books.give(grant.id) if books else False
            if returned and held is not None:
                self._drop_grant(held)
        if returned:
            self._changed()
        return returned

    def lost(self, grant: Grant) -> bool:
        with self._lock:
            books = self._books.get(grant.machine)
            return books is None or (grant.incarnation is not None and grant.incarnation != books.incarnation)

    def keep_waiting(self, call_ids: Sequence[str], now: float) -> None:
        with self._lock:
            for call_id in call_ids:
                if call_id in self._waiting:
                    self._waiting[call_id].seen_at = now

    def forget_waiting(self, call_id: str) -> None:
        with self._lock:
            tell = self._unlist(call_id) and self._held_back
            if tell:
                self._held_back = False
        if tell:
            self._changed(TURN)  # it may have been what others waited behind

    def waiting(self, stale_after_s: float | None = None) -> list[WaitingCall]:
        with self._lock:
            if stale_after_s is not None:
                oldest = self._clock() - stale_after_s
                for call_id in [c for c, w in self._waiting.items() if w.seen_at < oldest]:
                    self._unlist(call_id)
            return sorted(self._waiting.values(), key=lambda w: w.order)

    def on_change(self, callback: Callable[[Change], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def _changed(self, what: str = ANY_CHANGE) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        change = Change(what)  # one process: its first waiting call of each kind is the installation's
        for callback in callbacks:  # outside the lock: a callback may come straight back in
            callback(change)
