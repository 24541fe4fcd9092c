"""How long node calls take, as a Prometheus histogram per flow and node, counted from the run store's node rows.

Why the store: calls run in worker processes on other hosts; the one place every finished call shows up is
the row its driver writes when it ends (``store/tallies.py``). A histogram is cumulative, so each finished
call must be counted exactly once: :class:`CallDurations` keeps a cursor, the id of the newest node row it
has read, and each :meth:`~CallDurations.update` (one per scrape) reads at most :data:`PAGE` rows after it.
A scrape's work is bounded however many calls ended since the last one; a backlog is caught up over the
following scrapes.

The state lives in the exporting process, like any Prometheus counter's: it starts at zero (the cursor at
the newest row, on the first update), so it counts the calls that end while the process runs, and a restart
is a counter reset, which ``rate()`` and ``histogram_quantile()`` allow for. Two exporters of one
installation each count every call: scrape one, or aggregate them with ``max``, not ``sum``.

Rows become visible in the order their writers commit, not always the order of their ids: on PostgreSQL a
row numbered 41 may be committed after row 42 was read. Ids skipped over are kept as *gaps*, and asked for
again at each update for :data:`GAP_WAIT_S` seconds: one that shows up then is counted late; one that never
does was an insert rolled back or refused as a duplicate (those use up numbers too). At most
:data:`GAPS_MAX` are kept. SQLite has one writer at a time, so there an id skipped is never filled later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fluksio.store.tallies import FinishedCall

#: Node rows one update reads at most.
PAGE = 5_000
#: Upper bounds of the buckets, in seconds: a node call lasts anything from milliseconds (a lookup) to a day
#: (a training run), so the steps grow with the bound, a handful per order of magnitude.
BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
                              7200, 14400, 43200, 86400)
#: How long an id skipped over is looked for again, in seconds: longer than any transaction that writes
#: node rows stays open (a driver writes them in one short statement).
GAP_WAIT_S = 120.0
#: The most skipped ids kept (a deleted range of rows is not worth asking for row by row).
GAPS_MAX = 10_000


class CallRows(Protocol):
    """Where finished calls are read (``client.tallies``: ``store.tallies.Tallies``)."""

    def newest_call(self) -> int: ...

    def calls_after(self, row: int, limit: int) -> list[FinishedCall]: ...

    def calls_among(self, rows: Collection[int]) -> list[FinishedCall]: ...


@dataclass
class Histogram:
    """One flow's node: how many calls fell in each bucket (not cumulative; the last is above every bound)."""

    counts: list[int]
    total_seconds: float = 0.0

    def cumulative(self, bounds: Sequence[float]) -> list[tuple[str, float]]:
        """``(le, count)`` pairs as Prometheus writes them: cumulative, ``+Inf`` last."""
        running, pairs = 0, []
        for bound, count in zip([*map(_bound_text, bounds), "+Inf"], self.counts, strict=True):
            running += count
            pairs.append((bound, float(running)))
        return pairs


@dataclass
class CallDurations:
    """The durations of the calls that ended since this process first updated, per ``(flow, node)``.

    Thread-safe: scrapes may come at once.
    """

    rows: CallRows
    bounds: tuple[float, ...] = BUCKETS
    page: int = PAGE
    gap_wait_s: float = GAP_WAIT_S
    clock: Callable[[], float] = time.monotonic
    #: The id of the newest row read (``None``: not read yet).
    cursor: int | None = None
    #: Ids skipped over → when they were first missed (``clock``).
    gaps: dict[int, float] = field(default_factory=dict)
    _series: dict[tuple[str, str], Histogram] = field(default_factory=dict)
    #: Guards ``_series``, never held while the store is read: a store that hangs must not hold up a scrape's
    #: :meth:`histograms`.
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: One update at a time (each reads after the cursor the one before left); the only writer of ``cursor``
    #: and ``gaps``.
    _updating: threading.Lock = field(default_factory=threading.Lock)

    def update(self) -> int:
        """Count the calls whose rows appeared since the last update; how many rows it read (raises what the
        store raises, counting nothing of that read)."""
        with self._updating:
            if self.cursor is None:
                self.cursor = self.rows.newest_call()  # from now on: earlier calls are not this process's to count
                return 0
            now = self.clock()
            gaps = {row: since for row, since in self.gaps.items() if now - since < self.gap_wait_s}
            late = self.rows.calls_among(gaps) if gaps else []
            calls = self.rows.calls_after(self.cursor, self.page)
            for call in late:
                del gaps[call.row]
            expected = self.cursor + 1
            for call in calls:
                room = max(GAPS_MAX - len(gaps), 0)
                gaps.update(dict.fromkeys(range(expected, min(call.row, expected + room)), now))
                expected = call.row + 1
            with self._lock:
                for call in [*late, *calls]:
                    self._observe(call)
            self.gaps = gaps
            if calls:
                self.cursor = calls[-1].row
            return len(late) + len(calls)

    def _observe(self, call: FinishedCall) -> None:
        """Count one call (``_lock`` held)."""
        if call.seconds is None:
            return
        series = self._series.get((call.flow, call.node))
        if series is None:
            series = self._series[(call.flow, call.node)] = Histogram([0] * (len(self.bounds) + 1))
        at = next((i for i, bound in enumerate(self.bounds) if call.seconds <= bound), len(self.bounds))
        series.counts[at] += 1
        series.total_seconds += call.seconds

    def histograms(self) -> dict[tuple[str, str], tuple[list[tuple[str, float]], float]]:
        """``{(flow, node): (cumulative buckets, sum of seconds)}``, as counted so far."""
        with self._lock:
            return {key: (series.cumulative(self.bounds), series.total_seconds)
                    for key, series in sorted(self._series.items())}


def _bound_text(bound: float) -> str:
    """A bucket's bound as Prometheus clients write it: ``0.5``, ``10.0``."""
    return repr(float(bound))
