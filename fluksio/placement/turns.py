"""Whose turn it is: one installation-wide order of waiting calls, and backfill that never overtakes. Pure.

Waiting calls are granted highest priority first, then oldest (by when each first waited), across every
driver of the installation: the books keep the order. A claim may take only what is left once the calls
ahead of it have had their share: the books play those calls through, in order, each taking on paper what
it would take now, and the claim gets what remains. A call ahead that cannot be granted now takes nothing,
so a free cpu goes to a CPU-only call while a GPU call waits for a GPU (backfill); a call ahead that could
start now is never overtaken.

Calls of one :class:`Kind` (the same request, machines and pool) are interchangeable: once one of them
cannot be played through, none after it can. So a claim looks at one call per kind that cannot go, plus
the calls that can (no more than there are free places), not at every waiting call. ``RedisBooks``' claim
script plays the same game in Lua (``redis_scripts.CLAIM``); keep the two alike.

(The price of backfill: a call asking for much — a whole machine — can wait while smaller calls behind it
keep taking what frees up, one piece at a time. Give it a higher priority.)
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter
from typing import Protocol, TypeVar

from fluksio.schemas import Resources

#: The largest priority (runs store 32-bit signed integers); an order key counts down from it.
PRIORITY_MAX = 2**31 - 1
#: Hex digits of an order key: 8 for the priority, 12 for the milliseconds since the epoch.
ORDER_PREFIX = 20


def order_key(priority: int, since: float, call_id: str) -> str:
    """A waiting call's place in the order as one string: lower sorts first (bytewise, as Redis sorts
    members of equal score), which is higher priority, then earlier ``since`` (seconds since the epoch,
    to the millisecond), then the call id."""
    return f"{PRIORITY_MAX - priority:08x}{max(0, int(since * 1000)):012x}{call_id}"


def call_of(order: str) -> str:
    """The call id an order key ends with."""
    return order[ORDER_PREFIX:]


@dataclass(frozen=True)
class Kind:
    """What makes waiting calls interchangeable: what each asks for, where, and from which pool."""

    resources: Resources
    #: The machines tried in order, each group a tuple of names (``None``: any machine); empty when no
    #: machine could take the call at all.
    groups: tuple[tuple[str, ...] | None, ...]
    pool: str | None = None
    #: The pool's slots, as the claiming process's settings say.
    pool_limit: int = 0

    @functools.cached_property
    def encoded(self) -> tuple[str, str]:
        """``(id, JSON)``: the kind as the Redis claim script keeps it (``groups``: 0 for any machine), worked
        out once per kind (the placer keeps one per plan), not once per claim."""
        body = json.dumps({
            "cpus": self.resources.cpus, "gpus": self.resources.gpus, "ram_mb": self.resources.ram_mb,
            "groups": [0 if names is None else list(names) for names in self.groups],
            "pool": self.pool or "", "limit": self.pool_limit,
        }, separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()[:24], body

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.resources, self.groups, self.pool, self.pool_limit))

    def __hash__(self) -> int:
        # Kinds key the wait queues and the wake-ups, looked up on every claim and every change; hashing the
        # pydantic Resources and the groups each time showed in the embedded fan-out's profile.
        return self._hash


@dataclass(frozen=True)
class Ask:
    """One claim as the books see it."""

    call_id: str
    kind: Kind
    priority: int = 0
    clamped_from: Resources | None = None
    run_id: str | None = None
    node: str | None = None
    #: Why it waits when no machine has the resources free, in words a user reads.
    reason: str = "waiting for a machine"
    #: Who waits, when it is more than one call (``12 of 40 elements``): put before the reason it is listed under.
    detail: str | None = None
    #: The device label the call asks for (``None``: none), listed with it for those who count waiting calls.
    label: str | None = None

    def listed(self, reason: str) -> str:
        """The reason as ``fluksio placer`` lists it."""
        return f"{self.detail} {reason}" if self.detail else reason


class Why(str, Enum):
    """Why a claim was refused."""

    #: No machine it may go to has the resources free.
    MACHINES = "machines"
    #: Its pool's slots are all held.
    POOL = "pool"
    #: It would fit, but calls ahead of it in the order can use what is free.
    BEHIND = "behind"


@dataclass(frozen=True)
class Refusal:
    """A claim that waits: why, and in words (the call is listed as waiting, keeping its place)."""

    why: Why
    reason: str


def pool_reason(pool: str, used: int, limit: int) -> str:
    return f"waiting for pool {pool!r} ({used}/{limit} in use)"


def behind_reason(node: str | None, run_id: str | None, priority: int) -> str:
    return (f"waiting for its turn: calls ahead of it can use what is free (the first: {node or '?'} of run "
            f"{run_id or '?'}, priority {priority})")


class Machine(Protocol):
    """What the play needs of a machine's books (``books.MachineBooks`` has it)."""

    free_cpus: int
    free_ram_mb: int
    free_gpus: list[int]
    rank: tuple[bool, float, str]

    @property
    def name(self) -> str: ...


