"""Where machine requests live, so every driver process sees the same ones.

The store makes "one outstanding request per profile" atomic across processes
(two drivers waiting for the same label submit one job, not two) and lets
``fluksio placer``, a process of its own, show what was asked. ``MemoryRequestStore``
serves one process; ``RedisRequestStore`` (redis_store.py) every process of an installation.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

from fluksio.provisioners.request import MachineRequest


class RequestStore(ABC):
    @abstractmethod
    def reserve(self, request: MachineRequest) -> MachineRequest | None:
        """Record ``request`` as its profile's outstanding one, unless there is one: then return that."""

    @abstractmethod
    def update(self, request: MachineRequest) -> bool:
        """Write a live request's new state. Returns ``False`` when it had already ended (nothing written).

        A request that is no longer outstanding frees its profile for the next one; one that ended
        leaves the live set and becomes its profile's :meth:`last`.
        """

    @abstractmethod
    def live(self) -> list[MachineRequest]:
        """Every request whose job may still be in a cluster (pending or attached), oldest first."""

    @abstractmethod
    def last(self, profile: str) -> MachineRequest | None:
        """The profile's most recently ended request (its outcome says why it ended)."""

    def outstanding(self, profile: str) -> MachineRequest | None:
        return next((r for r in self.live() if r.profile == profile and r.state.is_outstanding()), None)

    def close(self) -> None:
        """Release connections."""


class MemoryRequestStore(RequestStore):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, MachineRequest] = {}
        self._slots: dict[str, str] = {}  # profile -> id of its outstanding request
        self._last: dict[str, MachineRequest] = {}

    def reserve(self, request: MachineRequest) -> MachineRequest | None:
        with self._lock:
            held = self._slots.get(request.profile)
            if held is not None and held in self._live:
                return self._live[held]
            self._slots[request.profile] = request.id
            self._live[request.id] = request
            return None

    def update(self, request: MachineRequest) -> bool:
        with self._lock:
            if request.id not in self._live:
                return False
            if not request.state.is_outstanding() and self._slots.get(request.profile) == request.id:
                del self._slots[request.profile]
            if request.state.is_live():
                self._live[request.id] = request
            else:
                del self._live[request.id]
                self._last[request.profile] = request
            return True

    def live(self) -> list[MachineRequest]:
        with self._lock:
            return sorted(self._live.values(), key=lambda r: r.submitted_at)

    def last(self, profile: str) -> MachineRequest | None:
        with self._lock:
            return self._last.get(profile)
