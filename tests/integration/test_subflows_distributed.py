"""Subflows across real processes: redis-server, two node workers, and a driver worker with two driver threads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Client, RunStatus
from fluksio.schemas import NodeStatus
from tests.integration.support import subflow_flows as flows
from tests.integration.support.cluster import FLOWS_FILE, Cluster, running_cluster
from tests.integration.support.servers import alive, wait_for

pytestmark = pytest.mark.integration

SUBFLOWS_FILE = Path(flows.__file__)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workers = {"sub-a": ("--cpus", "2", "--gpus", "none"),
               "sub-b": ("--cpus", "2", "--gpus", "none"),
               "drv": ("--drivers-only",)}
    env = {"FLUKSIO_FLOWS": f"{FLOWS_FILE},{SUBFLOWS_FILE}", "FLUKSIO_DRIVER_CONCURRENCY": "2",
           "FLUKSIO_STALE_AFTER_S": "3",
           # The runs whose driver is killed here are resumed by hand (`client.resume`), to see what it keeps.
           "FLUKSIO_AUTO_RESUME": "false"}
    with running_cluster(tmp_path_factory.mktemp("subcluster"), workers, env=env) as setup:
        yield setup


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with cluster.client() as connected:
        yield connected


def started_calls(cluster: Cluster, tag: str) -> list[str]:
    return [m for m in cluster.marked(tag) if m.count(".") >= 3 and not m.endswith((".hold", ".fail"))]


def test_the_search_example_with_six_trials_across_two_workers(client: Client) -> None:
    record = client.submit(flows.search, {"n": 6, "epochs": 4, "tag": "six"}, seed=7).wait(timeout=120)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result["best"] == {"lr": 0.1, "accuracy": 1.007}
    children = {c.parent_node: c for c in client.runs(parent=record.id)}
    assert set(children) == {f"trial[{i}]" for i in range(6)}
    rows = {n.index: n for n in record.nodes if n.node == "trial"}
    machines = set()
    for index, row in rows.items():
        child = children[f"trial[{index}]"]
        assert row.child_run == child.id and child.status is RunStatus.OK and child.parent_id == record.id
        lr = child.params["lr"]
        assert client.metrics(child.id) == {"loss": [(s, lr / (s + 1)) for s in range(4)]}
        machines |= {n.machine for n in client.get(child.id).nodes}
    assert machines == {"sub-a", "sub-b"}


def test_cancelling_the_parent_mid_search_kills_the_childrens_calls(client: Client, cluster: Cluster) -> None:
    cluster.marks.mkdir(parents=True, exist_ok=True)
    (cluster.marks / "cancel.hold").write_text("hold")
    run = client.submit(flows.search, {"n": 4, "epochs": 2, "tag": "cancel"}, seed=1)
    # Children hold their calls; how many are driven at once (two, or all four) is the drivers' timing.
    wait_for(lambda: len(started_calls(cluster, "cancel")) >= 2, what="two held calls")
    client.cancel(run.id)
    record = run.wait(timeout=30)
    assert record.status is RunStatus.CANCELLED
    wait_for(lambda: all(c.status is RunStatus.CANCELLED for c in client.runs(parent=run.id)), what="the children")
    started = started_calls(cluster, "cancel")
    pids = {int(name.split(".")[-2]) for name in started}
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=15, what="the calls' processes to die")
    explained = tree_of(client, run.id, started, started_calls(cluster, "cancel"))
    assert started_calls(cluster, "cancel") == started, explained  # nothing started once the tree was cancelled
    assert len({name.split(".")[2] for name in started}) == len(started), explained  # no call ran twice
    children = [client.get(child.id) for child in client.runs(parent=run.id)]
    assert len(children) == 4, explained
    for child in children:  # a child cancelled while it waited for a driver has no nodes at all
        nodes = {n.node: n for n in child.nodes}
        fit, score = nodes.get("sub_fit"), nodes.get("sub_score")
        assert fit is None or (fit.status is NodeStatus.CANCELLED and fit.attempt == 1), explained
        assert score is None or score.error == "cancelled before it started", explained  # nothing went on
    (cluster.marks / "cancel.hold").unlink()


def tree_of(client: Client, run_id: str, started: list[str], after: list[str]) -> str:
    """What a failure of the cancel test needs to be understood: the marks, and every child's calls."""
    lines = [f"marks before the cancel: {started}", f"marks after: {after}"]
    for child in client.runs(parent=run_id):
        record = client.get(child.id)
        lines.append(f"child {child.id} {child.parent_node} {record.status.value} ({record.status_reason})")
        lines += [f"  {n.node}[{n.index}] attempt {n.attempt} {n.status.value} on {n.machine}: {n.error}"
                  for n in record.nodes]
    return "\n".join(lines)


