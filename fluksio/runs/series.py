"""Reading runs' metric series one at a time: what charts and progress displays ask a client for
(``client.series``). A run's whole series at once is ``client.metrics(run)``; tables' newest values are
``client.latest_metrics(runs)``.
"""

from __future__ import annotations

from collections.abc import Callable

from fluksio.runs.metrics import sources_of
from fluksio.store import run_rows
from fluksio.store.db import Database
from fluksio.store.metrics import latest_metrics, read_series


class MetricSeries:
    """A client's reads of metric series, one series (or one newest point per series) at a time.

    A run is named by its id or a unique prefix of it; an unknown one raises
    :class:`~fluksio.errors.RunNotFound`. ``check`` is called before each read (a closed client refuses).
    """

    def __init__(self, db: Database, check: Callable[[], None] = lambda: None) -> None:
        self._db = db
        self._check = check

    def newest(self, run_id: str) -> dict[str, tuple[int, float]]:
        """Each of the run's own series' newest point, ``{name: (step, value)}``, as written so far: what a
        progress display shows while the run goes on (series of nodes restored from the cache are not
        followed: those are in :meth:`sources`)."""
        self._check()
        return latest_metrics(self._db, run_rows.get_run(self._db, run_id).id)

    def sources(self, run_id: str) -> dict[str, tuple[str, int]]:
        """Each series of the run, sorted by name: the run whose rows hold its points (the run itself, or for
        a node restored from the cache the run that made it) and how many points it has. :meth:`read` takes
        that run and the series' name."""
        self._check()
        return sources_of(self._db, run_rows.get_run(self._db, run_id).id)

    def read(self, source: str, name: str, start: int | None = None,
             end: int | None = None) -> list[tuple[int, float]]:
        """Series ``name``'s ``(step, value)`` points held by run ``source`` (a full id, as :meth:`sources`
        gives it), in step order; those with ``start ≤ step ≤ end`` when given. Empty when it has none."""
        self._check()
        return read_series(self._db, source, name, start, end)
