"""Books in this process's memory: the embedded default and unit tests."""

from __future__ import annotations

import threading
from collections.abc import Callable

from fluksio.placement.backend import Books, MachineView, WaitingCall
from fluksio.placement.books import MachineBooks
from fluksio.schemas import Grant, Inventory, Resources


class MemoryBooks(Books):
    def __init__(self) -> None:
        self._books: dict[str, MachineBooks] = {}
        self._waiting: dict[str, WaitingCall] = {}
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def attach(self, inventory: Inventory) -> None:
        with self._lock:
            self._books[inventory.name] = MachineBooks(inventory)
        self._changed()

    def detach(self, name: str) -> list[Grant]:
        with self._lock:
            books = self._books.pop(name, None)
        return list(books.grants.values()) if books else []

    def machines(self) -> list[MachineView]:
        # The live books, not copies: the placer only reads them, and take() checks again under the lock.
        with self._lock:
            return list(self._books.values())  # type: ignore[arg-type]

    def take(self, machine: str, resources: Resources, grant_id: str,
             clamped_from: Resources | None = None) -> Grant | None:
        with self._lock:
            books = self._books.get(machine)
            return books.take(resources, grant_id, clamped_from) if books else None

    def give(self, grant: Grant) -> bool:
        with self._lock:
            books = self._books.get(grant.machine)
            returned = books.give(grant.id) if books else False
        if returned:
            self._changed()
        return returned

    def lost(self, grant: Grant) -> bool:
        with self._lock:
            return grant.machine not in self._books

    def note_waiting(self, waiting: WaitingCall) -> None:
        with self._lock:
            known = self._waiting.get(waiting.call_id)
            if known is not None:
                waiting.since = known.since
            self._waiting[waiting.call_id] = waiting

    def forget_waiting(self, call_id: str) -> None:
        with self._lock:
            self._waiting.pop(call_id, None)

    def waiting(self) -> list[WaitingCall]:
        with self._lock:
            return list(self._waiting.values())

    def on_change(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def _changed(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:  # outside the lock: a callback may come straight back in
            callback()
