"""A flow's file edited while `fluksio worker`s keep running the code they imported at start.

Real processes: redis-server, `fluksio worker`s started before and after the edit, and this test process as
the client, which loads the file as it is now. The run records the code it was submitted with (its package),
and in `registered` mode (the default) a worker or a driver that holds other code refuses it, naming both
digests and the setting that would ship it: never run on the code the workers happen to hold. Restarting
the stale worker, as the message says, fixes it.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import RunStatus, connect
from fluksio.cache.keys import cache_key
from fluksio.cache.lookup import lookup
from fluksio.flows.node_code import node_codes
from fluksio.flows.source import code_digest
from tests.integration.support.cluster import Cluster
from tests.integration.support.servers import RedisServer

pytestmark = pytest.mark.integration

FLOW_FILE = """
from fluksio import Flow, Resources

edited = Flow("edited", inputs={"x": int}, outputs=["y"])

@edited.node(provides="y")
def step(x):
    return x + 1

edited_gpu = Flow("edited_gpu", inputs={"x": int}, outputs=["y"])

@edited_gpu.node(provides="y", device="gpu", resources=Resources(cpus=1, gpus=1))
def on_gpu(x):
    return x + 1
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A Redis and no workers yet; every process registers the flows of one file that the test edits."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "edited_flows.py").write_text(textwrap.dedent(FLOW_FILE))
    server = RedisServer(tmp_path / "redis").start()
    setup = Cluster(tmp_path, server)
    setup.env["FLUKSIO_FLOWS"] = str(code / "edited_flows.py")
    try:
        yield setup
    finally:
        setup.stop_all()
        server.stop()


def flow_file(cluster: Cluster) -> Path:
    return Path(cluster.env["FLUKSIO_FLOWS"])


def edit(cluster: Cluster) -> None:
    path = flow_file(cluster)
    path.write_text(path.read_text().replace("x + 1", "x + 1000"))


def connect_to(cluster: Cluster):  # type: ignore[no-untyped-def]
    """A client that loads the flow file as it is now (submit validates against it), as a new `fluksio run`
    would: this process forgets the module it imported the file as before."""
    for name in [n for n in sys.modules if n.startswith("fluksio_flowfile_edited_flows_")]:
        del sys.modules[name]
    return connect(cluster.settings().model_copy(update={"flows": [str(flow_file(cluster))]}))


def test_a_worker_started_before_the_edit_refuses_calls_of_runs_submitted_with_the_edited_code(
        cluster: Cluster) -> None:
    cluster.start_worker("stale-a", "--cpus", "1", "--gpus", "none")
    cluster.wait_attached("stale-a")
    edit(cluster)
    cluster.start_worker("drivers-a", "--drivers-only")  # the drivers load the edited file
    with connect_to(cluster) as client:
        edited_digest = code_digest(client.flow("edited"))  # the file on disk now
        record = client.submit("edited", {"x": 1}).wait(timeout=60)
        assert record.status is RunStatus.ERROR, record.status_reason
        assert record.code_digest == edited_digest
        [node] = record.nodes
        assert node.status == "error" and node.machine == "stale-a"
        assert node.error == (
            f"machine stale-a runs only the flows FLUKSIO_FLOWS loads (FLUKSIO_ACCEPT_CODE=registered), and flow "
            f"'edited' of run {record.id} came with code package {edited_digest[:19]}…, which it does not hold; set "
            "FLUKSIO_ACCEPT_CODE=signed (or any) on stale-a (`fluksio worker --accept-code signed`) to run shipped "
            "code, or restart it on the same code")
        spec = client.flow("edited").nodes["step"]
        key = cache_key("edited", spec, node_codes(client.flow("edited"))["step"], {"x": 1})
        assert lookup(client._runtime.db, client._runtime.artifacts, key) is None

        # Restarted as the message says, the worker loads the edited code and the run goes through on it.
        cluster.stop("stale-a")
        cluster.start_worker("stale-a", "--cpus", "1", "--gpus", "none")
        cluster.wait_attached("stale-a")
        record = client.submit("edited", {"x": 1}).wait(timeout=60)
        assert record.status is RunStatus.OK, record.status_reason
        assert record.result == {"y": 1001} and record.nodes[0].status == "ok"
        assert record.code_digest == edited_digest
        assert lookup(client._runtime.db, client._runtime.artifacts, key) is not None


def test_a_flow_edited_on_the_client_is_refused_at_claim_by_a_driver_that_loaded_the_old_file(
        cluster: Cluster) -> None:
    """The hole this closes: a new input and a changed device= used to run `ok` on the old code and placement."""
    cluster.start_worker("gpu-old", "--labels", "gpu", "--cpus", "1", "--gpus", "0", "--drivers")
    cluster.wait_attached("gpu-old")
    with connect_to(cluster) as client:
        loaded = client._runtime.registry.digest("edited_gpu")
        record = client.submit("edited_gpu", {"x": 1}).wait(timeout=60)
        assert record.status is RunStatus.OK and record.result == {"y": 2}, record.status_reason
        assert record.code_digest == loaded
    path = flow_file(cluster)
    path.write_text(path.read_text().replace(
        'Flow("edited_gpu", inputs={"x": int}', 'Flow("edited_gpu", inputs={"x": int, "k": int}'
    ).replace("def on_gpu(x):\n    return x + 1", "def on_gpu(x, k):\n    return x + k"))
    with connect_to(cluster) as client:
        on_client = code_digest(client.flow("edited_gpu"))
        assert on_client != loaded and "k" in client.flow("edited_gpu").inputs
        record = client.submit("edited_gpu", {"x": 5, "k": 7}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    assert record.code_digest == on_client and record.nodes == []  # nothing ran, on any code
    assert record.status_reason == (
        f"flow 'edited_gpu' of run {record.id} was submitted with code {on_client[:19]}…, and machine gpu-old runs "
        f"only the code it registered (it holds {loaded[:19]}…; FLUKSIO_ACCEPT_CODE=registered): restart the "
        "workers on the submitter's code, or set FLUKSIO_ACCEPT_CODE=signed (or any) on them to run the code "
        "shipped with each run")


def test_with_shipped_code_accepted_the_edited_file_runs_on_workers_that_loaded_the_old_one(
        cluster: Cluster) -> None:
    """The same edit, with FLUKSIO_ACCEPT_CODE=any: the new code runs from its package, on the GPU (forked from
    a package server of the worker's fork server), with no restart."""
    cluster.start_worker("gpu-any", "--labels", "gpu", "--cpus", "1", "--gpus", "0", "--drivers",
                         "--accept-code", "any")
    cluster.wait_attached("gpu-any")
    with connect_to(cluster) as client:
        assert client.submit("edited_gpu", {"x": 1}).wait(timeout=60).result == {"y": 2}
    edit(cluster)
    with connect_to(cluster) as client:
        record = client.submit("edited_gpu", {"x": 5}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"y": 1005}  # x + 1000: the code submitted, not the code the worker loaded
    assert record.nodes[0].machine == "gpu-any" and record.nodes[0].gpus == [0]
