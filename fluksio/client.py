"""The Python front door: ``connect()``, then submit, wait, inspect and cancel runs."""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from celery import Celery

from pydantic import ValidationError

from fluksio.artifacts.digests import validate_digest
from fluksio.artifacts.store import with_local_copy
from fluksio.broker.events.base import Callback, Unsubscribe
from fluksio.broker.events.redis import EventStream, RedisEvents
from fluksio.errors import (
    ArtifactError,
    BrokerUnavailable,
    ClientClosed,
    CodecError,
    ConfigError,
    FlowNotFound,
    FluksioError,
    NodeFailed,
    RunRejected,
)
from fluksio.execution.values import decode
from fluksio.flows.annotations import adapter_for, fit_error, type_name
from fluksio.flows.flow import Flow
from fluksio.flows.package import PackedFile, read_files, unpack
from fluksio.runs import family
from fluksio.runs.code import earlier, package_of
from fluksio.runs.lease import noticed_driverless
from fluksio.runs.listing import list_records, run_filters
from fluksio.runs.metrics import latest_values_of_runs, series_of
from fluksio.runs.references import output_of
from fluksio.runs.series import MetricSeries
from fluksio.runs.submit import check_priority, submit_run, validate_params
from fluksio.runtime import Runtime
from fluksio.schemas import CatchUp, RunRecord, RunStatus, ScheduleRecord
from fluksio.settings import Settings, load_settings, redact_url, require_redis_broker
from fluksio.store import run_rows
from fluksio.store.ids import new_run_id
from fluksio.store.models import RunArtifact
from fluksio.store.nodes import artifact_by_digest, artifacts_of
from fluksio.store.tallies import Tallies
from fluksio.triggers.alerts import attach_alerts
from fluksio.triggers.schedules import Schedules
from fluksio.worker.app import create_app, send_drive, start_sweeper
from fluksio.worker.embedded import EmbeddedWorkers

#: First and longest pause between two looks at a run's row while waiting, in seconds.
WAIT_FIRST_S, WAIT_MAX_S = 0.005, 0.2
#: How long closing an embedded client waits for its drivers to hand their runs over, in seconds.
STOP_DRIVERS_S = 3.0
#: The reason a run cancelled by an interrupted wait records.
INTERRUPTED = "interrupted while waiting (Ctrl-C)"

log = logging.getLogger(__name__)

_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


