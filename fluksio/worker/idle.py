"""``fluksio worker --idle-timeout``: a worker that exits after a while without node calls.

A provisioned worker (a Slurm job) holds cluster resources for as long as it
runs; once nothing has called it for the idle timeout it stops as a service
manager would stop it (SIGTERM: a warm shutdown that detaches it from the
placer's books), and its job ends.

Busy means: Celery holds a request (received, waiting for a pool slot or
running), or the placer's books hold a grant on this machine (a call was placed
here and its message may still be on its way). The second keeps the worker
from walking away from a call the placer has just given it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from celery.signals import task_received, worker_ready
from celery.worker import state as worker_state

from fluksio.constants import GRANTS_KEY
from fluksio.placement.redis import RedisBooks

log = logging.getLogger(__name__)

#: Longest pause between two looks at whether the worker is busy, in seconds.
CHECK_EVERY_S = 1.0


def celery_busy() -> bool:
    """Whether this worker process holds any task request (reserved, scheduled or running)."""
    return bool(worker_state.requests) or bool(worker_state.reserved_requests) or bool(worker_state.active_requests)


def grants_held(books: RedisBooks, machine: str) -> Callable[[], bool]:
    """A check: whether the placer's books hold any grant on ``machine``."""
    return lambda: bool(books.redis.hlen(GRANTS_KEY + machine))


def terminate_self() -> None:
    """A warm shutdown of this worker, exactly as ``kill -TERM`` from outside would ask for it."""
    os.kill(os.getpid(), signal.SIGTERM)


class IdleExit:
    """Calls ``stop`` once the worker has been idle for ``idle_s`` seconds (counted from :meth:`start`).

    ``busy`` checks are called from this thread every ``check_every_s``; one that raises counts as busy
    (an unreachable Redis is no reason to leave).
    """

    def __init__(self, idle_s: float, busy: list[Callable[[], bool]] | None = None,
                 stop: Callable[[], None] = terminate_self, clock: Callable[[], float] = time.monotonic,
                 check_every_s: float | None = None) -> None:
        if idle_s <= 0:
            raise ValueError(f"the idle timeout must be positive, got {idle_s}")
        self.idle_s = idle_s
        self.busy = list(busy) if busy is not None else [celery_busy]
        self._stop_worker = stop
        self.clock = clock
        self.check_every_s = check_every_s if check_every_s is not None else min(CHECK_EVERY_S, idle_s / 10)
        self.last_active = clock()
        self.fired = False
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="fluksio-idle-exit", daemon=True)

    def start(self) -> IdleExit:
        """Start counting now."""
        self.last_active = self.clock()
        task_received.connect(self._touch, weak=False)
        self._thread.start()
        return self

    def start_when_ready(self) -> IdleExit:
        """Start counting once Celery's worker is ready: by then its SIGTERM handler (a warm shutdown that
        lets fluksio detach the machine) is installed, where Python's default would just kill the process."""
        worker_ready.connect(self._on_ready, weak=False)
        return self

    def _on_ready(self, **_: object) -> None:
        worker_ready.disconnect(self._on_ready)
        if not self._halt.is_set():
            self.start()

    def stop(self) -> None:
        """Stop watching (the worker is stopping anyway)."""
        self._halt.set()
        worker_ready.disconnect(self._on_ready)
        task_received.disconnect(self._touch)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.check_every_s + 1)

    def _touch(self, **_: object) -> None:
        self.last_active = self.clock()

    def check(self) -> bool:
        """One look: note activity, or stop the worker if idle long enough. Returns True once it fired."""
        if self.fired:
            return True
        if self._is_busy():
            self.last_active = self.clock()
            return False
        idle = self.clock() - self.last_active
        if idle < self.idle_s:
            return False
        self.fired = True
        log.info("no node call for %.0f s (idle timeout %g s): stopping this worker", idle, self.idle_s)
        self._stop_worker()
        return True

    def _is_busy(self) -> bool:
        for check in self.busy:
            try:
                if check():
                    return True
            except Exception:
                log.warning("could not tell whether this worker is busy; counting it as busy", exc_info=True)
                return True
        return False

    def _watch(self) -> None:
        while not self._halt.wait(self.check_every_s):
            if self.check():
                return
