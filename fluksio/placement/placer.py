"""The placer: which machine runs a node call, holding its resources for exactly as long as the call runs.

``try_claim`` never blocks: it grants now or says why the call waits. It plans
from the machines' inventories (static facts, cached by the books) and leaves
the choice among the machines that may take the call to the books, which pick
and take in one atomic step — one round trip to Redis per claim — in the call's
turn: waiting calls are granted highest priority first, then oldest, across the
installation, and a call may take only what no call ahead of it could use
(``turns``). A call may also hold one slot of a named pool while it runs.
Whoever waits registers a listener, called (outside every lock) when resources
are given back or a machine attaches — in any process, when the books are
shared — so waiting wakes on events, not on a timer; a driver's listener only
when one of its calls is first of its kind to wait in this process
(``wakeups``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fluksio.errors import PlacementError
from fluksio.placement.backend import TURN, Books, Change, MachinesChanged, Tell
from fluksio.placement.clamp import clamp
from fluksio.placement.memory import MemoryBooks
from fluksio.placement.turns import Ask, Kind, Refusal, Why, order_key
from fluksio.placement.wakeups import Listener, Wakeups
from fluksio.schemas import DevicePolicy, Grant, Inventory, Resources

#: Kinds of request (resources, device, policy) whose plans are kept; past this many they start afresh.
PLANS_KEPT = 1024
#: Plans per claim when the machines change between reading their inventories and taking (an attach,
#: a detach, a heartbeat found expired); each failed plan has refreshed the books' view, so one retry
#: is almost always enough.
PLAN_ATTEMPTS = 3


@dataclass(frozen=True)
class Request:
    """One node call asking for a place."""

    call_id: str
    resources: Resources
    device: str | None = None
    policy: DevicePolicy = DevicePolicy.REQUIRE
    run_id: str | None = None
    node: str | None = None
    #: Who waits, when it is more than one call (``12 of 40 elements``): said with the reason it waits.
    detail: str | None = None
    #: Its run's priority: waiting calls are granted highest first, then oldest.
    priority: int = 0
    #: A pool the call holds one slot of while it runs (one of the placer's ``pools``).
    pool: str | None = None


@dataclass(frozen=True)
class Waiting:
    """A call that cannot be placed now, and why (in words a user reads)."""

    reason: str
    #: True when no attached machine carries the label at all (not merely busy).
    no_machine: bool = False
    #: The request after clamping, as a provisioner would have to grant it (``None``: not clamped yet).
    wanted: Resources | None = None
    #: What it waits for: machines (a provisioner may help), a pool's slot, or its turn.
    why: Why = Why.MACHINES


@dataclass(frozen=True)
class _Plan:
    """Where one kind of request may go, worked out from the machines' inventories alone.

    Reused by every claim of that kind until a machine attaches or leaves; the books then pick among the
    machines named here by what is free at that moment.
    """

    #: (machines, queue label) to try in order: the labelled machines, then a ``prefer`` fallback.
    #: ``None`` for machines means any machine; the queue label goes on a grant made in that group.
    groups: tuple[tuple[tuple[str, ...] | None, str | None], ...]
    wanted: Resources
    clamped_from: Resources | None
    #: The answer when no group can take the call now.
    waiting: Waiting
    #: What the books are asked for (set by ``Placer._plan_for``, once per plan).
    kind: Kind | None = None


class Placer:
    """Places node calls on machines. Thread-safe: several drivers in one process share one placer.

    It holds no resources itself (the books do); it keeps the plans it made per kind of request, for as
    long as the machines stay the same. ``pools`` names the installation's pools and their slots;
    waiting calls nobody kept listed for ``stale_after_s`` (their driver died) are not waited behind.
    ``clock`` (seconds since the epoch) stamps waiting calls; tests pass one they can move.
    """

    def __init__(self, books: Books | None = None,
                 provisioner_shapes: Sequence[tuple[Resources, tuple[str, ...]]] = (),
                 clock: Callable[[], float] = time.time, pools: Mapping[str, int] | None = None,
                 stale_after_s: float | None = None) -> None:
        self._clock = clock
        self.books = books if books is not None else MemoryBooks(clock)
        #: Shapes a provisioner could start, with their labels: they count when clamping.
        self.provisioner_shapes = list(provisioner_shapes)
        #: Pool name → its slots, installation-wide.
        self.pools: dict[str, int] = dict(pools or {})
        self.stale_after_s = stale_after_s
        self._wakeups = Wakeups()
        self._lock = threading.Lock()  # guards _subscribed; never held while calling out
        self._subscribed = False
        #: Plans by kind of request, valid for one inventories object (replaced whole when it changes).
        self._plans: tuple[Sequence[Inventory] | None, dict[tuple[Any, ...], _Plan]] = (None, {})

    # -- machines -------------------------------------------------------------------------------

    def attach(self, inventory: Inventory) -> None:
        self.books.attach(inventory)

    def detach(self, name: str) -> list[Grant]:
        """Forget a machine; returns the grants it held (their calls are lost)."""
        return self.books.detach(name)

    def machines(self) -> list[Inventory]:
        """Every live machine's inventory, sorted by name."""
        return list(self.books.inventories())

    def carries(self, label: str) -> bool:
        """Whether any live machine carries ``label`` now."""
        return any(inventory.carries(label) for inventory in self.books.inventories())

    # -- claims ---------------------------------------------------------------------------------

    def try_claim(self, request: Request) -> Grant | Waiting:
        """Grant the call now, in its turn, or say why it waits (it is then listed as waiting, keeping its
        place in the order until it is granted or :meth:`forget` is called).

        Raises :class:`PlacementError` for a pool this placer does not know (submit refuses such nodes).
        """
        if request.pool is not None and request.pool not in self.pools:
            known = ", ".join(sorted(self.pools)) or "none"
            raise PlacementError(f"pool {request.pool!r} is not one of this installation's pools ({known}); "
                                 "add it to the pools setting (FLUKSIO_POOLS or [pools] in fluksio.toml)")
        for _ in range(PLAN_ATTEMPTS):
            try:
                return self._place(request)
            except MachinesChanged:
                continue  # the books have read the machines again: plan on them as they are now
        # Machines attaching and leaving under every attempt: an attach will wake us.
        self._wakeups.waits(request.call_id, request.run_id, None, "")
        return Waiting("waiting while the attached machines change")

    def keep_waiting(self, call_ids: Sequence[str]) -> None:
        """The calls still wait, and their driver is alive: keep them on the list (see ``snapshot``)."""
        self.books.keep_waiting(call_ids, self._clock())

    def forget(self, call_id: str) -> None:
        """Stop listing a call as waiting (its run ended, or stopped scheduling): it gives up its place."""
        self._wakeups.forgotten(call_id)
        self.books.forget_waiting(call_id)

    def start(self, grant: Grant, token: str, tell: Tell | None = None) -> bool:
        """Whether the delivery ``token`` of the grant's call may run it now (see :meth:`Books.start`)."""
        return self.books.start(grant, token, tell)

    def given_back(self, grants: Sequence[Grant]) -> set[str]:
        """The ids of those grants no longer held: their calls ended (or can never start)."""
        return self.books.given_back(grants)

    def release(self, grant: Grant, tell: Tell | None = None) -> bool:
        return self.books.give(grant, tell)

    def lost(self, grant: Grant) -> bool:
        return self.books.lost(grant)

    def _place(self, request: Request) -> Grant | Waiting:
        plan, inventories = self._plan_for(request, cached=True)
        if not plan.groups:
            # No machine could take it: a take would not have told us a machine attached meanwhile, so ask
            # the books afresh (one round trip to Redis) before saying the call waits for one to attach.
            plan, inventories = self._plan_for(request, cached=False)
        assert plan.kind is not None  # every plan kept has its kind
        ask = Ask(request.call_id, plan.kind, request.priority, plan.clamped_from, request.run_id, request.node,
                  plan.waiting.reason, request.detail, request.device)
        # Listed even when no machine could take it, so that it keeps its place for when one attaches.
        now = self._clock()
        outcome = self.books.claim(ask, inventories, now, self.stale_after_s)
        if isinstance(outcome, Refusal):
            self._wakeups.waits(request.call_id, request.run_id, plan.kind,
                                order_key(request.priority, now, request.call_id), behind=outcome.why is Why.BEHIND)
            if outcome.why is Why.MACHINES:
                return plan.waiting
            return Waiting(outcome.reason, wanted=plan.waiting.wanted, why=outcome.why)
        grant, group = outcome
        # It waited: what freed may hold the next of its kind too (books that name calls say so themselves).
        for listener in self._wakeups.granted(request.call_id, wake_next=not self.books.names_calls):
            listener()
        queue_label = plan.groups[group][1] if plan.groups else None
        return grant.model_copy(update={"queue_label": queue_label}) if queue_label else grant

    def _plan_for(self, request: Request, cached: bool) -> tuple[_Plan, Sequence[Inventory]]:
        """The plan for this kind of request on the machines as the books know them (``cached``: as they knew),
        and the inventories it was made from."""
        inventories = self.books.inventories(cached=cached)
        made_on, plans = self._plans
        if made_on is not inventories:  # a machine attached or left: every plan may change
            plans = {}
            self._plans = (inventories, plans)
        key = (request.resources, request.device, request.policy, request.pool)
        plan = plans.get(key)
        if plan is None:
            if len(plans) >= PLANS_KEPT:
                plans.clear()
            plan = self._plan(request, inventories)
            kind = Kind(plan.wanted, tuple(names for names, _label in plan.groups), request.pool,
                        self.pools.get(request.pool, 0) if request.pool else 0)
            plan = plans[key] = dataclasses.replace(plan, kind=kind)
        return plan, inventories

    def _plan(self, request: Request, inventories: Sequence[Inventory]) -> _Plan:
        """Where the request may go, from the inventories alone (static facts): no free resources read."""
        candidates, fallback = self._candidates(request, inventories)
        if not candidates and not fallback:
            label = f" labelled {request.device!r}" if request.device else " to attach"
            return _Plan((), request.resources, None, Waiting(f"waiting for a worker{label}", no_machine=True))
        pool = candidates + fallback
        if any(_could_ever_fit(inventory, request.resources) for inventory in pool):
            wanted, clamped_from = request.resources, None  # the usual case: no need to look at shapes
        else:
            wanted, warning = clamp(request.resources, self._shapes(pool, request.device))
            clamped_from = request.resources if warning else None
        label = f"labelled {request.device!r} " if request.device else ""
        waiting = Waiting(f"waiting for a worker {label}with {wanted.describe()} free", wanted=wanted)
        if request.device is None:
            return _Plan(((None, None),), wanted, clamped_from, waiting)  # any machine: the books need no list
        # Labelled work first on the machines carrying the label (its queue there), then (prefer) anywhere.
        groups = tuple((tuple(inventory.name for inventory in group), queue_label)
                       for group, queue_label in ((candidates, request.device), (fallback, None)) if group)
        return _Plan(groups, wanted, clamped_from, waiting)

    def _shapes(self, pool: list[Inventory], device: str | None) -> list[Resources]:
        """Distinct machine shapes (a cluster has few), plus provisioner shapes that carry the label."""
        shapes = {_total(inventory) for inventory in pool}
        shapes.update(shape for shape, labels in self.provisioner_shapes if device is None or device in labels)
        return list(shapes)

    @staticmethod
    def _candidates(request: Request,
                    inventories: Sequence[Inventory]) -> tuple[list[Inventory], list[Inventory]]:
        """The machines that may take the call, and those only a ``prefer`` fallback may use."""
        if request.device is None:
            return list(inventories), []
        device = request.device
        labelled = [inventory for inventory in inventories if inventory.carries(device)]
        if request.policy is DevicePolicy.PREFER and not any(
                _could_ever_fit(inventory, request.resources) for inventory in labelled):
            return labelled, [inventory for inventory in inventories if not inventory.carries(device)]
        return labelled, []

    # -- waking ---------------------------------------------------------------------------------

    def add_listener(self, listener: Listener, run_id: str | None = None) -> None:
        """Call ``listener`` whenever the books change, or (with ``run_id``: a driver) only when one of the
        run's calls that this placer refused may go now (see ``wakeups``)."""
        self._wakeups.add(listener, run_id)
        with self._lock:
            subscribe = not self._subscribed
            self._subscribed = True
        if subscribe:  # lazily: only processes that wait (drivers) need to hear about changes
            self.books.on_change(self._notify)

    def remove_listener(self, listener: Listener) -> None:
        self._wakeups.remove(listener)

    def _notify(self, change: Change) -> None:
        # No lock held: a listener may call straight back into try_claim.
        for listener in self._wakeups.on_change(turn=change.what == TURN, named=change.named):
            listener()

    # -- visibility -----------------------------------------------------------------------------

    def snapshot(self, stale_after_s: float | None = None) -> dict[str, Any]:
        """Machines (with the grants of the calls running on each), what waits and why (in the order it will
        be granted, with priority and age), each pool's use, and provisioner shapes, for ``fluksio placer``
        and the explorer.

        With ``stale_after_s``, a waiting call its driver has not kept on the list for that long (the
        driver died; see ``keep_waiting``) is dropped rather than shown waiting forever.
        """
        now = self._clock()
        held = self.books.held()
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
                    # What each running call holds; a grant's id is its call's id (run, node, attempt).
                    "grants": [{"id": g.id, "cpus": g.cpus, "gpus": list(g.gpus), "ram_mb": g.ram_mb, "pool": g.pool}
                               for g in sorted(held.get(v.inventory.name, ()), key=lambda g: g.id)],
                }
                for v in sorted(self.books.machines(), key=lambda v: v.inventory.name)
            ],
            # In the order they will be granted: highest priority first, then oldest. ``label``: the device
            # label the call asks for (``None``: none).
            "waiting": [
                {"run_id": w.run_id, "node": w.node, "reason": w.reason, "waiting_s": round(now - w.since, 1),
                 "priority": w.priority, "pool": w.pool, "label": w.label}
                for w in self.books.waiting(stale_after_s)
            ],
            "pools": [{"name": name, "slots": self.pools[name], "in_use": len(holders), "calls": holders}
                      for name, holders in sorted(self.books.pool_holders(sorted(self.pools)).items())],
            "provisioners": [{"shape": s.model_dump(), "labels": list(labels)}
                             for s, labels in self.provisioner_shapes],
        }


def _total(inventory: Inventory) -> Resources:
    return Resources(cpus=inventory.cpus, gpus=len(inventory.gpus), ram_mb=inventory.ram_mb)


def _could_ever_fit(inventory: Inventory, request: Resources) -> bool:
    """Whether the machine, empty, could grant the request."""
    return (request.cpus <= inventory.cpus and request.gpus <= len(inventory.gpus)
            and request.ram_mb <= inventory.ram_mb)