class RunHandle:
    """A submitted run: its id, its status now, and a way to wait for its end."""

    def __init__(self, client: Client, run_id: str, created: bool = True) -> None:
        self._client = client
        self.id = run_id
        #: False when an idempotency key returned a run an earlier submit made.
        self.created = created

    @property
    def status(self) -> RunStatus:
        return run_rows.run_status(self._client._runtime.db, self.id)

    def wait(self, timeout: float | None = None, *, cancel_on_interrupt: bool = True) -> RunRecord:
        """Block until the run ends; :class:`TimeoutError` after ``timeout`` seconds.

        Reads the run's row, with pauses growing to :data:`WAIT_MAX_S` in between; a run driven in this
        process (the embedded default) ends the pause as soon as its end is written.

        Ctrl-C while waiting (a :class:`KeyboardInterrupt`: a notebook's interrupt too) cancels the run, as
        ``fluksio run`` does, then raises; ``cancel_on_interrupt=False`` leaves it running (``client.handle(id)``
        waits for it again later).
        """
        try:
            return self._wait(timeout)
        except KeyboardInterrupt:
            if cancel_on_interrupt:
                self._cancel_interrupted()
            raise

    def _wait(self, timeout: float | None) -> RunRecord:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = WAIT_FIRST_S
        with self._client._runtime.ends.watch(self.id) as ended:
            while True:
                status = self.status
                if status.is_terminal():
                    return self._client.get(self.id)
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"run {self.id} is still {status.value} after {timeout:g} s")
                if ended.wait(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic()))):
                    ended.clear()  # the row says what ended it (a resumed run is waited for again)
                pause = min(pause * 2, WAIT_MAX_S)

    def _cancel_interrupted(self) -> None:
        """Cancel the run whose waiter was interrupted; a cancel that cannot be sent is said, never raised over
        the interrupt."""
        try:
            self._client.cancel(self.id, INTERRUPTED)
        except FluksioError as exc:
            log.warning("run %s was not cancelled after the interrupt (%s); `fluksio cancel %s` cancels it",
                        self.id, exc, self.id)

    async def wait_async(self, timeout: float | None = None) -> RunRecord:
        """:meth:`wait` for code in an event loop (``await run.wait_async()``): the loop runs on while the run does.

        Each look at the run's row runs in a worker thread (:func:`asyncio.to_thread`), with pauses growing to
        :data:`WAIT_MAX_S` in between. Cancelling the awaiting task stops the waiting and leaves the run running
        (``client.cancel(run.id)`` cancels it); :class:`TimeoutError` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = WAIT_FIRST_S
        while True:
            status = await asyncio.to_thread(lambda: self.status)
            if status.is_terminal():
                return await asyncio.to_thread(self._client.get, self.id)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} is still {status.value} after {timeout:g} s")
            await asyncio.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, WAIT_MAX_S)

    def get(self) -> RunRecord:
        return self._client.get(self.id)

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"


@dataclass
class Sweep:
    """The runs one :meth:`Client.sweep` submitted: one per point of its grid (and seed), in the grid's order,
    all filed under the group ``group_id`` (``client.runs(group=…)`` lists them, ``fluksio runs --group``
    shows them with their metrics)."""

    group_id: str
    runs: list[RunHandle]

    def wait(self, timeout: float | None = None, *, cancel_on_interrupt: bool = True) -> list[RunRecord]:
        """Block until every run has ended and return their records in the order of :attr:`runs`;
        :class:`TimeoutError` when ``timeout`` seconds (for all of them together) pass first.

        Ctrl-C while waiting cancels every run of the sweep not yet ended, then raises;
        ``cancel_on_interrupt=False`` leaves them running.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            return [r.wait(None if deadline is None else max(0.0, deadline - time.monotonic()),
                           cancel_on_interrupt=False) for r in self.runs]
        except KeyboardInterrupt:
            if cancel_on_interrupt:
                for run in self.runs:
                    run._cancel_interrupted()
            raise


