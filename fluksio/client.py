"""The Python front door: ``connect()``, then submit, wait, inspect and cancel runs."""

from __future__ import annotations

import atexit
import itertools
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery

from pydantic import ValidationError

from fluksio.errors import BrokerUnavailable, ClientClosed, CodecError, NodeFailed, RunRejected
from fluksio.execution.values import decode
from fluksio.flows.annotations import adapter_for, fit_error, type_name
from fluksio.flows.flow import Flow
from fluksio.runs import family
from fluksio.runs.metrics import series_of
from fluksio.runs.references import output_of
from fluksio.runs.submit import check_priority, submit_run, validate_params
from fluksio.runtime import Runtime
from fluksio.schemas import CatchUp, RunRecord, RunStatus, ScheduleRecord
from fluksio.settings import Settings, load_settings, redact_url, require_redis_broker
from fluksio.store import run_rows
from fluksio.store.ids import new_run_id
from fluksio.triggers.alerts import attach_alerts
from fluksio.triggers.schedules import Schedules
from fluksio.worker.app import create_app, send_drive, start_sweeper
from fluksio.worker.embedded import EmbeddedWorkers

#: First and longest pause between two looks at a run's row while waiting, in seconds.
WAIT_FIRST_S, WAIT_MAX_S = 0.005, 0.2
#: How long closing an embedded client waits for its drivers to hand their runs over, in seconds.
STOP_DRIVERS_S = 3.0

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
        return run_rows.run_status(self._client.runtime.db, self.id)

    def wait(self, timeout: float | None = None) -> RunRecord:
        """Block until the run ends; :class:`TimeoutError` after ``timeout`` seconds.

        Reads the run's row, with pauses growing to :data:`WAIT_MAX_S` in between; a run driven in this
        process (the embedded default) ends the pause as soon as its end is written.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = WAIT_FIRST_S
        with self._client.runtime.ends.watch(self.id) as ended:
            while True:
                status = self.status
                if status.is_terminal():
                    return self._client.get(self.id)
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"run {self.id} is still {status.value} after {timeout:g} s")
                if ended.wait(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic()))):
                    ended.clear()  # the row says what ended it (a resumed run is waited for again)
                pause = min(pause * 2, WAIT_MAX_S)

    def get(self) -> RunRecord:
        return self._client.get(self.id)

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"


@dataclass
class Sweep:
    group_id: str
    runs: list[RunHandle]

    def wait(self, timeout: float | None = None) -> list[RunRecord]:
        deadline = None if timeout is None else time.monotonic() + timeout
        return [r.wait(None if deadline is None else max(0.0, deadline - time.monotonic())) for r in self.runs]


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
            self.runtime = Runtime.embedded(settings)
            self._workers = EmbeddedWorkers(self.runtime)
            self.app: Celery = self._workers.app
            self._sweeper = start_sweeper(self.app, self.runtime)
        else:
            from fluksio.broker.connection import check_broker  # the embedded default never loads redis-py

            require_redis_broker(settings)
            check_broker(settings)  # at once, not after FLUKSIO_BROKER_OUTAGE_S of retries
            self.runtime = Runtime.distributed(settings)
            self.app = create_app(settings, self.runtime)
        #: The installation's schedules: ``client.schedules.list()``, ``.pause(name)``, ``.resume``, ``.remove``.
        self.schedules = Schedules(self.runtime.db, self.runtime.registry)
        self._closed = False
        self._lock = threading.Lock()
        try:
            # Runs end here too: embedded ones, and queued ones this client cancels.
            attach_alerts(self.runtime)
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
    ) -> RunHandle:
        """Validate and journal a run, then hand it to a driver. Bad input raises :class:`RunRejected`.

        ``priority``: the run's waiting calls are granted before those of lower priorities (then oldest first).
        """
        self._check_open()
        run, created = submit_run(
            self.runtime.db, self.runtime.registry, self.runtime.artifacts, flow, engine=self.settings.engine,
            params=params, seed=seed,
            group=group, no_cache=no_cache, idempotency_key=idempotency_key, priority=priority,
            embedded_machines=self.runtime.placer.machines() if self.settings.embedded else None,
            pools=self.settings.pools,
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
        run = run_rows.get_run(self.runtime.db, run_id)
        if self.settings.embedded:
            self.runtime.registry.get(run.flow)  # the driver here must be able to load it
        family.resume(self.runtime, run)
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
        resolved = self.runtime.registry.resolve(flow)
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

    def get(self, run_id: str) -> RunRecord:
        self._check_open()
        return run_rows.load_record(self.runtime.db, run_id)

    def handle(self, run_id: str) -> RunHandle:
        self._check_open()
        return RunHandle(self, run_rows.get_run(self.runtime.db, run_id).id)

    def runs(self, flow: str | None = None, status: str | None = None, group: str | None = None,
             limit: int = 50, schedule: str | None = None, parent: str | None = None,
             offset: int = 0) -> list[RunRecord]:
        """Runs, newest first (their ``nodes`` are left empty: :meth:`get` one for those).

        ``schedule``: only runs that schedule's ticks started (``RunRecord.schedule_tick`` says which tick);
        ``parent``: only the child runs of that run (its subflow calls; an id or a unique prefix);
        ``offset``: skip that many (paging).
        """
        self._check_open()
        for name, value, least in (("limit", limit, 1), ("offset", offset, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise RunRejected(f"{name} must be a whole number ≥ {least}, got {value!r}")
        if status is not None and status not in {s.value for s in RunStatus}:
            raise RunRejected(f"status {status!r} is not one of {', '.join(s.value for s in RunStatus)}")
        if parent is not None:
            parent = run_rows.get_run(self.runtime.db, parent).id  # a prefix works, a wrong id says so
        return [run_rows.to_record(r, [])
                for r in run_rows.list_runs(self.runtime.db, flow, status, group, limit, schedule=schedule,
                                            parent=parent, offset=offset)]

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
        run = run_rows.get_run(self.runtime.db, run_id)
        where = f"output {name!r} of run {run.id}"
        try:
            value = decode(output_of(self.runtime.db, run.id, name), self.runtime.artifacts, where)
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
        return series_of(self.runtime.db, run_rows.get_run(self.runtime.db, run_id).id)

    def cancel(self, run_id: str, reason: str = "cancelled by request") -> RunStatus:
        """A queued run is cancelled at once; a running one is told to stop. Returns the status after."""
        self._check_open()
        return family.cancel(self.runtime, run_id, reason)

    def placement(self) -> dict[str, Any]:
        """Every machine (total, free, labels, calls, heartbeat), what waits and why (in the order it will be
        granted, with priority, pool and age), each pool's use, and the provisioners."""
        self._check_open()
        # A driver keeps its waiting calls on the list once per lease interval; one that has not for as
        # long as a lease takes to go stale is dead, and so are its entries.
        snapshot = self.runtime.placer.snapshot(stale_after_s=self.settings.stale_after_s)
        if self.runtime.provisioner is not None:
            snapshot["provisioners"] = self.runtime.provisioner.status()
        return snapshot

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
            self.runtime.stop_driving()
            deadline = time.monotonic() + STOP_DRIVERS_S
            while self.runtime.driving and time.monotonic() < deadline:
                time.sleep(0.01)
            self._sweeper.stop()
            self._workers.stop()
        self.runtime.close()

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
