"""``Runtime``: what every part of one fluksio process shares, built once from the settings."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from fluksio.artifacts.factory import open_store
from fluksio.artifacts.store import ArtifactStore
from fluksio.broker.events.base import Events
from fluksio.broker.events.memory import MemoryEvents
from fluksio.broker.events.redis import RedisEvents
from fluksio.broker.inbox.base import Inbox
from fluksio.broker.inbox.memory import MemoryInbox
from fluksio.broker.inbox.redis import RedisInbox
from fluksio.codecs.estimators import trust
from fluksio.flows.registry import FlowRegistry
from fluksio.placement.backend import Books
from fluksio.placement.placer import Placer
from fluksio.provisioners.base import Provisioner
from fluksio.runs import family
from fluksio.runs.ends import RunEnds
from fluksio.schemas import Inventory, Resources, RunStatus
from fluksio.security.signatures import Signer, load_signer
from fluksio.settings import Settings, require_redis_broker
from fluksio.store import run_rows
from fluksio.store.contact import open_run_store
from fluksio.store.db import Database

if TYPE_CHECKING:
    from redis import Redis  # the embedded default never loads redis-py

log = logging.getLogger(__name__)


class RunEndListener(Protocol):
    """Told of every run that ends in this process, after its end is written (fluksio/triggers/alerts.py)."""

    def run_ended(self, run_id: str, status: RunStatus) -> None:
        """Must return at once: the caller may be a driver's loop."""

    def close(self, wait_s: float | None = None) -> None: ...


@dataclass
class Runtime:
    """What every part of one fluksio process shares: settings, run store, artifact store, flows, placer,
    inboxes and events, built once (:meth:`embedded`, :meth:`distributed`, :meth:`standalone`).

    The embedded runtime keeps books, inboxes and events in this process; the distributed one in the
    broker's Redis, shared by every host. ``driving`` holds the runs this process drives now (its sweeper
    spares them); ``stopping`` is set when the process shuts down and its drivers hand their runs over.
    """

    settings: Settings
    db: Database
    artifacts: ArtifactStore
    registry: FlowRegistry
    placer: Placer
    inbox: Inbox
    events: Events
    #: The machine this process's node worker is, if it runs one.
    machine: str = field(default_factory=socket.gethostname)
    #: The Redis client of the distributed mode (``None`` when embedded).
    redis: Redis | None = None
    #: Runs this process is driving now (its sweeper spares them: they are alive).
    driving: set[str] = field(default_factory=set)
    #: Set when this process shuts down: drivers hand their runs over instead of holding the exit up.
    stopping: threading.Event = field(default_factory=threading.Event)
    #: Starts machines on demand (Slurm), when the installation has profiles; distributed mode only.
    provisioner: Provisioner | None = None
    #: ``hand_over(run_id, flow)`` sends a run to a driver (the drive task); set by the Celery app built on
    #: this runtime. A child run's end uses it to wake its parked parent.
    hand_over: Callable[[str, str], None] | None = None
    #: Wakes what waits here for a run to end (a client's ``wait``) once the end is written in this process.
    ends: RunEnds = field(default_factory=RunEnds)
    #: The alert dispatcher, when the installation has alert rules (``fluksio.triggers.alerts.attach_alerts``
    #: builds it from the settings: the front doors and driver processes call it, as they start).
    alerts: RunEndListener | None = None
    #: Signs what this process sends outside Celery (inbox messages, its runs' code), with FLUKSIO_SIGNING_*.
    signer: Signer | None = None

    @classmethod
    def embedded(cls, settings: Settings) -> Runtime:
        """Everything in this process: the run store, the artifact store, in-memory books and inboxes."""
        # Its runs' code comes from this process alone (nobody else can write its in-memory broker): it runs
        # any code package its own submits shipped, such as an earlier package run again (`--code`).
        settings = settings.model_copy(update={"accept_code": "any"})
        trust(settings.trusted_types)
        if "auto_resume" not in settings.model_fields_set:
            # Its drivers live only as long as the command that runs them: a run one left behind is resumed by
            # `fluksio resume`, not by whichever later command happens to open the store.
            settings = settings.model_copy(update={"auto_resume": False})
        artifacts = open_store(settings, check=True)  # an unusable bucket is said now, not in a run
        db = open_run_store(settings)
        machine = settings.machine_name or socket.gethostname()
        runtime = cls(settings=settings, db=db, artifacts=artifacts,
                      registry=_registry(settings), placer=_placer(settings), inbox=MemoryInbox(),
                      events=MemoryEvents(), machine=machine)
        runtime.placer.attach(local_inventory(settings, machine))
        return runtime

    @classmethod
    def distributed(cls, settings: Settings, machine: str | None = None) -> Runtime:
        """Books, inboxes and events in the broker's Redis; shared by every host.

        Opens no connection to the broker itself (callers check first contact: ``connect()`` with
        :func:`~fluksio.broker.connection.check_broker`, a worker with
        :func:`~fluksio.broker.connection.wait_for_broker`).
        """
        artifacts = open_store(settings, check=True)  # a worker with an unusable bucket refuses to start
        trust(settings.trusted_types)
        from fluksio.broker.connection import broker_client
        from fluksio.placement.redis import RedisBooks

        client = broker_client(settings)
        books = RedisBooks(client, settings.heartbeat_ttl_s)
        provisioner = _provisioner(settings, client)
        placer = _placer(settings, books, provisioner.shapes() if provisioner else ())
        signer = load_signer(settings)
        return cls(settings=settings, db=open_run_store(settings), artifacts=artifacts,
                   registry=_registry(settings), placer=placer, inbox=RedisInbox(client, signer),
                   events=RedisEvents(client),
                   machine=machine or settings.machine_name or socket.gethostname(), redis=client,
                   provisioner=provisioner, signer=signer)

    @classmethod
    def standalone(cls, settings: Settings, registry: FlowRegistry | None = None) -> Runtime:
        """Just the store, artifacts and flows: for a child process that runs one node call. ``registry``: the
        flows its fork server loaded already (default: load the installation's flows now)."""
        trust(settings.trusted_types)
        return cls(settings=settings, db=Database(settings.database_url, outage_s=settings.db_outage_s),
                   artifacts=open_store(settings), registry=registry if registry is not None else _registry(settings),
                   placer=Placer(), inbox=MemoryInbox(), events=MemoryEvents())

    def stop_driving(self) -> None:
        """Tell every driver in this process to hand its run over, and wake them to hear it."""
        self.stopping.set()
        for run_id in list(self.driving):
            try:
                self.inbox.wake(run_id)
            except Exception:  # the broker may be what is going away
                log.debug("could not wake the driver of %s", run_id, exc_info=True)

    def run_ended(self, run_id: str, status: RunStatus, orphan: bool = False) -> None:
        """A run ended here (its end is written): tell its parent (a subflow's child) and the alerts.

        ``orphan``: the caller knows the run has no parent (a run's parent is fixed when it is submitted), so
        its row need not be read again to find out — a read per run that a sweep of top-level runs pays for
        nothing. Never raises: whoever ended the run has done its part; what is told is looked after by others
        too (a parent woken late is found by the sweepers, see ``store.family.stale_woken``).
        """
        self.ends.tell(run_id)
        try:
            if not orphan:
                family.tell_parent(self, run_rows.get_run(self.db, run_id))
        except Exception:
            log.exception("could not tell the parent of run %s that it ended", run_id)
        if self.alerts is None:
            return
        try:
            self.alerts.run_ended(run_id, status)
        except Exception:
            log.exception("could not queue the alerts of run %s (%s)", run_id, status.value)

    def close(self) -> None:
        if self.alerts is not None:
            self.alerts.close()
        self.placer.books.close()
        self.db.dispose()


