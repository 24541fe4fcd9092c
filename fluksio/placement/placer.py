"""The placer: which machine runs a node call, holding its resources for exactly as long as the call runs.

``try_claim`` never blocks: it grants now or says why the call waits. Whoever
waits registers a listener, called (outside every lock) whenever resources are
given back or a machine attaches — in any process, when the books are shared —
so waiting wakes on events, not on a timer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fluksio.placement.backend import Books, MachineView, WaitingCall
from fluksio.placement.clamp import clamp
from fluksio.placement.memory import MemoryBooks
from fluksio.schemas import DevicePolicy, Grant, Inventory, Resources

#: Attempts at taking resources when another driver wins the race for the machine that was free.
TAKE_ATTEMPTS = 3


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
    #: The request after clamping, as a provisioner would have to grant it (``None``: not clamped yet).
    wanted: Resources | None = None


class Placer:
    def __init__(self, books: Books | None = None,
                 provisioner_shapes: Sequence[tuple[Resources, tuple[str, ...]]] = ()) -> None:
        self.books = books if books is not None else MemoryBooks()
        #: Shapes a provisioner could start, with their labels: they count when clamping.
        self.provisioner_shapes = list(provisioner_shapes)
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._subscribed = False

    # -- machines -------------------------------------------------------------------------------

    def attach(self, inventory: Inventory) -> None:
        self.books.attach(inventory)

    def detach(self, name: str) -> list[Grant]:
        """Forget a machine; returns the grants it held (their calls are lost)."""
        return self.books.detach(name)

    def machines(self) -> list[Inventory]:
        return [view.inventory for view in self.books.machines()]

    def carries(self, label: str) -> bool:
        """Whether any live machine carries ``label`` now."""
        return any(view.inventory.carries(label) for view in self.books.machines())

    # -- claims ---------------------------------------------------------------------------------

    def try_claim(self, request: Request) -> Grant | Waiting:
        outcome: Grant | Waiting = Waiting("no machine attached", no_machine=True)
        for _ in range(TAKE_ATTEMPTS):
            outcome = self._place(request, self.books.machines())
            if not isinstance(outcome, _Raced):
                break
        if isinstance(outcome, _Raced):
            outcome = Waiting(outcome.reason)
        if isinstance(outcome, Waiting):
            self.books.note_waiting(WaitingCall(request.call_id, request.run_id, request.node, outcome.reason,
                                                time.time()))
        else:
            self.books.forget_waiting(request.call_id)
        return outcome

    def forget(self, call_id: str) -> None:
        """Stop listing a call as waiting (its run ended or it was placed)."""
        self.books.forget_waiting(call_id)

    def release(self, grant: Grant) -> bool:
        return self.books.give(grant)

    def lost(self, grant: Grant) -> bool:
        return self.books.lost(grant)

    def _place(self, request: Request, views: list[MachineView]) -> Grant | Waiting:
        candidates, fallback = self._candidates(request, views)
        if not candidates and not fallback:
            if request.device is None:
                return Waiting("waiting for a worker to attach", no_machine=True)
            return Waiting(f"waiting for a worker labelled {request.device!r}", no_machine=True)
        pool = candidates + fallback
        if any(v.could_ever_fit(request.resources) for v in pool):
            wanted, clamped_from = request.resources, None  # the usual case: no need to look at shapes
        else:
            wanted, warning = clamp(request.resources, self._shapes(pool, request.device))
            clamped_from = request.resources if warning else None
        label = f"labelled {request.device!r} " if request.device else ""
        reason = f"waiting for a worker {label}with {wanted.describe()} free"
        raced = False
        # Labelled work first on the labelled machines, then (prefer) anywhere; within a group, unlabelled
        # machines first (keep GPU boxes for GPU work), then the least loaded, then by name.
        for group in (candidates, fallback):
            fitting = _fitting(group, wanted)
            if not fitting:
                continue
            for view in _best_first(fitting):
                grant = self.books.take(view.inventory.name, wanted, request.call_id, clamped_from)
                if grant is not None:
                    if request.device and view.inventory.carries(request.device):
                        grant = grant.model_copy(update={"queue_label": request.device})
                    return grant
                raced = True  # another driver took it between our look and our take
        return _Raced(reason) if raced else Waiting(reason, wanted=wanted)

    def _shapes(self, pool: list[MachineView], device: str | None) -> list[Resources]:
        """Distinct machine shapes (a cluster has few), plus provisioner shapes that carry the label."""
        shapes = {view.total for view in pool}
        shapes.update(shape for shape, labels in self.provisioner_shapes if device is None or device in labels)
        return list(shapes)

    @staticmethod
    def _candidates(request: Request, views: list[MachineView]) -> tuple[list[MachineView], list[MachineView]]:
        """The machines that may take the call, and those only a ``prefer`` fallback may use."""
        if request.device is None:
            return views, []
        labelled = [v for v in views if v.inventory.carries(request.device)]
        if request.policy is DevicePolicy.PREFER and not any(v.could_ever_fit(request.resources) for v in labelled):
            return labelled, [v for v in views if not v.inventory.carries(request.device)]
        return labelled, []

    # -- waking ---------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)
            subscribe = not self._subscribed
            self._subscribed = True
        if subscribe:  # lazily: only processes that wait (drivers) need to hear about changes
            self.books.on_change(self._notify)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:  # no lock held: a listener may call straight back into try_claim
            listener()

    # -- visibility -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        return {
            "machines": [
                {
                    "name": v.inventory.name,
                    "labels": list(v.inventory.labels),
                    "total": v.total.model_dump(),
                    "gpu_ids": list(v.inventory.gpus),
                    "free": v.free.model_dump(),
                    "free_gpu_ids": list(v.free_gpus),
                    "calls": v.calls,
                    "heartbeat_age_s": None if v.heartbeat_age_s is None else round(v.heartbeat_age_s, 1),
                }
                for v in sorted(self.books.machines(), key=lambda v: v.inventory.name)
            ],
            "waiting": [
                {"run_id": w.run_id, "node": w.node, "reason": w.reason, "waiting_s": round(now - w.since, 1)}
                for w in sorted(self.books.waiting(), key=lambda w: w.since)
            ],
            "provisioners": [{"shape": s.model_dump(), "labels": list(labels)}
                             for s, labels in self.provisioner_shapes],
        }


@dataclass(frozen=True)
class _Raced:
    reason: str


def _preference(view: MachineView) -> tuple[bool, float, str]:
    cpus = view.inventory.cpus
    return (view.labelled, (cpus - view.free_cpus) / cpus, view.inventory.name)


def _fitting(views: list[MachineView], wanted: Resources) -> list[MachineView]:
    """Machines with ``wanted`` free now (a tight loop: it runs over every machine on every claim)."""
    cpus, gpus, ram_mb = wanted.cpus, wanted.gpus, wanted.ram_mb
    return [v for v in views
            if v.free_cpus >= cpus and v.free_ram_mb >= ram_mb and (not gpus or len(v.free_gpus) >= gpus)]


def _best_first(views: list[MachineView]) -> Iterator[MachineView]:
    """The preferred machine; the rest in order only if taking it failed (another driver raced us)."""
    best = min(views, key=_preference)
    yield best
    yield from sorted((v for v in views if v is not best), key=_preference)
