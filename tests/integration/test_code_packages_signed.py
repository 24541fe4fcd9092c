"""Shipped code in a signing installation: a worker started with ``--accept-code signed`` runs a package its
submitter signed (``FLUKSIO_SIGNING_*`` set: every submit signs its package's digest), with real processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluksio import RunStatus, Settings
from fluksio.flows.registry import load_flows
from fluksio.security.signatures import load_signer
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
    store = Database(cluster.env["FLUKSIO_DATABASE_URL"])
    row = get_run(store, record.id)
    assert row.code_signature is not None and record.code_digest in row.code_signature
    # Run again by its digest: the submitter's signature is carried over (checked), never made afresh.
    with cluster.client() as client:
        again = client.submit("shipped", {"tag": ""}, code=record.code_digest, no_cache=True).wait(timeout=90)
    assert again.status is RunStatus.OK, again.status_reason
    assert get_run(store, again.id).code_signature == row.code_signature


def test_an_unsigned_package_and_one_signed_by_an_unknown_certificate_are_refused(cluster: Cluster) -> None:
    """The drive messages are signed by the installation (Celery's auth serializer), so the run is driven; the
    code signature is what is missing or foreign, and the worker refuses the call in one line."""
    stranger = self_signed(cluster.workdir / "ids-stranger", "stranger")
    foreign = load_signer(Settings(**{name.removeprefix("FLUKSIO_").lower(): value for name, value in
                                      signing_env(stranger, store_of(cluster.workdir / "store-stranger",
                                                                     stranger)).items()}))
    assert foreign is not None
    refused = {}
    for case, signer in (("unsigned", None), ("stranger", foreign)):
        [flow] = load_flows(str(write_tree(cluster.workdir / f"submitter-{case}", SHIPPED_FLOW, case)))
        with cluster.client() as client:
            client._runtime.signer = signer  # how this submitter signs its packages (or does not)
            record = client.submit(flow, {"tag": ""}).wait(timeout=90)
        assert record.status is RunStatus.ERROR, record.status_reason
        [node] = record.nodes
        assert node.machine == "signed-w" and "\n" not in node.error
        assert "looked from" not in (node.logs or "")  # refused before anything of the package ran
        refused[case] = node.error
        if case == "unsigned":  # a signing submitter running it again by digest does not vouch for it
            with cluster.client() as client:
                again = client.submit("shipped", {"tag": ""}, code=record.code_digest).wait(timeout=90)
            assert again.status is RunStatus.ERROR and ", unsigned; " in again.nodes[0].error
    rule = ("machine signed-w runs shipped code only when signed by a certificate it trusts "
            "(FLUKSIO_ACCEPT_CODE=signed), and flow 'shipped' of run ")
    assert refused["unsigned"].startswith(rule) and ", unsigned; the submitter signs it when it has " \
        "FLUKSIO_SIGNING_KEY, FLUKSIO_SIGNING_CERTIFICATE and FLUKSIO_SIGNING_CERT_STORE set" in refused["unsigned"]
    assert refused["stranger"].startswith(rule) and "which is not among the trusted ones" in refused["stranger"]
