"""Typed values across processes: redis-server and two `fluksio worker`s, each in a working directory of its
own, sharing only the artifacts folder; values are made by one worker (``alpha``) and received by the other
(``beta``), and read back in this third process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fluksio import Client, RunRecord, RunStatus, Settings
from tests.integration.support import codec_flows as flows
from tests.integration.support.cluster import Cluster
from tests.integration.support.servers import RedisServer, need

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
#: Registered by module name: the workers and this process import the very same module (and its codec).
FLOWS_MODULE = "tests.integration.support.codec_flows"


class CodecCluster(Cluster):
    """The cluster harness, with this module's flows and one working directory per worker."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env["FLUKSIO_FLOWS"] = FLOWS_MODULE
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

    def settings(self) -> Settings:
        return super().settings().model_copy(update={"flows": [FLOWS_MODULE]})

    def start_worker(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        cwd = self.workdir / f"cwd-{name}"
        cwd.mkdir(exist_ok=True)
        log = open(self.workdir / f"worker-{name}.log", "ab")  # noqa: SIM115 - kept open for the process
        process = subprocess.Popen(
            [sys.executable, "-m", "fluksio.cli.main", "worker", "--name", name, "--loglevel", "info", *args],
            env=self.env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.workers[name] = process
        return process


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need("redis-server")
    workdir = tmp_path_factory.mktemp("codecs")
    server = RedisServer(workdir / "redis").start()
    setup = CodecCluster(workdir, server)
    try:
        setup.start_worker("alpha", "--labels", "alpha", "--cpus", "1", "--gpus", "none", "--drivers")
        # beta also offers a GPU id (none need exist): a call granted it runs in a child process of its own.
        setup.start_worker("beta", "--labels", "beta,gpu", "--cpus", "1", "--gpus", "0")
        setup.wait_attached("alpha", "beta")
        yield setup
    finally:
        setup.stop_all()
        server.stop()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with cluster.client() as connected:
        yield connected


def node_of(record: RunRecord, name: str) -> Any:
    return next(n for n in record.nodes if n.node == name)


def type_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_typed_values_made_on_one_worker_arrive_on_the_other_as_the_same_types(client: Client,
                                                                                 cluster: Cluster) -> None:
    record = client.submit(flows.typed, {"n": 7}).wait(timeout=120)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    assert (node_of(record, "make").machine, node_of(record, "check").machine) == ("alpha", "beta")
    report = record.result["report"]
    assert report["types"] == {"arr": "numpy.ndarray", "frame": type_path(pd.DataFrame),
                               "cfg": type_path(flows.Cfg), "box": type_path(flows.Box),
                               "colour": type_path(flows.Colour), "span": type_path(flows.Interval)}
    # Compared on beta, against the values rebuilt there; the user's codec was registered there by import.
    assert report["equal"] == dict.fromkeys(report["types"], True)
    assert report["cwd"] == str(cluster.workdir / "cwd-beta") and report["pid"] != os.getpid()
    # And read here, a third process: the user's codec makes an Interval again, the frame a DataFrame.
    want = flows.expected_values(7)
    assert client.output(record.id, "span") == want["span"]
    pd.testing.assert_frame_equal(client.output(record.id, "frame"), want["frame"])
    np.testing.assert_array_equal(client.output(record.id, "arr"), want["arr"])


@pytest.mark.parametrize("flow, node, expected", [
    (flows.object_array, "make_objects", "message 'arr' of node 'make_objects' is a numpy array of dtype object"),
    (flows.object_frame, "make_object_frame", "message 'table' of node 'make_object_frame' is a pandas DataFrame "
                                              "that Parquet cannot hold"),
    (flows.misannotated, "count_rows", "message 'frame' for parameter 'frame' of node 'count_rows' must be "
                                       "pandas.DataFrame: Input should be an instance of DataFrame (got a "
                                       "numpy.ndarray of shape (2, 3))"),
])
def test_what_cannot_travel_or_does_not_fit_fails_on_the_worker_naming_it(client: Client, flow: Any, node: str,
                                                                        expected: str) -> None:
    record = client.submit(flow).wait(timeout=120)
    assert record.status is RunStatus.ERROR
    failed = node_of(record, node)
    assert failed.machine == ("beta" if node == "count_rows" else "alpha")
    assert failed.error.startswith(expected), failed.error


def test_the_run_cache_restores_a_frame_made_on_another_worker_without_a_call(client: Client,
                                                                               cluster: Cluster) -> None:
    first = client.submit(flows.cached, {"n": 9, "tag": "cross"}).wait(timeout=120)
    second = client.submit(flows.cached, {"n": 9, "tag": "cross"}).wait(timeout=120)
    assert first.status is RunStatus.OK and second.status is RunStatus.OK
    restored = node_of(second, "make_frame")
    assert restored.status.value == "cached" and restored.cached_from == first.id
    assert len(list(cluster.marks.glob("cross.*"))) == 1  # called once, in the first run, on alpha
    assert second.result["frame"] == first.result["frame"]  # the same reference: the same digest
    # Its reader's key holds that reference, so it is restored too, with no frame read to compare.
    assert node_of(second, "total").status.value == "cached" and second.result["total"] == first.result["total"]
    # The restored output is a reference like any other: a run on beta reads it as a DataFrame.
    used = client.submit(flows.consume, {"frame": f"@run:{second.id}.frame"}).wait(timeout=120)
    assert used.status is RunStatus.OK and used.result == {"rows": 9, "first": "r0"}
    assert node_of(used, "describe").machine == "beta"


def test_a_mapped_node_on_the_other_worker_gets_one_dataframe_per_call(client: Client) -> None:
    record = client.submit(flows.shards, {"count": 3}).wait(timeout=120)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result["sizes"] == [{"rows": i + 1, "sum": 10 * i * (i + 1) // 2, "type": "DataFrame"}
                                      for i in range(3)]
    assert {n.machine for n in record.nodes if n.node == "size"} == {"beta"}
    assert [len(p) for p in client.output(record.id, "parts")] == [1, 2, 3]


def test_a_value_made_in_the_child_process_of_a_gpu_call_reaches_the_next_node(client: Client) -> None:
    record = client.submit(flows.on_gpu).wait(timeout=120)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    made = node_of(record, "train_on_gpu")
    assert made.machine == "beta" and made.gpus == [0]
    assert record.result["seen"] == {"type": "ndarray", "dtype": "float32", "shape": [3, 4], "sum": 66.0,
                                     "devices": "0"}
    assert node_of(record, "inspect_weights").machine == "alpha"
