"""The lease sweeper: runs whose driver stopped refreshing their lease are ``abandoned`` (or resumed).

Every driver process runs one. Several sweepers at once are safe: marking a
run abandoned is a guarded UPDATE, so each stale run is taken by exactly one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fluksio.errors import FluksioError
from fluksio.store import runs as run_rows
from fluksio.store.db import Database

log = logging.getLogger(__name__)


def sweep_once(db: Database, stale_after_s: float, resume: Callable[[str], bool] | None = None) -> list[str]:
    """Abandon stale runs; with ``resume``, hand each to it (it returns whether it re-drove the run)."""
    stale = run_rows.abandon_stale(db, stale_after_s)
    for run_id in stale:
        log.warning("run %s: its driver's lease is older than %g s; marked abandoned", run_id, stale_after_s)
        if resume is not None and resume(run_id):
            log.warning("run %s: resumed automatically", run_id)
    return stale


class Sweeper:
    """A daemon thread calling :func:`sweep_once` every ``interval_s`` seconds."""

    def __init__(self, db: Database, stale_after_s: float, interval_s: float,
                 resume: Callable[[str], bool] | None = None) -> None:
        self.db = db
        self.stale_after_s = stale_after_s
        self.interval_s = interval_s
        self.resume = resume
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fluksio-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                sweep_once(self.db, self.stale_after_s, self.resume)
            except (FluksioError, OSError):
                log.warning("lease sweep failed; trying again in %g s", self.interval_s, exc_info=True)
            except Exception:
                log.exception("lease sweep failed; trying again in %g s", self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s + 1)
