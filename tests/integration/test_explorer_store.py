"""The run store's reads behind the explorer on both stores it runs on: SQLite and a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluksio.clock import utcnow
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.metrics import latest_metrics_of_runs, read_series, series_sizes, upsert_metrics
from fluksio.store.models import Run
from fluksio.store.run_rows import count_runs, flow_names, insert_run, list_runs

pytestmark = pytest.mark.integration


@pytest.fixture
def store(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    db.upgrade()
    yield db
    db.dispose()


def test_series_pages_and_newest_values_read_alike_on_both_stores(store: Database) -> None:
    parent = Run(id=new_run_id(), flow="search", params={}, params_digest="p", status="ok", created_at=utcnow(),
                 engine="embedded")
    insert_run(store, parent)
    children = []
    for index in range(4):
        child = Run(id=new_run_id(), flow="train", params={"i": index}, params_digest="p", status="ok",
                    created_at=utcnow(), engine="embedded", parent_id=parent.id, parent_node=f"trial[{index}]")
        insert_run(store, child)
        children.append(child.id)
    assert [r.id for r in list_runs(store, parent=parent.id, limit=2, offset=1)] == sorted(children)[::-1][1:3]
    assert count_runs(store, parent=parent.id) == 4 and flow_names(store) == ["search", "train"]
    upsert_metrics(store, [(parent.id, "loss", step, 1.0 / (step + 1)) for step in range(3000)]
                   + [(children[0], "acc", 0, 0.5)])
    points = read_series(store, parent.id, "loss")
    assert points == [(step, 1.0 / (step + 1)) for step in range(3000)]
    assert all(isinstance(s, int) and isinstance(v, float) for s, v in points[:3])
    assert read_series(store, parent.id, "loss", start=10, end=12) == [(s, 1.0 / (s + 1)) for s in (10, 11, 12)]
    assert read_series(store, parent.id, "loss", start=2990) == points[2990:]
    assert read_series(store, parent.id, "none") == []
    assert series_sizes(store, parent.id) == {"loss": 3000}
    assert latest_metrics_of_runs(store, [parent.id, children[0], children[1]]) == {
        parent.id: {"loss": (2999, 1.0 / 3000)}, children[0]: {"acc": (0, 0.5)}}
