"""The placer: which machine runs a node call, holding its resources for exactly as long as the call runs.

``try_claim`` never blocks: it grants now or says why the call waits. Whoever
waits registers a listener, called (outside every lock) whenever resources are
given back or a machine attaches, so waiting wakes on events, not on a timer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fluksio.placement.books import MachineBooks
from fluksio.placement.clamp import clamp
from fluksio.schemas import DevicePolicy, Grant, Inventory, Resources


@dataclass(frozen=True)
class Request:
    """One node call asking for a place."""

    call_id: str
    resources: Resources
    device: str | None = None
    policy: DevicePolicy = DevicePolicy.REQUIRE
    run_id: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class Waiting:
    """A call that cannot be placed now, and why (in words a user reads)."""

    reason: str
    #: True when no attached machine carries the label at all (not merely busy).
    no_machine: bool = False


@dataclass
class _Waiter:
    request: Request
    reason: str
    since: float = field(default_factory=time.time)


class Placer:
    """Placement over in-process books (the embedded default and unit tests)."""

    def __init__(self, provisioner_shapes: Sequence[tuple[Resources, tuple[str, ...]]] = ()) -> None:
        self._books: dict[str, MachineBooks] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._waiting: dict[str, _Waiter] = {}
        #: Shapes a provisioner could start, with their labels: they count when clamping.
        self.provisioner_shapes = list(provisioner_shapes)

    # -- machines -------------------------------------------------------------------------------

    def attach(self, inventory: Inventory) -> None:
        with self._lock:
            if inventory.name not in self._books:
                self._books[inventory.name] = MachineBooks(inventory)
        self._notify()

    def detach(self, name: str) -> list[Grant]:
        """Forget a machine; returns the grants it held (their calls are lost)."""
        with self._lock:
            books = self._books.pop(name, None)
        return list(books.grants.values()) if books else []

    def machines(self) -> list[Inventory]:
        with self._lock:
            return [b.inventory for b in self._books.values()]

    # -- claims ---------------------------------------------------------------------------------

    def try_claim(self, request: Request) -> Grant | Waiting:
        with self._lock:
            outcome = self._place(request)
            if isinstance(outcome, Waiting):
                self._waiting[request.call_id] = _Waiter(request, outcome.reason,
                                                         self._waiting.get(request.call_id, _Waiter(request, "")).since)
            else:
                self._waiting.pop(request.call_id, None)
            return outcome

    def forget(self, call_id: str) -> None:
        """Stop listing a call as waiting (its run ended or it was placed elsewhere)."""
        with self._lock:
            self._waiting.pop(call_id, None)

    def release(self, grant: Grant) -> bool:
        with self._lock:
            books = self._books.get(grant.machine)
            returned = books.give(grant.id) if books else False
        if returned:
            self._notify()
        return returned

    def _place(self, request: Request) -> Grant | Waiting:
        candidates = self._candidates(request)
        if not candidates:
            return Waiting(f"waiting for a worker labelled {request.device!r}", no_machine=True)
        shapes = [_shape(b.inventory) for b in candidates] + [
            shape for shape, labels in self.provisioner_shapes
            if request.device is None or request.device in labels
        ]
        wanted, warning = clamp(request.resources, shapes)
        clamped_from = request.resources if warning else None
        for books in candidates:
            if books.could_ever_fit(wanted):
                grant = books.take(wanted, request.call_id, clamped_from)
                if grant is not None:
                    return grant
        label = f"labelled {request.device!r} " if request.device else ""
        return Waiting(f"waiting for a worker {label}with {wanted.describe()} free")

    def _candidates(self, request: Request) -> list[MachineBooks]:
        machines = list(self._books.values())
        if request.device is None:
            # Keep labelled machines (GPU boxes) free for labelled work: unlabelled first, then least loaded.
            return sorted(machines, key=lambda b: (bool(b.inventory.labels), b.load, b.inventory.name))
        labelled = [b for b in machines if b.inventory.carries(request.device)]
        if request.policy is DevicePolicy.PREFER and not any(b.could_ever_fit(request.resources) for b in labelled):
            others = sorted((b for b in machines if b not in labelled), key=lambda b: (b.load, b.inventory.name))
            return sorted(labelled, key=lambda b: b.load) + others
        return sorted(labelled, key=lambda b: (b.load, b.inventory.name))

    # -- waking ---------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _notify(self) -> None:
        # Called with no lock held: a listener may call straight back into try_claim.
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    # -- visibility -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        with self._lock:
            machines = [
                {
                    "name": b.inventory.name,
                    "labels": list(b.inventory.labels),
                    "total": _shape(b.inventory).model_dump(),
                    "gpu_ids": list(b.inventory.gpus),
                    "free": b.free().model_dump(),
                    "free_gpu_ids": list(b.free_gpus),
                    "calls": len(b.grants),
                }
                for b in self._books.values()
            ]
            waiting = [
                {"run_id": w.request.run_id, "node": w.request.node, "reason": w.reason,
                 "waiting_s": round(now - w.since, 3)}
                for w in self._waiting.values()
            ]
        return {"machines": machines, "waiting": waiting,
                "provisioners": [{"shape": s.model_dump(), "labels": list(l)} for s, l in self.provisioner_shapes]}


def _shape(inventory: Inventory) -> Resources:
    return Resources(cpus=inventory.cpus, gpus=len(inventory.gpus), ram_mb=inventory.ram_mb)
