"""Subflows on the embedded default: each call a child run of its own, linked to its parent, cancelled and
resumed down the tree, and never holding the driver slots its children need."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fluksio import Client, Flow, RunStatus, Settings, connect

pytestmark = pytest.mark.integration


def train_flow(name: str = "train", gate: threading.Event | None = None, fail_lr: list[float] | None = None) -> Flow:
    train = Flow(name, inputs={"lr": float, "epochs": int, "seed": int}, outputs=["model", "accuracy"])

    @train.node(provides="model", streams=["loss"])
    def fit(lr: float, epochs: int, seed: int, emit) -> float:
        if gate is not None:
            gate.wait(30)
        if fail_lr is not None and lr in fail_lr:
            raise RuntimeError(f"diverged at lr={lr}")
        for step in range(epochs):
            emit("loss", lr / (step + 1))
        return lr * epochs

    @train.node(provides="accuracy")
    def score(model: float, seed: int) -> float:
        return round(1 - abs(model - 0.4) + seed / 1000, 6)

    return train


def search_flow(train: Flow, name: str = "search") -> Flow:
    search = Flow(name, inputs={"n": int, "epochs": int, "seed": int}, outputs=["best"])

    @search.node(provides="lrs")
    def propose(n: int, seed: int) -> list[float]:
        return [round(0.02 * (i + 1), 4) for i in range(n)]

    search.subflow(train, name="trial", map={"lr": "lrs"}, provides={"accuracy": "accuracies", "model": "models"})

    @search.node(provides="best")
    def pick(accuracies: list[float], lrs: list[float]) -> dict:
        best = max(range(len(lrs)), key=accuracies.__getitem__)
        return {"lr": lrs[best], "accuracy": accuracies[best]}

    return search


def trial_rows(record) -> dict[int, object]:
    return {n.index: n for n in record.nodes if n.node == "trial"}


def test_the_search_example_runs_each_trial_as_a_child_run_linked_to_its_parent(client: Client) -> None:
    record = client.submit(search_flow(train_flow()), {"n": 6, "epochs": 5}, seed=7).wait(timeout=120)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result["best"] == {"lr": 0.08, "accuracy": 1.007}
    rows = trial_rows(record)
    assert sorted(rows) == list(range(6)) and {r.status.value for r in rows.values()} == {"ok"}
    children = client.runs(parent=record.id)
    assert len(children) == 6
    by_node = {c.parent_node: c for c in children}
    assert set(by_node) == {f"trial[{i}]" for i in range(6)}
    for index, row in rows.items():
        child = by_node[f"trial[{index}]"]
        assert row.child_run == child.id and child.parent_id == record.id and child.flow == "train"
        assert child.status is RunStatus.OK and child.seed == 7  # the parent's seed, inherited
        assert child.params == {"lr": round(0.02 * (index + 1), 4), "epochs": 5, "seed": 7}
        # Each child is a run of its own: its node rows, its metrics.
        assert [n.node for n in client.get(child.id).nodes] == ["fit", "score"]
        assert client.metrics(child.id) == {"loss": [(s, child.params["lr"] / (s + 1)) for s in range(5)]}


def test_a_child_s_seed_input_is_the_parent_s_unless_a_parameter_gives_it(client: Client) -> None:
    child = Flow("seeded_child", inputs={"seed": int}, outputs=["seen"])

    @child.node(provides="seen")
    def echo(seed: int) -> int:
        return seed

    parent = Flow("seeded_parent", inputs={"seed": int}, outputs=["given", "inherited"])
    parent.subflow(child, name="given", params={"seed": 11}, provides={"seen": "given"})
    parent.subflow(child, name="inherited", provides={"seen": "inherited"})
    record = client.submit(parent, {}, seed=7).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"given": 11, "inherited": 7}
    by_node = {c.parent_node: c for c in client.runs(parent=record.id)}
    assert by_node["given"].params == {"seed": 11} and by_node["inherited"].params == {"seed": 7}


def test_a_child_that_was_restored_entirely_from_the_cache_makes_its_parent_row_cached(client: Client) -> None:
    search = search_flow(train_flow(name="train_cached"), name="search_cached")
    first = client.submit(search, {"n": 2, "epochs": 3}, seed=1).wait(timeout=60)
    again = client.submit(search, {"n": 2, "epochs": 3}, seed=1).wait(timeout=60)
    assert (first.status, again.status) == (RunStatus.OK, RunStatus.OK)
    assert {r.status.value for r in trial_rows(again).values()} == {"cached"}
    assert {r.child_run for r in trial_rows(again).values()}.isdisjoint({r.child_run for r in
                                                                       trial_rows(first).values()})


def test_a_failed_child_fails_its_element_with_the_childs_reason_and_resume_reruns_only_it(client: Client) -> None:
    fail_lr = [0.04]
    search = search_flow(train_flow(name="train_flaky", fail_lr=fail_lr), name="search_flaky")
    failed = client.submit(search, {"n": 3, "epochs": 2}, seed=1).wait(timeout=60)
    assert failed.status is RunStatus.ERROR
    assert "trial[1]: child run" in failed.status_reason and "diverged at lr=0.04" in failed.status_reason
    rows = trial_rows(failed)
    failed_child = rows[1].child_run
    assert (rows[0].status.value, rows[1].status.value, rows[2].status.value) == ("ok", "error", "ok")
    fail_lr.clear()
    resumed = client.resume(failed.id).wait(timeout=60)
    assert resumed.status is RunStatus.OK, resumed.status_reason
    children = {c.parent_node: c for c in client.runs(parent=failed.id)}
    assert len(children) == 3  # no second copy of any child
    assert children["trial[1]"].id == failed_child and children["trial[1]"].resume_count == 1
    assert children["trial[0]"].resume_count == children["trial[2]"].resume_count == 0  # kept as they ended


def test_cancelling_the_parent_cancels_its_running_children_and_starts_no_new_one(tmp_path: Path) -> None:
    gate = threading.Event()
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a", cpus=2,
                        lease_interval_s=0.2)
    search = search_flow(train_flow(name="train_gated", gate=gate), name="search_gated")
    with connect(settings) as client:
        run = client.submit(search, {"n": 4, "epochs": 2}, seed=1)
        deadline = time.monotonic() + 20
        # Two children run, and the parent has parked saying so (it writes its reason as it parks).
        while time.monotonic() < deadline and (len(client.runs(parent=run.id, status="running")) < 2
                                               or "trial: " not in (client.get(run.id).status_reason or "")):
            time.sleep(0.02)
        assert "child runs running" in (client.get(run.id).status_reason or "")
        client.cancel(run.id)
        record = run.wait(timeout=30)
        children = client.runs(parent=run.id)
        for child in children:
            client.handle(child.id).wait(timeout=30)
        children = client.runs(parent=run.id)
        gate.set()
    assert record.status is RunStatus.CANCELLED
    assert {c.status for c in children} == {RunStatus.CANCELLED}
    assert len(children) == 4
    assert {r.status.value for r in trial_rows(record).values()} == {"cancelled"}


def test_more_nested_parents_than_driver_threads_all_finish(tmp_path: Path) -> None:
    """2 driver threads; a parent maps 8 children, each of which runs a subflow of its own: parents park."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a", cpus=2,
                        driver_concurrency=2, lease_interval_s=0.2)
    leaf = Flow("leaf", inputs={"x": int}, outputs=["y"])
    leaf.node(lambda x: x * 10, name="times_ten", provides="y")
    middle = Flow("middle", inputs={"x": int}, outputs=["y"])
    middle.subflow(leaf, name="deeper", provides=["y"])
    top = Flow("top", inputs={"xs": list[int]}, outputs=["ys"])
    top.subflow(middle, name="each", map={"x": "xs"}, provides={"y": "ys"})
    with connect(settings) as client:
        record = client.submit(top, {"xs": list(range(8))}).wait(timeout=120)
        middles = client.runs(parent=record.id)
        leaves = [leaf_run for m in middles for leaf_run in client.runs(parent=m.id)]
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"ys": [x * 10 for x in range(8)]}
    assert len(middles) == 8 and len(leaves) == 8
    assert {r.status for r in [*middles, *leaves]} == {RunStatus.OK}


