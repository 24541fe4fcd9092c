"""Code that travels with the run, with real processes: redis-server, `fluksio worker`s that never loaded the
flow, and this test as the submitter of two versions of it. A worker started with ``--accept-code any`` runs
both side by side, warm and without a restart; one that runs only registered flows refuses them in one line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from fluksio import Client, RunStatus
from fluksio.flows.flow import Flow
from fluksio.flows.registry import load_flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.package_flows import OVERDUE, SHIPPED_FLOW, write_tree

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("shipped")
    workers = {"open-w": ("--labels", "open", "--cpus", "2", "--gpus", "none", "--drivers", "--accept-code", "any")}
    with running_cluster(workdir, workers, env={"FLUKSIO_ARTIFACTS_CACHE": str(workdir / "cache" / "artifacts")}) \
            as setup:
        yield setup


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with cluster.client() as connected:
        yield connected


def version(cluster: Cluster, name: str, text: str = SHIPPED_FLOW) -> Flow:
    """The flow ``shipped`` as a submitter who edited its helper to hold ``name`` loads it."""
    [flow] = load_flows(str(write_tree(cluster.workdir / "submitter" / name, text, name)))
    return flow


def test_two_versions_of_a_flow_the_worker_never_loaded_run_side_by_side(client: Client, cluster: Cluster) -> None:
    first, second = version(cluster, "first"), version(cluster, "second")
    runs = [client.submit(flow, {"tag": ""}) for flow in (first, second, first)]
    records = [run.wait(timeout=90) for run in runs]
    for record in records:
        assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    seen = [{n.node: n for n in record.nodes} for record in records]
    assert [record.result["seen"]["constant"] for record in records] == ["first", "second", "first"]
    assert all(record.code_entry == "flows.py" for record in records)
    assert records[0].code_digest == records[2].code_digest != records[1].code_digest
    assert "fluksio.execution.forkserver" in records[0].result["seen"]["parent"]
    assert seen[0]["look"].logs and "looked from first" in seen[0]["look"].logs
    assert "shipped code packages on open-w start warm" in cluster.whole_log("open-w")


def test_a_shipped_node_past_its_timeout_fails_as_timed_out(client: Client, cluster: Cluster) -> None:
    flow = version(cluster, "late", SHIPPED_FLOW + OVERDUE)
    record = client.submit(flow, {"tag": "dist-overdue"}).wait(timeout=90)
    overdue = next(n for n in record.nodes if n.node == "overdue")
    assert overdue.status == "error" and "timed out after 1 s" in (overdue.error or "")


#: A node of :data:`SHIPPED_FLOW`, on the machine labelled ``exiting``, that leaves an exit handler behind.
EXIT_HANDLER = '''

@shipped.node(provides="remembered", requires=["tag"], device="exiting")
def remember(tag):
    import atexit
    marks = Path(os.environ["TEST_FLUKSIO_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)
    atexit.register(lambda: (marks / f"{tag}.atexit").write_text("ran"))
    return tag
'''


def test_a_worker_stopped_lets_its_kept_runners_go_and_their_calls_exit_handlers_run(
        client: Client, cluster: Cluster) -> None:
    cluster.start_worker("exit-w", "--labels", "exiting", "--cpus", "1", "--gpus", "none", "--accept-code", "any")
    cluster.wait_attached("exit-w")
    record = client.submit(version(cluster, "exiting", SHIPPED_FLOW + EXIT_HANDLER), {"tag": "kept-exit"}).wait(
        timeout=90)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    assert next(n for n in record.nodes if n.node == "remember").machine == "exit-w"
    mark = cluster.marks / "kept-exit.atexit"
    assert not mark.exists()  # the runner that ran the call is still there, kept by its pool process
    cluster.stop("exit-w")  # SIGTERM: the pool process lets its runner go gently, rather than have it killed
    assert mark.exists() and mark.read_text() == "ran", cluster.whole_log("exit-w")[-3000:]


def test_a_worker_that_runs_only_registered_flows_refuses_shipped_code(client: Client, cluster: Cluster) -> None:
    cluster.start_worker("closed-w", "--labels", "closed", "--cpus", "1", "--gpus", "none")
    cluster.wait_attached("closed-w")
    on_closed = SHIPPED_FLOW.replace('@shipped.node(provides="seen", requires=["tag"])',
                                     '@shipped.node(provides="seen", requires=["tag"], device="closed")')
    record = client.submit(version(cluster, "closed", on_closed), {"tag": ""}).wait(timeout=90)
    assert record.status is RunStatus.ERROR
    [node] = record.nodes
    assert node.machine == "closed-w" and "\n" not in (node.error or "")
    assert (node.error or "").startswith(
        "machine closed-w runs only the flows FLUKSIO_FLOWS loads (FLUKSIO_ACCEPT_CODE=registered), and flow "
        f"'shipped' of run {record.id} came with code package sha256:")
    assert "shipped code packages" not in cluster.whole_log("closed-w")  # it started no server for them


def test_the_flag_takes_only_the_three_settings_and_signed_needs_certificates(cluster: Cluster) -> None:
    command = [sys.executable, "-m", "fluksio.cli.main", "worker", "--name", "flagged", "--gpus", "none"]
    wrong = subprocess.run([*command, "--accept-code", "everything"], capture_output=True, text=True, timeout=60,
                           env=cluster.env)
    assert wrong.returncode == 2
    assert "Invalid value for '--accept-code': 'everything' is not one of 'registered', 'signed', 'any'" \
        in wrong.stderr
    unsigned = subprocess.run([*command, "--accept-code", "signed"], capture_output=True, text=True, timeout=60,
                              env=cluster.env)
    assert unsigned.returncode != 0
    assert "FLUKSIO_ACCEPT_CODE=signed runs code packages signed by a certificate this worker trusts" in (
        unsigned.stderr + unsigned.stdout)