def test_resume_after_one_child_failed_reruns_only_that_child(client: Client, cluster: Cluster) -> None:
    cluster.marks.mkdir(parents=True, exist_ok=True)
    (cluster.marks / "flaky.fail-0.04").write_text("fail")
    failed = client.submit(flows.search, {"n": 3, "epochs": 2, "tag": "flaky"}, seed=1).wait(timeout=60)
    assert failed.status is RunStatus.ERROR and "trial[1]" in failed.status_reason
    (cluster.marks / "flaky.fail-0.04").unlink()
    before = started_calls(cluster, "flaky")
    resumed = client.resume(failed.id).wait(timeout=60)
    assert resumed.status is RunStatus.OK, resumed.status_reason
    again = [m for m in started_calls(cluster, "flaky") if m not in before]
    assert [m.split(".", 1)[1].rsplit(".", 2)[0] for m in again] == ["0.04"]  # that child's node alone
    children = {c.parent_node: c for c in client.runs(parent=failed.id)}
    assert len(children) == 3 and children["trial[1]"].resume_count == 1


def test_more_nested_parents_than_driver_threads_all_finish(client: Client) -> None:
    """The driver worker has two threads; 8 children each run a subflow of their own."""
    record = client.submit(flows.top, {"xs": list(range(8))}).wait(timeout=180)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"ys": [x * 10 for x in range(8)]}
    middles = client.runs(parent=record.id)
    assert len(middles) == 8 and all(len(client.runs(parent=m.id)) == 1 for m in middles)


def test_a_driver_killed_while_children_run_starts_no_second_copy_when_the_run_is_resumed(
        client: Client, cluster: Cluster) -> None:
    cluster.marks.mkdir(parents=True, exist_ok=True)
    (cluster.marks / "killed.hold").write_text("hold")
    run = client.submit(flows.search, {"n": 3, "epochs": 2, "tag": "killed"}, seed=1)
    wait_for(lambda: len(started_calls(cluster, "killed")) >= 2, what="two held calls")
    first_children = {c.parent_node: c.id for c in client.runs(parent=run.id)}
    assert len(first_children) == 3
    cluster.kill("drv")  # kill -9 of every driver of the installation: the children's (the parent had parked)
    cluster.start_worker("drv", "--drivers-only")
    # The new driver process's sweeper finds the children's leases stale and abandons them; each abandoned
    # child wakes its parent, which ends (once the child that was still queued has run) naming them.
    wait_for(lambda: sum(c.status is RunStatus.ABANDONED for c in client.runs(parent=run.id)) == 2, timeout=30,
             what="the two children that were running abandoned")
    (cluster.marks / "killed.hold").unlink()
    wait_for(lambda: client.get(run.id).status.is_terminal(), timeout=60, what="the parent's end")
    ended = client.get(run.id)
    assert ended.status is RunStatus.ERROR and "abandoned" in ended.status_reason
    record = client.resume(run.id).wait(timeout=90)
    assert record.status is RunStatus.OK, record.status_reason
    children = client.runs(parent=run.id)
    assert {c.parent_node: c.id for c in children} == first_children  # the same three, no second copy
    assert all(c.status is RunStatus.OK for c in children)
