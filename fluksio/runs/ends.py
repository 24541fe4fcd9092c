"""Run ends written in this process, told to whoever in this process waits for them.

A client waiting for a run looks at the run's row, and between two looks it sleeps. On the embedded default
the run's driver is in the same process, so the wait can be woken the moment the end is written instead of
at its next look (which came up to 200 ms late). A run that ends elsewhere (another process, another host)
wakes nobody here: its waiter finds the end at its next look, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class RunEnds:
    """Who waits for which run to end; :meth:`tell` wakes them. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[threading.Event]] = {}

    @contextmanager
    def watch(self, run_id: str) -> Iterator[threading.Event]:
        """An event set when the end of ``run_id`` is written in this process (cleared by the waiter, which
        then reads the row: a run resumed meanwhile is waited for again)."""
        ended = threading.Event()
        with self._lock:
            self._waiting.setdefault(run_id, []).append(ended)
        try:
            yield ended
        finally:
            with self._lock:
                waiters = self._waiting.get(run_id, [])
                if ended in waiters:
                    waiters.remove(ended)
                if not waiters:
                    self._waiting.pop(run_id, None)

    def tell(self, run_id: str) -> None:
        """The end of ``run_id`` is written: wake whoever waits for it. Returns at once."""
        with self._lock:
            waiters = list(self._waiting.get(run_id, ()))
        for ended in waiters:
            ended.set()