class Client:
    """A connection to one installation: its run store, its broker and placer books, its flows.

    Made by :func:`connect`, which fails within seconds, in one line, when the broker or the run store
    cannot be reached at start. Embedded (no broker configured), the client also runs the installation:
    an in-process broker, driver and node workers on threads, and the lease sweeper; ``close()`` stops
    them (runs still driven here end ``abandoned``, resumable). Distributed, it only submits and reads:
    the workers are ``fluksio worker`` processes. Thread-safe; once closed, every call is refused with
    :class:`~fluksio.errors.ClientClosed`.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._workers: EmbeddedWorkers | None = None
        if settings.embedded:
            self._runtime = Runtime.embedded(settings)
            self._workers = EmbeddedWorkers(self._runtime)
            self.app: Celery = self._workers.app
            self._sweeper = start_sweeper(self.app, self._runtime)
        else:
            from fluksio.broker.connection import check_broker  # the embedded default never loads redis-py

            require_redis_broker(settings)
            check_broker(settings)  # at once, not after FLUKSIO_BROKER_OUTAGE_S of retries
            self._runtime = Runtime.distributed(settings)
            self.app = create_app(settings, self._runtime)
        #: The installation's schedules: ``client.schedules.list()``, ``.pause(name)``, ``.resume``, ``.remove``.
        self.schedules = Schedules(self._runtime.db, self._runtime.registry)
        #: Metric series one at a time: ``client.series.sources(run)``, ``.read(source, name)``, ``.newest(run)``.
        self.series = MetricSeries(self._runtime.db, self._check_open)
        #: What a monitoring system counts: ``client.tallies.runs_by_status()``, calls as they finish (fluksio's
        #: Prometheus exporter reads them, README "Monitoring").
        self.tallies = Tallies(self._runtime.db, self._check_open)
        self._closed = False
        self._lock = threading.Lock()
        try:
            # Runs end here too: embedded ones, and queued ones this client cancels.
            attach_alerts(self._runtime)
        except Exception:
            self.close()
            raise
        _open_clients.add(self)

    # -- runs -----------------------------------------------------------------------------------

    def submit(
        self,
        flow: Flow | str,
        params: Mapping[str, Any] | None = None,
        *,
        seed: int | None = None,
        group: str | None = None,
        no_cache: bool = False,
        idempotency_key: str | None = None,
        priority: int = 0,
        code: str | None = None,
    ) -> RunHandle:
        """Validate and journal a run, then hand it to a driver. Bad input raises :class:`RunRejected`.

        ``priority``: the run's waiting calls are granted before those of lower priorities (then oldest first).
        The flow's code travels with the run (a package workers fetch: README, "Code that travels with the run");
        ``code="sha256:…"``: run an earlier package of the flow (named by ``flow``) again, unchanged.
        """
        self._check_open()
        runtime = self._runtime
        run, created = submit_run(
            runtime.db, runtime.registry, runtime.artifacts, flow, engine=self.settings.engine,
            params=params, seed=seed,
            group=group, no_cache=no_cache, idempotency_key=idempotency_key, priority=priority,
            embedded_machines=runtime.placer.machines() if self.settings.embedded else None,
            pools=self.settings.pools, code=code, code_max_mb=self.settings.code_max_mb, signer=runtime.signer,
        )
        if created or run.status == RunStatus.QUEUED.value:
            # A retry of a submit whose hand-over failed gets it handed over now (claiming is idempotent).
            self._hand_over(run.id, run.flow)
        return RunHandle(self, run.id, created)

    def _hand_over(self, run_id: str, flow: str) -> None:
        try:
            send_drive(self.app, run_id, flow)
        except Exception as exc:  # kombu's errors differ by transport; any of them means the same here
            raise BrokerUnavailable(
                f"run {run_id} is journaled (queued) but could not be handed to a driver: the broker "
                f"{redact_url(self.settings.broker_url)} did not take it ({type(exc).__name__}: {exc}). "
                "A driver's sweeper sends it again once the broker is back; submitting again with the same "
                "idempotency_key does so too"
            ) from None

    def resume(self, run_id: str) -> RunHandle:
        """Re-drive a run that ended ``error``, ``cancelled`` or ``abandoned``, under the same id.

        Nodes that succeeded before are restored from their rows; only the rest run. The run's row
        records that it was resumed and from what status.
        """
        self._check_open()
        run = run_rows.get_run(self._runtime.db, run_id)
        if self.settings.embedded and run.flow not in self._runtime.registry.names():
            # The driver here must hold the flow, and resume takes a run, not a flow: say the setting that
            # loads it, with where the run found it.
            where = run.flow_ref or "path/to/file.py"
            raise FlowNotFound(
                f"run {run.id} is of flow {run.flow!r}, which this process has not loaded: name its file or module "
                f"in FLUKSIO_FLOWS and resume again (FLUKSIO_FLOWS={where} fluksio resume {run.id})")
        family.resume(self._runtime, run)
        return RunHandle(self, run.id)

    def sweep(
        self,
        flow: Flow | str,
        grid: Mapping[str, Sequence[Any]],
        seeds: Sequence[int] | None = None,
        params: Mapping[str, Any] | None = None,
        no_cache: bool = False,
        priority: int = 0,
    ) -> Sweep:
        """One run per point of the cartesian product of ``grid`` (and ``seeds``), all in one group."""
        self._check_open()
        if not isinstance(grid, Mapping) or not grid:
            raise RunRejected("grid must be a non-empty mapping of input name to a list of values")
        for name, values in grid.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise RunRejected(f"grid[{name!r}] must be a non-empty list of values")
        check_priority(priority)
        resolved = self._runtime.registry.resolve(flow)
        names = list(grid)
        points = [(dict(zip(names, combo)), seed)
                  for combo in itertools.product(*(grid[n] for n in names))
                  for seed in (list(seeds) if seeds else [None])]
        for point, seed in points:  # every point is checked before any run is journaled
            validate_params(resolved, {**(params or {}), **point}, seed)
        group_id = "g" + new_run_id()
        handles = [self.submit(resolved, {**(params or {}), **point}, seed=seed, group=group_id, no_cache=no_cache,
                               priority=priority)
                   for point, seed in points]
        return Sweep(group_id, handles)

    def get(self, run_id: str, nodes: bool = True) -> RunRecord:
        """A run (by id or a unique prefix of it) with its nodes; ``nodes=False``: without them, as :meth:`runs`
        lists it (one row read, however many nodes it has)."""
        self._check_open()
        if not nodes:
            record = run_rows.to_record(run_rows.get_run(self._runtime.db, run_id), [])
        else:
            record = run_rows.load_record(self._runtime.db, run_id)
        return noticed_driverless(record, self.settings.stale_after_s)

    def resumed_at(self, run_id: str) -> datetime | None:
        """When the run was last resumed (UTC), ``None`` if it never was: node rows that started later are of
        its current drive."""
        self._check_open()
        return run_rows.get_run(self._runtime.db, run_id).resumed_at

    def handle(self, run_id: str) -> RunHandle:
        self._check_open()
        return RunHandle(self, run_rows.get_run(self._runtime.db, run_id).id)

    def runs(self, flow: str | None = None, status: str | None = None, group: str | None = None,
             limit: int = 50, schedule: str | None = None, parent: str | None = None,
             offset: int = 0) -> list[RunRecord]:
        """Runs, newest first (their ``nodes`` are left empty: :meth:`get` one for those).

        ``schedule``: only runs that schedule's ticks started (``RunRecord.schedule_tick`` says which tick);
        ``parent``: only the child runs of that run (its subflow calls; an id or a unique prefix);
        ``offset``: skip that many (paging).
        """
        self._check_open()
        return list_records(self._runtime.db, self.settings.stale_after_s, flow, status, group, limit,
                            schedule=schedule, parent=parent, offset=offset)

    def count_runs(self, flow: str | None = None, status: str | None = None, group: str | None = None,
                   schedule: str | None = None, parent: str | None = None) -> int:
        """How many runs :meth:`runs` pages through with these filters (a page's "of N")."""
        self._check_open()
        parent = run_filters(self._runtime.db, status, parent)
        return run_rows.count_runs(self._runtime.db, flow, status, group, parent, schedule)

    def schedule(self, name: str, flow: Flow | str, *, cron: str | None = None, tz: str | None = None,
                 every: str | int | timedelta | None = None, params: Mapping[str, Any] | None = None,
                 seed: int | None = None, priority: int = 0, catchup: str | CatchUp = CatchUp.LAST) -> ScheduleRecord:
        """Add a schedule: a run of ``flow`` per tick of ``cron`` (in ``tz``) or ``every`` (``"10m"``).

        Fired by `fluksio beat` (or `fluksio worker --drivers --beat`). Everything is checked now — the
        expression, the time zone, the flow and its parameters — and refused with
        :class:`~fluksio.errors.ScheduleRejected` (or the flow's own error) rather than at the first tick.
        """
        self._check_open()
        return self.schedules.add(name, flow, cron=cron, tz=tz, every=every, params=params, seed=seed,
                                  priority=priority, catchup=catchup)

    def output(self, run_id: str, name: str, as_type: Any = None) -> Any:
        """Output ``name`` of a run as a node would receive it: a codec's value decoded into its type (a
        ``pandas.DataFrame``, a ``numpy.ndarray`` …), an artifact as an :class:`~fluksio.Artifact`, JSON as
        it is; with ``as_type``, validated into that type (``client.output(run, "cfg", Cfg)``).

        :class:`~fluksio.errors.OutputNotFound` names the outputs the run did make when it made no ``name``.
        """
        self._check_open()
        run = run_rows.get_run(self._runtime.db, run_id)
        where = f"output {name!r} of run {run.id}"
        try:
            value = decode(output_of(self._runtime.db, run.id, name), self._runtime.artifacts, where)
        except NodeFailed as exc:  # the decoding error, raised here as what it is
            raise CodecError(str(exc)) from None
        if as_type is None:
            return value
        try:
            return adapter_for(as_type, where).validate_python(value)
        except ValidationError as exc:
            raise CodecError(f"{where} is no {type_name(as_type)}: {fit_error(exc)}") from None

    def metrics(self, run_id: str) -> dict[str, list[tuple[int, float]]]:
        """Each metric's ``[(step, value), …]``, including series of nodes restored from the cache."""
        self._check_open()
        return series_of(self._runtime.db, run_rows.get_run(self._runtime.db, run_id).id)

    def latest_metrics(self, run_ids: Sequence[str]) -> dict[str, dict[str, float]]:
        """Each run's metrics' newest values, ``{run_id: {name: value}}``, for every id given (full ids, as
        records hold them; a run with no metrics has ``{}``), series of cached nodes included. A page of runs
        costs a few queries, whatever their number."""
        self._check_open()
        if isinstance(run_ids, str):
            raise RunRejected(f"latest_metrics takes a list of run ids, got the string {run_ids!r}")
        return latest_values_of_runs(self._runtime.db, list(run_ids))

    def artifacts(self, run_id: str) -> list[RunArtifact]:
        """The artifacts the run's nodes made (codecs' values included), in the order they were recorded:
        each one's ``digest``, ``name``, ``node``, ``message``, ``size`` (in bytes) and ``media_type``."""
        self._check_open()
        return artifacts_of(self._runtime.db, run_rows.get_run(self._runtime.db, run_id).id)

    def artifact(self, digest: str) -> RunArtifact:
        """The row of an artifact some run made with these bytes (the oldest such row).

        :class:`~fluksio.errors.ArtifactError` for a malformed digest, or one no run made.
        """
        self._check_open()
        row = artifact_by_digest(self._runtime.db, validate_digest(digest))
        if row is None:
            raise ArtifactError(f"no run made an artifact {digest}")
        return row

    def open_artifact(self, digest: str) -> BinaryIO:
        """The bytes of artifact ``digest``, opened for reading (close it, or use ``with``).

        Read from this host's copy; an object store's copy evicted by another process before it was opened
        is fetched again. :class:`~fluksio.errors.ArtifactError` for a malformed digest or bytes the
        artifact store does not hold.
        """
        self._check_open()
        return with_local_copy(self._runtime.artifacts, validate_digest(digest), lambda path: path.open("rb"))

    def packaged_flow(self, flow: str, code: str) -> Flow:
        """Flow ``flow`` as code package ``code`` declares it (its inputs, nodes and options), rebuilt from the
        description an earlier run of that package stored: what ``submit(flow, code=code)`` runs."""
        self._check_open()
        return earlier(self._runtime.db, self._runtime.artifacts, flow, code, None)[1]

    def code_files(self, run_id: str) -> list[PackedFile]:
        """The files of the code package the run ran (path and size), as ``fluksio show`` lists them.

        :class:`~fluksio.errors.RunRejected` when its code did not travel with it; ``ArtifactError`` when the
        package is gone from the artifact store.
        """
        self._check_open()
        return read_files(package_of(self._runtime.artifacts, self.get(run_id, nodes=False)))

    def get_code(self, run_id: str, into: str | Path) -> list[PackedFile]:
        """Write exactly the files the run ran into the folder ``into`` (new, or empty); returns them."""
        self._check_open()
        folder = Path(into)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise RunRejected(f"{folder} is not an empty folder; give a new or empty one")
        return unpack(package_of(self._runtime.artifacts, self.get(run_id, nodes=False)), folder)

    def cancel(self, run_id: str, reason: str = "cancelled by request") -> RunStatus:
        """A queued run is cancelled at once; a running one is told to stop. Returns the status after."""
        self._check_open()
        return family.cancel(self._runtime, run_id, reason)

    def placement(self) -> dict[str, Any]:
        """Every machine (total, free, labels, calls, heartbeat), what waits and why (in the order it will be
        granted, with priority, pool and age), each pool's use, and the provisioners."""
        self._check_open()
        # A driver keeps its waiting calls on the list once per lease interval; one that has not for as
        # long as a lease takes to go stale is dead, and so are its entries.
        snapshot = self._runtime.placer.snapshot(stale_after_s=self.settings.stale_after_s)
        if self._runtime.provisioner is not None:
            snapshot["provisioners"] = self._runtime.provisioner.status()
        return snapshot

    # -- flows and events -----------------------------------------------------------------------

    def flow(self, reference: Flow | str) -> Flow:
        """The flow a reference names — a registered name, ``path/file.py[:attr]`` or ``package.module:attr`` —
        loaded and registered with this client, as :meth:`submit` would; :class:`~fluksio.errors.FlowNotFound`
        says what is registered, or what the file or module holds."""
        self._check_open()
        return self._runtime.registry.resolve(reference)

    def flows(self) -> list[str]:
        """The names of the flows registered with this client (``FLUKSIO_FLOWS``, and those submitted or
        looked up here), sorted."""
        self._check_open()
        return self._runtime.registry.names()

    def flows_with_runs(self) -> list[str]:
        """The name of every flow the run store holds runs of, sorted."""
        self._check_open()
        return run_rows.flow_names(self._runtime.db)

    def subscribe(self, callback: Callback) -> Unsubscribe:
        """Call ``callback(event)`` for each run and node event published from now on, until the returned
        function is called. Embedded, the events of the runs driven in this process; distributed, those of the
        whole installation. The callback runs on another thread: it must be quick and must not raise."""
        self._check_open()
        if not callable(callback):
            raise TypeError(f"subscribe takes a function of one event, got {callback!r}")
        return self._runtime.events.subscribe(callback)

    def event_stream(self) -> EventStream:
        """A subscription to the installation's events that starts now, read with ``next(timeout_s)`` and
        closed with ``close()`` (or ``with``). Subscribe first, then read the state it must not miss.

        Distributed only: :class:`~fluksio.errors.ConfigError` on the embedded default, whose events are
        seen only in its process (:meth:`subscribe` them there).
        """
        self._check_open()
        events = self._runtime.events
        if not isinstance(events, RedisEvents):
            raise ConfigError("an event stream follows a shared broker's events, and this client has none (the "
                              "embedded default): subscribe() to the events of the runs it drives, or set "
                              "FLUKSIO_BROKER_URL")
        return events.stream()

    def watch_end(self, run_id: str) -> AbstractContextManager[threading.Event]:
        """``with client.watch_end(run_id) as ended:`` — an event set as soon as this process writes the run's
        end (embedded runs), so a waiter can sleep on it between looks at the run (:meth:`get`) rather than
        poll. A run that ends in another process sets nothing here: look at the run on a timeout. Clear it
        before the next sleep (a resumed run ends again)."""
        self._check_open()
        return self._runtime.ends.watch(run_id)

    # -- lifetime -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("this fluksio client is closed; call fluksio.connect() again")

    def close(self) -> None:
        """Stop the embedded workers (if any) and release the run store."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._workers is not None:
            # Runs still driven here end `abandoned` (resumable) rather than `running` forever.
            self._runtime.stop_driving()
            deadline = time.monotonic() + STOP_DRIVERS_S
            while self._runtime.driving and time.monotonic() < deadline:
                time.sleep(0.01)
            self._sweeper.stop()
            self._workers.stop()
        self._runtime.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(settings: Settings | None = None, **overrides: Any) -> Client:
    """A client for the configured installation; embedded (in this process) unless a broker is set.

    A broker or run store that cannot be reached now raises a :class:`~fluksio.errors.FluksioError`
    within a few seconds, naming the URL (password hidden), what failed and what to check.
    """
    return Client(settings or load_settings(**overrides))


@atexit.register
def _close_all() -> None:
    for client in list(_open_clients):
        client.close()
