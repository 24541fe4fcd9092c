"""The interface of placer books: where machines, their free resources and their grants live.

The placer decides which machines may take a call (from their inventories, which
change only when a machine attaches or leaves); a backend keeps the books and, in
one atomic step, picks the preferred of those machines that has the resources
free now and takes them there (:meth:`Books.take_best`). ``MemoryBooks`` serves
one process (the embedded default), ``RedisBooks`` every driver on every host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fluksio.placement.turns import Ask, Refusal
from fluksio.schemas import Grant, Inventory, Resources

#: What a change of the books was, as a change listener hears it: a turn (a call that others were refused
#: behind was granted, or gave up its place: only calls refused ``Why.BEHIND`` may go now), or anything
#: else (a give-back, a pool slot freed, an attach: any waiting call may).
TURN = "turn"
ANY_CHANGE = "change"


@dataclass(frozen=True)
class Tell:
    """A message for others that books which :attr:`Books.tells` send in the same atomic step as a start or a
    give-back, saving the round trip it would take alone (fluksio/execution/handoff.py): published on the channel
    ``key`` after a start; pushed onto the list ``key`` after a give-back, the list then kept ``ttl_s`` seconds
    (0: its expiry left as it was)."""

    key: str
    text: str
    ttl_s: int = 0


@dataclass(frozen=True)
class Change:
    """A change of the books, as a change listener hears it."""

    #: :data:`TURN` or :data:`ANY_CHANGE`.
    what: str = ANY_CHANGE
    #: The waiting calls it may let go, when the books name them: the first of each kind in the installation's
    #: order (each process wakes those it holds). ``None``: the books do not say, so each process wakes its
    #: own first of each kind — with several processes, all but one of them then claim in vain.
    named: frozenset[str] | None = None


class MachinesChanged(Exception):
    """The machines a placement was planned on are not the live ones any more: read the inventories again.

    Raised by :meth:`Books.take_best` (before it takes anything) when a candidate has gone, or, for books
    that cache inventories, when any machine attached or left since they were read. The placer catches it
    and plans again; it never leaves the placement package.
    """


def preference(labelled: bool, cpus: int, free_cpus: int, name: str) -> tuple[bool, float, str]:
    """Sort key of a machine that could take a call now: lowest first.

    Unlabelled machines first (keep GPU boxes for GPU work), then the least loaded (cpus in use / cpus),
    then by name. ``RedisBooks``' take script implements the same order in Lua; keep the two alike.
    """
    return (labelled, (cpus - free_cpus) / cpus, name)


@dataclass(frozen=True)
class MachineView:
    """A machine as the placer sees it at one moment.

    Memory books hand out their live :class:`~fluksio.placement.books.MachineBooks` instead, which
    answer the same questions without a copy per machine per claim.
    """

    inventory: Inventory
    free: Resources
    free_gpus: tuple[int, ...]
    calls: int
    #: Seconds since the machine's last heartbeat (``None``: it needs none, as in the embedded default).
    heartbeat_age_s: float | None = None

    @property
    def total(self) -> Resources:
        return Resources(cpus=self.inventory.cpus, gpus=len(self.inventory.gpus), ram_mb=self.inventory.ram_mb)

    @property
    def labelled(self) -> bool:
        return bool(self.inventory.labels)

    @property
    def free_cpus(self) -> int:
        return self.free.cpus

    @property
    def free_ram_mb(self) -> int:
        return self.free.ram_mb

    @property
    def load(self) -> float:
        return 1 - self.free.cpus / self.inventory.cpus

    def could_ever_fit(self, request: Resources) -> bool:
        total = self.total
        return request.cpus <= total.cpus and request.gpus <= total.gpus and request.ram_mb <= total.ram_mb

    def fits_now(self, request: Resources) -> bool:
        return (request.cpus <= self.free.cpus and request.gpus <= self.free.gpus
                and request.ram_mb <= self.free.ram_mb)


@dataclass
class WaitingCall:
    call_id: str
    run_id: str | None
    node: str | None
    reason: str
    #: When the call began to wait, in seconds since the epoch.
    since: float
    extra: dict[str, Any] = field(default_factory=dict)
    #: When its driver last said it still waits (``keep_waiting``), in seconds since the epoch.
    seen_at: float = 0.0
    #: Its run's priority, and the pool it asks for a slot of.
    priority: int = 0
    pool: str | None = None
    #: Its place in the order of waiting calls (``turns.order_key``); every listed call has one.
    order: str = ""
    #: The device label it asks for (``None``: none).
    label: str | None = None


class Books(ABC):
    """Where machines, their free resources and their grants live (this process, or Redis for all hosts).

    Invariants every backend keeps: a machine is never granted more than it has, nor a pool more slots
    than its limit; a grant holds its resources and its pool slot until given back (or its machine leaves
    or restarts, which voids it); a take is atomic, so two placers never both get the last cpu; giving
    back is idempotent; waiting calls are granted in their order (see ``turns``).
    """

    @abstractmethod
    def attach(self, inventory: Inventory) -> None:
        """Add a machine with all its resources free (a re-attaching machine starts afresh)."""

    @abstractmethod
    def detach(self, name: str) -> list[Grant]:
        """Remove a machine; returns the grants it held."""

    @abstractmethod
    def machines(self) -> list[MachineView]:
        """Every live machine with its free resources: a full read, for ``fluksio placer``, not for claims."""

    @abstractmethod
    def held(self) -> dict[str, list[Grant]]:
        """Every live machine's grants now, ``{machine: [grant, …]}``: which calls run where (for the
        explorer and ``fluksio placer``, not for claims). A grant's id is its call's id."""

    @abstractmethod
    def inventories(self, cached: bool = False) -> Sequence[Inventory]:
        """The inventories of every live machine, sorted by name.

        The very same sequence object comes back while the machines stay the same, so a caller may keep
        what it worked out from it (the placer keeps its plans) until the object changes.

        ``cached=True`` may answer from what the books read earlier, without asking a server: only for a
        caller that goes on to :meth:`take_best`, which notices a stale answer (``MachinesChanged``). A
        cached answer may also still list a machine whose heartbeat expired, until a claim picks it or the
        cache is older than the heartbeat's time to live.
        """

    @abstractmethod
    def claim(self, ask: Ask, planned_on: Sequence[Inventory] | None, now: float,
              stale_after_s: float | None = None) -> tuple[Grant, int] | Refusal:
        """Take what the call asks for, in its turn (see ``turns``), atomically: ``(grant, group)`` — the index of
        the group of ``ask.kind.groups`` it was granted in — or a :class:`Refusal`, the call then listed as
        waiting (keeping its place, ``since`` and ``order``, if it was listed already; seen as of ``now``).

        A granted call leaves the list. Calls ahead of it that nobody kept listed for ``stale_after_s``
        (their driver died) are dropped rather than waited behind. A call that already holds its grant gets
        that grant (a retried claim). Raises :class:`MachinesChanged`, taking nothing, as :meth:`take_best`.
        Whoever was refused for a call ahead of it (``Why.BEHIND``) hears a change once that call is granted.
        """

    @abstractmethod
    def pool_holders(self, pools: Sequence[str]) -> dict[str, list[str]]:
        """For each pool named, the ids of the grants holding one of its slots now (a grant's id is its call's)."""

    @abstractmethod
    def take_best(self, candidates: Sequence[str] | None, resources: Resources, grant_id: str,
                  clamped_from: Resources | None = None,
                  planned_on: Sequence[Inventory] | None = None) -> Grant | None:
        """Atomically hold ``resources`` on the preferred candidate that has them free now.

        Without regard to who waits (:meth:`claim` minds the order): for the books' own tests and tools.
        ``candidates`` names the machines the call may go to (``None``: any live machine). Among those
        that are alive and have ``resources`` free, takes them on the first by :func:`preference`;
        ``None`` when none has. A ``grant_id`` that is already held returns that grant and charges
        nothing (a retried claim). Raises :class:`MachinesChanged`, taking nothing, when the candidates
        were chosen from inventories that are no longer current — ``planned_on``, the inventories the
        caller chose them from, when it says.
        """

    @abstractmethod
    def start(self, grant: Grant, token: str, tell: Tell | None = None) -> bool:
        """A worker is about to run the grant's call: ``True`` for one ``token`` only, and only while the
        grant is held; ``tell`` is published then (not again for the same ``token``), by books that
        :attr:`tells` (others refuse it).

        The grant is the call's ledger entry. Redis redelivers an unacknowledged message when a
        worker reconnects or comes back; by then the call may be running still, or its driver may
        have settled it (given the grant back to retry it elsewhere, or to cancel it), or the
        machine may have restarted (its grants void). In each case this answers ``False``, and the
        copy is dropped: a call never runs twice. ``token`` is made once per delivery: asking again
        with the same one (a client resending the command whose answer a dropped connection lost)
        gets the same ``True``, instead of a call that nobody runs.
        """

    @abstractmethod
    def given_back(self, grants: Sequence[Grant]) -> set[str]:
        """The ids of those grants no longer held (given back, or void): one look for them all."""

    @abstractmethod
    def give(self, grant: Grant, tell: Tell | None = None) -> bool:
        """Return a grant's resources (and its pool slot). Idempotent: a second give-back does nothing.

        ``tell`` is pushed after it, given back or not, by books that :attr:`tells` (others refuse it).
        """

    @abstractmethod
    def lost(self, grant: Grant) -> bool:
        """Whether the grant's machine is gone (heartbeat expired) or has restarted since it granted it."""

    # -- who waits, and why (for `fluksio placer`) ------------------------------------------------

    @abstractmethod
    def keep_waiting(self, call_ids: Sequence[str], now: float) -> None:
        """The calls' driver is alive and they still wait: their entries are fresh as of ``now``."""

    @abstractmethod
    def forget_waiting(self, call_id: str) -> None:
        """Take the call off the list (its run ended, or stopped scheduling); it loses its place."""

    @abstractmethod
    def waiting(self, stale_after_s: float | None = None) -> list[WaitingCall]:
        """The calls listed as waiting, in the order they will be granted. With ``stale_after_s``, entries
        nobody kept for that long (their driver died without taking them off the list) are dropped, from
        the books too."""

    # -- change notifications ---------------------------------------------------------------------

    #: Whether the books name the calls a change lets go (:attr:`Change.named`), and a grant that leaves room
    #: for the next call of its kind names that call too. Else the placer wakes the next of the kind itself.
    names_calls: bool = False
    #: Whether :meth:`start` and :meth:`give` carry a :class:`Tell` in their own step.
    tells: bool = False

    @abstractmethod
    def on_change(self, callback: Callable[[Change], None]) -> None:
        """Call ``callback`` (with no lock held) after every give-back and attach, and after a call is granted in
        its turn that others were refused for (``Why.BEHIND``), from any process; it is told which."""

    def close(self) -> None:
        """Release connections and threads."""
