"""Shipped code in a signing installation: a worker started with ``--accept-code signed`` runs a package its
submitter signed (``FLUKSIO_SIGNING_*`` set: every submit signs its package's digest), with real processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluksio import RunStatus
from fluksio.flows.registry import load_flows
from fluksio.store.db import Database
from fluksio.store.run_rows import get_run
from tests.certs import self_signed, signing_env, store_of
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.package_flows import SHIPPED_FLOW, write_tree

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("signed-code")
    installation = self_signed(folder / "ids", "installation")
    env = {**signing_env(installation, store_of(folder / "store", installation)),
           "FLUKSIO_ARTIFACTS_CACHE": str(folder / "cache" / "artifacts")}
    workers = {"signed-w": ("--cpus", "1", "--gpus", "none", "--drivers", "--accept-code", "signed")}
    with running_cluster(folder, workers, env=env) as setup:
        yield setup


def test_a_package_signed_by_a_trusted_submitter_runs(cluster: Cluster) -> None:
    [flow] = load_flows(str(write_tree(cluster.workdir / "submitter", SHIPPED_FLOW, "signed")))
    with cluster.client() as client:
        record = client.submit(flow, {"tag": ""}).wait(timeout=90)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    assert record.result["seen"]["constant"] == "signed"
    row = get_run(Database(cluster.env["FLUKSIO_DATABASE_URL"]), record.id)
    assert row.code_signature is not None and record.code_digest in row.code_signature
