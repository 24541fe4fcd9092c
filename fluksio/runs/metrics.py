"""The metric sink: numeric, finite emissions become rows, written in batches.

Step = how many times the name was emitted before in this call. Booleans, NaN
and infinities are not metrics. Rows go straight to the run store (never
through a channel that may drop them) in a few statements per call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from numbers import Real
from typing import TypeVar

from fluksio.store.db import Database
from fluksio.store.metrics import latest_metrics, latest_metrics_of_runs, read_metrics, series_sizes, upsert_metrics
from fluksio.store.models import RunNode
from fluksio.store.nodes import cached_rows_of
from fluksio.store.run_rows import node_rows

T = TypeVar("T")

#: Buffered rows that trigger a write.
FLUSH_ROWS = 5_000
#: Longest time a buffered row waits for a write, in seconds (so `fluksio run` shows live values).
FLUSH_INTERVAL_S = 0.5


def is_metric(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))


class MetricSink:
    def __init__(self, db: Database, run_id: str) -> None:
        self.db = db
        self.run_id = run_id
        self.steps: dict[str, int] = {}
        self._buffer: list[tuple[str, str, int, float]] = []
        self._last_flush = time.monotonic()
        #: Statements issued so far (for benchmarks and tests of batching).
        self.statements = 0

    def record(self, name: str, value: object) -> bool:
        """Count one emission; buffer it if it is a metric. Returns whether it was."""
        if not is_metric(value):
            return False
        step = self.steps.get(name, 0)
        self.steps[name] = step + 1
        self._buffer.append((self.run_id, name, step, float(value)))  # type: ignore[arg-type]
        if len(self._buffer) >= FLUSH_ROWS or time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()
        return True

    def flush(self) -> None:
        rows, self._buffer = self._buffer, []
        self._last_flush = time.monotonic()
        if not rows:
            return
        # upsert_metrics retries through a database outage; past that the node fails rather than lose rows.
        self.statements += upsert_metrics(self.db, rows)


def _following_cache(db: Database, run_id: str, read: Callable[[Database, str], dict[str, T]]) -> dict[str, T]:
    """``read`` for the run, plus, for each node restored from the cache, what ``read`` gives for the run
    that made its outputs (only the names that node emitted: its outputs keep each one's last value, see
    fluksio/execution/emitter.py)."""
    found = read(db, run_id)
    origins: dict[str, dict[str, T]] = {}
    for row in node_rows(db, run_id):
        if row.cached_from and row.outputs:
            if row.cached_from not in origins:
                origins[row.cached_from] = read(db, row.cached_from)
            origin = origins[row.cached_from]
            for message in row.outputs:
                name, there = _names(message, row)
                if there in origin and name not in found:
                    found[name] = origin[there]
    return dict(sorted(found.items(), key=lambda item: _series_order(item[0])))


def series_of(db: Database, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """A run's metric series, including those of its cached nodes (read from the run that made them)."""
    return _following_cache(db, run_id, read_metrics)


def latest_of(db: Database, run_id: str) -> dict[str, tuple[int, float]]:
    """Each metric's newest ``(step, value)``, following cached nodes like :func:`series_of` (one run; for a page
    of them, :func:`latest_of_runs`)."""
    return _following_cache(db, run_id, latest_metrics)


def _names(message: str, row: RunNode) -> tuple[str, str]:
    """A cached row's series of ``message``: its name in the row's run, and in the run it came from — an
    element's series carry its index, here and there (which may differ)."""
    name = message if row.element is None or row.element < 0 else f"{message}[{row.element}]"
    there = message if row.cached_element is None else f"{message}[{row.cached_element}]"
    return name, there


def _series_order(name: str) -> tuple[str, int]:
    """``loss`` before ``loss[0]`` before ``loss[2]`` before ``loss[10]``: elements in index order."""
    base, _, index = name.partition("[")
    return base, int(index[:-1]) if index[:-1].isdigit() else -1


def sources_of(db: Database, run_id: str) -> dict[str, tuple[str, int]]:
    """Each metric of the run: the run whose rows hold its points (itself, or for a node restored from the
    cache the run that made it, as in :func:`series_of`) and how many points it has. Sorted by name.

    What a reader of one series at a time needs (``store.metrics.read_series``), without reading every point.
    """
    own = {name: (run_id, count) for name, count in series_sizes(db, run_id).items()}
    return _following_cache(db, run_id, lambda _db, rid: own if rid == run_id else
                            {name: (rid, count) for name, count in series_sizes(db, rid).items()})


def latest_of_runs(db: Database, run_ids: list[str]) -> dict[str, dict[str, tuple[int, float]]]:
    """:func:`latest_of` of many runs (a page of them) in three queries, whatever their number."""
    found = latest_metrics_of_runs(db, run_ids)
    cached = cached_rows_of(db, run_ids)
    origins = latest_metrics_of_runs(db, sorted({row.cached_from for row in cached if row.cached_from}))
    for row in cached:
        origin = origins.get(row.cached_from or "", {})
        mine = found.setdefault(row.run_id, {})
        for message in row.outputs or {}:
            name, there = _names(message, row)
            if there in origin and name not in mine:
                mine[name] = origin[there]
    return {run_id: dict(sorted(found.get(run_id, {}).items(), key=lambda item: _series_order(item[0])))
            for run_id in run_ids}


def latest_values_of_runs(db: Database, run_ids: list[str]) -> dict[str, dict[str, float]]:
    """Each run's metrics' newest values (what tables and comparisons show), as :func:`latest_of_runs` finds them."""
    return {run_id: {name: value for name, (_step, value) in latest.items()}
            for run_id, latest in latest_of_runs(db, run_ids).items()}
