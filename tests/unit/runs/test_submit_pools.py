"""Submit refuses a node (or a subflow's node) naming a pool the installation does not have, naming the pools."""

from __future__ import annotations

import pytest

from fluksio import Flow
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.errors import RunRejected
from fluksio.flows.registry import FlowRegistry
from fluksio.runs.submit import submit_run
from fluksio.store.run_rows import list_runs


def licensed(pool: str) -> Flow:
    flow = Flow(f"uses_{pool}", outputs=["x"])
    flow.node(lambda: 1, name="solve", provides="x", requires=[], pool=pool)
    return flow


def submit(db, tmp_path, flow: Flow, pools):  # noqa: ANN001, ANN201
    return submit_run(db, FlowRegistry(), LocalArtifactStore(tmp_path / "artifacts"), flow, engine="embedded",
                      pools=pools)


def test_a_node_naming_an_unknown_pool_is_refused_before_anything_is_journaled(db, tmp_path):
    with pytest.raises(RunRejected, match=r"node 'solve' of flow 'uses_gpus' asks for pool 'gpus', which this "
                                          r"installation does not have \(its pools: db \(1\), licenses \(4\)\)"):
        submit(db, tmp_path, licensed("gpus"), {"licenses": 4, "db": 1})
    assert list_runs(db) == []


def test_a_subflows_node_counts_too(db, tmp_path):
    parent = Flow("parent", outputs=["x"])
    parent.subflow(licensed("gpus"), name="child")
    with pytest.raises(RunRejected, match="asks for pool 'gpus'.*its pools: none"):
        submit(db, tmp_path, parent, {})


def test_a_known_pool_is_submitted(db, tmp_path):
    run, created = submit(db, tmp_path, licensed("licenses"), {"licenses": 4})
    assert created and run.status == "queued"


def test_a_refused_pool_stores_none_of_the_inputs(db, tmp_path):
    np = pytest.importorskip("numpy")
    flow = Flow("weights_in", inputs={"weights": np.ndarray}, outputs=["x"])
    flow.node(lambda weights: 1, name="solve", provides="x", pool="gpus")
    store = LocalArtifactStore(tmp_path / "artifacts")
    with pytest.raises(RunRejected, match="asks for pool 'gpus'"):
        submit_run(db, FlowRegistry(), store, flow, params={"weights": np.arange(1000.0)}, engine="embedded",
                   pools={})
    stored = [path for path in (tmp_path / "artifacts").rglob("*") if path.is_file()]
    assert stored == []  # checked before the array was encoded into the store
