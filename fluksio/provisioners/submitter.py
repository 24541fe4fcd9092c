"""Submissions off the caller's thread: one daemon thread that submits machine requests one after another.

A driver asks for a machine from its loop, which must keep collecting results, dispatching calls and
refreshing its run's lease meanwhile: a run whose lease goes stale is marked ``abandoned`` by the
sweepers of other driver processes. ``sbatch`` may take a minute (two, through ssh: the credentials
file is written first), so :meth:`Provisioner.request <fluksio.provisioners.base.Provisioner.request>`
only reserves the profile and hands the submission to this thread. Submissions are rare (at most one
outstanding per profile), so one thread working in order is enough; it is started when a submission
is queued and ends when none is left.

The :class:`Poller`'s thread is not used for this: a poll may take ``squeue``'s half minute and a
submission two minutes, and each must not hold the other up (attach timeouts are enforced by polls).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from fluksio.provisioners.request import MachineRequest

log = logging.getLogger(__name__)


class Submitter:
    """Runs ``submit(request)`` for each request :meth:`put`, in order, on a daemon thread (one at a time).

    ``submit`` must handle its own failures; anything it raises is logged and the next request goes on.
    """

    def __init__(self, submit: Callable[[MachineRequest], None]) -> None:
        self._submit = submit
        self._changed = threading.Condition()
        self._queue: deque[MachineRequest] = deque()
        #: Requests put and not yet done (queued or being submitted).
        self._unfinished = 0
        #: The request being submitted now, if any.
        self.in_flight: MachineRequest | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def put(self, request: MachineRequest) -> bool:
        """Queue ``request`` for submission; ``False`` (nothing queued) once :meth:`close` was called."""
        with self._changed:
            if self._closed:
                return False
            self._queue.append(request)
            self._unfinished += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fluksio-provisioner-submit", daemon=True)
                self._thread.start()
            self._changed.notify_all()
            return True

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait until every request put so far is done (at most ``timeout_s`` seconds; ``None``: for as long as
        it takes). Returns whether they are."""
        with self._changed:
            return self._changed.wait_for(lambda: self._unfinished == 0, timeout_s)

    def close(self) -> None:
        """Take no more requests and drop those not started yet; the one in flight finishes."""
        with self._changed:
            self._closed = True
            self._unfinished -= len(self._queue)
            self._queue.clear()
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._queue:
                    self._thread = None  # the next put starts another
                    return
                request = self.in_flight = self._queue.popleft()
            try:
                self._submit(request)
            except Exception:  # a bug, or the store away: logged; the driver that asked never sees it
                log.exception("submitting machine request %s (profile %s) failed", request.id, request.profile)
            finally:
                with self._changed:
                    self.in_flight = None
                    self._unfinished -= 1
                    self._changed.notify_all()
