"""``Runtime``: what every part of one fluksio process shares, built once from the settings."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from fluksio.artifacts.local import LocalArtifactStore
from fluksio.artifacts.store import ArtifactStore
from fluksio.flows.registry import FlowRegistry
from fluksio.placement.placer import Placer
from fluksio.runs.inbox import Inbox, MemoryInbox
from fluksio.schemas import Inventory
from fluksio.settings import Settings
from fluksio.store.db import Database


@dataclass
class Runtime:
    settings: Settings
    db: Database
    artifacts: ArtifactStore
    registry: FlowRegistry
    placer: Placer
    inbox: Inbox
    #: The machine this process's node worker is, if it runs one.
    machine: str = field(default_factory=socket.gethostname)

    @classmethod
    def embedded(cls, settings: Settings) -> Runtime:
        """Everything in this process: SQLite (or the configured DB), local artifacts, in-memory books."""
        db = Database(settings.database_url)
        db.upgrade()
        registry = FlowRegistry()
        registry.load_sources(settings.flows)
        runtime = cls(settings=settings, db=db, artifacts=LocalArtifactStore(settings.artifacts_dir),
                      registry=registry, placer=Placer(), inbox=MemoryInbox(),
                      machine=settings.machine_name or socket.gethostname())
        runtime.placer.attach(local_inventory(settings, runtime.machine))
        return runtime

    def close(self) -> None:
        self.db.dispose()


def local_inventory(settings: Settings, name: str) -> Inventory:
    return Inventory(
        name=name,
        cpus=settings.cpus or os.cpu_count() or 1,
        gpus=(),
        ram_mb=settings.ram_mb if settings.ram_mb is not None else host_ram_mb(),
        labels=tuple(settings.labels),
    )


def host_ram_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return 0