M = TypeVar("M", bound=Machine)
#: The sort key of machines by ``backend.preference``.
_RANK = attrgetter("rank")


class Paper:
    """What is free once the calls played through so far took their share: a tally, nothing is held."""

    def __init__(self, pool_used: Callable[[str], int]) -> None:
        self._pool_used = pool_used
        #: Machine name → (cpus, gpus, ram_mb) taken on paper.
        self._taken: dict[str, tuple[int, int, int]] = {}
        self._pools: dict[str, int] = {}

    def fits(self, machine: Machine, want: Resources) -> bool:
        cpus, gpus, ram_mb = self._taken.get(machine.name, (0, 0, 0))
        return (machine.free_cpus - cpus >= want.cpus and len(machine.free_gpus) - gpus >= want.gpus
                and machine.free_ram_mb - ram_mb >= want.ram_mb)

    def pool_free(self, kind: Kind) -> bool:
        return kind.pool is None or self._pool_used(kind.pool) + self._pools.get(kind.pool, 0) < kind.pool_limit

    def pick(self, groups: Sequence[Iterable[M]], want: Resources) -> tuple[M, int] | None:
        """The preferred machine (of the first group that has one) the request fits on, on paper."""
        cpus, gpus, ram_mb, taken = want.cpus, want.gpus, want.ram_mb, self._taken
        for index, group in enumerate(groups):
            # Tight: it runs over every candidate on every claim. What is free for real is checked first;
            # only the few machines with something taken on paper need a second look.
            fitting = [machine for machine in group if machine.free_cpus >= cpus and machine.free_ram_mb >= ram_mb
                       and (not gpus or len(machine.free_gpus) >= gpus)]
            if taken:
                fitting = [machine for machine in fitting if machine.name not in taken or self.fits(machine, want)]
            if fitting:
                return min(fitting, key=_RANK), index
        return None

    def take(self, machine: Machine, kind: Kind) -> None:
        cpus, gpus, ram_mb = self._taken.get(machine.name, (0, 0, 0))
        want = kind.resources
        self._taken[machine.name] = (cpus + want.cpus, gpus + want.gpus, ram_mb + want.ram_mb)
        if kind.pool is not None:
            self._pools[kind.pool] = self._pools.get(kind.pool, 0) + 1


#: ``play(kind, order)``: ``True`` when the call took its share on paper, ``False`` when it cannot go (nor
#: can any call of its kind after it), ``None`` when it is no longer waiting (its driver died): drop it.
Play = Callable[[Kind, str], "bool | None"]


class WaitQueue:
    """The waiting calls' order keys, sorted, per kind. Not thread-safe: the owner serialises access."""

    def __init__(self) -> None:
        self._orders: dict[Kind, list[str]] = {}

    def add(self, kind: Kind, order: str) -> None:
        bisect.insort(self._orders.setdefault(kind, []), order)

    def remove(self, kind: Kind, order: str) -> None:
        orders = self._orders.get(kind)
        if orders is None:
            return
        at = bisect.bisect_left(orders, order)
        if at < len(orders) and orders[at] == order:
            del orders[at]
        if not orders:
            del self._orders[kind]

    def __len__(self) -> int:
        return sum(len(orders) for orders in self._orders.values())

    def __bool__(self) -> bool:
        return bool(self._orders)  # a kind with no call left is removed

    def play_ahead(self, mine: str, play: Play) -> None:
        """Offer ``play`` every call ahead of ``mine`` in order, but none after one of its kind that cannot go."""
        position = dict.fromkeys(self._orders, 0)
        gone: list[tuple[Kind, str]] = []
        for kind, order in self._merged(mine, position):
            outcome = play(kind, order)
            if outcome is False:
                del position[kind]
                continue
            position[kind] += 1
            if outcome is None:
                gone.append((kind, order))
        for kind, order in gone:
            self.remove(kind, order)

    def _merged(self, mine: str, position: dict[Kind, int]) -> Iterator[tuple[Kind, str]]:
        """The next call ahead of ``mine`` among every kind's next one, until none is left (``position``
        moves as the caller says)."""
        while True:
            best: tuple[Kind, str] | None = None
            for kind, at in position.items():
                orders = self._orders[kind]
                if at < len(orders) and orders[at] < mine and (best is None or orders[at] < best[1]):
                    best = (kind, orders[at])
            if best is None:
                return
            yield best
