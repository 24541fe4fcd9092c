"""Notices while a connected process waits through an outage of its broker or run store.

A process that was connected and loses its broker or store keeps trying for a
while (``FLUKSIO_BROKER_OUTAGE_S``, ``FLUKSIO_DB_OUTAGE_S``) rather than failing
what it was doing. Waiting in silence looks like a hang, so each wait is said
on the :data:`LOGGER` logger (warnings): at once, then every :data:`EVERY_S`
seconds, then once more when the part answers again (info). A worker's log shows them as any other
warning; a command at the terminal prints them on stderr (``fluksio.cli``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

#: The logger every outage notice goes to (the CLI shows exactly this one on the terminal).
LOGGER = "fluksio.outage"
#: Least time between two notices of one ongoing outage, in seconds.
EVERY_S = 5.0

log = logging.getLogger(LOGGER)


class Notices:
    """Says that ``part`` is unreachable and for how long it is tried, without flooding the log.

    One per part and process, shared by every thread and connection that retries it. The first
    failure of an outage is said at once; later ones at most every :data:`EVERY_S` seconds;
    :meth:`over` says the part answers again (only if an outage was said).
    """

    def __init__(self, part: str, every_s: float = EVERY_S, clock: Any = time.monotonic) -> None:
        #: What is waited for, as a person calls it: "broker", "run store".
        self.part = part
        self._every_s = every_s
        self._clock = clock
        self._last: float | None = None
        self._lock = threading.Lock()

    def waiting(self, reason: str, left_s: float) -> None:
        """One retry failed with ``reason``; retries go on for ``left_s`` more seconds."""
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < self._every_s:
                return
            self._last = now
        log.warning("%s unreachable (%s), retrying for %.0f s more", self.part, reason, max(0.0, left_s))

    def over(self) -> None:
        """The part answered again."""
        with self._lock:
            said, self._last = self._last is not None, None
        if said:
            log.info("%s reachable again", self.part)
