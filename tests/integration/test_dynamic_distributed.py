"""Mapped nodes across real processes: redis-server, two one-cpu `fluksio worker`s and a two-GPU one."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest

from fluksio import Client, RunStatus
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.intervals import max_overlap
from tests.integration.support.servers import alive, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workers = {"map-a": ("--cpus", "1", "--gpus", "none", "--drivers"),
               "map-b": ("--cpus", "1", "--gpus", "none"),
               "map-gpu": ("--labels", "gpu", "--cpus", "2", "--gpus", "0,1")}
    with running_cluster(tmp_path_factory.mktemp("mapcluster"), workers) as setup:
        yield setup


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with cluster.client() as connected:
        yield connected


def test_a_40_element_map_across_two_workers_never_runs_more_calls_than_cpus(client: Client,
                                                                             cluster: Cluster) -> None:
    record = client.submit(flows.mapped_marks, {"tag": "wide", "items": list(range(40)), "pause": 0.1}).wait(
        timeout=120)
    assert record.status is RunStatus.OK, record.status_reason
    elements = [n for n in record.nodes if n.node == "mark_element"]
    assert sorted(n.index for n in elements) == list(range(40))
    by_machine: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for node in elements:
        by_machine[node.machine].append((node.started_at.timestamp(), node.finished_at.timestamp()))
    assert set(by_machine) <= {"map-a", "map-b", "map-gpu"} and len(by_machine) >= 2
    cpus = {"map-a": 1, "map-b": 1, "map-gpu": 2}
    for machine, intervals in by_machine.items():
        assert max_overlap(intervals) <= cpus[machine], (machine, intervals)
    assert len(cluster.marked("wide")) == 40  # one call per element, no element twice


def test_a_gpu_mapped_node_gets_distinct_gpu_ids_per_concurrent_element(client: Client) -> None:
    record = client.submit(flows.gpu_map, {"items": [0, 1, 2, 3]}).wait(timeout=120)
    assert record.status is RunStatus.OK, record.status_reason
    runs = record.result["devices"]
    assert {devices for devices, _s, _e in runs} == {"0", "1"}
    for i, (devices, start, end) in enumerate(runs):
        for other, (devices_b, start_b, end_b) in enumerate(runs):
            if i != other and start < end_b and start_b < end:  # ran at the same time
                assert devices != devices_b, runs
    rows = [n for n in record.nodes if n.node == "element_devices"]
    assert {n.machine for n in rows} == {"map-gpu"} and all(len(n.gpus) == 1 for n in rows)


def test_cancel_mid_map_kills_the_running_elements_and_starts_no_new_one(client: Client, cluster: Cluster) -> None:
    run = client.submit(flows.stuck_map, {"tag": "stuckmap", "items": list(range(6))})
    # Every slot taken (map-a, map-b, map-gpu ×2) before looking: with one left free, a fourth element could start
    # between the look and the cancel.
    wait_for(lambda: len(cluster.marked("stuckmap")) >= 4, 30, "four elements to start")
    started = cluster.marked("stuckmap")
    client.cancel(run.id)
    record = run.wait(timeout=30)
    assert record.status is RunStatus.CANCELLED
    killed = [n for n in record.nodes if n.node == "element_forever" and n.index is not None]
    assert len(killed) == len(started) and {n.error for n in killed} == {"cancelled while running"}
    pids = {int(name.rsplit(".", 1)[1]) for name in started}
    wait_for(lambda: not any(alive(pid) for pid in pids), 15, "the cancelled elements' processes to die")
    assert cluster.marked("stuckmap") == started  # no element started after the cancel
    assert all(m["calls"] == 0 for m in client.placement()["machines"])


def test_a_rerun_with_one_element_added_runs_one_call(client: Client, cluster: Cluster) -> None:
    first = client.submit(flows.mapped_marks, {"tag": "grow", "items": [1, 2, 3], "pause": 0.0}).wait(timeout=60)
    assert first.status is RunStatus.OK
    assert len(cluster.marked("grow")) == 3
    second = client.submit(flows.mapped_marks, {"tag": "grow", "items": [1, 2, 3, 4], "pause": 0.0}).wait(
        timeout=60)
    assert second.status is RunStatus.OK
    assert [m.split(".")[1] for m in cluster.marked("grow")].count("4") == 1 and len(cluster.marked("grow")) == 4
    statuses = {n.index: n.status.value for n in second.nodes if n.node == "mark_element"}
    assert statuses == {0: "cached", 1: "cached", 2: "cached", 3: "ok"}


def test_resume_after_one_element_failed_runs_that_element_alone(client: Client, cluster: Cluster) -> None:
    cluster.marks.mkdir(parents=True, exist_ok=True)
    (cluster.marks / "flaky.fail").write_text("x")
    failed = client.submit(flows.flaky_map, {"tag": "flaky", "items": [0, 1, 2, 3]}).wait(timeout=60)
    assert failed.status is RunStatus.ERROR and "element_fails_while_flagged[2]" in failed.status_reason
    (cluster.marks / "flaky.fail").unlink()
    before = [m for m in cluster.marked("flaky") if m != "flaky.fail"]
    assert len(before) == 4
    resumed = client.resume(failed.id).wait(timeout=60)
    assert resumed.status is RunStatus.OK, resumed.status_reason
    assert resumed.result == {"ys": [0, 10, 20, 30]}
    after = [m for m in cluster.marked("flaky") if m not in before]
    assert [m.split(".")[1] for m in after] == ["2"]  # that element alone ran again
