"""Distributed mode with real processes: redis-server, three `fluksio worker`s with different inventories,
a driver worker, and this test process as the client."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

from fluksio import Client, RunStatus
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.intervals import max_overlap

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The same installation on either run store: SQLite shared by processes on one host, or PostgreSQL."""
    workdir = tmp_path_factory.mktemp("cluster")
    database_url = request.getfixturevalue("postgres").new_database() if request.param == "postgresql" else None
    workers = {"cpu-a": ("--cpus", "2", "--gpus", "none", "--drivers"),
               "gpu-a": ("--labels", "gpu", "--cpus", "2", "--gpus", "0,1"),
               "gpu-b": ("--labels", "gpu", "--cpus", "1", "--gpus", "0")}
    with running_cluster(workdir, workers, database_url) as setup:
        yield setup


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with cluster.client() as connected:
        yield connected


def test_never_more_concurrent_calls_on_a_machine_than_its_cpus(client: Client) -> None:
    record = client.submit(flows.spread, {"width": 8, "pause": 0.6}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    by_machine: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for node in record.nodes:
        by_machine[node.machine].append((node.started_at.timestamp(), node.finished_at.timestamp()))
    cpus = {"cpu-a": 2, "gpu-a": 2, "gpu-b": 1}
    for machine, intervals in by_machine.items():
        assert max_overlap(intervals) <= cpus[machine], (machine, intervals)
    # Unlabelled work fills the unlabelled machine first: cpu-a ran its full share.
    assert max_overlap(by_machine["cpu-a"]) == 2


def test_labelled_nodes_land_only_on_labelled_machines_with_disjoint_gpus(client: Client) -> None:
    record = client.submit(flows.gpu_pair).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert {n.machine for n in record.nodes} <= {"gpu-a", "gpu-b"}
    for node in record.nodes:
        # The call saw exactly the GPU ids its grant names.
        assert record.result[f"devices{node.node[-1]}"] == ",".join(map(str, node.gpus))
    on_a = [n for n in record.nodes if n.machine == "gpu-a"]
    ids = [g for n in on_a for g in n.gpus]
    assert len(ids) == len(set(ids))  # no GPU id granted twice on one machine at once
    intervals = [(n.started_at.timestamp(), n.finished_at.timestamp()) for n in record.nodes]
    assert max_overlap(intervals) == 3  # all three ran at once: two on gpu-a, one on gpu-b


def test_a_two_gpu_node_runs_only_on_the_two_gpu_machine(client: Client) -> None:
    record = client.submit(flows.two_gpus).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.nodes[0].machine == "gpu-a" and record.nodes[0].gpus == [0, 1]
    assert record.result == {"devices": "0,1"}


def test_an_oversized_request_is_clamped_to_the_largest_machine_and_runs(client: Client) -> None:
    record = client.submit(flows.oversized).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    node = record.nodes[0]
    assert node.machine == "gpu-a" and node.gpus == [0, 1]
    assert "clamped: requested 8 gpu(s) and 64 cpu(s)" in node.logs


def test_prefer_falls_back_to_any_machine(client: Client) -> None:
    record = client.submit(flows.prefer).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.nodes[0].machine in {"cpu-a", "gpu-a", "gpu-b"}


def test_a_require_run_waits_with_its_reason_and_starts_when_the_worker_attaches(
        client: Client, cluster: Cluster) -> None:
    run = client.submit(flows.late)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and client.get(run.id).status_reason is None:
        time.sleep(0.1)
    record = client.get(run.id)
    assert record.status is RunStatus.QUEUED
    assert record.status_reason == "Waiting for a worker labelled 'late'"
    cluster.start_worker("late-a", "--labels", "late", "--cpus", "1", "--gpus", "none")
    record = run.wait(timeout=60)
    assert record.status is RunStatus.OK and record.result == {"x": 7}
    assert record.nodes[0].machine == "late-a"


def test_a_busy_machine_is_waited_for_and_says_why(client: Client, cluster: Cluster) -> None:
    import json
    import subprocess
    import sys

    import redis

    events = redis.Redis.from_url(cluster.redis.url).pubsub(ignore_subscribe_messages=True)
    events.subscribe("fluksio:events")
    first = client.submit(flows.hold_gpus, {"pause": 3.0})
    deadline = time.monotonic() + 20  # the first must hold gpu-a's two GPUs before the second asks
    while time.monotonic() < deadline and not any(
            m["name"] == "gpu-a" and m["calls"] for m in client.placement()["machines"]):
        time.sleep(0.05)
    second = client.submit(flows.hold_gpus, {"pause": 0.1})
    reason = "hold: waiting for a worker labelled 'gpu' with 2 gpu(s) and 1 cpu(s) free"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and client.get(second.id).status_reason != reason.capitalize():
        time.sleep(0.05)
    assert client.get(second.id).status is RunStatus.RUNNING
    assert client.get(second.id).status_reason == reason.capitalize()

    shown = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "placer", "--json"], env=cluster.env,
                           capture_output=True, text=True, timeout=60)
    snapshot = json.loads(shown.stdout)
    assert {"run_id": second.id, "node": "hold"}.items() <= snapshot["waiting"][0].items()
    assert snapshot["waiting"][0]["reason"] == reason.split(": ", 1)[1]
    assert {m["name"] for m in snapshot["machines"]} >= {"cpu-a", "gpu-a", "gpu-b"}

    assert first.wait(timeout=30).status is RunStatus.OK
    record = second.wait(timeout=30)
    assert record.status is RunStatus.OK and record.nodes[0].gpus == [0, 1]
    # Not clamped away onto gpu-b's single GPU: it waited for gpu-a.
    assert record.nodes[0].started_at >= client.get(first.id).nodes[0].finished_at
    seen = []
    quiet_until = time.monotonic() + 1.0
    while time.monotonic() < quiet_until:  # None also stands for the (ignored) subscribe confirmation
        message = events.get_message(timeout=0.1)
        if message is not None:
            seen.append(json.loads(message["data"]))
    queued = [e for e in seen if e["event"] == "node_queued" and e["run_id"] == second.id]
    assert queued and queued[0]["reason"] == reason.split(": ", 1)[1]


