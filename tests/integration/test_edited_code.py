"""A flow's file edited while `fluksio worker`s keep running the code they imported at start.

Real processes: redis-server, `fluksio worker`s started before and after the edit, and this test process as
the client. A worker that loaded other code than the run's driver refuses the call and says how to fix it;
nothing is cached under the run's code digest; restarting the stale worker, as the message says, fixes it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import RunStatus, connect
from fluksio.cache.keys import cache_key
from fluksio.cache.lookup import lookup
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
    """A client that loads the flow file as it is now (submit validates against it)."""
    return connect(cluster.settings().model_copy(update={"flows": [str(flow_file(cluster))]}))


def test_a_worker_started_before_the_edit_refuses_calls_of_runs_claimed_with_the_edited_code(
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
        assert node.error.startswith("machine stale-a loaded other code for flow 'edited' than this run was "
                                     "claimed with (sha256:")
        assert f"here, {edited_digest[:19]}… in the run's driver)" in node.error
        assert node.error.endswith("restart `fluksio worker` on stale-a (or the drivers) so that both load the "
                                   "same code")
        spec = client.flow("edited").nodes["step"]
        key = cache_key("edited", spec, edited_digest, {"x": 1})
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


def test_a_gpu_call_in_a_fresh_interpreter_refuses_to_run_the_edited_file(cluster: Cluster) -> None:
    """A fresh interpreter imports the files as they are now: not the worker's code (the fork server's off)."""
    cluster.start_worker("gpu-old", "--labels", "gpu", "--cpus", "1", "--gpus", "0", "--drivers",
                         env={"FLUKSIO_GPU_FORK_SERVER": "false"})
    cluster.wait_attached("gpu-old")
    with connect_to(cluster) as client:
        loaded = client._runtime.registry.digest("edited_gpu")
        record = client.submit("edited_gpu", {"x": 1}).wait(timeout=60)
        assert record.status is RunStatus.OK and record.result == {"y": 2}, record.status_reason
    edit(cluster)
    with connect_to(cluster) as client:
        on_disk = code_digest(client.flow("edited_gpu"))
        assert on_disk != loaded
        record = client.submit("edited_gpu", {"x": 5}).wait(timeout=60)
        assert record.status is RunStatus.ERROR, record.status_reason
        assert record.code_digest == loaded  # the driver runs the code it loaded at start
        [node] = record.nodes
        assert node.status == "error" and node.machine == "gpu-old"
        assert node.error.startswith(f"the process started on machine gpu-old to run node 'on_gpu' on its GPUs "
                                     f"loaded other code for flow 'edited_gpu' than this run was claimed with "
                                     f"({on_disk[:19]}… on disk there now, "
                                     f"{loaded[:19]}… in the run's driver)")
        assert "restart it (or the drivers)" in node.error


def test_a_gpu_call_forked_from_the_fork_server_runs_the_code_its_worker_loaded(cluster: Cluster) -> None:
    """The fork server imported the flows when the worker did: an edit since changes neither, and the run,
    claimed with that code, runs it on the GPU as on the CPU."""
    cluster.start_worker("gpu-warm", "--labels", "gpu", "--cpus", "1", "--gpus", "0", "--drivers")
    cluster.wait_attached("gpu-warm")
    with connect_to(cluster) as client:
        loaded = client._runtime.registry.digest("edited_gpu")
        # A first run: its drivers process (started beside the worker) has loaded the flows too, before the edit.
        assert client.submit("edited_gpu", {"x": 1}).wait(timeout=60).status is RunStatus.OK
    edit(cluster)
    with connect_to(cluster) as client:
        record = client.submit("edited_gpu", {"x": 5}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.code_digest == loaded and record.result == {"y": 6}  # x + 1: the code loaded at start
