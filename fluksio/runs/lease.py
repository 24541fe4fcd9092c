"""The lease sweeper: runs whose driver stopped refreshing their lease are ``abandoned`` (or resumed).

Every driver process runs one. Several sweepers at once are safe: marking a
run abandoned is a guarded UPDATE, so each stale run is taken by exactly one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from datetime import datetime

from sqlalchemy.exc import DBAPIError

from fluksio.clock import utcnow
from fluksio.errors import FluksioError
from fluksio.schemas import RunRecord, RunStatus
from fluksio.store import family as store_family
from fluksio.store import run_rows
from fluksio.store.db import Database

log = logging.getLogger(__name__)


#: ``hand_over(run id, flow, resumed)`` gives a queued run to a driver; ``resumed``: it was just resumed here.
HandOver = Callable[[str, str, bool], None]
#: ``ended(run id, status)``: a run this sweeper ended (its alerts are told).
Ended = Callable[[str, RunStatus], None]


def sweep_once(db: Database, stale_after_s: float, spare: Collection[str] = (), drivable: Collection[str] = (),
               hand_over: HandOver | None = None, auto_resume: bool = False,
               ended: Ended | None = None, shipped: bool = False) -> list[str]:
    """Take every run whose driver's lease is stale (but those in ``spare``); returns their ids.

    ``shipped``: this process also drives runs whose code travelled with them (it accepts shipped code), of
    any flow. Without ``auto_resume`` each is marked ``abandoned``. With it, those of the ``drivable`` flows go
    straight back to ``queued`` (in the same UPDATE, so nobody sees them abandoned in between) and are
    handed over; the others are left one more stale limit to a sweeper that can load them, and then
    abandoned (no driver process has their flow). With ``hand_over``, runs of
    ``drivable`` flows queued so long that their hand-over must have been lost (a broker restart, a
    process that stopped with it in memory) are handed over again too. ``ended(run id, status)`` is told of
    each run this sweep marked ``abandoned`` (its alerts).
    """
    if hand_over is not None:
        for run_id, flow in run_rows.stale_queued(db, stale_after_s, drivable, shipped):
            log.warning("run %s was queued for over %g s with no driver; handed over again", run_id,
                        stale_after_s)
            hand_over(run_id, flow, False)
        for run_id, flow in store_family.stale_woken(db, stale_after_s, drivable, shipped):
            log.warning("run %s was woken by its children over %g s ago and no driver took it; handed over again",
                        run_id, stale_after_s)
            hand_over(run_id, flow, False)
        for run_id, flow in store_family.parked_with_news(db, drivable, shipped):
            log.warning("run %s is parked, but a child of it ended and it was not woken; woken now", run_id)
            hand_over(run_id, flow, False)
    # One attempt each: a sweeper that cannot reach the store must not sit in retries and then judge
    # leases that nobody could refresh meanwhile.
    taken: list[str] = []
    if auto_resume and hand_over is not None:
        for run_id, flow in run_rows.requeue_stale_once(db, stale_after_s, drivable, spare, shipped):
            log.warning("run %s: its driver's lease is older than %g s; resumed automatically", run_id,
                        stale_after_s)
            taken.append(run_id)
            hand_over(run_id, flow, True)
    abandon_after_s = stale_after_s * 2 if auto_resume and hand_over is not None else stale_after_s
    for run_id in run_rows.abandon_stale_once(db, abandon_after_s, spare):
        log.warning("run %s: its driver's lease is older than %g s; marked abandoned", run_id, abandon_after_s)
        taken.append(run_id)
        if ended is not None:
            ended(run_id, RunStatus.ABANDONED)
    return taken


def noticed_driverless(record: RunRecord, stale_after_s: float, now: datetime | None = None) -> RunRecord:
    """``record``, said to have no driver when it is running and its lease is older than the stale limit.

    Read by whoever looks (the client, the CLI, the explorer): a driver that died cannot say so, and when no
    driver process is alive no sweeper marks the run either. Its reason then says how long, and what to do.
    """
    if record.status is not RunStatus.RUNNING or record.parked or record.lease_at is None:
        return record
    quiet_s = ((now or utcnow()) - record.lease_at).total_seconds()
    if quiet_s <= stale_after_s:
        return record
    return record.model_copy(update={
        "driverless_s": quiet_s,
        "status_reason": f"no driver has refreshed this run for {quiet_s:.0f} s; start a worker with --drivers "
                         "(it resumes the run, keeping what finished)"})


class Sweeper:
    """A daemon thread calling :func:`sweep_once` every ``interval_s`` seconds.

    It judges leases only after it has reached the store for a whole stale limit without a break: right
    after an outage (or its own start) every lease may look stale because nobody could refresh it.
    """

    def __init__(self, db: Database, stale_after_s: float, interval_s: float,
                 spare: Callable[[], Collection[str]] = frozenset,
                 drivable: Callable[[], Collection[str]] = frozenset,
                 hand_over: HandOver | None = None, auto_resume: bool = False, ended: Ended | None = None,
                 shipped: bool = False) -> None:
        self.db = db
        self.shipped = shipped
        self.ended = ended
        self.stale_after_s = stale_after_s
        self.interval_s = interval_s
        self.spare = spare
        self.drivable = drivable
        self.hand_over = hand_over
        self.auto_resume = auto_resume
        self._reachable_since = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fluksio-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if time.monotonic() - self._reachable_since < self.stale_after_s:
                if not self.db.reachable():
                    self._reachable_since = time.monotonic()
                continue
            try:
                sweep_once(self.db, self.stale_after_s, self.spare(), self.drivable(), self.hand_over,
                           self.auto_resume, self.ended, self.shipped)
            except DBAPIError:
                log.warning("lease sweep could not reach the run store; waiting for it", exc_info=True)
                self._reachable_since = time.monotonic()
            except (FluksioError, OSError):
                log.warning("lease sweep failed; trying again in %g s", self.interval_s, exc_info=True)
            except Exception:
                log.exception("lease sweep failed; trying again in %g s", self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s + 1)
