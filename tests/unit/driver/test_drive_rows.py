"""The driver journals completions in batches: a fan-out's finished calls cost one transaction.

These drive real runs through ``drive()`` on a SQLite store, with an instant worker in
place of Celery (each dispatched call is answered at once), so what is counted is the
driver's own writes.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import event

from fluksio import Flow
from fluksio.driver.journal import WRITE_DELAY_S
from fluksio.messages import NodeCall
from fluksio.store.models import RunNode
from fluksio.store.run_rows import get_run, node_rows
from tests.unit.driver.drives import answer, chain, drive_instantly, drive_with, hop


@pytest.fixture
def runtime(make_runtime):
    return make_runtime(cpus=500)


@pytest.fixture
def node_inserts(runtime):
    """Each statement that writes node rows, as its number of rows."""
    seen: list[int] = []

    # One statement may carry many rows as many VALUES groups (SQLAlchemy's "insertmanyvalues", used
    # with RETURNING), its parameters flat: so many per row as the table has columns but the id.
    per_row = len(RunNode.__table__.columns) - 1

    def before(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO RUN_NODES"):
            flat = bool(parameters) and not isinstance(parameters[0], (tuple, list, dict))
            seen.append(len(parameters) // per_row if flat else len(parameters))

    event.listen(runtime.db.write_engine, "before_cursor_execute", before)
    yield seen
    event.remove(runtime.db.write_engine, "before_cursor_execute", before)


def fanout(width: int) -> Flow:
    flow = Flow(f"fanout_{width}", outputs=["m0"])
    for i in range(width):
        flow.node(hop, name=f"n{i}", provides=f"m{i}", requires=[])
    return flow


def test_a_fanout_that_finishes_at_once_is_journaled_in_one_statement(runtime, node_inserts):
    run_id = drive_instantly(runtime, fanout(100))
    assert get_run(runtime.db, run_id).status == "ok"
    assert len(node_rows(runtime.db, run_id)) == 100
    # Every call was sent before the first completion was read: the driver took them all in one go.
    assert node_inserts == [100]


def test_a_chain_writes_each_row_before_sending_the_next_node(runtime, node_inserts):
    run_id = drive_instantly(runtime, chain(5))
    assert get_run(runtime.db, run_id).status == "ok"
    assert node_inserts == [1, 1, 1, 1, 1]
    assert sorted(r.node for r in node_rows(runtime.db, run_id)) == [f"n{i}" for i in range(5)]


def test_node_finished_is_announced_only_once_its_row_is_there(runtime):
    seen_rows: dict[str, bool] = {}

    def on_event(evt: dict[str, Any]) -> None:
        if evt["event"] == "node_finished":
            seen_rows[evt["node"]] = any(r.node == evt["node"] for r in node_rows(runtime.db, evt["run_id"]))

    unsubscribe = runtime.events.subscribe(on_event)
    try:
        drive_instantly(runtime, fanout(20))
    finally:
        unsubscribe()
    assert len(seen_rows) == 20
    assert all(seen_rows.values())


def test_a_failure_in_a_batch_skips_its_dependents_and_keeps_the_other_rows(runtime):
    flow = Flow("mixed", outputs=["a"])
    flow.node(hop, name="a", provides="a", requires=[])
    flow.node(hop, name="b", provides="b", requires=[])
    flow.node(hop, name="c", provides="c", requires=["b"])
    run_id = drive_instantly(runtime, flow, failing=frozenset({"b"}))
    run = get_run(runtime.db, run_id)
    assert run.status == "error"
    assert "b" in run.status_reason
    assert {r.node: r.status for r in node_rows(runtime.db, run_id)} == {"a": "ok", "b": "error", "c": "skipped"}


def test_rows_of_finished_calls_wait_briefly_for_company_while_others_run(runtime, node_inserts):
    flow = fanout(10)
    rows_when_the_last_ended: list[int] = []
    run_ids: list[str] = []

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        run_ids.append(call.run_id)
        if call.node != "n9":
            answer(runtime, flow, call)
            return

        def finish_late() -> None:  # the slow call ends well after the others' rows were due
            rows_when_the_last_ended.append(len(node_rows(runtime.db, call.run_id)))
            answer(runtime, flow, call)

        threading.Timer(WRITE_DELAY_S * 6, finish_late).start()

    run_id = drive_with(runtime, flow, dispatch)
    assert get_run(runtime.db, run_id).status == "ok"
    # Nine rows in one transaction (within WRITE_DELAY_S, while n9 still ran), then n9's own.
    assert node_inserts == [9, 1]
    assert rows_when_the_last_ended == [9]
    assert len(node_rows(runtime.db, run_id)) == 10


def test_a_row_is_written_before_a_node_that_depends_on_it_is_sent_even_while_others_run(runtime):
    # a → c, with b slow: when a ends, b still runs (so rows could wait for company), yet c needs a's row.
    flow = Flow("diamondish", outputs=["c"])
    flow.node(hop, name="a", provides="a", requires=[])
    flow.node(hop, name="b", provides="b", requires=[])
    flow.node(hop, name="c", provides="c", requires=["a"])
    rows_when_c_was_sent: list[list[str]] = []
    slow: list[NodeCall] = []

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        if call.node == "b":
            slow.append(call)
            return
        if call.node == "c":
            rows_when_c_was_sent.append(sorted(r.node for r in node_rows(runtime.db, call.run_id)))
            threading.Timer(0.1, answer, (runtime, flow, slow[0])).start()
        answer(runtime, flow, call)

    run_id = drive_with(runtime, flow, dispatch)
    assert get_run(runtime.db, run_id).status == "ok"
    assert rows_when_c_was_sent == [["a"]]