def test_a_redelivered_call_that_is_already_settled_is_dropped(client: Client, cluster: Cluster) -> None:
    run = client.submit(flows.marked, {"tag": "redelivered"})
    record = run.wait(timeout=60)
    assert record.status is RunStatus.OK
    assert len(list(cluster.marks.glob("redelivered.*"))) == 1
    node = record.nodes[0]
    # What Redis would hand a worker that comes back: the same call, long settled.
    call = {"call_id": f"{run.id}.leave_mark.1", "run_id": run.id, "flow": "marked", "node": "leave_mark",
            "attempt": 1, "inputs": {"tag": "redelivered"},
            "grant": {"id": f"{run.id}.leave_mark.1", "machine": node.machine, "cpus": 1, "gpus": []}}
    client.app.send_task("fluksio.call", kwargs={"call": call}, queue=f"default@{node.machine}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "dropping call" not in cluster.log_of(node.machine):
        time.sleep(0.1)
    assert f"dropping call {run.id}.leave_mark.1" in cluster.log_of(node.machine)
    assert len(list(cluster.marks.glob("redelivered.*"))) == 1  # it did not run again
    assert [n.attempt for n in client.get(run.id).nodes] == [1]


def wait_for_mark(cluster: Cluster, tag: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list(cluster.marks.glob(f"{tag}.*")):
            return
        time.sleep(0.05)
    raise TimeoutError(f"node {tag} never started")


def test_kill_9_of_a_worker_mid_call_is_retried_on_another_machine(client: Client, cluster: Cluster) -> None:
    cluster.start_worker("fragile-a", "--labels", "fragile", "--cpus", "1", "--gpus", "none")
    cluster.wait_attached("fragile-a")
    run = client.submit(flows.fragile, {"tag": "retry"})
    wait_for_mark(cluster, "retry")
    cluster.start_worker("fragile-b", "--labels", "fragile", "--cpus", "1", "--gpus", "none")
    cluster.wait_attached("fragile-b")
    cluster.kill("fragile-a")
    record = run.wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    attempts = [(n.attempt, n.status.value, n.machine) for n in record.nodes]
    assert attempts == [(1, "error", "fragile-a"), (2, "ok", "fragile-b")]
    assert "machine fragile-a was lost" in record.nodes[0].error
    # The dead machine's books are gone and nothing is held on the living one.
    machines = {m["name"]: m for m in client.placement()["machines"]}
    assert "fragile-a" not in machines and machines["fragile-b"]["calls"] == 0
    cluster.stop("fragile-b")
    # A worker that stops deregisters at once; it does not wait for its heartbeat to expire.
    assert "fragile-b" not in {m["name"] for m in client.placement()["machines"]}


def test_kill_9_without_retries_fails_the_call_naming_the_machine(client: Client, cluster: Cluster) -> None:
    cluster.start_worker("fragile-c", "--labels", "fragile", "--cpus", "1", "--gpus", "none")
    cluster.wait_attached("fragile-c")
    run = client.submit(flows.fragile_once, {"tag": "once"})
    wait_for_mark(cluster, "once")
    cluster.kill("fragile-c")
    record = run.wait(timeout=60)
    assert record.status is RunStatus.ERROR
    assert "machine fragile-c was lost" in record.status_reason


def test_a_repeated_run_is_restored_from_the_cache_across_processes(client: Client, cluster: Cluster) -> None:
    first = client.submit(flows.marked, {"tag": "cached-dist"}).wait(timeout=60)
    second = client.submit(flows.marked, {"tag": "cached-dist"}).wait(timeout=60)
    assert first.status is RunStatus.OK and second.status is RunStatus.OK
    assert second.nodes[0].status.value == "cached" and second.nodes[0].cached_from == first.id
    assert len(list(cluster.marks.glob("cached-dist.*"))) == 1


def test_a_drive_is_acknowledged_when_taken_and_a_running_call_only_when_it_ends(client: Client,
                                                                                 cluster: Cluster) -> None:
    import json

    import redis

    from fluksio.constants import CALL_TASK, DRIVE_TASK

    run = client.submit(flows.stuck, {"tag": "acked"})
    wait_for_mark(cluster, "acked")
    # kombu's Redis transport keeps each delivered, unacknowledged message in its "unacked" hash.
    held = [json.loads(raw)[0]["headers"]["task"]
            for raw in redis.Redis.from_url(cluster.redis.url).hvals("unacked")]
    client.cancel(run.id)
    assert run.wait(timeout=15).status is RunStatus.CANCELLED
    # The call stays on the broker until it ends (a machine that dies leaves it there); the drive went
    # when its driver took it, else the broker would hand it to a second driver after its visibility timeout.
    assert CALL_TASK in held and DRIVE_TASK not in held, held


def test_cancel_kills_a_call_stuck_in_a_long_sleep(client: Client, cluster: Cluster) -> None:
    import os

    run = client.submit(flows.stuck, {"tag": "stuck-dist"})
    wait_for_mark(cluster, "stuck-dist")
    pid = int(next(cluster.marks.glob("stuck-dist.*")).suffix[1:])
    machine = None
    t0 = time.monotonic()
    client.cancel(run.id)
    record = run.wait(timeout=15)
    assert record.status is RunStatus.CANCELLED
    assert record.nodes[0].status.value == "cancelled"
    machine = record.nodes[0].machine
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the pool process {pid} running the cancelled call is still alive")
    assert time.monotonic() - t0 < 10
    busy = {m["name"]: m["calls"] for m in client.placement()["machines"]}
    assert busy[machine] == 0