def test_subflows_five_deep_run(client: Client) -> None:
    flow = Flow("deep0", inputs={"x": int}, outputs=["y"])
    flow.node(lambda x: x + 1, name="step", provides="y")
    for depth in range(1, 6):
        parent = Flow(f"deep{depth}", inputs={"x": int}, outputs=["y"])
        parent.subflow(flow, name="inner", provides=["y"])
        flow = parent
    record = client.submit(flow, {"x": 41}).wait(timeout=120)
    assert record.status is RunStatus.OK and record.result == {"y": 42}


def test_a_child_the_parent_cannot_start_fails_that_element_saying_why(client: Client) -> None:
    child = Flow("strict_child", inputs={"lr": float}, outputs=["y"])
    child.node(lambda lr: lr, name="use", provides="y")
    parent = Flow("loose_parent", inputs={"lrs": list}, outputs=["ys"])
    parent.subflow(child, name="each", map={"lr": "lrs"}, provides={"y": "ys"})
    record = client.submit(parent, {"lrs": [0.1, "fast"]}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    rows = {n.index: n for n in record.nodes if n.node == "each"}
    assert rows[0].status.value == "ok" and rows[1].status.value == "error"
    assert "could not start the child run of each[1]" in rows[1].error and "'lr'" in rows[1].error
