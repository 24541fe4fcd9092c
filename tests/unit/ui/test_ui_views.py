"""What the explorer's pages are made of: node rows grouped by (node, index), call ids as the driver makes them,
which drive made a row, and a comparison's differing params."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from fluksio.clock import utcnow
from fluksio.driver.state import DriveState
from fluksio.messages import call_id, parse_call_id
from fluksio.schemas import NodeRecord, NodeStatus, RunRecord, RunStatus
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.models import Run
from fluksio.store.nodes import NodeRow, record_nodes
from fluksio.store.run_rows import insert_run, load_record
from fluksio.ui.views import (
    compare_rows,
    epoch_of,
    flower_task_url,
    fmt_duration,
    group_nodes,
    timeline_bars,
)


def stored_run(db: Database) -> str:
    run = Run(id=new_run_id(), flow="count", params={}, params_digest="sha256:p", status="ok", created_at=utcnow(),
              engine="embedded")
    insert_run(db, run)
    return run.id


def test_mapped_elements_group_under_their_node_failed_first_and_attempts_merge(db: Database) -> None:
    run = stored_run(db)
    now = utcnow()
    rows = [NodeRow(run_id=run, node="split", status="ok", machine="a", started_at=now, finished_at=now)]
    # Elements written as a mapped node's driver writes them (the engine does not make them yet here).
    for index in range(5):
        status = "error" if index in (1, 3) else "ok"
        rows.append(NodeRow(run_id=run, node="count", status=status, element=index, machine="b", error=(
            f"bad shard {index}" if status == "error" else None)))
    rows.append(NodeRow(run_id=run, node="count", status="ok", element=3, attempt=2, machine="a"))  # a retry
    rows.append(NodeRow(run_id=run, node="total", status="ok"))
    record_nodes(db, rows)
    record = load_record(db, run)
    groups = group_nodes(record.nodes)
    assert [g.node for g in groups] == ["split", "count", "total"]
    split, count, total = groups
    assert not split.mapped and len(split.calls) == 1 and split.calls[0].label == "split"
    assert count.mapped and [c.index for c in count.calls] == [1, 0, 2, 3, 4]  # the failed element first
    retried = next(c for c in count.calls if c.index == 3)
    assert retried.latest.attempt == 2 and retried.latest.status is NodeStatus.OK
    assert [e.error for e in retried.earlier] == ["bad shard 3"]
    assert count.counts == {"error": 1, "ok": 4} and count.status == "error" and count.summary == "1 error · 4 ok"
    assert count.machines == ["a", "b"] and count.calls[0].label == "count[1]"
    assert total.calls[0].index is None


def test_call_ids_are_the_driver_s_and_parse_back() -> None:
    for epoch, node, attempt in ((0, "train", 1), (2, "r1", 3), (1, "fit", 2), (0, "count[7]", 2)):
        driver = SimpleNamespace(run_id="01M8RGWPN4GFX6DKXANWJWNG1N", epoch=epoch, attempts={node: attempt})
        made = DriveState.call_id(driver, node)  # type: ignore[arg-type]
        assert call_id(driver.run_id, epoch, node, attempt) == made
        ref = parse_call_id(made)
        assert ref is not None and (ref.run_id, ref.epoch, ref.node, ref.attempt) == (driver.run_id, epoch, node,
                                                                                        attempt)
    assert parse_call_id("some-other-grant") is None
    assert flower_task_url("http://h:5555/", "R.r1.fit.2") == "http://h:5555/task/R.r1.fit.2"


def test_which_drive_made_a_row() -> None:
    resumed = utcnow()
    before = NodeRecord(node="a", status=NodeStatus.OK, started_at=resumed - timedelta(seconds=5))
    after = NodeRecord(node="a", status=NodeStatus.OK, started_at=resumed + timedelta(seconds=1))
    assert epoch_of(before, 0, None) == 0
    assert epoch_of(after, 2, resumed) == 2
    assert epoch_of(before, 1, resumed) == 0
    assert epoch_of(before, 2, resumed) is None  # one of two earlier drives: unknown


def record(params: dict[str, object], run_id: str | None = None) -> RunRecord:
    return RunRecord(id=run_id or new_run_id(), flow="train", status=RunStatus.OK, params=params,
                     created_at=utcnow(), duration_ms=1500)


def test_compare_marks_the_params_that_differ() -> None:
    runs = [record({"lr": lr, "epochs": 3}) for lr in (0.1, 0.2, 0.3)] + [record({"lr": 0.3})]
    rows = {r.name: r for r in compare_rows(runs, {runs[0].id: {"loss": 0.5}, runs[1].id: {"loss": 0.5}})}
    assert rows["lr"].differs and rows["lr"].cells == ["0.1", "0.2", "0.3", "0.3"]
    assert rows["epochs"].differs and rows["epochs"].cells[-1] == "—"  # the last run lacks it
    same = {r.name: r for r in compare_rows(runs[:3], {})}
    assert not same["epochs"].differs and same["lr"].differs
    assert rows["loss"].kind == "metric" and rows["loss"].cells == ["0.5", "0.5", "—", "—"]
    assert rows["duration"].cells[0] == fmt_duration(1500) == "1.5 s"


def test_timeline_bars_skip_calls_that_never_ran_on_a_machine() -> None:
    start = utcnow()
    nodes = [NodeRecord(node="a", status=NodeStatus.OK, machine="m1", started_at=start,
                        finished_at=start + timedelta(seconds=2), duration_ms=2000),
             NodeRecord(node="b", status=NodeStatus.CACHED, started_at=start, finished_at=start, cached_from="X"),
             NodeRecord(node="c", status=NodeStatus.ERROR, machine="m2", index=4,
                        started_at=start + timedelta(seconds=1), finished_at=start + timedelta(seconds=3))]
    run = RunRecord(id=new_run_id(), flow="f", status=RunStatus.OK, created_at=start, nodes=nodes)
    bars = timeline_bars(run, href=lambda n: f"/task/{n.node}")
    assert [(b.lane, b.label, b.start, b.end, b.status) for b in bars] == [
        ("m1", "a", 0.0, 2.0, "ok"), ("m2", "c[4]", 1.0, 3.0, "error")]
    assert bars[0].href == "/task/a"
