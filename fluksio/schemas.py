"""Pydantic models shared by every layer: what a node asks for, what a machine has, what a run is."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Resources(BaseModel):
    """What one node call holds while it runs. ``ram_mb`` is in megabytes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: int = Field(default=1, ge=0)
    gpus: int = Field(default=0, ge=0)
    ram_mb: int = Field(default=0, ge=0)

    def describe(self) -> str:
        parts = []
        if self.gpus:
            parts.append(f"{self.gpus} gpu(s)")
        parts.append(f"{self.cpus} cpu(s)")
        if self.ram_mb:
            parts.append(f"{self.ram_mb} MB RAM")
        return " and ".join(parts)


class Inventory(BaseModel):
    """A machine's total capacity and the labels it carries (its name is always one of them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    cpus: int = Field(ge=1)
    gpus: tuple[int, ...] = ()
    ram_mb: int = Field(default=0, ge=0)
    labels: tuple[str, ...] = ()

    def carries(self, label: str) -> bool:
        return label == self.name or label in self.labels


class Grant(BaseModel):
    """Resources held on one machine for one node call, until given back."""

    model_config = ConfigDict(frozen=True)

    id: str
    machine: str
    cpus: int
    gpus: tuple[int, ...] = ()
    ram_mb: int = 0
    #: Set when the request was larger than any machine and was cut down to fit.
    clamped_from: Resources | None = None
    #: Which start of the machine granted it: a machine that restarted has lost its calls.
    incarnation: str | None = None
    #: The label whose queue on that machine the call goes to (``None``: its ``default`` queue).
    queue_label: str | None = None
    #: The pool whose slot the call holds with it (``None``: none), given back with the grant.
    pool: str | None = None

    @property
    def resources(self) -> Resources:
        """What the grant holds, as a request would say it."""
        return Resources(cpus=self.cpus, gpus=len(self.gpus), ram_mb=self.ram_mb)


class DevicePolicy(StrEnum):
    REQUIRE = "require"
    PREFER = "prefer"


class RunStatus(StrEnum):
    """Where a run is: stored in its row as the value (``"ok"``) and compared directly; printed as that word
    (``f"resumed from {status}"`` reads ``resumed from abandoned``), as every status is.

    A run is ``queued`` when submitted, ``running`` once a driver claims it, and then ends in one of the
    terminal statuses (:meth:`is_terminal`): ``ok``, ``error``, ``cancelled`` or ``abandoned`` (its driver's
    lease ran out, or its driver's worker was shut down mid-run). A queued run may also end without running:
    ``cancelled``, or ``error`` when its flow cannot be loaded. ``ok`` is final; a run that ended otherwise
    goes back to ``queued`` only by being resumed. The one table of moves is
    :data:`fluksio.store.status.TRANSITIONS`.
    """

    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"

    def is_terminal(self) -> bool:
        """Whether the run has ended (anything but ``queued`` and ``running``): nothing moves it on but a
        resume, which sends a run that did not end ``ok`` back to ``queued``."""
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)


def unit_of(node: str, index: int | None) -> str:
    """The unit of a node (``index`` ``None``) or of one of its elements: ``count[3]``."""
    return node if index is None else f"{node}[{index}]"


def split_unit(unit: str) -> tuple[str, int | None]:
    """``count[3]`` → ``("count", 3)``; a node's name → ``(name, None)``. (Node names never hold ``[``.)"""
    if unit.endswith("]"):
        node, _, index = unit.partition("[")
        return node, int(index[:-1])
    return unit, None


class NodeStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    CACHED = "cached"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class NodeRecord(BaseModel):
    """One attempt of one node of a run (or of one element of a mapped node), as its row in the run store keeps it.

    ``status`` is ``ok`` (the call made its outputs), ``error`` (the call failed, or the node failed without
    one; ``error`` says why), ``cached`` (no call: the outputs were restored from the run cache, from the run
    ``cached_from`` names, ``duration_ms`` 0; or a subflow call whose child run was cached whole),
    ``skipped`` (its condition ruled it out, something it needs was skipped, or a node upstream failed; why
    is in ``error``) or ``cancelled`` (the run was cancelled before or while it ran). A node retried has one
    record per attempt, ``attempt`` counting from 1; records are in the order they were written. ``index``
    is set for an element of a mapped node, ``child_run`` for the call of a subflow node.
    """

    node: str
    status: NodeStatus
    machine: str | None = None
    gpus: list[int] = Field(default_factory=list)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: ``finished_at - started_at`` in milliseconds (``None`` without a start: no call ran).
    duration_ms: int | None = None
    error: str | None = None
    logs: str | None = None
    cached_from: str | None = None
    attempt: int = 1
    #: A mapped node's element: its 0-based position in the product (``None``: the node is not mapped).
    index: int | None = None
    #: The child run a subflow node's call is.
    child_run: str | None = None
    #: What this attempt was granted (an out-of-memory retry shows the larger ask).
    granted: Resources | None = None
    #: The code identity the call was keyed on in the run cache: the node's function and what it uses of the
    #: project (``None``: a row with no key, such as a skipped node's).
    node_code: str | None = None
    #: Why the call was not restored from the run cache (``code of `evaluate` changed``, ``inputs changed``);
    #: ``None`` when it was, or when the cache was not asked (a retry).
    cache_miss: str | None = None


class DriveRecord(BaseModel):
    """One earlier drive of a resumed run: the machine whose driver drove it, from when until its last sign of
    life, and how it ended (the status the run was resumed from, and why)."""

    epoch: int
    driver: str | None = None
    started_at: datetime | None = None
    last_lease_at: datetime | None = None
    resumed_at: datetime
    ended_as: str
    reason: str | None = None


class RunRecord(BaseModel):
    """A run as the run store keeps it, with the records of its nodes' attempts (``nodes``).

    ``status`` follows :class:`RunStatus`; ``status_reason`` says why it is where it is (why it failed or
    was abandoned, what it waits for). Times are aware UTC datetimes. ``started_at`` is when a driver first
    claimed the run (a resumed run keeps it: its duration counts from there; ``drives`` says the earlier
    drives), ``finished_at`` when it ended (``None`` while it has not).
    ``result`` maps the flow's result messages that were made to their values (a skipped one to ``None``),
    as the driver that ended the run wrote them: all of them for an ``ok`` run, those made so far for a run
    that failed or was cancelled; ``None`` before the end, and when the driver itself failed.
    """

    id: str
    flow: str
    status: RunStatus
    status_reason: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    group_id: str | None = None
    result: dict[str, Any] | None = None
    #: The digest of the code the run runs: its code package (``fluksio code get`` writes its files).
    code_digest: str | None = None
    #: What workers import from the package; ``None`` when the code did not travel with the run (the workers
    #: ran the flow they registered under that digest).
    code_entry: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: From ``started_at`` to its end, in milliseconds, as the driver that ran it wrote it when it ended
    #: (``None`` until then, and for a run cancelled while queued or abandoned by the lease sweeper).
    duration_ms: int | None = None
    #: How often the run was resumed, and the status it was last resumed from.
    resume_count: int = 0
    resumed_from: RunStatus | None = None
    #: Waiting calls are granted highest priority first, then oldest.
    priority: int = 0
    #: A subflow's child run: its parent run and the parent's call (``trial[2]``).
    parent_id: str | None = None
    parent_node: str | None = None
    #: The schedule whose tick submitted the run, and that tick's time.
    schedule: str | None = None
    schedule_tick: datetime | None = None
    #: When the run's driver last refreshed its lease (a running run's driver does so every few seconds).
    lease_at: datetime | None = None
    #: A running run that only waits for its child runs (its driver let go of it on purpose): no lease.
    parked: bool = False
    #: Seconds since a driver last refreshed this running run's lease, once that is over the stale limit
    #: (``FLUKSIO_STALE_AFTER_S``): no driver is driving it. ``None`` otherwise. Set by the client as it reads.
    driverless_s: float | None = None
    #: The machine whose driver claimed the run last, and when (``None`` before any did, or from an older store).
    driver: str | None = None
    drive_started_at: datetime | None = None
    #: A resumed run's earlier drives, oldest first (empty for a run never resumed).
    drives: list[DriveRecord] = Field(default_factory=list)
    nodes: list[NodeRecord] = Field(default_factory=list)


class CatchUp(StrEnum):
    """What a schedule does with ticks that came due while no beat ran (or while it was paused)."""

    #: Submit one run, for the most recent missed tick.
    LAST = "last"
    #: Submit nothing for missed ticks.
    NONE = "none"
    #: Submit one run per missed tick, oldest first, up to ``schedule_catchup_limit`` (the newest ones).
    ALL = "all"


class ScheduleRecord(BaseModel):
    """A schedule as stored: a cron expression (in ``tz``) or an interval, and the run each tick submits."""

    name: str
    flow: str
    cron: str | None = None
    tz: str | None = None
    #: The interval of an ``--every`` schedule, in seconds; its ticks are multiples of it since the epoch.
    every_s: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    priority: int = 0
    catchup: CatchUp = CatchUp.LAST
    paused: bool = False
    created_at: datetime
    #: The newest tick a beat submitted a run for.
    last_tick: datetime | None = None
    #: The next tick (``None`` while paused).
    next_tick: datetime | None = None


class AlertRecord(BaseModel):
    """One alert as the alert log keeps it: sent, or failed after its retries."""

    id: int
    rule: str
    run_id: str | None = None
    #: The status of the run the alert was about.
    status: str
    #: Where it went (a webhook's address without its query, or the email addresses).
    target: str
    outcome: str
    attempts: int
    error: str | None = None
    created_at: datetime
    finished_at: datetime | None = None
