"""The run store's reads behind the explorer: filters and paging, counts, newest metrics of many runs, one
series at a time, and an artifact by its digest."""

from __future__ import annotations

from fluksio.runs.metrics import latest_of, latest_of_runs, series_of, sources_of
from fluksio.store.db import Database
from fluksio.store.metrics import latest_metrics_of_runs, read_series, series_sizes, upsert_metrics
from fluksio.store.nodes import ArtifactRow, NodeRow, artifact_by_digest, cached_rows_of, record_nodes
from fluksio.store.run_rows import count_runs, flow_names, list_runs
from tests.unit.store.runs import add_run


def test_runs_filter_by_parent_and_page_newest_first(db: Database) -> None:
    parent = add_run(db, "search")
    # Newest first is by id, which orders by the millisecond a run was made: runs of one millisecond by chance.
    children = sorted((add_run(db, "train", parent=parent) for _ in range(5)), reverse=True)
    add_run(db, "train")  # not a child
    listed = [r.id for r in list_runs(db, parent=parent, limit=50)]
    assert listed == children
    assert [r.id for r in list_runs(db, parent=parent, limit=2, offset=2)] == children[2:4]
    assert count_runs(db, parent=parent) == 5
    assert count_runs(db, flow="train") == 6 and count_runs(db) == 7
    assert count_runs(db, flow="train", parent=parent, status="error") == 0
    assert flow_names(db) == ["search", "train"]


def test_newest_metrics_of_many_runs_in_one_read(db: Database) -> None:
    a, b, c = add_run(db), add_run(db), add_run(db)
    upsert_metrics(db, [(a, "loss", 0, 1.0), (a, "loss", 1, 0.5), (a, "acc", 0, 0.7), (b, "loss", 0, 2.0)])
    assert latest_metrics_of_runs(db, [a, b, c]) == {a: {"acc": (0, 0.7), "loss": (1, 0.5)}, b: {"loss": (0, 2.0)}}
    assert latest_metrics_of_runs(db, []) == {}


def test_a_cached_node_s_series_comes_from_the_run_that_made_it(db: Database) -> None:
    origin, copy = add_run(db), add_run(db)
    upsert_metrics(db, [(origin, "loss", s, 1.0 / (s + 1)) for s in range(4)] + [(copy, "own", 0, 3.0)])
    record_nodes(db, [NodeRow(run_id=copy, node="fit", status="cached", outputs={"loss": None, "model": 1},
                              cached_from=origin)])
    assert [r.run_id for r in cached_rows_of(db, [copy, origin])] == [copy]
    assert sources_of(db, copy) == {"loss": (origin, 4), "own": (copy, 1)}
    assert latest_of_runs(db, [copy, origin]) == {copy: latest_of(db, copy), origin: latest_of(db, origin)}
    assert latest_of_runs(db, [copy])[copy] == {"loss": (3, 0.25), "own": (0, 3.0)}
    assert read_series(db, origin, "loss") == series_of(db, copy)["loss"]


def test_one_series_in_step_order_and_in_a_step_range(db: Database) -> None:
    run = add_run(db)
    upsert_metrics(db, [(run, "loss", s, float(s)) for s in (5, 1, 3, 0, 4, 2)] + [(run, "acc", 0, 1.0)])
    assert read_series(db, run, "loss") == [(s, float(s)) for s in range(6)]
    assert read_series(db, run, "loss", start=2, end=4) == [(2, 2.0), (3, 3.0), (4, 4.0)]
    assert read_series(db, run, "nope") == []
    assert series_sizes(db, run) == {"acc": 1, "loss": 6}


def test_an_artifact_is_found_by_its_digest_only_when_a_run_made_it(db: Database) -> None:
    run = add_run(db)
    digest = "sha256:" + "ab" * 32
    record_nodes(db, [NodeRow(run_id=run, node="fit", status="ok")],
                 [ArtifactRow(run_id=run, node="fit", message="model", digest=digest, size=3,
                              media_type="application/json", name="model.json")])
    found = artifact_by_digest(db, digest)
    assert found is not None and found.name == "model.json" and found.run_id == run
    assert artifact_by_digest(db, "sha256:" + "cd" * 32) is None