def _placer(settings: Settings, books: Books | None = None,
            shapes: Sequence[tuple[Resources, tuple[str, ...]]] = ()) -> Placer:
    """The placer of an installation: its pools, and how long a dead driver's waiting calls are waited behind
    (as long as its lease takes to go stale: its drivers keep their calls listed once per lease)."""
    return Placer(books, provisioner_shapes=shapes, pools=settings.pools, stale_after_s=settings.stale_after_s)


def _provisioner(settings: Settings, client: Redis) -> Provisioner | None:
    from fluksio.constants import HEARTBEAT_KEY
    from fluksio.provisioners import create_provisioner, load_profiles, profiles_path
    from fluksio.provisioners.redis_store import RedisRequestStore

    path = profiles_path(settings.provisioners)
    if path is None:
        return None
    return create_provisioner(load_profiles(path), settings, RedisRequestStore(client),
                              is_attached=lambda name: bool(client.exists(HEARTBEAT_KEY + name)))


def _registry(settings: Settings) -> FlowRegistry:
    registry = FlowRegistry()
    registry.load_sources(settings.flows)
    return registry


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


def check_installation(settings: Settings) -> None:
    """Return if this installation's broker (in the distributed mode) and run store answer now; else raise a
    :class:`~fluksio.errors.FluksioError` that says in one line which, why, and what to check.

    For front doors that serve without a :class:`~fluksio.client.Client` of their own (a dashboard):
    ``connect()`` makes the same checks.
    """
    if not settings.embedded:
        require_redis_broker(settings)
        from fluksio.broker.connection import check_broker  # the embedded default never loads redis-py

        check_broker(settings)
    open_run_store(settings, upgrade=False).dispose()
