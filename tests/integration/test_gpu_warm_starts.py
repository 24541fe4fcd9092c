"""GPU calls forked warm from the worker's fork server, with real processes: redis-server, `fluksio worker`s
with fake GPU ids (the nodes read ``CUDA_VISIBLE_DEVICES``), a driver process, and this test as the client."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Client, RunStatus
from tests.integration.support import gpu_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.processes import gone, wait_for_mark

pytestmark = pytest.mark.integration

FORK_SERVER = "fluksio.execution.forkserver"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("warm")
    workers = {"gpu-w": ("--labels", "gpu", "--cpus", "3", "--gpus", "0,1,2", "--drivers")}
    with running_cluster(workdir, workers, env={"FLUKSIO_FLOWS": str(Path(flows.__file__))}) as setup:
        yield setup


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with cluster.client() as connected:
        yield connected


def parent_command(pid: int) -> str:
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_concurrent_gpu_calls_each_see_exactly_their_ids_forked_warm(client: Client, cluster: Cluster) -> None:
    record = client.submit(flows.trio, {"pause": 1.0}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    seen = {node.node: record.result[f"seen{node.node[-1]}"] for node in record.nodes}
    for node in record.nodes:
        assert seen[node.node]["devices"] == ",".join(map(str, node.gpus))
        assert FORK_SERVER in seen[node.node]["parent"]
    assert sorted(g for n in record.nodes for g in n.gpus) == [0, 1, 2]
    spans = sorted(s["span"] for s in seen.values())
    assert spans[0][1] > spans[-1][0], "the three calls did not run at the same time"
    assert "GPU calls on gpu-w start warm" in cluster.whole_log("gpu-w")


def test_a_gpu_call_past_its_timeout_is_killed(client: Client, cluster: Cluster) -> None:
    record = client.submit(flows.overdue, {"tag": "overdue-dist"}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    node = record.nodes[0]
    assert "timed out after 1 s" in (node.error or "") and "going to sleep" in (node.logs or "")
    assert gone(wait_for_mark(cluster.marks, "overdue-dist"))


def test_a_cancelled_gpu_call_dies(client: Client, cluster: Cluster) -> None:
    run = client.submit(flows.stuck, {"tag": "cancel-gpu"})
    pid = wait_for_mark(cluster.marks, "cancel-gpu")
    assert FORK_SERVER in parent_command(pid)
    client.cancel(run.id)
    assert run.wait(timeout=15).status is RunStatus.CANCELLED
    # The cancel killed the pool process that asked for the call; the fork server heard its socket close.
    assert gone(pid), f"the forked call {pid} outlived its cancelled pool process"
    busy = {m["name"]: m["calls"] for m in client.placement()["machines"]}
    assert busy["gpu-w"] == 0


def test_kill_9_of_the_worker_kills_its_forked_call(client: Client, cluster: Cluster) -> None:
    worker = cluster.start_worker("victim-w", "--labels", "victim", "--cpus", "1", "--gpus", "0")
    try:
        cluster.wait_attached("victim-w")
        run = client.submit(flows.victim, {"tag": "victim"})
        pid = wait_for_mark(cluster.marks, "victim")
        assert FORK_SERVER in parent_command(pid)
        os.kill(worker.pid, signal.SIGKILL)  # the worker's main process alone, not its process group
        worker.wait(10)
        assert gone(pid), f"the forked call {pid} outlived its worker"
        client.cancel(run.id)
    finally:
        cluster.workers.pop("victim-w", None)
        try:
            os.killpg(worker.pid, signal.SIGKILL)  # whatever else of it is left (its pool process)
        except ProcessLookupError:
            pass


def test_flows_that_start_cuda_at_import_make_the_worker_start_fresh_interpreters(client: Client,
                                                                                  cluster: Cluster) -> None:
    cluster.start_worker("cuda-w", "--labels", "cudainit", "--cpus", "1", "--gpus", "0",
                         env={"TEST_FAKE_CUDA_AT_IMPORT": "1"})
    cluster.wait_attached("cuda-w")
    for _ in range(2):
        record = client.submit(flows.on_cudainit).wait(timeout=60)
        assert record.status is RunStatus.OK, record.status_reason
        seen = record.result["seen"]
        assert seen["devices"] == "0" and FORK_SERVER not in seen["parent"]
        assert "fluksio.cli.main worker --name cuda-w" in seen["parent"]  # a pool process started it fresh
    deadline = time.monotonic() + 5
    while "fresh interpreter" not in cluster.whole_log("cuda-w") and time.monotonic() < deadline:
        time.sleep(0.05)
    log = cluster.whole_log("cuda-w")
    assert log.count("GPU calls on cuda-w start in a fresh interpreter each") == 1, log
    assert "libcuda.so.1 is loaded once the flow modules are imported" in log
