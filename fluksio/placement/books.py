"""Exact books of one machine: what it has, what is free, and which grant holds what. Pure."""

from __future__ import annotations

import uuid

from fluksio.placement.backend import preference
from fluksio.schemas import Grant, Inventory, Resources


class MachineBooks:
    """Free cpus, GPU ids and RAM of one machine. Not thread-safe: the owner serialises access."""

    #: Memory books need no heartbeat; the view protocol (see ``backend.MachineView``) has the field.
    heartbeat_age_s = None

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.name = inventory.name
        self.total = Resources(cpus=inventory.cpus, gpus=len(inventory.gpus), ram_mb=inventory.ram_mb)
        #: Carries labels besides its name (the placer keeps such machines for labelled work).
        self.labelled = bool(inventory.labels)
        self.free_cpus = inventory.cpus
        self.free_gpus: list[int] = sorted(inventory.gpus)
        self.free_ram_mb = inventory.ram_mb
        self.grants: dict[str, Grant] = {}
        #: Which start of the machine these books describe: a grant of an earlier start is void.
        self.incarnation = uuid.uuid4().hex
        #: Grant id → the token of the delivery that started its call (see ``start``).
        self.started: dict[str, str] = {}
        #: Its place in ``backend.preference`` (lowest first); kept current by take and give, so that
        #: choosing among a thousand machines compares ready tuples instead of building them.
        self.rank = preference(self.labelled, inventory.cpus, self.free_cpus, inventory.name)

    def could_ever_fit(self, request: Resources) -> bool:
        """Whether the machine, empty, could grant the request."""
        total = self.total
        return request.cpus <= total.cpus and request.gpus <= total.gpus and request.ram_mb <= total.ram_mb

    def fits_now(self, request: Resources) -> bool:
        return (
            request.cpus <= self.free_cpus
            and request.gpus <= len(self.free_gpus)
            and request.ram_mb <= self.free_ram_mb
        )

    def take(self, request: Resources, grant_id: str, clamped_from: Resources | None = None,
             pool: str | None = None) -> Grant | None:
        if grant_id in self.grants:
            return self.grants[grant_id]
        if not self.fits_now(request):
            return None
        gpus = tuple(self.free_gpus[: request.gpus])
        del self.free_gpus[: request.gpus]
        self.free_cpus -= request.cpus
        self.free_ram_mb -= request.ram_mb
        grant = Grant(id=grant_id, machine=self.inventory.name, cpus=request.cpus, gpus=gpus,
                      ram_mb=request.ram_mb, clamped_from=clamped_from, incarnation=self.incarnation, pool=pool)
        self.grants[grant_id] = grant
        self._rerank()
        return grant

    def start(self, grant_id: str, token: str) -> bool:
        """Mark the grant's call started by ``token``: ``True`` for that token only, and only while held."""
        if grant_id not in self.grants:
            return False
        return self.started.setdefault(grant_id, token) == token

    def give(self, grant_id: str) -> bool:
        """Return a grant's resources. Giving an unknown or already-returned grant is a no-op."""
        grant = self.grants.pop(grant_id, None)
        self.started.pop(grant_id, None)
        if grant is None:
            return False
        self.free_cpus += grant.cpus
        self.free_gpus = sorted(self.free_gpus + list(grant.gpus))
        self.free_ram_mb += grant.ram_mb
        self._rerank()
        return True

    def _rerank(self) -> None:
        self.rank = preference(self.labelled, self.inventory.cpus, self.free_cpus, self.inventory.name)

    @property
    def load(self) -> float:
        """Fraction of the machine's cpus in use, 0..1."""
        return 1 - self.free_cpus / self.inventory.cpus

    @property
    def free(self) -> Resources:
        return Resources(cpus=self.free_cpus, gpus=len(self.free_gpus), ram_mb=self.free_ram_mb)

    @property
    def calls(self) -> int:
        return len(self.grants)
