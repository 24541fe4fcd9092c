"""Call durations counted from node rows: each finished call once per process, a bounded page per update,
rows committed out of order counted late, never twice. On a table of rows the test writes itself, and once on
a real run store."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from fluksio.store.db import Database
from fluksio.store.nodes import NodeRow, record_nodes
from fluksio.store.tallies import FinishedCall, Tallies
from fluksio.ui.durations import GAP_WAIT_S, CallDurations
from tests.unit.placement.machines import Clock
from tests.unit.store.runs import add_run


class Rows:
    """Node rows as a store holds them: only those ``visible`` (committed) are read."""

    def __init__(self) -> None:
        self.rows: dict[int, FinishedCall] = {}
        self.reads = 0

    def add(self, row: int, seconds: float | None = 1.0, node: str = "fit", flow: str = "train") -> None:
        self.rows[row] = FinishedCall(row, flow, node, seconds)

    def newest_call(self) -> int:
        return max(self.rows, default=0)

    def calls_after(self, row: int, limit: int) -> list[FinishedCall]:
        self.reads += 1
        return [self.rows[r] for r in sorted(self.rows) if r > row][:limit]

    def calls_among(self, rows: Collection[int]) -> list[FinishedCall]:
        return [self.rows[r] for r in sorted(rows) if r in self.rows]


def counts(durations: CallDurations) -> dict[tuple[str, str], float]:
    """Each series' count of calls (its ``+Inf`` bucket)."""
    return {key: buckets[-1][1] for key, (buckets, _total) in durations.histograms().items()}


def test_it_counts_the_calls_that_end_after_its_first_update_each_once() -> None:
    rows = Rows()
    rows.add(1)
    rows.add(2)
    durations = CallDurations(rows)
    assert durations.update() == 0 and durations.cursor == 2  # earlier calls are not this process's
    rows.add(3, seconds=0.3)
    rows.add(4, seconds=40.0, node="eval")
    durations.update()
    durations.update()
    assert counts(durations) == {("train", "eval"): 1, ("train", "fit"): 1}
    buckets, total = durations.histograms()[("train", "fit")]
    assert dict(buckets)["0.25"] == 0 and dict(buckets)["0.5"] == 1 and dict(buckets)["+Inf"] == 1
    assert total == pytest.approx(0.3)
    assert dict(durations.histograms()[("train", "eval")][0])["30.0"] == 0


def test_rows_of_nodes_that_ran_no_call_are_read_past_but_not_counted() -> None:
    rows = Rows()
    durations = CallDurations(rows)
    durations.update()
    rows.add(1, seconds=None)  # cached or skipped
    rows.add(2, seconds=2.0)
    durations.update()
    assert counts(durations) == {("train", "fit"): 1} and durations.cursor == 2 and durations.gaps == {}


def test_a_backlog_is_read_a_page_per_update() -> None:
    rows = Rows()
    durations = CallDurations(rows, page=10)
    durations.update()
    for row in range(1, 26):
        rows.add(row)
    assert [durations.update() for _ in range(4)] == [10, 10, 5, 0]
    assert counts(durations) == {("train", "fit"): 25}


def test_a_row_committed_after_a_newer_one_was_read_is_counted_late_once() -> None:
    rows = Rows()
    clock = Clock()
    durations = CallDurations(rows, clock=clock)
    durations.update()
    rows.add(2)  # row 1 is still being written (PostgreSQL numbered it first)
    durations.update()
    assert durations.gaps == {1: clock.now} and counts(durations) == {("train", "fit"): 1}
    rows.add(1, node="eval")
    durations.update()
    durations.update()
    assert counts(durations) == {("train", "fit"): 1, ("train", "eval"): 1} and durations.gaps == {}


def test_an_id_that_never_shows_up_is_given_up_after_a_while() -> None:
    rows = Rows()
    clock = Clock()
    durations = CallDurations(rows, clock=clock)
    durations.update()
    rows.add(3)  # 1 and 2 were rolled back
    durations.update()
    assert set(durations.gaps) == {1, 2}
    clock.advance(GAP_WAIT_S + 1)
    durations.update()
    assert durations.gaps == {}
    rows.add(1)  # an insert that old is not waited for
    durations.update()
    assert counts(durations) == {("train", "fit"): 1}


def test_a_failed_read_counts_nothing_and_the_next_one_catches_up() -> None:
    rows = Rows()
    durations = CallDurations(rows)
    durations.update()
    rows.add(1)
    healthy = rows.calls_after

    def down(row: int, limit: int) -> list[FinishedCall]:
        raise ConnectionError("the store is down")

    rows.calls_after = down  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        durations.update()
    assert counts(durations) == {} and durations.cursor == 0
    rows.calls_after = healthy  # type: ignore[method-assign]
    durations.update()
    assert counts(durations) == {("train", "fit"): 1}


def test_on_a_real_store_each_call_that_ran_is_counted_by_its_flow_and_node(db: Database) -> None:
    tallies = Tallies(db)
    durations = CallDurations(tallies)
    record_nodes(db, [NodeRow(run_id=add_run(db, flow="old"), node="fit", status="ok", duration_ms=5)])
    durations.update()
    first, second = add_run(db, flow="train"), add_run(db, flow="train", status="error")
    record_nodes(db, [NodeRow(run_id=first, node="count", element=i, status="ok", duration_ms=100 * (i + 1))
                      for i in range(3)] + [NodeRow(run_id=first, node="load", status="cached", duration_ms=0)])
    record_nodes(db, [NodeRow(run_id=second, node="count", element=0, status="error", duration_ms=7000),
                      NodeRow(run_id=second, node="fit", status="skipped")])
    durations.update()
    assert counts(durations) == {("train", "count"): 4}
    buckets, total = durations.histograms()[("train", "count")]
    assert total == pytest.approx(7.6)
    assert dict(buckets)["0.1"] == 1 and dict(buckets)["0.5"] == 3 and dict(buckets)["10.0"] == 4
    assert tallies.runs_by_status() == {"ok": 2, "error": 1}
