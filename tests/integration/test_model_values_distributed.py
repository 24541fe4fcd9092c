"""Fitted models across processes: redis-server and two `fluksio worker`s, each in a working directory of its own,
sharing only the artifacts folder and the run store. Models made on one worker are used on the other, and read
back in this third process, where they predict as models fit here do; undeclared metrics land in the series."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sklearn.datasets import load_diabetes

from fluksio import Client, RunRecord, RunStatus, Settings
from tests.integration.support import model_flows as flows
from tests.integration.support.cluster import Cluster
from tests.integration.support.servers import RedisServer, need
from tests.integration.test_model_values import CLIP, UNLISTED, check_boosters, check_the_example_run

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
#: Registered by module name: the workers and this process import the very same module (and its classes).
FLOWS_MODULE = "tests.integration.support.model_flows"


class ModelCluster(Cluster):
    """The cluster harness with this module's flows, Clip trusted everywhere, one working directory per worker."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env["FLUKSIO_FLOWS"] = FLOWS_MODULE
        self.env["FLUKSIO_TRUSTED_TYPES"] = CLIP
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

    def settings(self) -> Settings:
        return super().settings().model_copy(update={"flows": [FLOWS_MODULE], "trusted_types": [CLIP]})

    def start_worker(self, name: str, *args: str, cwd: Path | None = None,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        own = self.workdir / f"cwd-{name}"
        own.mkdir(exist_ok=True)
        return super().start_worker(name, *args, cwd=cwd or own, env=env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need("redis-server")
    workdir = tmp_path_factory.mktemp("models")
    server = RedisServer(workdir / "redis").start()
    setup = ModelCluster(workdir, server)
    try:
        setup.start_worker("alpha", "--labels", "alpha", "--cpus", "1", "--gpus", "none", "--drivers")
        setup.start_worker("beta", "--labels", "beta", "--cpus", "1", "--gpus", "none")
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


def test_the_example_flow_fits_on_both_workers_and_its_pipelines_predict_the_same_here(client: Client) -> None:
    record = client.submit(flows.diabetes, {"n_alphas": 4}, seed=2).wait(timeout=240)
    check_the_example_run(client, record, 4)
    # Two single-CPU workers took the four fits between them: whichever machine picked the best, some of the
    # pipelines it compared were made on the other one.
    assert {n.machine for n in record.nodes if n.node == "fit"} == {"alpha", "beta"}, \
        [(n.node, n.index, n.machine) for n in record.nodes]


def test_xgboost_and_lightgbm_models_made_on_one_worker_predict_the_same_on_the_other(client: Client) -> None:
    record = client.submit(flows.boosters).wait(timeout=240)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    assert (node_of(record, "fit_boosters").machine, node_of(record, "use_boosters").machine) == ("alpha", "beta")
    check_boosters(client, record)


def test_a_listed_type_crosses_workers_and_an_unlisted_one_fails_where_it_was_made(client: Client) -> None:
    trusted = client.submit(flows.clipped, {"transformer": "clip"}).wait(timeout=240)
    assert trusted.status is RunStatus.OK, [n.error for n in trusted.nodes]
    assert (node_of(trusted, "fit_clipped").machine, node_of(trusted, "use_clipped").machine) == ("alpha", "beta")
    assert trusted.result["predicted"] == flows.clipped_pipeline("clip").predict(
        load_diabetes(return_X_y=True)[0]).tolist()
    refused = client.submit(flows.clipped, {"transformer": "unlisted"}).wait(timeout=240)
    assert refused.status is RunStatus.ERROR
    failed = node_of(refused, "fit_clipped")
    assert failed.machine == "alpha"
    assert f"holds types skops does not trust: {UNLISTED}; if you trust that code, list them in " \
           "FLUKSIO_TRUSTED_TYPES" in failed.error


def test_undeclared_metrics_emitted_on_a_worker_land_in_the_series(client: Client) -> None:
    record = client.submit(flows.metrics).wait(timeout=120)
    assert record.status is RunStatus.OK, [n.error for n in record.nodes]
    assert client.metrics(record.id) == {"accuracy": [(0, 0.5), (1, 0.6), (2, 0.7)]}
    bad = client.submit(flows.metrics, {"bad": "str"}).wait(timeout=120)
    failed = node_of(bad, "measure")
    assert failed.error.startswith("MetricRefused: emit('accuracy', 'high'): a metric is a finite number")
    assert f"(at {flows.__file__}:" in failed.error and failed.error.endswith(" in measure)")
