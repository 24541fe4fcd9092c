"""SQLAlchemy tables of the run store, with their indexes beside them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from fluksio.constants import MAX_NAME_LENGTH

#: JSONB on PostgreSQL (indexable, compact), plain JSON text elsewhere.
JSONValue = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on every dialect; SQLite forgets the zone, so put it back on read."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to the run store; use datetime.now(timezone.utc)")
        return value.astimezone(timezone.utc) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"

    #: Time-ordered (ULID), so sorting by id sorts by submission.
    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    flow: Mapped[str] = mapped_column(String(MAX_NAME_LENGTH), index=True)
    #: How workers find the flow: ``module:attr`` or ``file.py:attr``.
    flow_ref: Mapped[str | None] = mapped_column(String(1000))
    #: Digest of the graph's shape; the code inside is in ``code_digest``.
    flow_version: Mapped[str | None] = mapped_column(String(64))
    #: The code the run runs: the digest of its code package (flows/package.py), recorded at submit; a run
    #: submitted without one (a flow defined without a file) gets the code its driver loaded at claim.
    code_digest: Mapped[str | None] = mapped_column(String(80))
    #: What a worker imports from the package (a module, or a file's path in it); ``None``: not shipped, the
    #: workers must hold the code themselves (``FLUKSIO_FLOWS``).
    code_entry: Mapped[str | None] = mapped_column(String(1000))
    #: The submitter's signature over ``code_digest`` (signed with its ``FLUKSIO_SIGNING_KEY``).
    code_signature: Mapped[str | None] = mapped_column(Text)
    #: The artifact holding the graph described as data (flows/manifest.py): what a driver that does not
    #: hold the code walks.
    graph_digest: Mapped[str | None] = mapped_column(String(80))
    params: Mapped[dict[str, Any]] = mapped_column(JSONValue, default=dict)
    params_digest: Mapped[str] = mapped_column(String(80))
    seed: Mapped[int | None] = mapped_column(BigInteger)
    group_id: Mapped[str | None] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: Refreshed by the running driver; an old one means the driver died.
    lease_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    engine: Mapped[str] = mapped_column(String(32))
    #: Unique: the index, not a read-then-write, decides which of two racing submits wins.
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    no_cache: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Set by ``cancel`` on a running run; the driver stops scheduling when it sees it.
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    #: How many times the run was resumed, and the status it was resumed from the last time.
    resume_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    resumed_from: Mapped[str | None] = mapped_column(String(16))
    resumed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: Waiting calls are granted highest priority first, then oldest, across the installation.
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: A subflow's child run: the run whose node called it, and which call (``trial[2]``).
    parent_id: Mapped[str | None] = mapped_column(String(26), index=True)
    parent_node: Mapped[str | None] = mapped_column(String(220))
    #: A running run whose driver let go while only its child runs were running: ``parked``; once a child's
    #: end has asked for a driver again: ``woken``. ``None`` for a run that is driven (or not running).
    park_state: Mapped[str | None] = mapped_column(String(8))
    #: The schedule whose tick submitted the run, and that tick's time.
    schedule: Mapped[str | None] = mapped_column(String(200), index=True)
    schedule_tick: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: The machine whose driver claimed the run last, and when (``started_at`` stays the first claim's).
    driver: Mapped[str | None] = mapped_column(String(MAX_NAME_LENGTH))
    drive_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_runs_status_lease", "status", "lease_at"),)


class RunDrive(Base):
    """One earlier drive of a resumed run: which machine drove it, from when until its last lease, and how it
    ended. Written when the run is resumed (the run's own row then describes the drive that follows)."""

    __tablename__ = "run_drives"

    run_id: Mapped[str] = mapped_column(String(26), primary_key=True)
    #: The drive's epoch: how often the run had been resumed when it was claimed.
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    driver: Mapped[str | None] = mapped_column(String(MAX_NAME_LENGTH))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: The drive's last sign of life: its last lease, or its end.
    last_lease_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: When the run was resumed after it.
    resumed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: The status the run was resumed from (``abandoned``: its driver died or stopped), and why.
    ended_as: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)


