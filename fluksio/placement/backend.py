"""The interface of placer books: where machines, their free resources and their grants live.

The placer decides; a backend only keeps the books and makes each take and
give-back atomic. ``MemoryBooks`` serves one process (the embedded default),
``RedisBooks`` every driver on every host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fluksio.schemas import Grant, Inventory, Resources


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
    since: float
    extra: dict[str, Any] = field(default_factory=dict)


class Books(ABC):
    @abstractmethod
    def attach(self, inventory: Inventory) -> None:
        """Add a machine with all its resources free (a re-attaching machine starts afresh)."""

    @abstractmethod
    def detach(self, name: str) -> list[Grant]:
        """Remove a machine; returns the grants it held."""

    @abstractmethod
    def machines(self) -> list[MachineView]:
        """Every live machine."""

    @abstractmethod
    def take(self, machine: str, resources: Resources, grant_id: str,
             clamped_from: Resources | None = None) -> Grant | None:
        """Atomically hold ``resources`` on ``machine``; ``None`` if they are not free (or it is gone)."""

    @abstractmethod
    def give(self, grant: Grant) -> bool:
        """Return a grant's resources. Idempotent: a second give-back of the same grant does nothing."""

    @abstractmethod
    def lost(self, grant: Grant) -> bool:
        """Whether the grant's machine is gone (heartbeat expired) or has restarted since it granted it."""

    # -- who waits, and why (for `fluksio placer`) ------------------------------------------------

    @abstractmethod
    def note_waiting(self, waiting: WaitingCall) -> None: ...

    @abstractmethod
    def forget_waiting(self, call_id: str) -> None: ...

    @abstractmethod
    def waiting(self) -> list[WaitingCall]: ...

    # -- change notifications ---------------------------------------------------------------------

    @abstractmethod
    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (with no lock held) after every give-back and attach, from any process."""

    def close(self) -> None:
        """Release connections and threads."""