class RunNode(Base):
    __tablename__ = "run_nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    #: Indexed: why a call found nothing in the cache is told by the node's newest earlier call (cache/node_cache.py).
    node: Mapped[str] = mapped_column(String(MAX_NAME_LENGTH), index=True)
    #: A mapped node's element (0-based position in the product); -1 for a node that is not mapped.
    #: Not NULL: the unique key below must tell two attempts of an unmapped node apart, and NULLs never clash.
    element: Mapped[int] = mapped_column(Integer, default=-1, server_default="-1")
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16))
    machine: Mapped[str | None] = mapped_column(String(200))
    gpus: Mapped[list[int]] = mapped_column(JSONValue, default=list)
    #: What this attempt was granted (cpus, gpus, ram_mb): an escalated retry shows its larger ask.
    granted: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    #: The child run a subflow node's call is.
    child_run: Mapped[str | None] = mapped_column(String(26))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    error: Mapped[str | None] = mapped_column(Text)
    logs: Mapped[str | None] = mapped_column(Text)
    cache_key: Mapped[str | None] = mapped_column(String(80), index=True)
    outputs: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    #: The run whose row this one's outputs were restored from (always the original, never a copy), and the
    #: element that made them there (an element's series are named after it: ``loss[3]``).
    cached_from: Mapped[str | None] = mapped_column(String(26))
    cached_element: Mapped[int | None] = mapped_column(Integer)
    #: The code identity the call was keyed on (flows/node_code.py), and why it was not restored from the cache.
    node_code: Mapped[str | None] = mapped_column(String(80))
    cache_miss: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (UniqueConstraint("run_id", "node", "element", "attempt", name="uq_run_nodes_attempt"),)


class RunMetric(Base):
    __tablename__ = "run_metrics"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME_LENGTH), primary_key=True)
    #: Count of earlier emissions of this name in this run, from 0.
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class RunArtifact(Base):
    __tablename__ = "run_artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    node: Mapped[str] = mapped_column(String(MAX_NAME_LENGTH))
    #: The mapped element that made it (-1: the node is not mapped), as in ``RunNode.element``.
    element: Mapped[int] = mapped_column(Integer, default=-1, server_default="-1")
    message: Mapped[str] = mapped_column(String(MAX_NAME_LENGTH))
    digest: Mapped[str] = mapped_column(String(80), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str] = mapped_column(String(200))
    name: Mapped[str | None] = mapped_column(String(500))
    #: The codec that encoded a typed value into these bytes (``numpy``, ``pandas`` …); ``None``: an Artifact.
    codec: Mapped[str | None] = mapped_column(String(64))


class Schedule(Base):
    """A named rule that submits a run per tick; every beat of the installation reads this table."""

    __tablename__ = "schedules"

    #: A ULID of its own: the idempotency key of a tick's run names it, so a schedule removed and added
    #: again under the same name never finds the runs of the old one.
    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    flow: Mapped[str] = mapped_column(String(200))
    #: How a beat loads the flow: ``module:attr`` or ``file.py:attr`` (``None``: by its registered name).
    flow_ref: Mapped[str | None] = mapped_column(String(1000))
    #: Exactly one of ``cron`` (five fields, read in ``tz``) and ``every_s`` (seconds) is set.
    cron: Mapped[str | None] = mapped_column(String(200))
    tz: Mapped[str | None] = mapped_column(String(64))
    every_s: Mapped[int | None] = mapped_column(BigInteger)
    params: Mapped[dict[str, Any]] = mapped_column(JSONValue, default=dict)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    catchup: Mapped[str] = mapped_column(String(8), default="last")
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: Moved by every change (pause, resume): a beat compares it to notice changes without a restart.
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: The newest tick a beat submitted a run for; only ever moves forward.
    last_tick: Mapped[datetime | None] = mapped_column(UTCDateTime)


class AlertLog(Base):
    """Every alert fluksio sent or gave up on, so that a failed one is never lost quietly."""

    __tablename__ = "alert_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rule: Mapped[str] = mapped_column(String(100), index=True)
    #: ``None`` for a sample sent by `fluksio alerts test`.
    run_id: Mapped[str | None] = mapped_column(String(26), index=True)
    status: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(1000))
    #: ``sent`` or ``failed``.
    outcome: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
